"""docs/get-token.md's blocks as a user pastes them, in bash, against the emulator: the set-up,
the one line run twice (the first run logs in and creates the refresh file, the second renews
it), then the other ways in order, and each of those alone. The venv's commands come from the
``PATH`` the set-up block sets (``$PWD/.venv/bin``, here this interpreter's folder); the
service's address is the emulator's instead of the documented one. No token is presented
twice, and none reaches standard error."""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pytest

from cmsemu import Emulator
from support import recipe, run_approving

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("jq") is None, reason="needs jq on PATH"),
]

DOCUMENTED_ADDRESS = "https://api.example.com"
JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.")
OTHER_WAYS = ("get-token-login", "get-token-stdin", "get-token-env")


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    emulator.config.poll_interval = 1  # quick logins on the real clock
    return emulator


def user_folder(directory: Path) -> Path:
    """A checkout's folder as the page assumes it: ``.venv/bin`` holds the console scripts."""
    bin_folder = Path(sys.executable).parent
    if not (bin_folder / "get-token").exists():
        pytest.skip("the venv's console scripts are not installed")
    (directory / ".venv").mkdir()
    (directory / ".venv" / "bin").symlink_to(bin_folder)
    return directory


def user_env(home: Path) -> dict[str, str]:
    """A shell without the venv on PATH, SERVICE_BASE_URL, a refresh token or XDG_STATE_HOME,
    its home ``home``."""
    venv = str(Path(sys.executable).parent)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("SERVICE_BASE_URL", "CMS_REFRESH_TOKEN", "VIRTUAL_ENV", "XDG_STATE_HOME")
    }
    env["HOME"] = str(home)
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if part and part != venv
    )
    return env


def pasted(emu: Emulator, *names: str) -> str:
    """The blocks, in order, as one script pointed at the emulator."""
    blocks = [recipe(name) for name in names]
    assert DOCUMENTED_ADDRESS in blocks[0]
    return "\n".join(blocks).replace(DOCUMENTED_ADDRESS, emu.base_url)


def bash(script: str, emu: Emulator, directory: Path) -> tuple[str, str]:
    ran = run_approving(
        ["bash", "-c", "set -euo pipefail\n" + script],
        emu.approve,
        cwd=directory,
        env=user_env(directory.parent / "home"),
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout, ran.stderr


def refreshes(emu: Emulator) -> list[str | None]:
    """The refresh tokens presented (the emulator's fingerprints of them), in order; each was
    accepted."""
    records = [record for record in emu.requests if record.endpoint == "refresh"]
    assert [record.status for record in records] == [200] * len(records)
    return [record.credential for record in records]


def clone(tmp_path: Path) -> Path:
    """The repository's folder, beside the user's (empty) home: ``tmp_path``'s ``clone``."""
    (tmp_path / "clone").mkdir()
    (tmp_path / "home").mkdir()
    return user_folder(tmp_path / "clone")


def test_the_page_pasted_in_order(emu: Emulator, tmp_path: Path) -> None:
    folder = clone(tmp_path)
    line = recipe("get-token-file")
    script = pasted(emu, "get-token-setup", "get-token-file", "get-token-file", *OTHER_WAYS)
    script += '\nprintf "%s\\n" "$refresh_token" > last-refresh-token\n'  # for the checks below
    stdout, stderr = bash(script, emu, folder)
    # The one line: logged in and created the file (0600) in the user's state folder, outside
    # the clone, with its missing folders (0700), then renewed it in place.
    assert '"${XDG_STATE_HOME:-$HOME/.local/state}/cmstoken/refresh-token"' in line
    path = tmp_path / "home" / ".local" / "state" / "cmstoken" / "refresh-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for created in (path.parent, path.parent.parent, path.parent.parent.parent):
        assert stat.S_IMODE(created.stat().st_mode) == 0o700
    assert sorted(os.listdir(folder)) == [".venv", "last-refresh-token"]
    kept = path.read_text().strip()
    assert emu.refresh_token_valid(kept)
    service_tokens = stdout.split()
    assert len(service_tokens) == 2
    assert all(emu.service_token_valid(token) for token in service_tokens)
    # Two logins (the file's, the other ways'), three renewals, no token presented twice.
    assert emu.counts["device_code"] == 2
    presented = refreshes(emu)
    assert len(presented) == 3
    assert len(set(presented)) == 3
    last = (folder / "last-refresh-token").read_text().strip()
    assert emu.refresh_token_valid(last)
    assert not emu.family_revoked(kept)
    assert not emu.family_revoked(last)
    assert "The refresh file (--refresh-file) now holds the login's refresh token" in stderr
    for secret in [kept, last]:
        assert secret not in stderr
    assert not JWT.search(stderr)
    assert os.listdir(path.parent) == ["refresh-token"]


@pytest.mark.parametrize("name", OTHER_WAYS)
def test_each_other_way_runs_alone(emu: Emulator, tmp_path: Path, name: str) -> None:
    folder = clone(tmp_path)
    given = emu.issue_tokens()["refresh_token"]
    script = f"refresh_token={given}\n" + pasted(emu, "get-token-setup", name)
    script += '\nprintf "%s\\n" "$refresh_token"\n'
    stdout, stderr = bash(script, emu, folder)
    kept = stdout.strip()
    assert kept != given
    assert emu.refresh_token_valid(kept)
    if name == "get-token-login":
        assert emu.counts["device_code"] == 1
        assert emu.counts.get("refresh", 0) == 0
    else:
        assert len(refreshes(emu)) == 1
        assert not emu.refresh_token_valid(given)
        assert not emu.family_revoked(kept)
    assert kept not in stderr
    assert given not in stderr
    assert not JWT.search(stderr)
