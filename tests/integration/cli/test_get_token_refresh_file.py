"""``get-token --refresh-file PATH``: the refresh token kept in a file, renewed in place.

The real command in a subprocess against the emulator, except for the one case that needs a
fault between the answer and the write (a failed rename), which runs ``main`` in-process with
``os.replace`` made to fail. Every run checks that no token reaches standard error (but for that
one case, where the new refresh token is printed there on purpose, being its only copy).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cmsemu import Emulator
from cmstoken.cli.get_token import command as get_token

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
COMMAND = [sys.executable, "-m", "cmstoken.cli.get_token"]
JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.")
TIMEOUT = 30.0
# A path that looks like a token pasted in the wrong place: never echoed.
TOKEN_LIKE_NAME = "v1.MTestOnlyRefreshTokenPastedAsAPath0123456789"


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        document = json.loads(self.stdout)
        assert isinstance(document, dict)
        return document

    def assert_no_secret_on_stderr(self, *secrets: str) -> None:
        for secret in secrets:
            assert secret not in self.stderr
        assert not JWT.search(self.stderr), self.stderr


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    return emulator


def environment(**overrides: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("SERVICE_BASE_URL", "CMS_REFRESH_TOKEN")
    }
    env.update(overrides)
    return env


def run(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    prefix: Sequence[str] = (),
) -> Outcome:
    result = subprocess.run(
        [*prefix, *COMMAND, *args],
        input="",
        capture_output=True,
        text=True,
        env=env if env is not None else environment(),
        timeout=TIMEOUT,
        check=False,
    )
    return Outcome(result.returncode, result.stdout, result.stderr)


def renew(emu: Emulator, path: Path | str, *extra: str, prefix: Sequence[str] = ()) -> Outcome:
    return run(["--base-url", emu.base_url, "--refresh-file", str(path), *extra], prefix=prefix)


def token_file(directory: Path, token: str, name: str = "refresh-token.txt") -> Path:
    path = directory / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def run_documented(line: str, directory: Path, base_url: str) -> subprocess.CompletedProcess[str]:
    """A documented command line as a user pastes it (its comment dropped), in bash with
    pipefail, from ``directory``, with the venv's console script and ``SERVICE_BASE_URL``."""
    script = ROOT / ".venv" / "bin" / "get-token"
    if not script.exists():
        pytest.skip("the venv's console script is not installed")
    command = line.split(" #", 1)[0].strip().replace(".venv/bin/get-token", str(script), 1)
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=directory,
        capture_output=True,
        text=True,
        env=environment(SERVICE_BASE_URL=base_url),
        timeout=TIMEOUT,
        check=False,
    )


def assert_no_reuse(emu: Emulator) -> None:
    """Every refresh the emulator saw was accepted and presented a different token."""
    refreshes = [record for record in emu.requests if record.endpoint == "refresh"]
    assert [record.status for record in refreshes] == [200] * len(refreshes)
    credentials = [record.credential for record in refreshes]
    assert len(set(credentials)) == len(credentials)


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


