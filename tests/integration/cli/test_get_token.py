"""The ``get-token`` console script, run as a subprocess against the emulator over HTTP.

Every run answers the (y/N) prompt on stdin and is killed if it outlives its timeout; every run
checks that no token it produced or was given appears on standard error.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cmsemu import Emulator
from support import (
    UNRESOLVABLE_HOST,
    Finished,
    OnATerminal,
    env_refusing_invalid_names,
    interruptible,
)

pytestmark = pytest.mark.integration

COMMAND = [sys.executable, "-m", "cmstoken.cli.get_token"]
USER_CODE = re.compile(r"[B-Z]{4}-[B-Z]{4}")
JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.")
TIMEOUT = 90.0  # a bound for a hung process on a busy machine, not a speed check


@dataclass
class Outcome(Finished):
    """A finished run: exit code, both streams, and the user code shown (if any)."""

    user_code: str | None = None
    secrets: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        document = super().json()
        self.secrets += [str(document.get("access_token")), str(document.get("refresh_token"))]
        return document

    def assert_no_secret_on_stderr(self, *extra: str) -> None:
        for secret in [*self.secrets, *extra]:
            assert secret not in self.stderr
        assert not JWT.search(self.stderr), self.stderr


def environment(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SERVICE_BASE_URL"}
    env.update(overrides)
    return env


def run(args: Sequence[str], *, stdin: str = "", env: dict[str, str] | None = None) -> Outcome:
    """A non-interactive run: ``stdin`` written at once, then end of input."""
    process = subprocess.Popen(
        [*COMMAND, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else environment(),
    )
    try:
        stdout, stderr = process.communicate(stdin, timeout=TIMEOUT)
    finally:
        process.kill()
        process.wait()
    return Outcome(process.returncode, stdout, stderr)


def interactive(
    emu: Emulator,
    args: Sequence[str],
    *,
    act: Callable[[str], None] | None = None,
    answer: str | None = "y\n",
    interrupt: bool = False,
) -> Outcome:
    """A device-flow run: wait for the user code on stderr, ``act`` on it (approve, deny...),
    then write ``answer`` (None: just close stdin) or press Ctrl-C (``interrupt``), and wait for
    the end."""
    process = subprocess.Popen(
        [*COMMAND, "--base-url", emu.base_url, *args],
        preexec_fn=interruptible,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    stderr_parts: list[str] = []
    stdout_parts: list[str] = []

    def pump_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            stderr_parts.append(line)
            lines.put(line)
        lines.put(None)

    def pump_stdout() -> None:
        assert process.stdout is not None
        stdout_parts.append(process.stdout.read())

    readers = [
        threading.Thread(target=pump_stderr, daemon=True),
        threading.Thread(target=pump_stdout, daemon=True),
    ]
    for reader in readers:
        reader.start()
    user_code = None
    try:
        while user_code is None:
            line = lines.get(timeout=TIMEOUT)
            if line is None:
                break
            found = USER_CODE.search(line)
            if found:
                user_code = found.group(0)
        assert process.stdin is not None
        if user_code is not None and interrupt:
            time.sleep(0.2)  # most likely at the prompt by now; anywhere after the code will do
            process.send_signal(signal.SIGINT)
            process.wait(timeout=TIMEOUT)
        elif user_code is not None:
            if act is not None:
                act(user_code)
            if answer is not None:
                process.stdin.write(answer)
        process.stdin.close()
        process.wait(timeout=TIMEOUT)
    finally:
        process.kill()
        process.wait()
        for reader in readers:
            reader.join(timeout=5)
    return Outcome(process.returncode, "".join(stdout_parts), "".join(stderr_parts), user_code)


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    """The emulator with a 1 s polling interval, so that runs are quick on the real clock."""
    emulator.config.poll_interval = 1
    return emulator


def test_json_output_holds_a_working_service_token(emu: Emulator) -> None:
    outcome = interactive(emu, [], act=emu.approve)
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert list(document) == ["access_token", "refresh_token", "scope", "expires_in", "token_type"]
    assert emu.service_token_valid(document["access_token"])
    assert emu.refresh_token_valid(document["refresh_token"])
    assert document["token_type"] == "Bearer"
    assert document["scope"] == emu.config.scope
    assert isinstance(document["expires_in"], int)
    assert emu.config.service_token_lifetime - 30 <= document["expires_in"]
    assert document["expires_in"] <= emu.config.service_token_lifetime
    assert outcome.stdout.strip().count("\n") == 0  # nothing but the one object
    assert outcome.user_code is not None
    assert f"user_code={outcome.user_code}" in outcome.stderr  # verification_uri_complete
    assert "(y/N)" in outcome.stderr
    assert "valid for" in outcome.stderr
    assert emu.counts["exchange"] == 1
    outcome.assert_no_secret_on_stderr()


def test_plain_output(emu: Emulator) -> None:
    outcome = interactive(emu, ["-o", "plain"], act=emu.approve, answer="Yes\n")
    assert outcome.returncode == 0, outcome.stderr
    lines = outcome.stdout.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == [
        "access_token",
        "refresh_token",
        "expires_in",
    ]
    values = [line.split(": ", 1)[1] for line in lines]
    outcome.secrets += values[:2]
    assert emu.service_token_valid(values[0])
    assert emu.refresh_token_valid(values[1])
    assert 0 < int(values[2]) <= emu.config.service_token_lifetime
    outcome.assert_no_secret_on_stderr()


def test_free_trial_family_belongs_to_the_free_trial_client(emu: Emulator) -> None:
    login = interactive(emu, ["--freetrial"], act=emu.approve)
    assert login.returncode == 0, login.stderr
    refresh_token = login.json()["refresh_token"]
    login.assert_no_secret_on_stderr()

    wrong_client = run(["--base-url", emu.base_url, "-r", refresh_token])
    assert wrong_client.returncode == 1
    assert wrong_client.stdout == ""
    assert "invalid_grant" in wrong_client.stderr
    wrong_client.assert_no_secret_on_stderr(refresh_token)
    assert emu.refresh_token_valid(refresh_token)  # refused, not spent

    renewed = run(["--base-url", emu.base_url, "-ft", "-r", refresh_token])
    assert renewed.returncode == 0, renewed.stderr
    document = renewed.json()
    assert emu.service_token_valid(document["access_token"])
    assert emu.refresh_token_valid(document["refresh_token"])
    renewed.assert_no_secret_on_stderr(refresh_token)


def test_refresh_rotates_and_reminds(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    outcome = run(["--refresh", old], env=environment(SERVICE_BASE_URL=emu.base_url))
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert document["refresh_token"] != old
    assert emu.refresh_token_valid(document["refresh_token"])
    assert not emu.refresh_token_valid(old)
    assert emu.service_token_valid(document["access_token"])
    assert document["scope"] == emu.config.refresh_scope
    assert "void" in outcome.stderr
    assert "keep the new refresh_token" in outcome.stderr
    assert emu.counts["device_code"] == 0
    outcome.assert_no_secret_on_stderr(old)


def test_exchange_failure_keeps_the_new_refresh_token(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("exchange", "status", status=400, error="bad_request")
    outcome = run(["--base-url", emu.base_url, "-r", old])
    assert outcome.returncode == 1
    document = outcome.json()
    assert "access_token" not in document
    assert emu.refresh_token_valid(document["refresh_token"])
    assert "exchange" in outcome.stderr
    assert "-r" in outcome.stderr
    outcome.assert_no_secret_on_stderr(old)


def test_an_rfc_minimal_refresh_answer_is_enough(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", "rewrite", drop=["expires_in", "scope"], set={"token_type": "bearer"})
    outcome = run(["--base-url", emu.base_url, "-r", old])
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert emu.refresh_token_valid(document["refresh_token"])
    assert emu.service_token_valid(document["access_token"])
    assert emu.counts["refresh"] == 1
    outcome.assert_no_secret_on_stderr(old)


def test_a_refresh_answer_without_an_access_token_still_prints_the_new_refresh_token(
    emu: Emulator,
) -> None:
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", "rewrite", drop=["access_token"])
    outcome = run(["--base-url", emu.base_url, "-r", old])
    assert outcome.returncode == 1
    document = outcome.json()
    assert "access_token" not in document
    assert emu.refresh_token_valid(document["refresh_token"])
    assert "access_token" in outcome.stderr
    assert "-r" in outcome.stderr
    assert (emu.counts["refresh"], emu.counts["exchange"]) == (1, 0)
    outcome.assert_no_secret_on_stderr(old)


def test_transient_exchange_failure_is_retried(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("exchange", "status", status=503)
    outcome = run(["--base-url", emu.base_url, "-r", old])
    assert outcome.returncode == 0, outcome.stderr
    assert emu.service_token_valid(outcome.json()["access_token"])
    assert emu.counts["exchange"] == 2
    outcome.assert_no_secret_on_stderr(old)


def test_no_aborts_without_polling(emu: Emulator) -> None:
    outcome = interactive(emu, [], act=emu.approve, answer="n\n")
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert "get-token: aborted" in outcome.stderr
    assert emu.counts["device_token"] == 0
    outcome.assert_no_secret_on_stderr()


def test_end_of_input_aborts(emu: Emulator) -> None:
    outcome = interactive(emu, [], act=emu.approve, answer=None)
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert "aborted" in outcome.stderr
    assert emu.counts["device_token"] == 0


def test_ctrl_c_exits_130_quietly(emu: Emulator) -> None:
    outcome = interactive(emu, [], answer=None, interrupt=True)
    assert outcome.returncode == 130
    assert "interrupted" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert emu.counts["device_token"] == 0


def test_denial(emu: Emulator) -> None:
    outcome = interactive(emu, [], act=emu.deny)
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert "denied" in outcome.stderr
    assert emu.counts["exchange"] == 0
    outcome.assert_no_secret_on_stderr()


def test_expiry_tells_the_user_to_start_again(emu: Emulator) -> None:
    emu.config.device_code_lifetime = 2  # room for one poll (at 1 s), then no poll is left
    outcome = interactive(emu, [])
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert "expired" in outcome.stderr
    assert "start" in outcome.stderr
    assert "again" in outcome.stderr
    assert emu.counts["exchange"] == 0


def test_slow_down_adds_five_seconds(emu: Emulator) -> None:
    def slow_down_then_approve(user_code: str) -> None:
        emu.inject("device_token", "status", status=429, error="slow_down")
        emu.approve(user_code)

    outcome = interactive(emu, [], act=slow_down_then_approve)
    assert outcome.returncode == 0, outcome.stderr
    assert emu.service_token_valid(outcome.json()["access_token"])
    polls = [record for record in emu.requests if record.endpoint == "device_token"]
    assert [record.status for record in polls] == [429, 200]
    assert polls[1].at - polls[0].at >= 5.0
    outcome.assert_no_secret_on_stderr()


@pytest.mark.parametrize("args", [["--bogus"], ["-o", "xml"], ["-r"], ["-f"]])
def test_bad_flags_are_usage_errors(emu: Emulator, args: list[str]) -> None:
    outcome = run(["--base-url", emu.base_url, *args])
    assert outcome.returncode == 2
    assert outcome.stdout == ""
    assert "usage: get-token" in outcome.stderr
    assert sum(emu.counts.values()) == 0


def test_stray_arguments_are_not_echoed(emu: Emulator) -> None:
    stray = "v1.looks-like-a-refresh-token"
    outcome = run(["--base-url", emu.base_url, stray])
    assert outcome.returncode == 2
    outcome.assert_no_secret_on_stderr(stray)


def test_no_base_url_is_a_usage_error() -> None:
    outcome = run([])
    assert outcome.returncode == 2
    assert outcome.stdout == ""
    assert "SERVICE_BASE_URL" in outcome.stderr


@pytest.mark.parametrize("url", ["http://cms.example.com", "ftp://127.0.0.1/", "not a url"])
def test_invalid_base_url_is_a_usage_error(url: str) -> None:
    outcome = run(["--base-url", url])
    assert outcome.returncode == 2
    assert outcome.stdout == ""
    assert "usage: get-token" in outcome.stderr


def test_plain_http_elsewhere_than_loopback_is_refused_from_the_environment() -> None:
    outcome = run([], env=environment(SERVICE_BASE_URL="http://cms.example.com"))
    assert outcome.returncode == 2
    assert "https" in outcome.stderr


def test_unreachable_service() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = run(["--base-url", f"http://127.0.0.1:{port}", "-r", "v1.some-refresh-token"])
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert "cannot reach" in outcome.stderr
    outcome.assert_no_secret_on_stderr("v1.some-refresh-token")


def test_help() -> None:
    outcome = run(["-h"])
    assert outcome.returncode == 0
    for text in [
        "-ft, --freetrial",
        "-o, --format",
        "-r, --refresh",
        "--base-url",
        "SERVICE_BASE_URL",
        "json",
        "plain",
        "exit codes",
    ]:
        assert text in outcome.stdout


def test_no_aws_modules_on_the_import_path() -> None:
    code = (
        "import sys, cmstoken.cli.get_token; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('boto3','botocore','aws_lambda_powertools')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True
    )
    assert result.stdout.strip() == "[]"


# --- safe forms of the refresh token, hostile text, a base URL ending in /api ------------------


def test_the_refresh_token_from_standard_input(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old + "\n")
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert not emu.refresh_token_valid(old)
    assert emu.refresh_token_valid(document["refresh_token"])
    outcome.assert_no_secret_on_stderr(old)


def test_an_empty_standard_input_is_a_usage_error(emu: Emulator) -> None:
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin="")
    assert outcome.returncode == 2
    assert "no refresh token on standard input" in outcome.stderr
    assert emu.counts["refresh"] == 0


def test_the_refresh_token_from_the_environment(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    env = environment(SERVICE_BASE_URL=emu.base_url, CMS_REFRESH_TOKEN=old)
    outcome = run(["-o", "plain"], env=env)
    assert outcome.returncode == 0, outcome.stderr
    assert not emu.refresh_token_valid(old)
    assert emu.counts["device_code"] == 0
    assert "refresh_token: " in outcome.stdout
    outcome.assert_no_secret_on_stderr(old)


def test_terminal_escapes_from_the_upstream_are_not_printed(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    hostile = "bad\x1b]0;owned\x07\x1b[2J\u202eevil"
    emu.inject("refresh", "status", status=400, error="invalid_request", description=hostile)
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 1
    assert "\x1b" not in outcome.stderr
    assert "\x07" not in outcome.stderr
    assert "\u202e" not in outcome.stderr
    assert "bad?]0;owned??[2J?evil" in outcome.stderr


def test_a_base_url_ending_in_api_is_recognised(emu: Emulator) -> None:
    outcome = run(["--base-url", emu.base_url.rstrip("/") + "/api", "-r", "-"], stdin="x" * 20)
    assert outcome.returncode == 2
    assert "pass the service's address, without /api" in outcome.stderr
    assert f"--base-url {emu.base_url.rstrip('/')}" in outcome.stderr
    assert emu.counts["refresh"] == 0


def test_help_and_usage_errors_import_no_http_library() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from cmstoken.cli.get_token.command import main\n"
        "quiet = contextlib.redirect_stdout(io.StringIO())\n"
        "with quiet, contextlib.redirect_stderr(io.StringIO()):\n"
        "    codes = [main(['--help']), main(['--base-url', 'ftp://x']), main(['-o', 'xml'])]\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "http = {'requests', 'urllib3', 'http', 'ssl', 'boto3', 'botocore'}\n"
        "print(codes, sorted(loaded & http))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True
    )
    assert result.stdout.strip() == "[0, 2, 2] []"


# --- issue 18: an empty CMS_REFRESH_TOKEN, retries, named connection failures, the countdown --


@pytest.mark.parametrize("value", ["", "   ", "\n"])
def test_an_empty_refresh_token_variable_is_a_usage_error(emu: Emulator, value: str) -> None:
    env = environment(SERVICE_BASE_URL=emu.base_url, CMS_REFRESH_TOKEN=value)
    outcome = run([], env=env)
    assert outcome.returncode == 2
    assert outcome.stdout == ""
    assert "usage: get-token" in outcome.stderr
    assert "CMS_REFRESH_TOKEN" in outcome.stderr
    assert sum(emu.counts.values()) == 0  # no device flow started either


def refreshes(emu: Emulator) -> list[int | None]:
    return [record.status for record in emu.requests if record.endpoint == "refresh"]


@pytest.mark.parametrize(
    ("endpoint", "fault", "params"),
    [
        ("refresh", "rate_limit", {"retry_after": 1}),
        ("refresh", "rate_limit", {"reset_in": 1}),
        ("refresh", "status", {"status": 503}),
        ("provider", "status", {"status": 503}),
        ("provider", "rate_limit", {"retry_after": 1}),
    ],
)
def test_a_refresh_waits_out_429_and_503(
    emu: Emulator, endpoint: str, fault: str, params: dict[str, Any]
) -> None:
    old = emu.issue_tokens()["refresh_token"]
    emu.inject(endpoint, fault, **params)
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert emu.refresh_token_valid(document["refresh_token"])
    assert emu.counts[endpoint] == 2
    assert refreshes(emu)[-1] == 200
    assert not emu.family_revoked(document["refresh_token"])  # no reuse
    assert "trying again" in outcome.stderr
    outcome.assert_no_secret_on_stderr(old)


def test_a_refresh_the_provider_did_not_act_on_is_sent_again_after_a_lost_answer(
    emu: Emulator,
) -> None:
    """429 says the provider did not act: sent again. A gateway's 502 leaves the outcome
    unknown: the same token is presented again, once; this provider had not acted on it, so
    that refreshes."""
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", "rate_limit", retry_after=1)
    emu.inject("refresh", "status", status=502)
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert refreshes(emu) == [429, 502, 200]
    assert emu.refresh_token_valid(document["refresh_token"])
    assert not emu.family_revoked(document["refresh_token"])
    assert "the answer was lost" in outcome.stderr
    outcome.assert_no_secret_on_stderr(old)


@pytest.mark.parametrize(
    ("fault", "params"),
    [("drop", {}), ("status", {"status": 502, "acted": True})],
    ids=["dropped", "502-acted"],
)
def test_a_lost_refresh_answer_is_recovered_within_the_reuse_interval(
    emu: Emulator, fault: str, params: dict[str, Any]
) -> None:
    """The provider rotated the token and the answer was lost: presenting the same token again
    at once, within the tenant's reuse interval, recovers the family."""
    emu.config.refresh_reuse_interval = 30
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", fault, **params)
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 0, outcome.stderr
    document = outcome.json()
    assert emu.counts["refresh"] == 2
    assert emu.refresh_token_valid(document["refresh_token"])
    assert not emu.family_revoked(document["refresh_token"])
    assert emu.service_token_valid(document["access_token"])
    assert "presenting the same token again, once" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    outcome.assert_no_secret_on_stderr(old)


