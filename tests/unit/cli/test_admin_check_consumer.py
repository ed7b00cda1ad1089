"""``cmstoken-admin check-consumer`` on moto in-process (issue 22, item 7): each check's ok,
FAIL and skip, one line each, the exit status, and never a token.

moto evaluates neither a secret's resource policy nor a KMS key policy, so the refusals AWS
would answer are stood in for by a handler on the consumer's session that answers
``GetSecretValue`` for one secret with AWS's own error (the texts of AWS's refusals: IAM's
"is not authorized to perform", and "Access to KMS is not allowed" from the AWS Knowledge
Center's secrets-manager-cross-account-key); everything else is moto's."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from cmstoken.aws.documents import STATUS_REAUTHORIZATION_REQUIRED, ServiceTokenDocument
from cmstoken.cli.admin import command
from cmstoken.consumer.check import ConsumerCheck, Line, run_checks
from cmstoken.core.clock import to_iso
from cmstoken.core.triggers import REFRESH_REQUESTED
from harness import refresh_request_queue
from replication import stop_replication
from support import FakeClock, check_aws_command

PRIMARY, REPLICA = "eu-west-1", "us-east-1"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.check-consumer-token.c2ln"
REFRESH_TOKEN = "v1.refresh-token-that-must-never-print"
DAY = 86400
POLICY_DENIED = "User: arn:aws:sts::123456789012:assumed-role/app/x is not authorized to perform"
KMS_DENIED = "Access to KMS is not allowed"


@dataclass
class Stack:
    """The stack's secrets and bus in moto, and the refusals AWS would answer the consumer."""

    token_arn: str
    credential_arn: str
    bus_arn: str
    queue_url: str
    clock: FakeClock
    session: Any = None
    refusals: dict[str, tuple[str, str]] = field(default_factory=dict)  # secret: code, text

    def __post_init__(self) -> None:
        self.session = boto3.Session()
        self.session.events.register("before-call.secrets-manager.GetSecretValue", self._refuse)
        self.refuse(self.credential_arn, "AccessDeniedException", POLICY_DENIED)

    def refuse(self, arn: str, code: str, text: str) -> None:
        self.refusals[arn] = (code, text)

    def _refuse(self, params: Any, **_: Any) -> None:
        body = json.loads(params["body"])
        refusal = self.refusals.get(body["SecretId"])
        if refusal is not None:
            error: Any = {"Error": {"Code": refusal[0], "Message": refusal[1]}}
            raise ClientError(error, "GetSecretValue")

    def clients(self, service: str, region: str) -> Any:
        return self.session.client(service, region_name=region)

    def check(self, **options: Any) -> list[Line]:
        check = ConsumerCheck(self.token_arn, self.credential_arn, **options)
        return run_checks(check, self.clients, self.session, self.clock)

    def publish(self, token: str = TOKEN, **fields: Any) -> None:
        now = self.clock.now()
        document = ServiceTokenDocument(
            token=token,
            expires_at=now + DAY,
            api_url="https://cms.example.com/api",
            issued_at=now,
            **fields,
        )
        client = boto3.client("secretsmanager", region_name=PRIMARY)
        client.put_secret_value(SecretId=self.token_arn, SecretString=document.to_json())

    def requests(self) -> list[dict[str, Any]]:
        sqs = boto3.client("sqs", region_name=PRIMARY)
        messages = sqs.receive_message(QueueUrl=self.queue_url).get("Messages", [])
        return [json.loads(message["Body"]) for message in messages]


@pytest.fixture
def stack(aws_credentials: None) -> Iterator[Stack]:
    with mock_aws():
        secrets = boto3.client("secretsmanager", region_name=PRIMARY)
        token_arn = secrets.create_secret(
            Name="cmstoken/service-token", AddReplicaRegions=[{"Region": REPLICA}]
        )["ARN"]
        credential_arn = secrets.create_secret(
            Name="cmstoken/refresh-credential", SecretString=json.dumps({"t": REFRESH_TOKEN})
        )["ARN"]
        events = boto3.client("events", region_name=PRIMARY)
        bus = events.create_event_bus(Name="cmstoken-refresh-requests")["EventBusArn"]
        _, queue = refresh_request_queue(bus="cmstoken-refresh-requests", region=PRIMARY)
        # The command reads the system clock: the fake one starts now.
        world = Stack(token_arn, credential_arn, bus, queue, FakeClock(start=time.time()))
        world.publish()
        yield world


