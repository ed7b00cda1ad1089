"""``cmstoken-admin status``: one report that says whether the stack is healthy, against moto's
server (the stack's outputs and parameters, its alarms and metrics, the rotator's schedule) and
the handlers in-process on the emulator. Permissions moto does not enforce are refused with a
botocore event hook on the client; the report degrades that line instead of failing."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from cmstoken import __version__
from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.invokers import LambdaInvoker, LocalInvoker
from cmstoken.cli.admin.stack import DeployedStack, StackFunctions, locate
from cmstoken.cli.admin.status import StatusSources, status
from harness import Stack, secret_values
from local_stack import LambdaEndpoint
from support import documentation, load_handler

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
ACCOUNT, REGION = "123456789012", "us-east-1"
NAME = "tokens"
FUNCTIONS = StackFunctions(bootstrap=f"{NAME}-bootstrap", rotator=f"{NAME}-rotator")
NAMESPACE = f"CmsToken/{NAME}"
DIMENSIONS = [{"Name": "service", "Value": "cmstoken"}]
MINUTE = 60


def deploy(*, version: str = __version__) -> DeployedStack:
    """What the command reads of a deployed stack, in moto's server: the stack (parameters,
    outputs), three of its alarms, another stack's alarm, and the rotator's schedule."""
    outputs = {
        "Version": version,
        "BootstrapFunctionName": FUNCTIONS.bootstrap,
        "BootstrapFunctionArn": arn(FUNCTIONS.bootstrap),
        "RotatorFunctionName": FUNCTIONS.rotator,
        "RotatorFunctionArn": arn(FUNCTIONS.rotator),
        "MetricsNamespace": NAMESPACE,
    }
    template = {
        "Parameters": {
            "RotationIntervalMinutes": {"Type": "Number", "Default": 60},
            "ExpiryAlarmThresholdSeconds": {"Type": "Number", "Default": 7200},
            "ReauthorizationWarningSeconds": {"Type": "Number", "Default": 2160000},
        },
        "Resources": {"AlarmTopic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {
            **{key: {"Value": value} for key, value in outputs.items()},
            "AlarmTopicArn": {"Value": {"Ref": "AlarmTopic"}},
        },
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(StackName=NAME, TemplateBody=json.dumps(template))
    deployed = locate(NAME, cloudformation)
    topic = deployed.outputs["AlarmTopicArn"]
    for name, metric, actions in (
        ("AuthorizationRequiredAlarm", "AuthorizationRequired", [topic]),
        ("RotationFailingAlarm", "RotationFailed", [topic]),
        ("RotatorHeartbeatAlarm", "RotationFailed", []),
    ):
        alarm(f"{NAME}-{name}-1A2B3C4D", NAMESPACE, metric, actions)
    alarm(f"{NAME}-2-AuthorizationRequiredAlarm-9Z8Y7X", f"{NAMESPACE}-2", "X", ["arn:other"])
    boto3.client("scheduler").create_schedule(
        Name=f"{NAME}-rotator",
        ScheduleExpression="rate(60 minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": arn(FUNCTIONS.rotator), "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/s"},
    )
    return deployed


def arn(function: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}"


def alarm(name: str, namespace: str, metric: str, actions: list[str]) -> None:
    boto3.client("cloudwatch").put_metric_alarm(
        AlarmName=name,
        Namespace=namespace,
        MetricName=metric,
        Dimensions=DIMENSIONS,
        Statistic="Maximum",
        Period=3600,
        EvaluationPeriods=1,
        Threshold=1,
        ComparisonOperator="GreaterThanOrEqualToThreshold",
        AlarmActions=actions,
    )


def set_alarm(name: str, state: str) -> None:
    boto3.client("cloudwatch").set_alarm_state(AlarmName=name, StateValue=state, StateReason="t")


def ran(stack: Stack, outcome: str, *, minutes_ago: float) -> None:
    """A rotator run's outcome counters, as its metric record reports them."""
    at = datetime.fromtimestamp(stack.clock.now() - minutes_ago * MINUTE, tz=UTC)
    names = ("RotationSucceeded", "RotationSkipped", "RotationFailed", "ReauthorizationRequired")
    boto3.client("cloudwatch").put_metric_data(
        Namespace=NAMESPACE,
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": DIMENSIONS,
                "Timestamp": at,
                "Value": 1.0 if name == outcome else 0.0,
            }
            for name in names
        ],
    )


