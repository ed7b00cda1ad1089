"""Issue 37: interrupts between a refresh's sending and the storing of its answer, a closed
standard output, and no refresh token on either stream with ``--refresh-file`` (SPEC 3, 4.1).

The real command in a subprocess against the emulator over HTTP, its refresh answered slowly
after the emulator has rotated the token (``delay`` with ``acted``), no reuse interval: a lost
answer is a lost login. Signals are sent while it waits for that answer.
"""

from __future__ import annotations

import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from cmsemu import Emulator
from support import Finished, OnATerminal, get_token_env, interruptible, token_file

pytestmark = pytest.mark.integration

# The console script, as a user runs it (beside this interpreter in the venv).
COMMAND = [os.path.join(os.path.dirname(sys.executable), "get-token")]
TIMEOUT = 30.0
SLOW = 3.0  # seconds the emulator holds the refresh's answer, after rotating the token
REFRESH_TOKEN_SHAPE = re.compile(r"v1\.[A-Za-z0-9_-]{8,}")
USER_CODE = re.compile(r"^\s*[B-Z]{4}-[B-Z]{4}\s*$")
JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.")
SAVING = "get-token: interrupted: the refresh token sent is spent; waiting for the answer"
AT_STAKE = "get-token: interrupted again: exiting before the answer is saved loses the login"


class Outcome(Finished):
    def assert_no_refresh_token(self, *tokens: str) -> None:
        """Neither stream holds a refresh token (those given, or any of their shape);
        standard error holds no JWT either (the service token is standard output's)."""
        for text in (self.stdout, self.stderr):
            for token in tokens:
                assert token not in text
            assert not REFRESH_TOKEN_SHAPE.search(text), text
        assert not JWT.search(self.stderr), self.stderr

    def assert_one_line_messages(self) -> None:
        assert "Traceback" not in self.stderr
        assert "Error" not in self.stderr, self.stderr  # KeyboardInterrupt, BrokenPipeError...
        for message in (SAVING, AT_STAKE):
            assert self.stderr.count(message) <= 1
            for line in self.stderr.splitlines():
                if message in line:
                    assert line.startswith(message)


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    emulator.config.refresh_reuse_interval = 0  # a spent token presented again revokes
    return emulator


class Running:
    """get-token started in a subprocess (pipes), its standard error read line by line."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        stdin: str | None = "",
        closed_stdout: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        """``closed_stdout``: standard output a pipe nobody reads (``| jq`` killed by the same
        Ctrl-C, ``| head -c0``): writing to it fails (Python ignores SIGPIPE). ``env``: more
        environment variables."""
        read, write = os.pipe()
        os.close(read)
        try:
            self.process = subprocess.Popen(
                [*COMMAND, *args],
                stdin=subprocess.PIPE,
                stdout=write if closed_stdout else subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=get_token_env(**(env or {})),
                preexec_fn=interruptible,
            )
        finally:
            os.close(write)
        if stdin is not None:  # None: left open for ``answer``
            self.answer(stdin)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        self.out: list[str] = []
        self.readers = [
            threading.Thread(target=self._pump_stderr, daemon=True),
            threading.Thread(target=self._pump_stdout, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def answer(self, text: str) -> None:
        """``text`` on standard input, which then closes."""
        assert self.process.stdin is not None
        self.process.stdin.write(text)
        self.process.stdin.close()

    def _pump_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stdout(self) -> None:
        if self.process.stdout is not None:
            self.out.append(self.process.stdout.read())

    def wait_for(self, text: str | re.Pattern[str]) -> str:
        """The first line from now on that holds ``text`` (or matches it)."""
        while True:
            line = self.lines.get(timeout=TIMEOUT)
            assert line is not None, "".join(self.err)
            if text.search(line) if isinstance(text, re.Pattern) else text in line:
                return line

    def finish(self) -> Outcome:
        try:
            self.process.wait(timeout=TIMEOUT)
        finally:
            self.process.kill()
            self.process.wait()
            for reader in self.readers:
                reader.join(timeout=5)
        return Outcome(self.process.returncode, "".join(self.out), "".join(self.err))


def held(emu: Emulator, endpoint: str, before: int = 0) -> None:
    """Wait until the emulator has counted a request at ``endpoint`` beyond ``before``, and a
    moment more, for it to be handled while its answer is delayed."""
    deadline = time.monotonic() + TIMEOUT
    while emu.counts[endpoint] == before:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.3)


def refreshing(emu: Emulator, args: Sequence[str], *, stdin: str = "") -> Running:
    """get-token with its refresh sent and rotated by the emulator, its answer not yet sent."""
    emu.inject("refresh", "delay", seconds=SLOW, acted=True)
    before = emu.counts["refresh"]
    running = Running(["--base-url", emu.base_url, *args], stdin=stdin)
    running.wait_for("Refreshing...")
    held(emu, "refresh", before)  # the token is rotated; the answer is held for SLOW seconds
    return running


def assert_saved(emu: Emulator, path: Path, old: str) -> str:
    """The file holds the new, live token of the old one's family, which is intact."""
    kept = path.read_text().strip()
    assert kept != old
    assert emu.refresh_token_valid(kept)
    assert not emu.family_revoked(kept)
    assert not emu.refresh_token_valid(old)
    assert emu.counts["refresh"] == 1
    return kept


