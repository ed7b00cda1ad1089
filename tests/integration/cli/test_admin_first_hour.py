"""cmstoken-admin as an AWS CLI user first runs it (issue 30): ``--profile`` before or after the
command, its help's examples, an unreachable endpoint that AWS_ENDPOINT_URL (or the service's
own variable) set named as such, ``logs`` against moto's server, and Ctrl-C while it waits.
Its ``main`` in-process (the environment as a shell would set it: AWS_* replaced), the console
script in a subprocess for a few; every failure is one line on standard error."""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from cmstoken.cli.admin.command import EXAMPLES, build_parser, parse_args
from support import interruptible, isolated_aws_env, run_admin

pytestmark = pytest.mark.integration

STACK_OUTPUTS = {"BootstrapFunctionName": "s-bootstrap", "RotatorFunctionName": "s-rotator"}


@pytest.fixture
def aws_env(moto_server: str, tmp_path: Path) -> dict[str, str]:
    """Credentials and moto's endpoint, no region, no AWS configuration files."""
    return isolated_aws_env(tmp_path)


class Admin:
    """``cmstoken-admin`` run in-process, with the AWS settings of a shell's ``env``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
        self.monkeypatch = monkeypatch
        self.capsys = capsys

    def __call__(self, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        import os

        from cmstoken.cli.admin import command

        with self.monkeypatch.context() as patch:
            for name in [name for name in os.environ if name.startswith("AWS_")]:
                patch.delenv(name)
            for name, value in env.items():
                if name.startswith("AWS_"):
                    patch.setenv(name, value)
            self.capsys.readouterr()
            try:
                code = command.main(list(argv))
            except SystemExit as exited:  # argparse
                code = exited.code if isinstance(exited.code, int) else 2
            out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(["cmstoken-admin", *argv], code, out, err)


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Admin:
    return Admin(monkeypatch, capsys)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def deploy(name: str, region: str) -> None:
    """A stack in moto's server with the outputs cmstoken-admin looks for."""
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in STACK_OUTPUTS.items()},
    }
    client = boto3.client("cloudformation", region_name=region)
    client.create_stack(StackName=name, TemplateBody=json.dumps(template))


# --- --profile ---------------------------------------------------------------------------------