@pytest.fixture
def invoker(server_stack: Stack) -> LocalInvoker:
    return LocalInvoker(
        {
            FUNCTIONS.bootstrap: load_handler("bootstrap"),
            FUNCTIONS.rotator: load_handler("rotator"),
        },
        timeout_seconds={FUNCTIONS.bootstrap: 900, FUNCTIONS.rotator: 120},
        clock=server_stack.clock.now,
    )


@pytest.fixture
def deployed(server_stack: Stack) -> DeployedStack:
    return deploy()


def report(
    stack: Stack,
    invoker: Any,
    deployed: DeployedStack,
    *,
    as_json: bool = False,
    cloudwatch: Any = None,
    scheduler: Any = None,
) -> tuple[int, str]:
    sources = StatusSources(
        deployed, cloudwatch or boto3.client("cloudwatch"), scheduler or boto3.client("scheduler")
    )
    out = io.StringIO()
    code = status(
        invoker, FUNCTIONS, out=out, sources=sources, as_json=as_json, now=stack.clock.now
    )
    output = out.getvalue()
    for secret in secret_values(stack):
        assert secret not in output
    return code, output


def rows(output: str) -> dict[str, str]:
    """The report's lines by name (``service token``: its value)."""
    found = {}
    for line in output.splitlines():
        name, value = re.split(r"\s{2,}", line, maxsplit=1)
        found[name] = value
    return found


def test_a_healthy_stack(server_stack: Stack, invoker: LocalInvoker, deployed: Any) -> None:
    server_stack.seed()
    ran(server_stack, "RotationSkipped", minutes_ago=7)
    set_alarm(f"{NAME}-AuthorizationRequiredAlarm-1A2B3C4D", "OK")
    code, output = report(server_stack, invoker, deployed)
    assert code == 0, output
    lines = rows(output)
    assert list(lines) == [
        "stack",
        "credential",
        "service token",
        "last run",
        "next run",
        "alarms",
        "version",
        "verdict",
    ]
    assert lines["stack"] == f"{NAME} (account {ACCOUNT}, region {REGION})"
    assert re.fullmatch(
        r"active, authorized \S+Z, refreshed \S+Z; re-authorize by \S+Z \(in 30\.0 days\)",
        lines["credential"],
    )
    assert re.fullmatch(r"expires \S+Z \(in 2[34] h \d+ min\)", lines["service token"])
    assert re.fullmatch(r"skipped at \S+:00Z \(\d+ min ago\)", lines["last run"])
    assert re.fullmatch(
        r"about \S+Z \(in (\d+ h )?\d+ min\); rate\(60 minutes\), enabled", lines["next run"]
    )
    assert lines["alarms"] == "none in ALARM (2 watched)"
    assert lines["version"] == f"stack {__version__}, cmstoken-admin {__version__}"
    assert lines["verdict"] == "healthy"


def test_an_alarm_in_alarm_needs_attention(
    server_stack: Stack, invoker: LocalInvoker, deployed: Any
) -> None:
    server_stack.seed()
    ran(server_stack, "RotationSucceeded", minutes_ago=3)
    # Neither the heartbeat (no actions: RotatorSilentAlarm's input) nor another stack's
    # alarm that shares the name prefix is this stack's incident.
    set_alarm(f"{NAME}-RotatorHeartbeatAlarm-1A2B3C4D", "ALARM")
    set_alarm(f"{NAME}-2-AuthorizationRequiredAlarm-9Z8Y7X", "ALARM")
    assert report(server_stack, invoker, deployed)[0] == 0
    set_alarm(f"{NAME}-RotationFailingAlarm-1A2B3C4D", "ALARM")
    code, output = report(server_stack, invoker, deployed)
    assert code == 1
    lines = rows(output)
    assert lines["alarms"] == "in ALARM: RotationFailingAlarm"
    assert lines["verdict"] == (
        "needs attention: in ALARM: RotationFailingAlarm (each alarm's description and the "
        "README's 'Operate' table say what to do)"
    )