def shown(lines: list[Line]) -> list[tuple[str, str]]:
    return [(line.status, line.check) for line in lines]


def assert_clean(lines: list[Line]) -> None:
    for line in lines:
        text = str(line)
        assert "\n" not in text
        assert TOKEN not in text
        assert REFRESH_TOKEN not in text


def test_a_consumer_that_may_read_and_not_more_passes(stack: Stack) -> None:
    lines = stack.check(replica_regions=(REPLICA,))
    assert shown(lines) == [
        ("ok", f"read {PRIMARY}"),
        ("ok", f"decrypt {PRIMARY}"),
        ("ok", f"token {PRIMARY}"),
        ("ok", f"read {REPLICA}"),
        ("ok", f"decrypt {REPLICA}"),
        ("ok", f"token {REPLICA}"),
        ("ok", f"replica {REPLICA}"),
        ("ok", "refresh credential"),
    ]
    assert f"GetSecretValue allowed on {stack.token_arn.replace(PRIMARY, REPLICA)}" in (
        lines[3].text
    )
    assert lines[6].text == f"holds the primary's token (issued at {to_iso(stack.clock.now())})"
    assert lines[2].text.startswith("a token for https://cms.example.com/api, expires ")
    assert_clean(lines)


def test_reading_the_refresh_credential_is_a_failure(stack: Stack) -> None:
    """The control of the last check: without the refusal, the value is read, and that fails
    (the value itself is never shown)."""
    del stack.refusals[stack.credential_arn]
    (line,) = [line for line in stack.check() if line.check == "refresh credential"]
    assert line.status == "FAIL"
    assert line.text.startswith(f"this principal can read {stack.credential_arn}: remove")
    assert_clean([line])


@pytest.mark.parametrize(
    ("code", "text", "expected"),
    [
        ("AccessDeniedException", KMS_DENIED, "only its KMS key refused (AccessDeniedException)"),
        ("ResourceNotFoundException", "not found", "was not found, so nothing is proven"),
        ("ThrottlingException", "slow down", "could not be checked"),
    ],
    ids=["key-only", "not-found", "throttled"],
)
def test_a_refresh_credential_not_refused_by_its_policies_fails(
    stack: Stack, code: str, text: str, expected: str
) -> None:
    stack.refuse(stack.credential_arn, code, text)
    (line,) = [line for line in stack.check() if line.check == "refresh credential"]
    assert line.status == "FAIL"
    assert expected in line.text


def test_a_secret_policy_refusal_stops_at_read(stack: Stack) -> None:
    stack.refuse(stack.token_arn, "AccessDeniedException", POLICY_DENIED)
    lines = stack.check()
    assert shown(lines)[:3] == [
        ("FAIL", f"read {PRIMARY}"),
        ("skip", f"decrypt {PRIMARY}"),
        ("skip", f"token {PRIMARY}"),
    ]
    assert "the secret's resource policy must allow this account" in lines[0].text
    assert_clean(lines)


def test_a_key_refusal_passes_read_and_fails_decrypt(stack: Stack) -> None:
    stack.refuse(stack.token_arn, "AccessDeniedException", KMS_DENIED)
    lines = stack.check()
    assert shown(lines)[:3] == [
        ("ok", f"read {PRIMARY}"),
        ("FAIL", f"decrypt {PRIMARY}"),
        ("skip", f"token {PRIMARY}"),
    ]
    assert "its key policy must let this principal use it for kms:Decrypt" in lines[1].text


def test_a_replica_that_is_not_there_fails_its_own_lines(stack: Stack) -> None:
    lines = stack.check(replica_regions=("ap-southeast-2",))
    assert shown(lines)[3:6] == [
        ("FAIL", "read ap-southeast-2"),
        ("skip", "decrypt ap-southeast-2"),
        ("skip", "token ap-southeast-2"),
    ]
    assert "does not exist where it was asked for (region ap-southeast-2" in lines[3].text


def test_an_expired_token_fails_and_reauthorization_is_noted(stack: Stack) -> None:
    stack.publish(credential_status=STATUS_REAUTHORIZATION_REQUIRED)
    (token,) = [line for line in stack.check() if line.check == f"token {PRIMARY}"]
    assert token.status == "ok"
    assert token.text.endswith("the stack's credential needs reauthorization: tell its operator")
    stack.clock.advance(DAY)
    (token,) = [line for line in stack.check() if line.check == f"token {PRIMARY}"]
    assert token.status == "FAIL"
    assert "expired at" in token.text