def saved(emu: Emulator, path: Path, outcome: Outcome) -> tuple[dict[str, Any], str]:
    """A renewal that succeeded, its new refresh token kept in the file (mode 0600, usable) and
    its service token accepted: its JSON document and the token kept."""
    assert outcome.returncode == 0, outcome.stderr
    document: dict[str, Any] = outcome.json()
    kept = path.read_text()
    assert kept == document["refresh_token"] + "\n"
    assert emu.refresh_token_valid(kept.strip())
    assert emu.service_token_valid(document["access_token"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return document, kept.strip()


# --- the renewal, twice ------------------------------------------------------------------------


def test_renewing_twice_uses_the_new_token_each_time(emu: Emulator, tmp_path: Path) -> None:
    first = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, first)
    seen = [first]
    for _ in range(2):
        outcome = renew(emu, path)
        document, kept = saved(emu, path, outcome)
        assert not emu.refresh_token_valid(seen[-1])
        assert "--refresh-file" in outcome.stderr  # says where the new token went
        outcome.assert_no_secret_on_stderr(*seen, kept, document["access_token"])
        seen.append(kept)
    assert emu.counts["refresh"] == 2
    assert_no_reuse(emu)
    assert not emu.family_revoked(seen[-1])
    assert leftovers(tmp_path) == []


def test_a_lost_answer_recovered_within_the_reuse_interval_is_saved(
    emu: Emulator, tmp_path: Path
) -> None:
    """The provider rotated the token and the answer was lost: the same token presented again
    at once (SPEC 4.2b), within the reuse interval, recovers; the file holds the new token."""
    emu.config.refresh_reuse_interval = 30
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    emu.inject("refresh", "drop")
    outcome = renew(emu, path)
    document, kept = saved(emu, path, outcome)
    assert not emu.family_revoked(kept)
    assert emu.counts["refresh"] == 2
    assert "presenting the same token again, once" in outcome.stderr
    outcome.assert_no_secret_on_stderr(old, kept, document["access_token"])
    assert leftovers(tmp_path) == []


def test_a_lost_answer_without_a_reuse_interval_leaves_the_file_and_says_so(
    emu: Emulator, tmp_path: Path
) -> None:
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    emu.inject("refresh", "drop")
    outcome = renew(emu, path)
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert path.read_text() == old + "\n"  # nothing new to keep
    assert emu.counts["refresh"] == 2
    assert "log in again" in outcome.stderr.splitlines()[-1]
    assert "Traceback" not in outcome.stderr
    outcome.assert_no_secret_on_stderr(old)
    assert leftovers(tmp_path) == []


@pytest.mark.skipif(shutil.which("jq") is None, reason="needs jq on PATH")
def test_the_readme_renewal_line_run_twice(emu: Emulator, tmp_path: Path) -> None:
    """The documented renewal line, as written (the venv's console script), run twice."""
    from support import section

    text = section("`get-token`: a token on your own machine")
    lines = [line for line in text.splitlines() if "--refresh-file" in line]
    command = next(line for line in lines if line.startswith(".venv/bin/get-token"))
    assert "refresh-token.txt" in command.split(" #", 1)[0]
    path = token_file(tmp_path, emu.issue_tokens()["refresh_token"])
    for _ in range(2):
        result = run_documented(command, tmp_path, emu.base_url)
        assert result.returncode == 0, result.stderr
        assert emu.service_token_valid(result.stdout.strip())
        assert emu.refresh_token_valid(path.read_text().strip())
    assert emu.counts["refresh"] == 2
    assert_no_reuse(emu)


@pytest.mark.parametrize("how", ["-r -", "CMS_REFRESH_TOKEN="])
def test_the_documented_stdin_and_environment_lines_renew_as_written(
    emu: Emulator, tmp_path: Path, how: str
) -> None:
    """The page's lines that pass the token without exposing it, as written (the venv's
    console script, the token file in the working directory): a service token and a new
    refresh token on stdout, the presented one spent, nothing secret on stderr."""
    from support import section

    text = section("`get-token`: a token on your own machine")
    (command,) = (line for line in text.splitlines() if how in line and "get-token" in line)
    presented = emu.issue_tokens()["refresh_token"]
    token_file(tmp_path, presented)
    result = run_documented(command, tmp_path, emu.base_url)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert emu.service_token_valid(document["access_token"])
    assert emu.refresh_token_valid(document["refresh_token"])
    assert not emu.refresh_token_valid(presented)
    for secret in (presented, document["refresh_token"], document["access_token"]):
        assert secret not in result.stderr
    assert emu.counts["refresh"] == 1


def test_concurrent_renewals_of_one_file_take_turns(emu: Emulator, tmp_path: Path) -> None:
    """A second run started while the first waits for its answer reads the file only once the
    first has saved the new token: it never presents the spent one."""
    path = token_file(tmp_path, emu.issue_tokens()["refresh_token"])
    emu.inject("refresh", "delay", seconds=2.0, acted=True)  # the first answer comes late
    args = [*COMMAND, "--base-url", emu.base_url, "--refresh-file", str(path)]
    pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    first = subprocess.Popen(args, env=environment(), **pipes)
    try:
        deadline = time.monotonic() + TIMEOUT
        while emu.counts["refresh"] == 0 and first.poll() is None:  # the first has sent
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = subprocess.Popen(args, env=environment(), **pipes)
        try:
            outputs = [process.communicate(timeout=TIMEOUT) for process in (first, second)]
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()
    assert (first.returncode, second.returncode) == (0, 0), [err for _, err in outputs]
    assert emu.counts["refresh"] == 2
    assert_no_reuse(emu)
    assert emu.refresh_token_valid(path.read_text().strip())
    assert json.loads(outputs[1][0])["refresh_token"] == path.read_text().strip()


# --- nothing is sent when the file cannot be used ------------------------------------------------


def without_root_override() -> list[str]:
    """A command prefix under which a read-only directory is read-only for this user too: as
    root, the capabilities that override file permissions are dropped (setpriv)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def test_a_read_only_directory_spends_nothing(emu: Emulator, tmp_path: Path) -> None:
    old = emu.issue_tokens()["refresh_token"]
    directory = tmp_path / "locked"
    directory.mkdir()
    path = token_file(directory, old)
    prefix = without_root_override()
    directory.chmod(0o500)
    try:
        outcome = renew(emu, path, prefix=prefix)
    finally:
        directory.chmod(0o700)
    assert outcome.returncode == 2, outcome.stderr
    assert outcome.stdout == ""
    assert "--refresh-file" in outcome.stderr
    assert "nothing was sent" in outcome.stderr
    assert sum(emu.counts.values()) == 0  # not even the provider information
    assert emu.refresh_token_valid(old)
    assert path.read_text() == old + "\n"
    outcome.assert_no_secret_on_stderr(old)


@pytest.mark.parametrize(
    ("content", "problem"),
    [("", "empty"), ("  \n\n", "empty"), ("v1.one v1.two\n", "only the refresh token")],
)
def test_a_file_without_one_token_is_a_usage_error(
    emu: Emulator, tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "refresh-token.txt"
    path.write_text(content)
    outcome = renew(emu, path)
    assert outcome.returncode == 2
    assert outcome.stdout == ""
    assert "usage: get-token" in outcome.stderr
    assert "--refresh-file" in outcome.stderr
    assert problem in outcome.stderr
    assert "v1.one" not in outcome.stderr
    assert sum(emu.counts.values()) == 0
    assert path.read_text() == content
    assert leftovers(tmp_path) == []


def test_a_missing_file_is_a_usage_error_that_does_not_echo_the_path(
    emu: Emulator, tmp_path: Path
) -> None:
    outcome = renew(emu, tmp_path / TOKEN_LIKE_NAME)
    assert outcome.returncode == 2
    assert "does not exist" in outcome.stderr
    assert "RefreshTokenPasted" not in outcome.stderr
    assert sum(emu.counts.values()) == 0


def test_a_directory_is_not_a_refresh_file(emu: Emulator, tmp_path: Path) -> None:
    outcome = renew(emu, tmp_path)
    assert outcome.returncode == 2
    assert "not a regular file" in outcome.stderr
    assert sum(emu.counts.values()) == 0


@pytest.mark.parametrize(
    "args",
    [
        ["-r", "v1.given-twice", "--refresh-file", "{path}"],
        ["--refresh-file={path}", "--refresh", "-"],
    ],
)
def test_r_and_refresh_file_together_is_a_usage_error(
    emu: Emulator, tmp_path: Path, args: list[str]
) -> None:
    path = token_file(tmp_path, emu.issue_tokens()["refresh_token"])
    outcome = run(["--base-url", emu.base_url, *(arg.format(path=path) for arg in args)])
    assert outcome.returncode == 2
    assert "usage: get-token" in outcome.stderr
    assert "not allowed with" in outcome.stderr
    assert "v1.given-twice" not in outcome.stderr
    assert sum(emu.counts.values()) == 0


def test_the_file_beats_the_environment(emu: Emulator, tmp_path: Path) -> None:
    path = token_file(tmp_path, emu.issue_tokens()["refresh_token"])
    env = environment(SERVICE_BASE_URL=emu.base_url, CMS_REFRESH_TOKEN="v1.not-this-one")
    outcome = run(["--refresh-file", str(path)], env=env)
    assert outcome.returncode == 0, outcome.stderr
    assert path.read_text().strip() == outcome.json()["refresh_token"]
    assert_no_reuse(emu)


# --- a symlink: its target is replaced, the link kept -------------------------------------------


def test_a_symlink_is_followed_and_kept(emu: Emulator, tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    target = token_file(vault, emu.issue_tokens()["refresh_token"], "cms-refresh")
    link = tmp_path / "refresh-token.txt"
    link.symlink_to(target)
    for _ in range(2):
        outcome = renew(emu, link)
        assert outcome.returncode == 0, outcome.stderr
        assert link.is_symlink()
        assert link.resolve() == target.resolve()
        assert target.read_text().strip() == outcome.json()["refresh_token"]
        assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert_no_reuse(emu)
    assert leftovers(vault) == []
    assert leftovers(tmp_path) == []


def test_a_dangling_symlink_is_a_usage_error(emu: Emulator, tmp_path: Path) -> None:
    link = tmp_path / "refresh-token.txt"
    link.symlink_to(tmp_path / "gone")
    outcome = renew(emu, link)
    assert outcome.returncode == 2
    assert "does not exist" in outcome.stderr
    assert sum(emu.counts.values()) == 0


# --- after the answer ----------------------------------------------------------------------------


def test_a_failed_write_prints_the_only_copy_loudly(
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The rename over the file fails once the provider has answered: the new refresh token
    goes to standard error with a loud warning (its only copy), nothing to standard output,
    exit 1, and no temporary file is left behind."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)

    def refuse(*_: object, **__: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.delenv("CMS_REFRESH_TOKEN", raising=False)
    code = get_token.main(["--base-url", emu.base_url, "--refresh-file", str(path)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    (new,) = [line.strip() for line in captured.err.splitlines() if line.strip().startswith("v1.")]
    assert emu.refresh_token_valid(new)
    assert not emu.refresh_token_valid(old)
    assert "ONLY copy" in captured.err
    assert "Permission denied" in captured.err
    assert str(path) not in captured.err
    assert path.read_text() == old + "\n"
    assert leftovers(tmp_path) == []
    assert emu.counts["exchange"] == 0


def test_a_failed_exchange_keeps_the_saved_token(emu: Emulator, tmp_path: Path) -> None:
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    emu.inject("exchange", "status", status=400, error="bad_request")
    outcome = renew(emu, path)
    assert outcome.returncode == 1
    saved = path.read_text().strip()
    assert emu.refresh_token_valid(saved)
    assert outcome.json()["refresh_token"] == saved
    assert "--refresh-file" in outcome.stderr
    outcome.assert_no_secret_on_stderr(old, saved)
    again = renew(emu, path)
    assert again.returncode == 0, again.stderr
    assert_no_reuse(emu)


def test_help_documents_the_refresh_file() -> None:
    outcome = run(["--help"])
    assert outcome.returncode == 0
    text = " ".join(outcome.stdout.split())
    assert "--refresh-file PATH" in text
    assert "symlink" in text
    assert "atomically" in text