# --- interrupts held from the refresh's sending until its answer is stored ----------------------


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_during_a_slow_refresh_saves_the_new_token_then_exits_130(
    emu: Emulator, tmp_path: Path, number: signal.Signals
) -> None:
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    running = refreshing(emu, ["--refresh-file", str(path)])
    running.process.send_signal(number)
    outcome = running.finish()
    assert outcome.returncode == 130, outcome.stderr
    kept = assert_saved(emu, path, old)
    assert outcome.stderr.count(SAVING) == 1
    assert AT_STAKE not in outcome.stderr
    assert outcome.stderr.splitlines()[-1].startswith("get-token: interrupted before the service")
    assert outcome.json()["refresh_token_file"] == str(path)
    assert set(outcome.json()) == {"refresh_token_file", "scope"}
    assert emu.counts["exchange"] == 0
    outcome.assert_one_line_messages()
    outcome.assert_no_refresh_token(old, kept)


def test_a_second_interrupt_says_what_is_at_stake_and_still_saves(
    emu: Emulator, tmp_path: Path
) -> None:
    """GitHub's cancellation: SIGINT, then SIGTERM; a person: Ctrl-C twice."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    running = refreshing(emu, ["--refresh-file", str(path)])
    running.process.send_signal(signal.SIGINT)
    running.wait_for(SAVING)
    running.process.send_signal(signal.SIGINT)
    running.wait_for(AT_STAKE)
    outcome = running.finish()
    assert outcome.returncode == 130, outcome.stderr
    kept = assert_saved(emu, path, old)
    (line,) = [line for line in outcome.stderr.splitlines() if AT_STAKE in line]
    assert "a person must log in again" in line
    assert "delete the refresh file, then run the same get-token --refresh-file" in line
    assert "interrupt once more to exit anyway" in line
    outcome.assert_one_line_messages()
    outcome.assert_no_refresh_token(old, kept)


def test_a_third_interrupt_exits_at_once(emu: Emulator, tmp_path: Path) -> None:
    """Insisted on three times: the run ends without waiting, as the second line warned."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    running = refreshing(emu, ["--refresh-file", str(path)])
    started = time.monotonic()
    for expected in (SAVING, AT_STAKE):
        running.process.send_signal(signal.SIGINT)
        running.wait_for(expected)
    running.process.send_signal(signal.SIGINT)
    outcome = running.finish()
    assert time.monotonic() - started < SLOW
    assert outcome.returncode == 130
    assert outcome.stderr.splitlines()[-1] == "get-token: interrupted"
    assert path.read_text() == old + "\n"
    assert outcome.stdout == ""
    outcome.assert_one_line_messages()
    outcome.assert_no_refresh_token(old)