def test_a_lost_refresh_answer_without_a_reuse_interval_says_to_log_in_again(
    emu: Emulator,
) -> None:
    emu.config.refresh_reuse_interval = 0
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", "drop")
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert emu.counts["refresh"] == 2
    assert emu.family_revoked(old)
    assert "Traceback" not in outcome.stderr
    error = outcome.stderr.splitlines()[-1]
    assert error.startswith("get-token: refresh: the answer to the first refresh was lost")
    assert "void" in error
    assert "log in again" in error
    assert "without -r" in error
    outcome.assert_no_secret_on_stderr(old)


def test_a_refresh_is_never_sent_a_third_time(emu: Emulator) -> None:
    emu.config.refresh_reuse_interval = 30
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", "drop", times=2)
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 1
    assert outcome.stdout == ""
    assert emu.counts["refresh"] == 2
    assert "may be void" in outcome.stderr
    assert "Traceback" not in outcome.stderr
    outcome.assert_no_secret_on_stderr(old)


def test_a_long_retry_hint_is_not_waited_for(emu: Emulator) -> None:
    old = emu.issue_tokens()["refresh_token"]
    emu.inject("refresh", "rate_limit", retry_after=600)
    outcome = run(["--base-url", emu.base_url, "-r", "-"], stdin=old)
    assert outcome.returncode == 1
    assert refreshes(emu) == [429]
    assert emu.refresh_token_valid(old)  # refused, not spent: the same token works later
    assert "429" in outcome.stderr