def with_profile(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """AWS configuration files with a profile ``ops`` in eu-west-2 (and a default profile
    without a region)."""
    config = tmp_path / "aws-config"
    config.write_text("[default]\n\n[profile ops]\nregion = eu-west-2\n")
    credentials = tmp_path / "aws-credentials"
    credentials.write_text("[ops]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    return {**env, "AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(credentials)}


@pytest.mark.parametrize(
    "argv",
    [
        ["--profile", "ops", "--stack", "nope", "status"],
        ["--stack", "nope", "status", "--profile", "ops"],
        ["--stack", "nope", "logs", "--profile=ops"],
    ],
)
def test_profile_selects_the_session_before_or_after_the_command(
    aws_env: dict[str, str], tmp_path: Path, argv: list[str], admin: Admin
) -> None:
    """The profile's region is the one used: the stack is looked for in eu-west-2."""
    result = admin(*argv, env=with_profile(tmp_path, aws_env))
    assert result.returncode == 1
    assert one_line(result).startswith(
        "cmstoken-admin: stack 'nope' not found in account 123456789012, region eu-west-2"
    )


def test_profile_finds_a_stack_in_its_region(
    aws_env: dict[str, str], tmp_path: Path, admin: Admin
) -> None:
    deploy("ours", "eu-west-2")
    client = boto3.client("logs", region_name="eu-west-2")
    client.create_log_group(logGroupName="/cmstoken/ours/rotator")
    result = run_admin(
        "logs", "--stack", "ours", "--profile", "ops", env=with_profile(tmp_path, aws_env)
    )
    assert result.returncode == 0, result.stderr
    assert one_line(result) == (
        "cmstoken-admin: no events in /cmstoken/ours/rotator in the last 1 hour"
    )


@pytest.mark.parametrize("where", ["--profile", "AWS_PROFILE"])
def test_an_unknown_profile_is_one_line_and_exit_2(
    aws_env: dict[str, str], tmp_path: Path, where: str, admin: Admin
) -> None:
    env = with_profile(tmp_path, aws_env)
    if where == "--profile":
        result = admin("--stack", "s", "status", "--profile", "nobody", env=env)
    else:
        result = admin("--stack", "s", "status", env={**env, "AWS_PROFILE": "nobody"})
    assert result.returncode == 2
    assert one_line(result) == (
        "cmstoken-admin: the AWS profile 'nobody' is not in your AWS configuration: check "
        "--profile and AWS_PROFILE (aws configure list-profiles lists the profiles)"
    )


def test_check_consumer_takes_a_profile_too() -> None:
    secret = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cmstoken/{}-AbCdEf"
    args = parse_args(
        [
            "check-consumer",
            "--profile",
            "consumer",
            "--secret-arn",
            secret.format("service-token"),
            "--refresh-credential-arn",
            secret.format("refresh-credential"),
        ]
    )
    assert args.profile == "consumer"


# --- the help's examples -----------------------------------------------------------------------


def test_the_help_shows_examples_each_of_which_parses(capsys: pytest.CaptureFixture[str]) -> None:
    text = build_parser().format_help()
    shown = [line.strip() for line in text.splitlines() if line.startswith("  cmstoken-admin ")]
    assert len(shown) == len(EXAMPLES) >= 5
    commands = set()
    for line in shown:
        words = shlex.split(line)[1:]
        commands.add(parse_args(words).command)
    assert commands >= {"bootstrap", "status", "rotate", "logs", "rotate-link-key"}
    assert any("--profile" in line for line in shown)
    assert capsys.readouterr().err == ""


# --- an endpoint set by a variable -------------------------------------------------------------


def closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_CLOUDFORMATION"])
def test_an_unreachable_endpoint_names_the_variable_that_set_it(
    aws_env: dict[str, str], variable: str, admin: Admin
) -> None:
    closed = closed_port()
    env = {key: value for key, value in aws_env.items() if key != "AWS_ENDPOINT_URL"}
    env.update({variable: closed, "AWS_REGION": "eu-west-1"})
    result = admin("--stack", "s", "status", env=env)
    assert result.returncode == 1
    assert one_line(result) == (
        f"cmstoken-admin: cloudformation:DescribeStacks on stack 's': cannot reach {closed}/ "
        f"(region eu-west-1), the address {variable} sets: check {variable} (unset it to "
        "reach AWS itself) and that something answers there"
    )


def test_another_services_variable_is_not_blamed(aws_env: dict[str, str], admin: Admin) -> None:
    """AWS_ENDPOINT_URL_LAMBDA points elsewhere; AWS_ENDPOINT_URL is what points here."""
    closed = closed_port()
    env = {**aws_env, "AWS_ENDPOINT_URL": closed, "AWS_ENDPOINT_URL_LAMBDA": closed_port()}
    result = admin("--stack", "s", "--region", "eu-west-1", "status", env=env)
    assert result.returncode == 1
    assert "the address AWS_ENDPOINT_URL sets: check AWS_ENDPOINT_URL " in one_line(result)


# --- logs ----------------------------------------------------------------------------------------


def put_events(group: str, region: str, messages: list[tuple[float, str]]) -> None:
    client = boto3.client("logs", region_name=region)
    client.create_log_group(logGroupName=group)
    client.create_log_stream(logGroupName=group, logStreamName="2026/01/01/[$LATEST]abc")
    client.put_log_events(
        logGroupName=group,
        logStreamName="2026/01/01/[$LATEST]abc",
        logEvents=[{"timestamp": int(at * 1000), "message": text} for at, text in messages],
    )


def test_logs_prints_the_rotators_recent_events_one_per_line(
    aws_env: dict[str, str], admin: Admin
) -> None:
    """The console script as a user runs it, then (in-process) --since and --function."""
    deploy("tokens", "eu-west-1")
    now = time.time()
    record = json.dumps({"level": "ERROR", "message": "refresh failed", "kind": "upstream"})
    put_events(
        "/cmstoken/tokens/rotator",
        "eu-west-1",
        [
            (now - 3 * 3600, "too old for the default hour"),
            (now - 1800, "START RequestId: 1\tVersion: $LATEST\n"),
            (now - 1799, record + "\n"),
            (now - 1798, "a line\nand its continuation \x1b[2J"),
        ],
    )
    put_events("/cmstoken/tokens/bootstrap", "eu-west-1", [(now - 60, "bootstrap's line")])
    env = {**aws_env, "AWS_REGION": "eu-west-1"}
    result = run_admin("--stack", "tokens", "logs", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ "
    assert [re.sub(stamp, "", line) for line in lines] == [
        "START RequestId: 1 Version: $LATEST",
        record,
        "a line and its continuation ?[2J",
    ]
    assert all(re.match(stamp, line) for line in lines)
    longer = admin("--stack", "tokens", "logs", "--since", "4h", env=env)
    assert "too old for the default hour" in longer.stdout
    bootstrap = admin("logs", "--function", "bootstrap", "--stack", "tokens", env=env)
    assert bootstrap.stdout.endswith(" bootstrap's line\n")


def test_logs_of_a_missing_log_group_is_one_line(aws_env: dict[str, str], admin: Admin) -> None:
    deploy("tokens", "eu-west-1")
    env = {**aws_env, "AWS_REGION": "eu-west-1"}
    result = admin("--stack", "tokens", "logs", "--function", "links", env=env)
    assert result.returncode == 1
    assert one_line(result) == (
        "cmstoken-admin: arn:aws:logs:eu-west-1:123456789012:log-group:/cmstoken/tokens/links "
        "not found (logs:FilterLogEvents, account 123456789012, region eu-west-1): the stack "
        "creates it with the function (links: only with OneClickReauthorization=true)"
    )


@pytest.mark.parametrize("since", ["1", "h", "0h", "1y", "-1h"])
def test_a_malformed_since_is_a_usage_error(since: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        parse_args(["--stack", "s", "logs", f"--since={since}"])
    assert raised.value.code == 2
    assert "--since: expects a number and a unit" in capsys.readouterr().err


# --- Ctrl-C while it waits ----------------------------------------------------------------------


@pytest.fixture
def silent_endpoint() -> Iterator[tuple[str, threading.Event]]:
    """An endpoint that accepts a request and never answers (``asked``: one arrived)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    asked = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            held.append(connection)
            connection.recv(65536)
            asked.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", asked
    server.close()
    for connection in held:
        connection.close()


def test_ctrl_c_while_waiting_for_aws_is_one_line_and_exit_130(
    tmp_path: Path, silent_endpoint: tuple[str, threading.Event]
) -> None:
    endpoint, asked = silent_endpoint
    env = isolated_aws_env(tmp_path, AWS_ENDPOINT_URL=endpoint, AWS_REGION="eu-west-1")
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "cmstoken-admin"), "--stack", "s", "status"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        assert asked.wait(timeout=60), "cmstoken-admin never called"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130
    assert stdout == ""
    assert [line for line in stderr.splitlines() if line.strip()] == ["cmstoken-admin: interrupted"]
