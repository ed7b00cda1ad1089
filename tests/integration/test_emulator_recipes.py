"""The emulator's examples in the documentation (docs/development.md), run as written against a
running emulator: a login whose user code is the one the command printed, approved through the
control API, then a fault and a renewal; and a login with `--auto-approve`."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from cmsemu import Emulator
from support import recipe

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("curl") is None or shutil.which("jq") is None,
        reason="needs curl and jq on PATH",
    ),
]

DOCUMENTED_ADDRESS = "http://127.0.0.1:8080"  # `make emulator PORT=8080`
# The interval the emulator's device code answer asks get-token to poll at: 1 s (the least
# get-token takes) rather than the emulator's default 5 s, the wait before each login's first
# poll; the login waits for the approval and polls again whatever the interval.
POLL_INTERVAL = 1


def run_recipe(name: str, emulator: Emulator, directory: Path) -> subprocess.CompletedProcess[str]:
    """The recipe in bash, in a shell whose PATH starts with the venv's console scripts (as the
    README puts them there), against the test's emulator instead of port 8080."""
    bin_folder = Path(sys.executable).parent
    if not (bin_folder / "get-token").exists():
        pytest.skip("the venv's console scripts are not installed")
    script = recipe(name)
    assert DOCUMENTED_ADDRESS in script
    emulator.config.poll_interval = POLL_INTERVAL
    home = directory / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "XDG_STATE_HOME"}
    return subprocess.run(
        ["bash", "-c", script.replace(DOCUMENTED_ADDRESS, emulator.base_url)],
        env={**env, "HOME": str(home), "PATH": f"{bin_folder}{os.pathsep}{env.get('PATH', '')}"},
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_login_is_approved_by_the_code_it_printed_then_a_fault_and_a_renewal(
    emulator: Emulator, tmp_path: Path
) -> None:
    # An earlier aborted login's code, still pending: the recipe must not approve it.
    stale = requests.post(
        emulator.issuer_url.rstrip("/") + "/oauth/device/code",
        data={
            "client_id": emulator.config.client_id,
            "scope": "openid offline_access",
            "audience": emulator.api_url,
        },
        timeout=5,
    ).json()["user_code"]
    result = run_recipe("emulator", emulator, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # Both control calls answered ok: the approval found the pending code (no "unknown user_code").
    assert result.stdout.count('{"ok": true}') == 2, result.stdout
    assert "unknown user_code" not in result.stdout
    assert (
        stale
        in requests.get(emulator.base_url + "/_emulator/state", timeout=5).json()[
            "pending_user_codes"
        ]
    )
    # The login wrote the refresh file in the user's state folder, outside the working
    # directory (no copy of its tokens elsewhere); the renewal renewed it.
    path = tmp_path / "home" / ".local" / "state" / "cmstoken" / "emulator-refresh-token"
    assert sorted(os.listdir(tmp_path)) == ["home"]
    assert os.listdir(path.parent) == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    renewed = json.loads(result.stdout.splitlines()[-1])
    assert emulator.service_token_valid(renewed["access_token"])
    kept = path.read_text().strip()
    assert renewed["refresh_token_file"] == str(path)  # the file is its one place
    assert kept not in result.stdout
    assert emulator.refresh_token_valid(kept)
    assert emulator.counts["device_code"] == 2
    assert emulator.counts["refresh"] == 1  # the renewal, of the login's token
    assert not emulator.family_revoked(kept)
    # The queued fault (one time) was the renewal's: the next refresh answer is whole again.
    token_url = emulator.issuer_url.rstrip("/") + "/oauth/token"
    form = {"grant_type": "refresh_token", "refresh_token": kept}
    answer = requests.post(
        token_url, data={**form, "client_id": emulator.config.client_id}, timeout=5
    )
    assert answer.status_code == 200
    assert "expires_in" in answer.json()


def test_with_auto_approve_the_login_needs_no_second_step(
    emulator: Emulator, tmp_path: Path
) -> None:
    emulator.config.auto_approve = True
    result = run_recipe("emulator-auto-approve", emulator, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert emulator.service_token_valid(json.loads(result.stdout)["access_token"])
