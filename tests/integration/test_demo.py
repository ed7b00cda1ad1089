"""`make demo`'s script runs the lifecycle end to end and prints no secret."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from function_url import FunctionUrl
from support import interruptible, kept_demo, recipe

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_the_lifecycle_and_prints_only_metadata() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Approving automatically" in result.stderr
    assert re.search(r"^\s+[B-Z]{4}-[B-Z]{4}$", result.stderr, re.MULTILINE)  # the user code
    # What an operator sees at bootstrap, once, although nobody is at a terminal: the QR code
    # (block characters) and the framed address.
    assert result.stderr.count("  Open:   http://127.0.0.1:") == 1
    assert result.stderr.count("=" * 64) == 2
    qr_rows = [line for line in result.stderr.splitlines() if set(line.strip()) <= set("█▀▄ ")]
    assert len([row for row in qr_rows if row.strip()]) >= 10
    assert "Authorized" in result.stderr
    assert re.search(r"rotator, scheduled\s+skipped: service token is fresh", result.stdout)
    assert re.search(r"rotator, scheduled again\s+rotated", result.stdout)
    assert "(old one void: yes)" in result.stdout
    assert re.search(r"projects listed\s+prj_[A-Za-z0-9]{16}", result.stdout)
    assert float(re.search(r"elapsed\s+([\d.]+) s", result.stdout).group(1)) < 60  # type: ignore[union-attr]
    assert_one_click(result.stdout)
    assert_next_steps(result.stdout.split("\nnext:\n", 1)[1])
    output = without_the_link(result.stdout + result.stderr)
    assert "eyJ" not in output  # no JWT (raw, id or service token)
    assert not re.search(r"v1\.[A-Za-z0-9_-]{20,}", output)  # no refresh token
    assert not re.search(r"[A-Za-z0-9_-]{40,}", output)  # no device code, no token of any kind
    # The bootstrap's user code only (its address and its frame): the one-click's, never.
    assert len(set(re.findall(r"\b[B-Z]{4}-[B-Z]{4}\b", output))) == 1


def assert_next_steps(steps: str) -> None:
    """The demo's last words: `make demo KEEP=1`, then commands cmstoken-admin takes against the
    kept stack, and documents that exist."""
    from cmstoken.cli.admin.command import parse_args

    lines = [line.split("#")[0].strip() for line in steps.splitlines()]
    assert "make demo KEEP=1" in lines
    assert ". .venv/local-stack.env" in lines
    commands = [line for line in lines if line.startswith("cmstoken-admin ")]
    taken = {parse_args(line.split()[1:]).command for line in commands}
    assert taken == {"status", "rotate", "logs", "bootstrap"}
    documents = re.findall(r"\b((?:docs/)?[\w-]+\.md)\b", steps)
    assert len(documents) >= 4
    assert all((ROOT / document).is_file() for document in documents)


def test_an_unknown_keep_value_is_refused_in_one_line() -> None:
    """`make demo KEEP=true` keeps the stack up (KEEP=1, true, yes: any case); a value the
    demo does not understand is refused before anything starts, not ignored."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        env={**os.environ, "KEEP": "maybe"},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "demo: KEEP='maybe' is not understood: use KEEP=1 (or true, yes) or leave it out"
    ]