def test_authorization_required(server_stack: Stack, invoker: LocalInvoker, deployed: Any) -> None:
    server_stack.seed()
    server_stack.emulator.revoke_family(server_stack.newest_refresh_token())
    server_stack.emulator.advance(19 * 3600)  # the token is due
    with pytest.raises(AdminError, match="ReauthorizationRequiredError"):
        invoker.invoke(FUNCTIONS.rotator, {})
    ran(server_stack, "ReauthorizationRequired", minutes_ago=1)
    set_alarm(f"{NAME}-AuthorizationRequiredAlarm-1A2B3C4D", "ALARM")
    code, output = report(server_stack, invoker, deployed)
    assert code == 1
    lines = rows(output)
    assert lines["credential"].startswith("reauthorization_required, authorized ")
    assert re.fullmatch(r"reauthorization required at \S+Z \(\d+ min ago\)", lines["last run"])
    assert lines["verdict"].startswith(
        "needs attention: authorization required (the identity provider refused the "
        f"credential): run `cmstoken-admin --stack {NAME} bootstrap`; in ALARM: "
        "AuthorizationRequiredAlarm"
    )


def test_a_stack_never_bootstrapped_with_a_pending_code_shows_no_code(
    server_stack: Stack, invoker: LocalInvoker, deployed: Any
) -> None:
    started = invoker.invoke(FUNCTIONS.bootstrap, {"action": "start"})
    assert started["status"] == "pending"
    for as_json in (False, True):
        code, output = report(server_stack, invoker, deployed, as_json=as_json)
        assert code == 1
        assert started["user_code"] not in output
        assert started["user_code"].replace("-", "") not in output
        assert "user_code=" not in output
    lines = rows(report(server_stack, invoker, deployed)[1])
    assert lines["credential"] == "absent: the stack was never authorized"
    assert lines["pending"] == (
        f"an authorization waits for approval until {started['expires_at']} (its code is "
        f"shown only to whoever runs `cmstoken-admin --stack {NAME} bootstrap`)"
    )
    assert lines["service token"] == "none published"
    assert lines["last run"] == "none reported in 24 h"
    # Only the bootstrap helps: a rotation needs a credential (issue 20).
    assert lines["verdict"] == (
        f"needs attention: not bootstrapped: run `cmstoken-admin --stack {NAME} bootstrap`"
    )


def test_a_version_mismatch_needs_attention(server_stack: Stack, invoker: LocalInvoker) -> None:
    deployed = deploy(version="0.0.9")
    server_stack.seed()
    ran(server_stack, "RotationSkipped", minutes_ago=2)
    code, output = report(server_stack, invoker, deployed)
    assert code == 1
    lines = rows(output)
    assert lines["version"] == f"stack 0.0.9, cmstoken-admin {__version__}"
    assert lines["verdict"] == (
        f"needs attention: the stack runs 0.0.9, this cmstoken-admin is {__version__}: deploy "
        "this release, or use cmstoken-admin 0.0.9"
    )


def test_a_failed_overdue_run_and_a_disabled_schedule(
    server_stack: Stack, invoker: LocalInvoker, deployed: Any
) -> None:
    server_stack.seed()
    ran(server_stack, "RotationSkipped", minutes_ago=200)
    ran(server_stack, "RotationFailed", minutes_ago=180)
    scheduler = boto3.client("scheduler")
    schedule = scheduler.get_schedule(Name=f"{NAME}-rotator")
    scheduler.update_schedule(
        Name=schedule["Name"],
        ScheduleExpression=schedule["ScheduleExpression"],
        FlexibleTimeWindow=schedule["FlexibleTimeWindow"],
        Target=schedule["Target"],
        State="DISABLED",
    )
    code, output = report(server_stack, invoker, deployed)
    assert code == 1
    lines = rows(output)
    assert re.fullmatch(r"failed at \S+Z \(3 h \d min ago\); last good run \S+Z", lines["last run"])
    assert lines["next run"] == "rate(60 minutes), disabled"
    log_group = f"/cmstoken/{NAME}/rotator"
    expected = (
        f"needs attention: the last rotator run failed: read {log_group}, then `cmstoken-admin "
        f"--stack {NAME} rotate`; no rotator run for 3 h MINUTES min (it runs every 60 min): "
        f"check the schedule {NAME}-rotator and {log_group}; the schedule {NAME}-rotator is "
        "disabled: nothing runs the rotator, and deploying the stack again does not enable it; "
        "enable it with aws scheduler update-schedule (its own settings, State ENABLED), then "
        f"run `cmstoken-admin --stack {NAME} rotate`"
    )
    assert re.fullmatch(re.escape(expected).replace("MINUTES", r"\d"), lines["verdict"])


