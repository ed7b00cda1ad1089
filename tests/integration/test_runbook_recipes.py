"""docs/operate.md's commands for reading a function's log and for each alarm, run as written in
bash against moto's server (the stack NAME stands for is ``tokens``): `cmstoken-admin ... logs`
(the venv's command on PATH, as the page says to put it), the AWS CLI's `filter-log-events`, and
the dead letter queue's depth. The runbook's `cmstoken-admin` lines that need the stack's
functions (status, rotate) are parsed by the test of every command the documents show."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from support import check_aws_command, isolated_aws_env, recipe, tool_works

pytestmark = pytest.mark.integration
AWS_CLI = pytest.mark.skipif(not tool_works("aws", "--version"), reason="needs the AWS CLI")

# A Region that AWS CLI v1 (this machine's) has no legacy SQS endpoint for: in the older ones it
# sends SQS calls to their *.queue.amazonaws.com name whatever AWS_ENDPOINT_URL says.
REGION = "eu-central-2"
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")
CRITICAL = json.dumps(
    {"level": "CRITICAL", "message": "rotated refresh token not stored", "aws_error": "KMS"}
)
# A request EventBridge could not deliver, as its dead letter queue holds it: "Each message in
# your DLQ will include the following custom attributes: RULE_ARN, TARGET_ARN, ERROR_CODE,
# ERROR_MESSAGE, EXHAUSTED_RETRY_CONDITION, RETRY_ATTEMPTS" (EventBridge User Guide, "Using
# dead-letter queues to process undelivered events",
# https://docs.aws.amazon.com/eventbridge/latest/userguide/rule-dlq.html); moto's EventBridge
# sends no dead letters, so the test puts one as EventBridge would.
RULE = "arn:aws:events:eu-central-2:123456789012:rule/tokens-refresh-requests/remote"


@pytest.fixture
def deployed(moto_server: str, tmp_path: Path) -> dict[str, str]:
    """The stack ``tokens`` in moto's server (outputs, a dead letter queue, its functions' log
    groups with a few records), and a shell's environment for it."""
    sqs = boto3.client("sqs", region_name=REGION)
    queue = sqs.create_queue(QueueName="tokens-dlq")
    undelivered = sqs.create_queue(QueueName="tokens-undelivered-requests")["QueueUrl"]
    failed = sqs.create_queue(
        QueueName="tokens-failed-requests.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    sqs.send_message(
        QueueUrl=undelivered,
        MessageBody="{}",
        MessageAttributes={
            name: {"DataType": "String", "StringValue": value}
            for name, value in {
                "RULE_ARN": RULE,
                "TARGET_ARN": "arn:aws:sqs:eu-central-2:123456789012:tokens-refresh-requests.fifo",
                "ERROR_CODE": "SDK_CLIENT_ERROR",
                "ERROR_MESSAGE": "Rate exceeded",
                "EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts",
                "RETRY_ATTEMPTS": "2",
            }.items()
        },
    )
    outputs = {
        "BootstrapFunctionName": "tokens-bootstrap",
        "RotatorFunctionName": "tokens-rotator",
        "RotationDeadLetterQueueUrl": queue["QueueUrl"],
        "UndeliveredRefreshRequestQueueUrl": undelivered,
        "FailedRefreshRequestQueueUrl": failed,
    }
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="tokens", TemplateBody=json.dumps(template)
    )
    logs = boto3.client("logs", region_name=REGION)
    now = int(time.time() * 1000)
    records = {
        "rotator": ['{"level": "INFO", "message": "refreshed"}', CRITICAL],
        "bootstrap": ['{"level": "INFO", "message": "authorization started"}'],
    }
    for function, messages in records.items():
        group = f"/cmstoken/tokens/{function}"
        logs.create_log_group(logGroupName=group)
        logs.create_log_stream(logGroupName=group, logStreamName="s")
        events = [
            {"timestamp": now - 60_000 + index, "message": text}
            for index, text in enumerate(messages)
        ]
        logs.put_log_events(logGroupName=group, logStreamName="s", logEvents=events)
    venv = Path(sys.executable).parent
    return isolated_aws_env(
        tmp_path,
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,
        PATH=f"{venv}{os.pathsep}{os.environ.get('PATH', '')}",
    )