@pytest.mark.parametrize(
    ("value", "on"),
    [
        *[(value, True) for value in ("1", "true", "TRUE", "Yes", " yes ")],
        *[(value, False) for value in ("", "0", "false", "No")],
    ],
)
def test_make_variables_turn_on_with_1_true_or_yes(
    value: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from demo import flag

    monkeypatch.setenv("KEEP", value)
    assert flag("KEEP") is on


def assert_one_click(summary: str) -> None:
    """The one-click rows: the credential refused and marked, a link sent, opened and approved,
    the outcome authorized, a new credential, and the stack healthy again."""
    assert re.search(
        r"rotator, scheduled \(refused\)\s+raised ReauthorizationRequiredError \(by design[^)]*\);"
        r" credential reauthorization_required$",
        summary,
        re.MULTILINE,
    )
    assert re.search(
        r"one-click\s+link sent \(credential refused\), opened, approved: authorized"
        r" \(identity [0-9a-f]{12}\)$",
        summary,
        re.MULTILINE,
    )
    refreshed = re.search(
        r"refresh credential again\s+(\w+) -> (\w+) \(new authorization\)", summary
    )
    assert refreshed is not None
    assert refreshed[1] != refreshed[2]
    assert re.search(r"rotator, scheduled after\s+skipped: service token is fresh", summary)


def without_the_link(output: str) -> str:
    """The output with the one-click link taken out, once it is found to be a link of the demo's
    stack: at the function URL's reported origin, and the same link at the local address. A link
    is not a secret (docs/one-click.md); its token would look like one to the scans."""
    origin = FunctionUrl(lambda event, context: None, region="us-east-1").origin
    sent = re.findall(r"https://\S+/l/\S+", output)
    assert [link.startswith(origin + "/l/v1.") for link in sent] == [True], sent
    token = sent[0].removeprefix(origin + "/l/")
    local = re.findall(r"http://127\.0\.0\.1:\d+/l/\S+", output)
    assert [link.endswith("/l/" + token) for link in local] == [True], local
    _, payload, _ = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert (claims["s"], claims["a"], claims["r"]) == (
        "cmstoken-local",
        "123456789012",
        "us-east-1",
    )
    return output.replace(sent[0], "<link>").replace(local[0], "<link>")


@pytest.mark.timeout(360)
def test_demo_stops_its_servers_on_ctrl_c() -> None:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        env={**os.environ, "INTERACTIVE": "1", "PYTHONFAULTHANDLER": "1"},
        preexec_fn=interruptible,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        port = None
        for line in process.stderr:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            port = int(found.group(1)) if found else port
            if "waiting for approval" in line:
                break
        assert port is not None
        assert _listening(port)
        process.send_signal(signal.SIGINT)
        # Bounds a hung process on a busy machine, not a speed check; on a hang the demo's
        # threads are dumped (faulthandler, on SIGABRT) into the failure message.
        try:
            _, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, err = process.communicate(timeout=60)
            pytest.fail(f"the demo did not stop within 120 s of Ctrl-C:\n{err[-6000:]}")
        assert process.returncode == 130, err
        assert "interrupted; servers stopped" in err
        assert not _listening(port)
    finally:
        process.kill()
        process.wait()


LOSES_THE_FIRST_INTERRUPT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from demo import CtrlC
lost = 0
with CtrlC():
    print("ready", flush=True)
    while True:
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            if lost:
                raise
            lost += 1  # as Python does when it lands in a finalizer ("Exception ignored")
"""


def test_a_ctrl_c_that_python_loses_is_raised_again() -> None:
    """A ``KeyboardInterrupt`` raised while a finalizer runs is printed and dropped by Python;
    the demo raises it again until it begins to stop, so one Ctrl-C is always enough."""
    process = subprocess.Popen(
        [sys.executable, "-c", LOSES_THE_FIRST_INTERRUPT, str(ROOT / "scripts")],
        preexec_fn=interruptible,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)  # bounds a hang, not a speed check
        assert process.returncode != 0
        assert "KeyboardInterrupt" in err
    finally:
        process.kill()
        process.wait()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def readme_recipe(name: str) -> str:
    """The code block that follows ``<!-- recipe: name -->`` in the documentation."""
    return recipe(name)


def test_demo_keep_leaves_a_stack_that_the_readmes_commands_operate(tmp_path: Path) -> None:
    """`make demo KEEP=1`, then the README's commands in another shell: cmstoken-admin with no
    AWS account. The README's relative paths hold in a directory of the test's own (its
    .venv/bin is this interpreter's), so that tests running at once do not share the file."""
    with kept_demo(tmp_path) as (process, printed, env_file):
        assert env_file.exists(), printed
        assert f"  . {env_file}\n" in printed
        ports = [int(port) for port in re.findall(r"http://127\.0\.0\.1:(\d+)", printed)]
        assert len(ports) == 2  # moto's server and the Lambda endpoint
        # A shell of the user's: whatever AWS settings it had, the file replaces them, and puts
        # the venv's commands on its PATH.
        shell_env = {**os.environ, "AWS_PROFILE": "someone", "AWS_REGION": "eu-west-3"}
        shell_env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", readme_recipe("local-admin")],
            cwd=tmp_path,
            env=shell_env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        stamped = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")
        logged = [line for line in result.stdout.splitlines() if stamped.match(line)]
        status = [line for line in result.stdout.splitlines() if not stamped.match(line)]
        report = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in status)
        assert report["stack"] == "cmstoken-local (account 123456789012, region us-east-1)"
        assert report["credential"].startswith("active, authorized ")
        assert re.fullmatch(r"skipped at \S+Z \(\d+ min ago\)", report["last run"])
        assert report["next run"].endswith("rate(5 minutes), enabled")
        assert report["alarms"] == "none in ALARM (6 watched)"  # the README's six
        assert report["verdict"] == "healthy"
        # The rotate: debounced (within 10 minutes of the bootstrap).
        assert result.stderr.startswith("skipped: forced refresh debounced")
        # ... saying until when: 600 s (MinRefreshIntervalSeconds) after the last refresh
        assert re.search(
            r"^a forced rotation works from \S+Z \(MinRefreshIntervalSeconds, 600 s after the "
            r"last refresh\)$",
            result.stderr,
            re.M,
        ), result.stderr
        # The rotator's log: Lambda's lines for the scheduled run and the forced one.
        assert sum("START RequestId: " in line for line in logged) == 2, logged
        assert sum("END RequestId: " in line for line in logged) == 2, logged
        output = printed + result.stdout + result.stderr
        assert "eyJ" not in output
        assert not re.search(r"v1\.[A-Za-z0-9_-]{20,}", output)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)  # a bound for a hung process on a busy machine
        assert process.returncode == 0
        assert time.monotonic() - started < 120
        assert not env_file.exists()
        assert not any(_listening(port) for port in ports)
        err = (tmp_path / "demo.err").read_text()
        assert "rotator forced: skipped" in err
        assert "demo: local stack stopped" in err