# --- replicas against the primary (issue 29, item 7) -----------------------------------------

ROTATED = "eyJhbGciOiJIUzI1NiJ9.check-consumer-rotated.c2ln"


def test_a_replica_behind_the_primary_fails_with_how_far_and_what_to_do(stack: Stack) -> None:
    published = stack.clock.now()
    stop_replication(stack.token_arn, REPLICA)
    stack.clock.advance(2 * 3600 + 300)
    stack.publish(ROTATED)
    lines = stack.check(replica_regions=(REPLICA,))
    assert shown(lines)[2:7] == [
        ("ok", f"token {PRIMARY}"),
        ("ok", f"read {REPLICA}"),
        ("ok", f"decrypt {REPLICA}"),
        ("ok", f"token {REPLICA}"),
        ("FAIL", f"replica {REPLICA}"),
    ]
    text = lines[6].text
    assert text.startswith(
        f"2 h 05 min behind the primary: its token was issued at {to_iso(published)}, the "
        f"primary's at {to_iso(stack.clock.now())}; replication to {REPLICA} has failed or "
        "not caught up yet"
    )
    (describe,) = re.findall(r"`(aws [^`]+)`", text)
    check_aws_command(describe.split())
    assert describe == (
        f"aws secretsmanager describe-secret --secret-id {stack.token_arn} --region {PRIMARY} "
        "--query ReplicationStatus"
    )
    assert_clean(lines)
    assert ROTATED not in "\n".join(map(str, lines))
    # What that command answers (on moto, as replication stopped): the replica's Region, Failed.
    client = boto3.client("secretsmanager", region_name=PRIMARY)
    (status,) = client.describe_secret(SecretId=stack.token_arn)["ReplicationStatus"]
    assert (status["Region"], status["Status"]) == (REPLICA, "Failed")


def test_an_expired_replica_behind_a_fresh_primary_names_the_replica_not_the_rotator(
    stack: Stack,
) -> None:
    stop_replication(stack.token_arn, REPLICA)
    stack.clock.advance(DAY)
    stack.publish(ROTATED)
    lines = {line.check: line for line in stack.check(replica_regions=(REPLICA,))}
    assert lines[f"token {PRIMARY}"].status == "ok"
    token, replica = lines[f"token {REPLICA}"], lines[f"replica {REPLICA}"]
    assert (token.status, replica.status) == ("FAIL", "FAIL")
    assert "the primary holds a newer one: the replica is behind" in token.text
    assert "rotator" not in token.text
    assert replica.text.startswith("24 h 00 min behind the primary")


def test_a_replica_not_read_is_not_compared(stack: Stack) -> None:
    arn = stack.token_arn.replace(PRIMARY, REPLICA)
    stack.refuse(arn, "AccessDeniedException", POLICY_DENIED)
    (line,) = [x for x in stack.check(replica_regions=(REPLICA,)) if x.check.startswith("replica")]
    assert (line.status, line.text) == ("skip", "not compared: this replica's token was not read")