def run(script: str, env: dict[str, str]) -> str:
    ran = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script.replace("NAME", "tokens")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return ran.stdout


def test_the_log_commands_print_the_records(deployed: dict[str, str]) -> None:
    lines = run(recipe("admin-logs"), deployed).splitlines()
    assert all(STAMP.match(line) for line in lines)
    messages = [STAMP.sub("", line) for line in lines]
    assert messages == [
        '{"level": "INFO", "message": "refreshed"}',
        CRITICAL,
        CRITICAL,  # the second line keeps the errors
        '{"level": "INFO", "message": "authorization started"}',
    ]


def test_the_credential_lost_command_finds_the_critical_line(deployed: dict[str, str]) -> None:
    (line,) = run(recipe("alarm-credential-lost"), deployed).splitlines()
    assert line.endswith(" " + CRITICAL)


@AWS_CLI
def test_the_aws_cli_reads_the_same_log(deployed: dict[str, str]) -> None:
    rows = [line.split("\t", 1) for line in run(recipe("aws-logs"), deployed).splitlines()]
    assert [message for _, message in rows] == [
        '{"level": "INFO", "message": "refreshed"}',
        CRITICAL,
    ]
    assert all(stamp.isdigit() for stamp, _ in rows)


@AWS_CLI
def test_the_dead_letter_queue_depth_of_the_silent_rotator_runbook(
    deployed: dict[str, str],
) -> None:
    (line,) = [
        line for line in recipe("alarm-rotator-silent").splitlines() if line.startswith("aws ")
    ]
    assert json.loads(run(line, deployed)) == {"Attributes": {"ApproximateNumberOfMessages": "0"}}


@AWS_CLI
def test_the_refresh_request_queues_commands_show_their_depths_and_the_undelivered_rule(
    deployed: dict[str, str],
) -> None:
    undelivered, failed, messages = recipe("refresh-request-queues").splitlines()
    depth = {"Attributes": {"ApproximateNumberOfMessages": "1"}}
    assert json.loads(run(undelivered, deployed)) == depth
    assert json.loads(run(failed, deployed)) == {"Attributes": {"ApproximateNumberOfMessages": "0"}}
    assert run(messages, deployed).split() == [RULE, "SDK_CLIENT_ERROR"]


def test_every_aws_command_of_the_runbook_is_one_the_cli_has() -> None:
    """Each `aws` command (the nested one too), checked against the CLI's service models."""
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "operate.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    commands = [line for block in blocks for line in block.splitlines() if "aws " in line]
    assert len(commands) >= 2
    checked = 0
    for command in commands:
        nested = re.findall(r"\$\((aws .*?)\)\"", command)
        outer = re.sub(r"\"\$\((aws .*?)\)\"", "VALUE", command)
        outer = re.sub(r"\"\$\(\(.*?\)\)\"", "0", outer)  # shell arithmetic
        for words in [shlex.split(outer), *(shlex.split(inner) for inner in nested)]:
            if words and words[0] == "aws":
                check_aws_command(words)
                checked += 1
    assert checked >= 3


def test_the_path_line_puts_cmstoken_admin_on_path(tmp_path: Path) -> None:
    """docs/operate.md's first block, from a checkout's folder (its .venv/bin: this
    interpreter's), in a shell without the venv on PATH."""
    venv = Path(sys.executable).parent
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(venv)
    path = [part for part in os.environ.get("PATH", "").split(os.pathsep) if part != str(venv)]
    ran = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + recipe("admin-path")],
        cwd=tmp_path,
        env={**os.environ, "PATH": os.pathsep.join(path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "examples:" in ran.stdout
    assert "  cmstoken-admin --stack cmstoken logs" in ran.stdout
