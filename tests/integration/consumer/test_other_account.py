"""Two accounts on moto's server (issue 22): the stack's (123456789012, the functions' secrets
and the stack's refresh request bus) and a consumer's (222233334444, credentials of a role
there). The consumer helper reads the token by its full ARN after the functions wrote it, and
again after the rotator rotated it; a refresh request from the consumer account reaches the
stack's bus, whose rule hands it to the rotator; ``check-consumer`` runs from the consumer
account.

What moto cannot show (tests/accounts.py): it looks every secret and bus up in the caller's own
account, so the consumer's session answers a request for another account's secret or bus by
full ARN in that account, as AWS does (a name stays in the caller's account: the controls);
moto evaluates no resource policy and no KMS key policy, so the secret's, the key's and the
bus's policies are not exercised here (the template's tests assert them, and the helper's
unit tests the answers AWS gives when they refuse); and an event moto delivers carries the
bus's account where AWS puts the sender's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from accounts import account_session, reach_by_arn
from cmstoken import consumer
from cmstoken.aws import clients
from cmstoken.cli.admin import command
from cmstoken.consumer import ConsumerError, ServiceTokenProvider
from cmstoken.core.triggers import REFRESH_REQUESTED
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack, refresh_request_queue
from support import no_spread

pytestmark = pytest.mark.integration

CONSUMER_ACCOUNT = "222233334444"
BUS = "cmstoken-refresh-requests"
HOUR = 3600


@dataclass
class Organisation:
    """The stack (seeded an hour ago), its bus and the queue standing in for its rule's
    target, and the consumer account's session."""

    stack: Stack
    token_arn: str
    credential_arn: str
    bus_arn: str
    queue_url: str
    consumer: Any
    rotations: list[str]

    def deliver(self) -> None:
        """Hand what reached the stack's bus to the rotator, as the rule does."""
        sqs = boto3.client("sqs")
        for message in sqs.receive_message(QueueUrl=self.queue_url).get("Messages", []):
            sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
            event = json.loads(message["Body"])
            assert (event["source"], event["detail-type"]) == (
                "cmstoken.consumer",
                REFRESH_REQUESTED,
            )
            self.rotations.append(self.stack.invoke("rotator", event)["outcome"])


@pytest.fixture
def organisation(server_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Organisation:
    server_stack.seed()
    server_stack.emulator.advance(HOUR)  # a forced refresh is not debounced
    bus_arn = boto3.client("events").create_event_bus(Name=BUS)["EventBusArn"]
    _, queue_url = refresh_request_queue(
        bus=BUS, pattern={"source": ["cmstoken.consumer"], "detail-type": [REFRESH_REQUESTED]}
    )
    secrets = server_stack.secretsmanager
    consumer_session = reach_by_arn(account_session(CONSUMER_ACCOUNT))
    # The helper's own session is the consumer account's.
    monkeypatch.setattr(clients, "session", lambda: consumer_session)
    return Organisation(
        stack=server_stack,
        token_arn=secrets.describe_secret(SecretId=SERVICE_SECRET)["ARN"],
        credential_arn=secrets.describe_secret(SecretId=REFRESH_SECRET)["ARN"],
        bus_arn=bus_arn,
        queue_url=queue_url,
        consumer=consumer_session,
        rotations=[],
    )


def test_the_consumer_reads_the_token_by_arn_before_and_after_a_rotation(
    organisation: Organisation,
) -> None:
    stack = organisation.stack
    assert organisation.consumer.client("sts").get_caller_identity()["Account"] == (
        CONSUMER_ACCOUNT
    )
    provider = ServiceTokenProvider(organisation.token_arn, clock=stack.clock)
    before = provider.token()
    assert before == stack.service_document().token
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    again = ServiceTokenProvider(organisation.token_arn, clock=stack.clock)
    assert again.token() == stack.service_document().token != before
    assert provider.token() == again.token(), "read again: older than max_age_seconds"
    assert stack.published_token_works()


def test_a_name_is_looked_up_in_the_consumers_own_account(organisation: Organisation) -> None:
    """The control: the same secret by name is not found from the consumer account (its own
    account has no such secret)."""
    with pytest.raises(ConsumerError) as caught:
        ServiceTokenProvider(SERVICE_SECRET, clock=organisation.stack.clock).token()
    assert caught.value.reason == consumer.SECRET_NOT_FOUND
    assert "a name or a partial ARN is looked up in the caller's own account" in str(caught.value)


def test_without_the_arn_lookup_moto_finds_nothing(organisation: Organisation) -> None:
    """Why tests/accounts.py exists: moto alone looks the ARN up in the consumer's account."""
    plain = account_session(CONSUMER_ACCOUNT).client("secretsmanager")
    with pytest.raises(ConsumerError) as caught:
        ServiceTokenProvider(organisation.token_arn, secrets_client=plain).token()
    assert caught.value.reason == consumer.SECRET_NOT_FOUND


def test_a_refresh_request_reaches_the_stacks_bus_and_the_rotator(
    organisation: Organisation,
) -> None:
    stack = organisation.stack
    provider = ServiceTokenProvider(
        organisation.token_arn,
        event_bus=organisation.bus_arn,
        clock=stack.clock,
        random_fraction=no_spread,
    )
    refused = provider.token()
    stack.clock.at(5, organisation.deliver)  # the rule's delivery, during the helper's wait
    assert provider.refused(refused) == stack.service_document().token != refused
    assert organisation.rotations == ["rotated"]
    assert provider.events_client.meta.region_name == "us-east-1"


def test_without_the_bus_the_request_stays_in_the_consumers_account(
    organisation: Organisation,
) -> None:
    """The control: on the default bus (the helper's default), the request never reaches the
    stack; the helper says so when no token comes."""
    stack = organisation.stack
    provider = ServiceTokenProvider(
        organisation.token_arn,
        clock=stack.clock,
        refresh_wait_seconds=10,
        random_fraction=no_spread,
    )
    stack.clock.at(5, organisation.deliver)
    with pytest.raises(ConsumerError) as caught:
        provider.refused(provider.token())
    assert caught.value.reason == consumer.REFRESH_TIMEOUT
    assert organisation.rotations == []


def test_check_consumer_from_the_consumer_account(
    organisation: Organisation, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every check passes across accounts but the last: moto evaluates no resource policy, so
    the refresh credential, which the stack's policy keeps to its functions in AWS, is readable
    here, and the check reports exactly that."""
    monkeypatch.setattr(command, "open_session", lambda region, profile=None: organisation.consumer)
    stack = organisation.stack
    code = command.main(
        [
            "check-consumer",
            "--secret-arn",
            organisation.token_arn,
            "--refresh-credential-arn",
            organisation.credential_arn,
            "--bus-arn",
            organisation.bus_arn,
            "--send-refresh-request",
        ]
    )
    out = capsys.readouterr().out
    statuses = [line[:4].strip() + " " + line[5:].split(":")[0] for line in out.splitlines()]
    assert statuses == [
        "ok read us-east-1",
        "ok decrypt us-east-1",
        "ok token us-east-1",
        "ok refresh request",
        "FAIL refresh credential",
    ]
    assert code == 1
    organisation.deliver()
    assert organisation.rotations == ["rotated"], "the check's request reached the rotator"
    assert stack.service_document().token not in out
    assert stack.newest_refresh_token() not in out