def test_a_device_flow_waits_out_a_503_on_the_device_code(emu: Emulator) -> None:
    emu.inject("device_code", "status", status=503)
    emu.inject("exchange", "rate_limit", retry_after=1)
    outcome = interactive(emu, [], act=emu.approve)
    assert outcome.returncode == 0, outcome.stderr
    assert emu.service_token_valid(outcome.json()["access_token"])
    assert (emu.counts["device_code"], emu.counts["exchange"]) == (2, 2)
    outcome.assert_no_secret_on_stderr()


def test_https_to_a_plain_http_server_is_named_a_tls_failure(emu: Emulator) -> None:
    port = emu.base_url.rsplit(":", 1)[1]
    outcome = run(["--base-url", f"https://127.0.0.1:{port}", "-r", "-"], stdin="v1.some-token")
    assert outcome.returncode == 1
    assert "TLS handshake" in outcome.stderr
    assert "does not speak TLS" in outcome.stderr
    assert "dropped" not in outcome.stderr
    assert emu.counts["refresh"] == 0


def test_an_unresolvable_name_is_named(tmp_path: Path) -> None:
    env = env_refusing_invalid_names(tmp_path, environment())  # no name server is asked
    outcome = run(
        ["--base-url", f"https://{UNRESOLVABLE_HOST}", "-r", "-"], stdin="v1.x-token", env=env
    )
    assert outcome.returncode == 1
    assert "name not resolved" in outcome.stderr
    assert "https://nonexistent.invalid" in outcome.stderr