def denied(client: Any, operation: str, action: str) -> Any:
    def refuse(**_: Any) -> None:
        message = (
            f"User: arn:aws:iam::{ACCOUNT}:user/operator is not authorized to perform: {action}"
        )
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": message}}, operation)

    client.meta.events.register(
        f"before-call.{client.meta.service_model.service_id.hyphenize()}.{operation}", refuse
    )
    return client


ALARMS = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:*"
SCHEDULE = f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/{NAME}-rotator"


@pytest.mark.parametrize(
    ("line", "service", "operation", "action", "resource"),
    [
        ("last run", "cloudwatch", "GetMetricData", "cloudwatch:GetMetricData", NAMESPACE),
        ("alarms", "cloudwatch", "DescribeAlarms", "cloudwatch:DescribeAlarms", ALARMS),
        ("next run", "scheduler", "GetSchedule", "scheduler:GetSchedule", SCHEDULE),
        ("credential", "lambda", "Invoke", "lambda:InvokeFunction", arn(FUNCTIONS.bootstrap)),
    ],
)
def test_each_missing_permission_degrades_its_line(
    server_stack: Stack,
    invoker: LocalInvoker,
    deployed: DeployedStack,
    line: str,
    service: str,
    operation: str,
    action: str,
    resource: str,
) -> None:
    server_stack.seed()
    ran(server_stack, "RotationSkipped", minutes_ago=5)
    clients = {name: boto3.client(name) for name in ("cloudwatch", "scheduler", "lambda")}
    denied(clients[service], operation, action)
    used: Any = LambdaInvoker(clients["lambda"], deployed) if service == "lambda" else invoker
    code, output = report(
        server_stack,
        used,
        deployed,
        cloudwatch=clients["cloudwatch"],
        scheduler=clients["scheduler"],
    )
    assert code == 1
    lines = rows(output)
    assert lines[line].startswith(f"not readable ({action} denied)")
    where = f"(account {ACCOUNT}, region {REGION})"
    assert lines["verdict"] == (
        f"needs attention: {action} denied on {resource} {where}: grant {action} on {resource} "
        f"to arn:aws:iam::{ACCOUNT}:user/operator"
    )
    # Every other line is read as usual.
    assert lines["version"] == f"stack {__version__}, cmstoken-admin {__version__}"
    readable = {"last run", "alarms", "next run", "credential"} - {line}
    for other in readable:
        assert "not readable" not in lines[other], other
    if line == "credential":
        assert lines["service token"] == "not readable (see credential)"
    if line == "next run":  # still estimated from the last run and the stack's interval
        assert re.search(r"; about \S+Z \(the last run \+ 60 min\)$", lines["next run"])


def test_json_is_one_object_with_the_same_report(
    server_stack: Stack, invoker: LocalInvoker, deployed: Any
) -> None:
    server_stack.seed()
    ran(server_stack, "RotationSucceeded", minutes_ago=4)
    code, output = report(server_stack, invoker, deployed, as_json=True)
    assert code == 0
    document = json.loads(output)
    assert document["verdict"] == "healthy"
    assert document["healthy"] is True
    assert document["problems"] == []
    assert (document["stack"], document["account"], document["region"]) == (NAME, ACCOUNT, REGION)
    assert document["credential"]["status"] == "active"
    assert document["credential"]["days_until_reauthorization"] == 30.0
    assert document["service_token"]["seconds_left"] > 23 * 3600
    assert document["last_run"]["outcome"] == "rotated"
    assert document["next_run"]["state"] == "ENABLED"
    assert document["alarms"] == {"in_alarm": [], "watched": 2}
    assert document["version"] == {
        "stack": __version__,
        "cmstoken_admin": __version__,
        "matches": True,
    }
    set_alarm(f"{NAME}-AuthorizationRequiredAlarm-1A2B3C4D", "ALARM")
    denied(client := boto3.client("scheduler"), "GetSchedule", "scheduler:GetSchedule")
    code, output = report(server_stack, invoker, deployed, as_json=True, scheduler=client)
    assert code == 1
    document = json.loads(output)
    assert (document["verdict"], document["healthy"]) == ("needs attention", False)
    assert document["alarms"]["in_alarm"] == ["AuthorizationRequiredAlarm"]
    assert document["next_run"]["readable"] is False
    assert document["next_run"]["error"] == "scheduler:GetSchedule denied"
    assert len(document["problems"]) == 2


