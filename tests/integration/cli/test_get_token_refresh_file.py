"""``get-token --refresh-file PATH``: the refresh token kept in a file, renewed in place.

The real command in a subprocess against the emulator, except for the one case that needs a
fault between the answer and the write (a failed rename), which runs ``main`` in-process with
``os.replace`` made to fail. Every run checks that no token reaches standard error, that one
case included: the new refresh token is then rescued to a new file of mode 0600.
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
from pathlib import Path
from typing import Any

import pytest

from cmsemu import Emulator
from cmstoken.cli.get_token import command as get_token
from cmstoken.cli.get_token.rescue import PREFIX as RESCUE_PREFIX
from support import Finished, get_token_env, run_approving, token_file

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
COMMAND = [sys.executable, "-m", "cmstoken.cli.get_token"]
JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.")
TIMEOUT = 30.0
# A path that looks like a token pasted in the wrong place: never echoed.
TOKEN_LIKE_NAME = "v1.MTestOnlyRefreshTokenPastedAsAPath0123456789"


class Outcome(Finished):
    def assert_no_secret_on_stderr(self, *secrets: str) -> None:
        for secret in secrets:
            assert secret not in self.stderr
        assert not JWT.search(self.stderr), self.stderr


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    return emulator


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
        env=env if env is not None else get_token_env(),
        timeout=TIMEOUT,
        check=False,
    )
    return Outcome(result.returncode, result.stdout, result.stderr)


def renew(emu: Emulator, path: Path | str, *extra: str, prefix: Sequence[str] = ()) -> Outcome:
    return run(["--base-url", emu.base_url, "--refresh-file", str(path), *extra], prefix=prefix)


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
    assert document["refresh_token_file"] == str(path)  # the file is the token's one place
    assert "refresh_token" not in document
    assert kept.strip() not in outcome.stdout
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


def test_concurrent_renewals_of_one_file_take_turns(emu: Emulator, tmp_path: Path) -> None:
    """A second run started while the first waits for its answer reads the file only once the
    first has saved the new token: it never presents the spent one."""
    path = token_file(tmp_path, emu.issue_tokens()["refresh_token"])
    emu.inject("refresh", "delay", seconds=2.0, acted=True)  # the first answer comes late
    args = [*COMMAND, "--base-url", emu.base_url, "--refresh-file", str(path)]
    pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    first = subprocess.Popen(args, env=get_token_env(), **pipes)
    try:
        deadline = time.monotonic() + TIMEOUT
        while emu.counts["refresh"] == 0 and first.poll() is None:  # the first has sent
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = subprocess.Popen(args, env=get_token_env(), **pipes)
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
    assert json.loads(outputs[1][0])["refresh_token_file"] == str(path)


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


def test_a_login_into_a_read_only_directory_is_refused_before_it_starts(
    emu: Emulator, tmp_path: Path
) -> None:
    directory = tmp_path / "locked"
    directory.mkdir()
    prefix = without_root_override()
    directory.chmod(0o500)
    try:
        outcome = renew(emu, directory / "refresh-token.txt", prefix=prefix)
    finally:
        directory.chmod(0o700)
    assert outcome.returncode == 2, outcome.stderr
    assert "nothing was sent" in outcome.stderr
    assert sum(emu.counts.values()) == 0
    assert os.listdir(directory) == []


@pytest.mark.parametrize("content", ["v1.one v1.two\n", "v1.one\nv1.two\n", "\x00\x01 binary\n"])
def test_a_file_without_one_token_is_a_usage_error(
    emu: Emulator, tmp_path: Path, content: str
) -> None:
    """Not one token, and not empty either: neither renewed nor replaced by a login."""
    path = tmp_path / "refresh-token.txt"
    path.write_text(content)
    outcome = renew(emu, path)
    assert outcome.returncode == 2
    assert outcome.stdout == ""
    assert "usage: get-token" in outcome.stderr
    assert "--refresh-file" in outcome.stderr
    assert "only the refresh token" in outcome.stderr
    assert "v1.one" not in outcome.stderr
    assert sum(emu.counts.values()) == 0
    assert path.read_text() == content
    assert leftovers(tmp_path) == []


def test_a_missing_folder_behind_a_dangling_symlink_is_a_usage_error(
    emu: Emulator, tmp_path: Path
) -> None:
    """A vault not mounted: its place is not created, and the path is not echoed."""
    (tmp_path / TOKEN_LIKE_NAME).symlink_to(tmp_path / "not-mounted")
    outcome = renew(emu, tmp_path / TOKEN_LIKE_NAME / "refresh-token.txt")
    assert outcome.returncode == 2
    assert "its directory does not exist" in outcome.stderr
    assert "RefreshTokenPasted" not in outcome.stderr
    assert sum(emu.counts.values()) == 0
    assert not (tmp_path / "not-mounted").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_file_git_would_add_is_warned_of_once_and_renewed(emu: Emulator, tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    first = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, first)
    outcome = renew(emu, path)
    document, kept = saved(emu, path, outcome)
    assert outcome.stderr.count("warning: the refresh file is in a git work tree") == 1
    outcome.assert_no_secret_on_stderr(first, kept, document["access_token"])
    (tmp_path / ".gitignore").write_text("refresh-token.txt\n")
    again = renew(emu, path)
    saved(emu, path, again)
    assert "git work tree" not in again.stderr


# --- a file without a token yet: the login creates it -------------------------------------------


def log_in(emu: Emulator, path: Path, *, answer: str = "y\n") -> Outcome:
    """``get-token --refresh-file PATH`` with a person approving the login and answering."""
    ran = run_approving(
        [*COMMAND, "--base-url", emu.base_url, "--refresh-file", str(path)],
        emu.approve,
        env=get_token_env(),
        answer=answer,
        timeout=TIMEOUT,
    )
    return Outcome(ran.returncode, ran.stdout, ran.stderr)


@pytest.mark.parametrize("content", [None, "", " \n\n"])
def test_a_login_creates_the_file_then_renews_it(
    emu: Emulator, tmp_path: Path, content: str | None
) -> None:
    """A path that does not exist yet, or an empty file: the login writes the refresh token
    there (mode 0600 whatever the umask) before printing; the same command then renews it."""
    emu.config.poll_interval = 1
    path = tmp_path / "refresh-token.txt"
    if content is not None:
        path.write_text(content)
        path.chmod(0o644)
    outcome = log_in(emu, path)
    document, kept = saved(emu, path, outcome)
    assert emu.counts["device_token"] >= 1
    assert "now holds the login's refresh token" in outcome.stderr
    outcome.assert_no_secret_on_stderr(kept, document["access_token"])
    assert leftovers(tmp_path) == []
    again = renew(emu, path)
    _, renewed = saved(emu, path, again)
    assert renewed != kept
    assert not emu.refresh_token_valid(kept)
    assert emu.counts["device_code"] == 1
    assert_no_reuse(emu)


def test_the_login_creates_the_missing_folders_private(emu: Emulator, tmp_path: Path) -> None:
    """Missing folders are created 0700 whatever the umask, the file 0600; the path (here
    like a token pasted in the wrong place) is not echoed."""
    emu.config.poll_interval = 1
    path = tmp_path / "state" / TOKEN_LIKE_NAME / "refresh-token.txt"
    outcome = log_in(emu, path)
    _, kept = saved(emu, path, outcome)
    for folder in (path.parent, path.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert "RefreshTokenPasted" not in outcome.stderr
    outcome.assert_no_secret_on_stderr(kept)


def test_an_aborted_login_creates_no_file(emu: Emulator, tmp_path: Path) -> None:
    path = tmp_path / "refresh-token.txt"
    outcome = log_in(emu, path, answer="n\n")
    assert outcome.returncode == 1
    assert "aborted" in outcome.stderr
    assert not path.exists()
    assert leftovers(tmp_path) == []
    assert emu.counts["device_token"] == 0


def test_a_void_token_in_the_file_says_to_delete_it_and_log_in(
    emu: Emulator, tmp_path: Path
) -> None:
    """A login never replaces a file that holds a token: when the provider refuses the
    file's token, the one line says what to do, and the file is left as it was."""
    old = emu.issue_tokens()["refresh_token"]
    emu.revoke_family(old)
    path = token_file(tmp_path, old)
    outcome = renew(emu, path)
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    (line,) = outcome.stderr.strip().splitlines()[-1:]
    assert "invalid_grant" in line
    assert line.endswith(
        "the refresh token in the file is void: delete the file, then run the same command "
        "to log in again (a login never replaces a file that holds a token)"
    )
    assert path.read_text() == old + "\n"
    assert emu.counts["device_code"] == 0
    outcome.assert_no_secret_on_stderr(old)


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
    env = get_token_env(SERVICE_BASE_URL=emu.base_url, CMS_REFRESH_TOKEN="v1.not-this-one")
    outcome = run(["--refresh-file", str(path)], env=env)
    assert outcome.returncode == 0, outcome.stderr
    assert emu.refresh_token_valid(path.read_text().strip())
    assert outcome.json()["refresh_token_file"] == str(path)
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
        assert emu.refresh_token_valid(target.read_text().strip())
        assert outcome.json()["refresh_token_file"] == str(link)
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


def test_a_failed_write_rescues_the_new_token_to_a_new_file_and_prints_it_nowhere(
    emu: Emulator,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The rename over the file fails once the provider has answered: the new refresh token
    goes to a new file of mode 0600 beside it, whose path a loud warning names; no token on
    standard output or standard error (SPEC section 3: the file is the token's one place),
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
    (rescued,) = sorted(tmp_path.glob(RESCUE_PREFIX + "*"))
    new = rescued.read_text().strip()
    assert emu.refresh_token_valid(new)
    assert not emu.refresh_token_valid(old)
    assert stat.S_IMODE(rescued.stat().st_mode) == 0o600
    assert f"It was saved to {rescued} (mode 0600) instead" in captured.err
    assert "Permission denied" in captured.err
    assert new not in captured.err
    assert old not in captured.err
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
    assert outcome.json()["refresh_token_file"] == str(path)
    assert saved not in outcome.stdout
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