def test_the_command_exits_1_on_a_replica_behind(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_replication(stack.token_arn, REPLICA)
    stack.clock.advance(600)
    stack.publish(ROTATED)
    code, out, err = run(
        stack,
        monkeypatch,
        "check-consumer",
        "--secret-arn",
        stack.token_arn,
        "--refresh-credential-arn",
        stack.credential_arn,
        "--replica-regions",
        REPLICA,
    )
    assert (code, err) == (1, "")
    assert f"FAIL replica {REPLICA}: " in out
    assert TOKEN not in out
    assert ROTATED not in out


def test_a_stack_not_bootstrapped_fails_at_token(stack: Stack) -> None:
    client = boto3.client("secretsmanager", region_name=PRIMARY)
    arn = client.create_secret(Name="empty/service-token")["ARN"]
    stack.token_arn = arn
    lines = stack.check()
    assert shown(lines)[:3] == [
        ("ok", f"read {PRIMARY}"),
        ("skip", f"decrypt {PRIMARY}"),
        ("FAIL", f"token {PRIMARY}"),
    ]
    assert "not bootstrapped" in lines[2].text


def test_a_value_that_is_no_token_document_fails_at_token(stack: Stack) -> None:
    client = boto3.client("secretsmanager", region_name=PRIMARY)
    client.put_secret_value(SecretId=stack.token_arn, SecretString='{"token": "x"}')
    lines = stack.check()
    assert shown(lines)[:3] == [
        ("ok", f"read {PRIMARY}"),
        ("ok", f"decrypt {PRIMARY}"),
        ("FAIL", f"token {PRIMARY}"),
    ]
    assert "cannot be used: service token: field" in lines[2].text


# --- refresh requests -----------------------------------------------------------------------


def test_a_refresh_request_is_skipped_unless_asked_for(stack: Stack) -> None:
    lines = stack.check(bus_arn=stack.bus_arn)
    (line,) = [line for line in lines if line.check == "refresh request"]
    assert (line.status, line.check) == ("skip", "refresh request")
    assert "PutEvents has no dry run; --send-refresh-request sends one real request" in line.text
    assert stack.requests() == []


def test_a_refresh_request_sent_reaches_the_bus(stack: Stack) -> None:
    lines = stack.check(bus_arn=stack.bus_arn, send_refresh_request=True)
    (line,) = [line for line in lines if line.check == "refresh request"]
    assert line.status == "ok"
    (event,) = stack.requests()
    assert (event["source"], event["detail-type"]) == ("cmstoken.consumer", REFRESH_REQUESTED)
    assert event["detail"]["reason"] == "consumer_check"
    assert f"{stack.bus_arn} took it (event {event['id']})" in line.text


def test_a_refused_refresh_request_names_both_policies(stack: Stack) -> None:
    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Put")

    stack.session.events.register("before-call.events.PutEvents", refuse)
    lines = stack.check(bus_arn=stack.bus_arn, send_refresh_request=True)
    (line,) = [line for line in lines if line.check == "refresh request"]
    assert line.status == "FAIL"
    assert "the bus's policy must allow this account" in line.text
    assert "consumer.yaml with RefreshRequestBusArn" in line.text


# --- the command ----------------------------------------------------------------------------


def run(stack: Stack, monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setattr(command, "open_session", lambda region, profile=None: stack.session)
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    monkeypatch.setattr("sys.stderr", err)
    code = command.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_the_command_prints_one_line_per_check_and_exits_0(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run(
        stack,
        monkeypatch,
        "check-consumer",
        "--secret-arn",
        stack.token_arn,
        "--refresh-credential-arn",
        stack.credential_arn,
        "--bus-arn",
        stack.bus_arn,
    )
    assert (code, err) == (0, ""), out
    assert [line.split(":")[0] for line in out.splitlines()] == [
        f"ok   read {PRIMARY}",
        f"ok   decrypt {PRIMARY}",
        f"ok   token {PRIMARY}",
        "skip refresh request",
        "ok   refresh credential",
    ]
    assert TOKEN not in out


def test_the_command_exits_1_on_a_failed_check(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    del stack.refusals[stack.credential_arn]
    code, out, _ = run(
        stack,
        monkeypatch,
        "check-consumer",
        "--secret-arn",
        stack.token_arn,
        "--refresh-credential-arn",
        stack.credential_arn,
    )
    assert code == 1
    assert out.splitlines()[-1].startswith("FAIL refresh credential: this principal can read")
    assert REFRESH_TOKEN not in out


@pytest.mark.parametrize(
    ("before", "extra", "message"),
    [
        ([], ["--send-refresh-request"], "--send-refresh-request needs --bus-arn"),
        (["--stack", "x"], [], "check-consumer takes the stack's ARNs, not --stack"),
        ([], ["--stack", "x"], "unrecognized arguments: --stack x"),
        ([], ["--replica-regions", "Europe"], "'Europe' is not an AWS region name"),
    ],
)
def test_usage_errors_exit_2(
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    before: list[str],
    extra: list[str],
    message: str,
) -> None:
    argv = [
        *before,
        "check-consumer",
        "--secret-arn",
        stack.token_arn,
        "--refresh-credential-arn",
        stack.credential_arn,
        *extra,
    ]
    with pytest.raises(SystemExit) as exited:
        command.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_partial_arn_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    partial = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cmstoken/service-token"
    with pytest.raises(SystemExit) as exited:
        command.main(
            ["check-consumer", "--secret-arn", partial, "--refresh-credential-arn", partial]
        )
    assert exited.value.code == 2
    assert "is not a secret's full ARN (ending in a hyphen and six characters)" in (
        capsys.readouterr().err
    )