def test_an_interrupt_while_waiting_to_retry_a_refused_refresh_exits_at_once(
    emu: Emulator, tmp_path: Path
) -> None:
    """A 429 is a refresh the provider did not act on: nothing to store, so an interrupt
    during the wait before the next attempt ends the run at once, the token unspent."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    emu.inject("refresh", "rate_limit", retry_after=20)
    running = Running(["--base-url", emu.base_url, "--refresh-file", str(path)])
    running.wait_for("trying again in")
    started = time.monotonic()
    running.process.send_signal(signal.SIGINT)
    outcome = running.finish()
    assert time.monotonic() - started < 5
    assert outcome.returncode == 130, outcome.stderr
    assert outcome.stderr.splitlines()[-1] == "get-token: interrupted"
    assert SAVING not in outcome.stderr
    assert emu.counts["refresh"] == 1
    assert emu.refresh_token_valid(old)
    assert path.read_text() == old + "\n"
    outcome.assert_one_line_messages()


def test_without_a_file_an_interrupt_prints_the_new_token_then_exits_130(
    emu: Emulator,
) -> None:
    old = emu.issue_tokens()["refresh_token"]
    running = refreshing(emu, ["-r", "-"], stdin=old + "\n")
    running.process.send_signal(signal.SIGINT)
    outcome = running.finish()
    assert outcome.returncode == 130, outcome.stderr
    new = outcome.json()["refresh_token"]
    assert emu.refresh_token_valid(new)
    assert not emu.family_revoked(new)
    assert "on standard output, then exiting" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert new not in outcome.stderr


def test_ctrl_c_on_a_terminal_during_a_renewal_saves_the_new_token(
    emu: Emulator, tmp_path: Path
) -> None:
    """Ctrl-C typed on a real terminal (a pty: ``\\x03`` sends SIGINT to the foreground
    process group), standard error on the terminal as in a person's shell."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    emu.inject("refresh", "delay", seconds=SLOW, acted=True)
    command = [*COMMAND, "--base-url", emu.base_url, "--refresh-file", str(path)]
    terminal = OnATerminal(command, get_token_env(), TIMEOUT)
    held(emu, "refresh")
    terminal.type(b"\x03")
    code, stdout, _ = terminal.finish()
    text = terminal.shown
    assert code == 130, text
    kept = assert_saved(emu, path, old)
    # The terminal echoes Ctrl-C as ^C, on the line of the message that follows it.
    lines = [line.strip().removeprefix("^C") for line in text.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("get-token:")]
    assert len(said) == 2, text
    assert said[0].startswith(SAVING)
    assert said[1].startswith("get-token: interrupted before the service token was obtained")
    assert "Traceback" not in text
    assert set(json.loads(stdout)) == {"refresh_token_file", "scope"}
    Outcome(0, stdout, text).assert_no_refresh_token(old, kept)


def test_an_interrupt_during_the_poll_that_gets_the_tokens_saves_the_login(
    emu: Emulator, tmp_path: Path
) -> None:
    """Tokens issued once must be kept: the poll that the approved login answers slowly is
    waited for, the file created with the login's refresh token, then exit 130."""
    emu.config.poll_interval = 1
    path = tmp_path / "refresh-token.txt"
    running = Running(["--base-url", emu.base_url, "--refresh-file", str(path)], stdin=None)
    code = running.wait_for(USER_CODE).strip()
    emu.approve(code)
    emu.inject("device_token", "delay", seconds=SLOW, acted=True)
    running.answer("y\n")
    held(emu, "device_token")
    running.process.send_signal(signal.SIGINT)
    outcome = running.finish()
    assert outcome.returncode == 130, outcome.stderr
    kept = path.read_text().strip()
    assert emu.refresh_token_valid(kept)
    assert "the login's tokens may be on their way" in outcome.stderr
    assert set(outcome.json()) == {"refresh_token_file", "scope"}
    outcome.assert_one_line_messages()
    outcome.assert_no_refresh_token(kept)


# --- a closed standard output -------------------------------------------------------------------


CLOSED = "standard output was closed (a broken pipe): the result could not be printed"


