"""The consumer helper across regions and accounts (issue 22, item 6), on moto in-process: the
replica in the caller's own region is read first (Secrets Manager's own replication, which moto
models: the replica's ARN is the primary's with its region), the primary when that fails or
when there is none, and as well when the replica is stale (issue 29, item 7: replication that
stopped, as ``replication`` makes moto's); refresh requests go to a bus named by its ARN, from
a client in the bus's region; and the three refusals (not found, the policies, the key) are
told apart, each in one line that says what to fix."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cmstoken import consumer
from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.consumer import ConsumerError, ServiceTokenProvider
from cmstoken.consumer.regions import REPLICA_RETRY_SECONDS, replica_arn
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import ConfigurationError
from cmstoken.core.triggers import REFRESH_REQUESTED
from harness import refresh_request_queue
from replication import stop_replication
from support import FakeClock, client_error, fail_with, no_spread

PRIMARY, OWN, OTHER = "eu-west-1", "us-east-1", "ap-southeast-2"
NAME = "cmstoken/service-token"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.regions-token-payload.c2ln"
ROTATED = "eyJhbGciOiJIUzI1NiJ9.regions-rotated-payload.c2ln"
HOUR, DAY = 3600, 86400
START = 1_795_000_000.0  # the clock's, when TOKEN is published


@dataclass
class World:
    """A published secret in PRIMARY, replicated to OWN (the callers' region)."""

    arn: str
    clock: FakeClock

    def provider(self, **options: Any) -> ServiceTokenProvider:
        """A provider whose waits are not spread unless asked."""
        options.setdefault("random_fraction", no_spread)
        return ServiceTokenProvider(self.arn, clock=self.clock, **options)

    def rotate(self, issued_after: float) -> None:
        """The primary gets ROTATED, issued ``issued_after`` seconds after TOKEN, valid a day."""
        issued_at = START + issued_after
        document = ServiceTokenDocument(
            token=ROTATED, expires_at=issued_at + DAY, api_url="https://x/api", issued_at=issued_at
        )
        primary = boto3.client("secretsmanager", region_name=PRIMARY)
        primary.put_secret_value(SecretId=self.arn, SecretString=document.to_json())


@pytest.fixture
def world(aws_credentials: None) -> Iterator[World]:
    with mock_aws():
        clock = FakeClock(start=START)
        document = ServiceTokenDocument(
            token=TOKEN, expires_at=START + DAY, api_url="https://x/api", issued_at=START
        )
        primary = boto3.client("secretsmanager", region_name=PRIMARY)
        arn = primary.create_secret(
            Name=NAME, SecretString=document.to_json(), AddReplicaRegions=[{"Region": OWN}]
        )["ARN"]
        yield World(arn, clock)


def region_calls(provider: ServiceTokenProvider) -> Counter[str]:
    """GetSecretValue calls by region, through every client the provider makes from now on
    (counted before any other handler of theirs runs)."""
    calls: Counter[str] = Counter()

    def count(context: Any, **_: Any) -> None:
        calls[context["client_region"]] += 1

    session = provider._connections._boto3_session()
    session.events.register("before-call.secrets-manager.GetSecretValue", count)
    return calls


def test_a_replica_is_the_primarys_arn_with_its_region() -> None:
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:stack/service-token-AbCdEf"
    assert replica_arn(arn, "us-east-1") == (
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:stack/service-token-AbCdEf"
    )


def test_the_replica_in_the_callers_region_is_read(world: World) -> None:
    provider = world.provider(replica_regions=[OWN, OTHER])
    calls = region_calls(provider)
    assert provider.secrets_client.meta.region_name == OWN
    assert provider.document().token == TOKEN
    assert calls == Counter({OWN: 1}), "the primary's region is not asked"


def test_without_replica_regions_the_primary_is_read_in_its_region(world: World) -> None:
    """The control: the same caller, no replica named, reads the primary in PRIMARY."""
    provider = world.provider()
    calls = region_calls(provider)
    assert provider.secrets_client.meta.region_name == PRIMARY
    assert provider.document().token == TOKEN
    assert calls == Counter({PRIMARY: 1})


def test_a_caller_in_a_region_without_a_replica_reads_the_primary(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", OTHER)
    provider = world.provider(replica_regions=[OWN])
    assert provider.secrets_client.meta.region_name == PRIMARY
    assert provider.token() == TOKEN


def test_a_failed_replica_read_falls_back_to_the_primary_for_a_while(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    provider = world.provider(replica_regions=[OWN])
    calls = region_calls(provider)
    fail_with(provider.secrets_client, "GetSecretValue", client_error("AccessDeniedException"))
    assert provider.document().token == TOKEN
    assert calls == Counter({OWN: 1, PRIMARY: 1})
    (warning,) = [r for r in caplog.records if r.msg.startswith("could not read the service")]
    assert warning.getMessage() == (
        "could not read the service token's replica in us-east-1; reading the primary"
    )
    assert warning.reason == consumer.ACCESS_DENIED  # type: ignore[attr-defined]
    assert TOKEN not in warning.error  # type: ignore[attr-defined]
    provider._read()  # what every uncached read does
    assert calls == Counter({OWN: 1, PRIMARY: 2}), "the replica rests after a failure"
    world.clock.advance(REPLICA_RETRY_SECONDS)
    provider._read()
    assert calls == Counter({OWN: 2, PRIMARY: 3}), "then it is tried again"


# --- a stale replica (issue 29, item 7) ------------------------------------------------------


def behind_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "is behind the primary" in r.msg]


def assert_no_token(caplog: pytest.LogCaptureFixture, *texts: str) -> None:
    logged = caplog.text + "\n".join(str(v) for r in caplog.records for v in vars(r).values())
    for token in (TOKEN, ROTATED):
        assert token not in logged
        assert all(token not in text for text in texts)


@pytest.mark.parametrize(
    ("age", "why"),
    [
        (DAY, f"its token expired at {to_iso(START + DAY)}"),
        (DAY - 30, f"its token expires at {to_iso(START + DAY)}, within 60 s"),
    ],
    ids=["expired", "expiring-within-min-validity"],
)
def test_an_expired_replica_gives_way_to_the_primarys_valid_token(
    world: World, caplog: pytest.LogCaptureFixture, age: float, why: str
) -> None:
    """Replication stopped after TOKEN; the primary holds ROTATED since hour 20. Before, the
    replica's expired token was the ``expired`` error and the primary was never read."""
    stop_replication(world.arn, OWN)
    world.rotate(issued_after=20 * HOUR)
    world.clock.advance(age)
    provider = world.provider(replica_regions=[OWN], min_validity_seconds=60)
    calls = region_calls(provider)
    with caplog.at_level(logging.WARNING):
        assert provider.token() == ROTATED
    assert calls == Counter({OWN: 1, PRIMARY: 1})
    (warning,) = behind_warnings(caplog)
    assert warning.getMessage() == (
        f"the service token's replica in {OWN} is behind the primary: {why}, and the primary's "
        "token was issued 20 h 00 min later; serving the primary's and reading it alone for "
        f"300 s (replication to {OWN} may have failed: see its ReplicationStatus)"
    )
    provider._read()
    assert calls == Counter({OWN: 1, PRIMARY: 2}), "the replica rests, as after a failed read"
    world.clock.advance(REPLICA_RETRY_SECONDS)
    assert provider._read().token == ROTATED
    assert calls == Counter({OWN: 2, PRIMARY: 3}), "still behind: the primary read again"
    assert_no_token(caplog)


def test_a_token_refused_at_a_replica_behind_comes_from_the_primary_without_a_request(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the refused token was the replica's again: a refresh request, then a wait that
    polled the same replica until it timed out."""
    stop_replication(world.arn, OWN)
    world.rotate(issued_after=HOUR)
    provider = world.provider(replica_regions=[OWN])
    calls = region_calls(provider)
    sent: list[Any] = []
    provider.events_client.meta.events.register(
        "before-call.events.PutEvents", lambda **_: sent.append(1)
    )
    assert provider.token() == TOKEN, "a valid replica is served alone: the primary not asked"
    assert calls == Counter({OWN: 1})
    with caplog.at_level(logging.INFO):
        assert provider.refused(TOKEN) == ROTATED
    assert sent == [], "the primary's newer token needs no refresh"
    assert calls == Counter({OWN: 2, PRIMARY: 1})
    assert len(behind_warnings(caplog)) == 1
    world.clock.advance(REPLICA_RETRY_SECONDS)
    assert provider._read().token == ROTATED, "the replica's older token is never served again"
    assert calls == Counter({OWN: 3, PRIMARY: 2})
    assert_no_token(caplog)


def test_a_replica_in_sync_holding_the_refused_token_is_not_left_alone(world: World) -> None:
    """The control: the replica holds what the primary holds, so both are read for the
    refused token, the refresh is requested, and the replica is not behind."""
    provider = world.provider(replica_regions=[OWN], refresh_wait_seconds=0)
    calls = region_calls(provider)
    with pytest.raises(ConsumerError) as caught:
        provider.refused(TOKEN)
    assert caught.value.reason == consumer.REFRESH_TIMEOUT
    assert calls == Counter({OWN: 1, PRIMARY: 1})
    provider._read()
    assert calls == Counter({OWN: 2, PRIMARY: 1}), "not behind: the replica is read first"


def test_an_expired_replica_and_an_unreadable_primary_are_one_error_line(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    stop_replication(world.arn, OWN)
    world.clock.advance(DAY)
    provider = world.provider(replica_regions=[OWN])
    primary = provider._connections.store(provider._connections.targets().primary).client
    fail_with(primary, "GetSecretValue", client_error("AccessDeniedException"))
    with pytest.raises(ConsumerError) as caught:
        provider.token()
    message = str(caught.value)
    assert caught.value.reason == consumer.ACCESS_DENIED, "what to fix: reading the primary"
    assert message.startswith(
        f"the service token's replica in {OWN} is stale (its token expired at "
        f"{to_iso(START + DAY)}) and the primary in {PRIMARY} could not be read either: "
        f"cannot read secret {world.arn!r}: AccessDeniedException"
    )
    assert "\n" not in message
    assert_no_token(caplog, message)


def test_a_stale_but_valid_replica_is_served_while_the_primary_cannot_be_read(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """A 403 re-reads the secret with the token refused: the replica holds it, the primary
    is asked and refuses, and the replica's (still valid) token stays in use."""
    provider = world.provider(replica_regions=[OWN])
    assert provider.token() == TOKEN
    primary = provider._connections.store(provider._connections.targets().primary).client
    fail_with(primary, "GetSecretValue", client_error("ThrottlingException"))
    world.clock.advance(10)  # past FORBIDDEN_RECHECK_SECONDS
    with caplog.at_level(logging.WARNING):
        assert provider.replacement(TOKEN) is None
    (warning,) = [r for r in caplog.records if "could not be read" in r.msg]
    assert warning.getMessage() == (
        f"the service token's replica in {OWN} is stale (it holds the token the service "
        "refused) and the primary could not be read; serving the replica's token while it is "
        "valid"
    )
    assert warning.reason == consumer.UNAVAILABLE  # type: ignore[attr-defined]
    assert_no_token(caplog)


def test_replica_regions_need_an_arn_and_region_names(world: World) -> None:
    with pytest.raises(ConfigurationError, match="needs the secret's full ARN"):
        ServiceTokenProvider(NAME, replica_regions=[OWN])
    with pytest.raises(ConfigurationError, match="'Europe' is not an AWS region name"):
        ServiceTokenProvider(world.arn, replica_regions=["Europe"])
    assert ServiceTokenProvider(world.arn, replica_regions=[" us-east-1 ", ""]).replica_regions == (
        OWN,
    )


# --- refresh requests to a bus by ARN -----------------------------------------------------


def test_a_refresh_request_goes_to_the_bus_arn_from_its_region(world: World) -> None:
    events = boto3.client("events", region_name=PRIMARY)
    bus = events.create_event_bus(Name="cmstoken-refresh-requests")["EventBusArn"]
    sqs, queue = refresh_request_queue(bus="cmstoken-refresh-requests", region=PRIMARY)
    provider = world.provider(event_bus=bus, refresh_wait_seconds=0)
    assert provider.events_client.meta.region_name == PRIMARY
    with pytest.raises(ConsumerError) as waited:
        provider.refused(TOKEN)
    assert waited.value.reason == consumer.REFRESH_TIMEOUT, "sent, and no new token came"
    (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
    event = json.loads(message["Body"])
    assert (event["source"], event["detail-type"]) == ("cmstoken.consumer", REFRESH_REQUESTED)
    assert event["detail"]["secret_id"] == world.arn


def test_without_a_bus_the_request_goes_to_the_default_bus_as_before(world: World) -> None:
    """The control: no event_bus, no EventBusName; the client is the session's region's."""
    provider = world.provider(refresh_wait_seconds=0)
    sent: list[dict[str, Any]] = []
    provider.events_client.meta.events.register(
        "before-parameter-build.events.PutEvents",
        lambda params, **_: sent.extend(params["Entries"]),
    )
    assert provider.events_client.meta.region_name == OWN
    with pytest.raises(ConsumerError):
        provider.refused(TOKEN)
    assert [entry.get("EventBusName") for entry in sent] == [None]


def test_a_refused_request_names_the_bus_and_both_policies(world: World) -> None:
    bus = f"arn:aws:events:{PRIMARY}:123456789012:event-bus/cmstoken-refresh-requests"
    provider = world.provider(event_bus=bus)
    fail_with(provider.events_client, "PutEvents", client_error("AccessDeniedException"))
    with pytest.raises(ConsumerError) as caught:
        provider.refused(TOKEN)
    message = str(caught.value)
    assert caught.value.reason == consumer.REQUEST_FAILED
    assert f"could not request a service token refresh on the event bus {bus}" in message
    assert f"events:PutEvents on the bus {bus} for source 'cmstoken.consumer'" in message
    assert "a bus of another account must allow this account in its policy" in message
    assert "\n" not in message
    assert TOKEN not in message


# --- the three refusals ---------------------------------------------------------------------

KMS_DENIED = "Access to KMS is not allowed"
POLICY_DENIED = (
    "User: arn:aws:sts::222233334444:assumed-role/app/x is not authorized to perform: "
    "secretsmanager:GetSecretValue on resource: {arn} because no resource-based policy allows "
    "the secretsmanager:GetSecretValue action"
)


def refuse(provider: ServiceTokenProvider, code: str, text: str) -> None:
    error = client_error(code, operation="GetSecretValue")
    error.response["Error"]["Message"] = text
    fail_with(provider.secrets_client, "GetSecretValue", error)


@pytest.mark.parametrize(
    ("code", "text", "reason", "fix"),
    [
        (
            "AccessDeniedException",
            POLICY_DENIED,
            consumer.ACCESS_DENIED,
            "the secret's resource policy must allow this account (the stack's "
            "ConsumerAccountIds, ConsumerOrganizationId or ConsumerOrganizationalUnitPaths)",
        ),
        (
            "AccessDeniedException",
            KMS_DENIED,
            consumer.CANNOT_DECRYPT,
            "its key policy must let this principal use it for kms:Decrypt through Secrets Manager",
        ),
        (
            "InvalidRequestException",
            "You can't access a secret from a different AWS account if you encrypt the secret "
            "with the default KMS service key.",
            consumer.CANNOT_DECRYPT,
            "the AWS managed key aws/secretsmanager cannot be shared with another account",
        ),
        ("DecryptionFailure", "m", consumer.CANNOT_DECRYPT, "the key must be enabled"),
    ],
    ids=["secret-policy", "key-policy", "aws-managed-key", "key-disabled"],
)
def test_the_policies_and_the_key_are_told_apart(
    world: World, code: str, text: str, reason: str, fix: str
) -> None:
    provider = world.provider()
    refuse(provider, code, text.format(arn=world.arn))
    with pytest.raises(ConsumerError) as caught:
        provider.token()
    message = str(caught.value)
    assert caught.value.reason == reason
    assert fix in message
    assert f"cannot read secret {world.arn!r}: {code} (region {PRIMARY}" in message
    assert "\n" not in message
    assert TOKEN not in message


def test_an_arn_that_is_not_there_is_not_found_and_says_full_arn(world: World) -> None:
    missing = world.arn.replace("123456789012", "999999999999")
    with pytest.raises(ConsumerError) as caught:
        ServiceTokenProvider(missing, clock=world.clock).token()
    message = str(caught.value)
    assert caught.value.reason == consumer.SECRET_NOT_FOUND
    assert f"(region {PRIMARY}, account 999999999999 (from the ARN))" in message
    assert "its full ARN (a name or a partial ARN is looked up in the caller's own account)" in (
        message
    )
    assert "\n" not in message


def test_a_replica_refusal_is_logged_and_the_primarys_error_is_raised(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    provider = world.provider(replica_regions=[OWN])
    refuse(provider, "AccessDeniedException", KMS_DENIED)
    primary = provider._connections.store(provider._connections.targets().primary).client
    fail_with(primary, "GetSecretValue", client_error("AccessDeniedException"))
    with caplog.at_level(logging.WARNING), pytest.raises(ConsumerError) as caught:
        provider.token()
    assert caught.value.reason == consumer.ACCESS_DENIED
    assert f"cannot read secret {world.arn!r}" in str(caught.value)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.reason for r in warnings] == [consumer.CANNOT_DECRYPT]  # type: ignore[attr-defined]