def test_a_closed_port_is_named_a_refused_connection() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = run(["--base-url", f"http://127.0.0.1:{port}", "-r", "-"], stdin="v1.x-token")
    assert outcome.returncode == 1
    assert "connection refused" in outcome.stderr


def test_a_countdown_on_a_terminal(emu: Emulator) -> None:
    """Standard error on a pseudo-terminal: after y, a live 'mm:ss left' line until the
    approval; standard output still holds only the result."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*COMMAND, "--base-url", emu.base_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=follower,
        text=True,
        env=environment(),
    )
    os.close(follower)
    shown: list[str] = []
    arrived = threading.Condition()

    def pump() -> None:
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:
                data = b""
            with arrived:
                shown.append(data.decode(errors="replace") if data else "\0")
                arrived.notify_all()
            if not data:
                return

    def wait_for(pattern: re.Pattern[str]) -> re.Match[str]:
        """The first match of ``pattern`` in what the terminal showed (waited for)."""
        with arrived:
            arrived.wait_for(
                lambda: pattern.search("".join(shown)) is not None or "\0" in shown,
                timeout=TIMEOUT,
            )
            found = pattern.search("".join(shown))
        assert found is not None, "".join(shown)
        return found

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        user_code = wait_for(USER_CODE).group(0)
        assert process.stdin is not None
        process.stdin.write("y\n")
        process.stdin.flush()
        wait_for(re.compile(r"waiting for approval: \d\d:\d\d left"))
        emu.approve(user_code)
        stdout, _ = process.communicate(timeout=TIMEOUT)
    finally:
        process.kill()
        process.wait()
        reader.join(timeout=5)
        os.close(leader)
    text = "".join(shown)
    assert process.returncode == 0, text
    document = json.loads(stdout)
    assert emu.service_token_valid(document["access_token"])
    assert "\r" in text
    assert document["refresh_token"] not in text
    assert not JWT.search(text)


def test_no_countdown_when_standard_error_is_not_a_terminal(emu: Emulator) -> None:
    outcome = interactive(emu, [], act=emu.approve)
    assert outcome.returncode == 0, outcome.stderr
    assert "left" not in outcome.stderr
    assert "\r" not in outcome.stderr


def test_help_documents_the_refresh_file_and_the_exit_codes() -> None:
    outcome = run(["-h"])
    assert outcome.returncode == 0
    text = " ".join(outcome.stdout.split())
    for words in ["--refresh-file PATH", "exit codes", "0 success", "2 usage error", "130"]:
        assert words in text


# --- end of input and Ctrl-C at a prompt on a real terminal ------------------------------------


def on_a_terminal(args: Sequence[str]) -> OnATerminal:
    """get-token on a terminal of its own."""
    return OnATerminal([*COMMAND, *args], environment(), TIMEOUT)


def last_lines(shown: list[str], prompt: str) -> list[str]:
    """What the terminal showed from the prompt's line on, without blank lines."""
    (at,) = [number for number, line in enumerate(shown) if prompt in line]
    return [line.strip() for line in shown[at:] if line.strip()]