def test_a_closed_standard_output_is_one_line_without_a_traceback(
    emu: Emulator, tmp_path: Path
) -> None:
    """``get-token --refresh-file F | head -c0``: the reader is gone before the result is
    printed. The renewal is kept; one line says the output was lost; exit 1."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    running = Running(["--base-url", emu.base_url, "--refresh-file", str(path)], closed_stdout=True)
    outcome = running.finish()
    assert outcome.returncode == 1, outcome.stderr
    assert "Exception ignored" not in outcome.stderr
    assert outcome.stderr.splitlines()[-1] == f"get-token: {CLOSED}"
    outcome.assert_one_line_messages()
    kept = assert_saved(emu, path, old)
    outcome.assert_no_refresh_token(old, kept)


def test_a_closed_standard_output_that_was_the_new_tokens_place_rescues_it_to_a_file(
    emu: Emulator, tmp_path: Path
) -> None:
    """``get-token -r - | head -c0``, no refresh file: standard output was the new refresh
    token's one place, and the token given is spent. The new one is saved to a new file of
    mode 0600 in the user's state folder, the line says where and how to renew with it, and
    the renewal from that file works; never the token on either stream."""
    old = emu.issue_tokens()["refresh_token"]
    state = tmp_path / "state"
    running = Running(
        ["--base-url", emu.base_url, "-r", "-"],
        stdin=old + "\n",
        closed_stdout=True,
        env={"XDG_STATE_HOME": str(state)},
    )
    outcome = running.finish()
    assert outcome.returncode == 1, outcome.stderr
    (rescued,) = (state / "cmstoken").iterdir()
    assert rescued.stat().st_mode & 0o777 == 0o600
    kept = rescued.read_text().strip()
    assert emu.refresh_token_valid(kept)
    assert outcome.stderr.splitlines()[-1] == (
        f"get-token: {CLOSED}; the new refresh token was saved to {rescued} (mode 0600): "
        f"renew with get-token --refresh-file {rescued}"
    )
    outcome.assert_one_line_messages()
    outcome.assert_no_refresh_token(old, kept)
    renewed = Running(["--base-url", emu.base_url, "--refresh-file", str(rescued)]).finish()
    assert renewed.returncode == 0, renewed.stderr
    assert emu.service_token_valid(renewed.json()["access_token"])
    assert emu.refresh_token_valid(rescued.read_text().strip())


def test_a_closed_standard_output_says_the_login_is_lost_when_no_file_takes_the_token(
    emu: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with no folder that takes a file (the state folder and the temporary folder
    are files: even root cannot write there): one line says the new token is lost and the given
    one spent: log in again. In-process, as the temporary folder falls back to /tmp otherwise."""
    from cmstoken.cli.get_token.command import main

    old = emu.issue_tokens()["refresh_token"]
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    monkeypatch.setattr(tempfile, "tempdir", str(blocked))
    read, write = os.pipe()
    os.close(read)
    stdout, stderr = os.fdopen(write, "w"), io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(old + "\n"))
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    try:
        code = main(["--base-url", emu.base_url, "-r", "-"])
    finally:
        monkeypatch.undo()
        stdout.close()
    outcome = Outcome(code, "", stderr.getvalue())
    assert outcome.returncode == 1, outcome.stderr
    last = outcome.stderr.splitlines()[-1]
    assert last.startswith(f"get-token: {CLOSED}, and no file took the new refresh token")
    assert last.endswith("it is lost, and the one given is spent: log in again")
    outcome.assert_one_line_messages()
    outcome.assert_no_refresh_token(old)
    assert not emu.refresh_token_valid(old)


def test_ctrl_c_during_the_exchange_into_a_closed_pipe_is_one_line(
    emu: Emulator, tmp_path: Path
) -> None:
    """Issue 37 item 4: ``get-token ... | jq -r .access_token`` and Ctrl-C during the exchange
    (jq dies of the same Ctrl-C): no traceback, one line, exit 130, the renewal kept."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    emu.inject("exchange", "delay", seconds=SLOW)
    running = Running(["--base-url", emu.base_url, "--refresh-file", str(path)], closed_stdout=True)
    held(emu, "exchange")
    running.process.send_signal(signal.SIGINT)
    outcome = running.finish()
    assert outcome.returncode == 130, outcome.stderr
    assert outcome.stderr.splitlines()[-1] == f"get-token: interrupted; {CLOSED}"
    outcome.assert_one_line_messages()
    kept = assert_saved(emu, path, old)
    outcome.assert_no_refresh_token(old, kept)


# --- with --refresh-file, the file is the refresh token's one place -----------------------------


def test_no_refresh_token_on_either_stream_with_a_refresh_file(
    emu: Emulator, tmp_path: Path
) -> None:
    """Every kind of run that ends with the token kept: success (json and plain), a refused
    exchange, an interrupted one. Each stream is scanned for every refresh token seen."""
    old = emu.issue_tokens()["refresh_token"]
    path = token_file(tmp_path, old)
    seen = [old]
    outcomes: list[Outcome] = []

    def renew(*extra: str) -> Outcome:
        ran = Running(["--base-url", emu.base_url, "--refresh-file", str(path), *extra])
        outcome = ran.finish()
        seen.append(path.read_text().strip())
        outcomes.append(outcome)
        return outcome

    document = renew().json()
    assert set(document) == {
        "access_token",
        "refresh_token_file",
        "scope",
        "expires_in",
        "token_type",
    }
    assert document["refresh_token_file"] == str(path)
    assert emu.service_token_valid(document["access_token"])
    plain = renew("-o", "plain")
    assert plain.stdout.splitlines()[1] == f"refresh_token_file: {path}"
    emu.inject("exchange", "status", status=400, error="bad_request")
    refused = renew()
    assert refused.returncode == 1
    assert set(refused.json()) == {"refresh_token_file", "scope"}
    running = refreshing(emu, ["--refresh-file", str(path)])
    running.process.send_signal(signal.SIGINT)
    outcomes.append(running.finish())
    seen.append(path.read_text().strip())
    assert [outcome.returncode for outcome in outcomes] == [0, 0, 1, 130]
    for outcome in outcomes:
        outcome.assert_no_refresh_token(*seen)
    assert emu.refresh_token_valid(seen[-1])
    assert len(set(seen)) == len(seen) == 5