HOSTILE = "\x1b]0;owned\x07\x1b[2J\u202e"


class Scripted:
    """A bootstrap function whose report holds hostile text (a stored document may)."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.report = report

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        return self.report


@pytest.mark.parametrize("as_json", [False, True])
def test_hostile_text_prints_harmlessly_and_never_a_code(as_json: bool) -> None:
    reported = {
        "credential": {
            "status": f"active{HOSTILE}",
            "authorized_at": f"2026-11-01T00:00:00Z{HOSTILE}",
            "refreshed_at": HOSTILE,
            "reauthorize_by": None,
            "service_token_expires_at": f"{HOSTILE}2026-11-03T00:00:00Z",
        },
        "pending": {
            "user_code": "HHHJ-MMSZ",
            "verification_uri_complete": "https://login.example.com/activate?user_code=HHHJ-MMSZ",
            "expires_at": f"2026-11-22T04:00:00Z{HOSTILE}",
        },
    }
    out = io.StringIO()
    assert status(Scripted(reported), FUNCTIONS, out=out, as_json=as_json) == 1
    shown = out.getvalue()
    for char in "\x1b\x07\u202e":
        assert char not in shown
    assert "HHHJ" not in shown
    assert "activate" not in shown


# --- the command itself, over the wire ------------------------------------------------------


@pytest.fixture
def lambda_endpoint(invoker: LocalInvoker) -> Iterator[str]:
    """The functions behind a local Lambda endpoint (scripts/local_stack.py, as the demo's
    kept stack serves them)."""
    endpoint = LambdaEndpoint(invoker, (FUNCTIONS.bootstrap, FUNCTIONS.rotator)).start()
    yield endpoint.url
    endpoint.stop()


def test_the_command_prints_the_report_on_stdout(
    server_stack: Stack, deployed: Any, moto_server: str, lambda_endpoint: str
) -> None:
    server_stack.seed()
    ran(server_stack, "RotationSkipped", minutes_ago=2)
    env = {
        "PATH": "/usr/bin:/bin",
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ENDPOINT_URL_LAMBDA": lambda_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    }
    admin = str(Path(sys.executable).parent / "cmstoken-admin")
    for argv, expected in (([], 0), (["--json"], 0)):
        result = subprocess.run(
            [admin, "--stack", NAME, "status", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (result.returncode, result.stderr) == (expected, "")
        if argv:
            assert json.loads(result.stdout)["verdict"] == "healthy"
        else:
            assert result.stdout.splitlines()[-1].split() == ["verdict", "healthy"]
    set_alarm(f"{NAME}-RotationFailingAlarm-1A2B3C4D", "ALARM")
    result = subprocess.run(
        [admin, "--stack", NAME, "status"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert rows(result.stdout)["alarms"] == "in ALARM: RotationFailingAlarm"


def test_the_readmes_operator_policy_grants_what_the_commands_call() -> None:
    readme = documentation()
    block = re.search(
        r"An operator's policy for\n`status` and the other commands:\n\n```json\n(.*?)```",
        readme,
        re.S,
    )
    assert block is not None
    policy = json.loads(block.group(1))
    granted: set[str] = set()
    for statement in policy["Statement"]:
        actions = statement["Action"]
        granted.update([actions] if isinstance(actions, str) else actions)
    source = "".join(
        (ROOT / "layers" / "cmstoken" / "cmstoken" / name).read_text()
        for name in (
            "cli/admin/stack.py",
            "cli/admin/invokers.py",
            "cli/admin/status_rotator.py",
            "cli/admin/status_alarms.py",
            "cli/admin/link_key.py",
            "cli/admin/logs.py",
        )
    )
    called = set(
        re.findall(
            r'"((?:cloudformation|lambda|cloudwatch|scheduler|secretsmanager|logs):[A-Za-z]+)"',
            source,
        )
    )
    assert (
        granted
        == called
        == {
            "cloudformation:DescribeStacks",
            "lambda:InvokeFunction",
            "cloudwatch:GetMetricData",
            "cloudwatch:DescribeAlarms",
            "scheduler:GetSchedule",
            "secretsmanager:PutSecretValue",
            "logs:FilterLogEvents",
        }
    )