def test_ctrl_d_at_the_refresh_token_prompt_is_one_line_and_exit_2(emu: Emulator) -> None:
    terminal = on_a_terminal(["--base-url", emu.base_url, "-r", "-"])
    terminal.wait_for("refresh token: ")
    terminal.type(b"\x04")  # Ctrl-D: end of input
    code, stdout, shown = terminal.finish()
    assert code == 2
    assert stdout == ""
    assert last_lines(shown, "refresh token:") == [
        "refresh token:",
        "get-token: no refresh token given (end of input at the prompt); nothing was sent",
    ]
    assert sum(emu.counts.values()) == 0


def test_ctrl_c_at_the_refresh_token_prompt_is_one_line_and_exit_130(emu: Emulator) -> None:
    terminal = on_a_terminal(["--base-url", emu.base_url, "-r", "-"])
    terminal.wait_for("refresh token: ")
    time.sleep(0.2)  # into getpass's read (echo off) by now; anywhere at the prompt will do
    terminal.process.send_signal(signal.SIGINT)
    code, stdout, shown = terminal.finish()
    assert code == 130
    assert stdout == ""
    assert last_lines(shown, "refresh token:") == ["refresh token:", "get-token: interrupted"]
    assert sum(emu.counts.values()) == 0


def test_ctrl_d_at_the_yes_no_question_aborts_in_one_line(emu: Emulator) -> None:
    """SPEC: end of input aborts at the (y/N) question, an authorization failure (exit 1),
    before any poll."""
    terminal = on_a_terminal(["--base-url", emu.base_url])
    terminal.wait_for("(y/N): ")
    terminal.type(b"\x04")
    code, stdout, shown = terminal.finish()
    assert code == 1
    assert stdout == ""
    assert last_lines(shown, "(y/N)")[1:] == [
        "get-token: aborted (end of input: nobody answered y)"
    ]
    assert emu.counts["device_token"] == 0


def test_ctrl_c_at_the_yes_no_question_is_one_line_and_exit_130(emu: Emulator) -> None:
    terminal = on_a_terminal(["--base-url", emu.base_url])
    terminal.wait_for("(y/N): ")
    terminal.type(b"\x03")  # Ctrl-C through the terminal: SIGINT to its foreground process
    code, stdout, shown = terminal.finish()
    assert code == 130
    assert stdout == ""
    assert last_lines(shown, "(y/N)")[1:] == ["get-token: interrupted"]
    assert "Traceback" not in "\n".join(shown)
