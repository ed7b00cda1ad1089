"""The consumer helper on moto in-process and a fake clock: cache, errors, refresh requests and
their debounce, and the ``requests`` authentication (through a scripted adapter, no sockets)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import ClientError
from moto import mock_aws
from requests.adapters import HTTPAdapter

from cmstoken import consumer
from cmstoken.aws.documents import STATUS_REAUTHORIZATION_REQUIRED, ServiceTokenDocument
from cmstoken.consumer import ConsumerError, ServiceTokenAuth, ServiceTokenProvider, cache, spread
from cmstoken.core.errors import ConfigurationError
from cmstoken.core.redaction import fingerprint
from cmstoken.core.triggers import REFRESH_REQUESTED
from support import FakeClock, no_spread

SECRET = "cmstoken/service-token"
API_URL = "https://cms.example.com/api"
DAY = 86400
TOKEN_A = "eyJhbGciOiJIUzI1NiJ9.token-a-secret-payload.c2ln"
TOKEN_B = "eyJhbGciOiJIUzI1NiJ9.token-b-secret-payload.c2ln"
TOKEN_C = "eyJhbGciOiJIUzI1NiJ9.token-c-secret-payload.c2ln"
TOKENS = (TOKEN_A, TOKEN_B, TOKEN_C)


class HookedClock(FakeClock):
    """A fake clock that runs an action after the sleep that reaches ``at`` seconds."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[tuple[float, Callable[[], object]]] = []

    def at(self, seconds_from_now: float, action: Callable[[], object]) -> None:
        self.actions.append((self.current + seconds_from_now, action))

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        for item in [item for item in self.actions if item[0] <= self.current]:
            self.actions.remove(item)
            item[1]()


@dataclass
class Aws:
    """moto's Secrets Manager and EventBridge, with the calls counted and events recorded."""

    secrets: Any
    events: Any
    clock: HookedClock
    calls: Counter[str]
    sent_events: list[dict[str, Any]]

    def publish(
        self,
        token: str,
        *,
        expires_in: float = DAY,
        status: str = "active",
        refreshed_ago: float | None = 3600,
        interval: int | None = 600,
    ) -> ServiceTokenDocument:
        """Publish ``token``; by default refreshed an hour ago, so a refresh request can work
        (the stack's minimum interval is 600 s)."""
        now = self.clock.now()
        document = ServiceTokenDocument(
            token=token,
            expires_at=now + expires_in,
            api_url=API_URL,
            issued_at=now,
            refreshed_at=None if refreshed_ago is None else now - refreshed_ago,
            credential_status=status,
            min_refresh_interval_seconds=interval,
        )
        self.secrets.put_secret_value(SecretId=SECRET, SecretString=document.to_json())
        return document

    def provider(self, **options: Any) -> ServiceTokenProvider:
        """A provider whose waits are not spread (``random_fraction`` 0)."""
        options.setdefault("random_fraction", no_spread)
        return ServiceTokenProvider(
            SECRET,
            secrets_client=self.secrets,
            events_client=self.events,
            clock=self.clock,
            **options,
        )

    def details(self) -> list[dict[str, Any]]:
        return [json.loads(entry["Detail"]) for entry in self.sent_events]


@pytest.fixture
def aws(aws_credentials: None) -> Iterator[Aws]:
    with mock_aws():
        secrets = boto3.client("secretsmanager")
        events = boto3.client("events")
        secrets.create_secret(Name=SECRET)
        calls: Counter[str] = Counter()
        sent: list[dict[str, Any]] = []

        def count(model: Any, **_: Any) -> None:
            calls[model.name] += 1

        def record(params: dict[str, Any], **_: Any) -> None:
            sent.extend(params["Entries"])

        secrets.meta.events.register("before-call.secrets-manager.*", count)
        events.meta.events.register("before-call.events.*", count)
        events.meta.events.register("provide-client-params.events.PutEvents", record)
        yield Aws(secrets, events, HookedClock(), calls, sent)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every ``cmstoken.*`` record at DEBUG, whatever routing another test set up."""
    library = logging.getLogger("cmstoken")
    library.addHandler(caplog.handler)
    library.setLevel(logging.DEBUG)
    return caplog


def logged_text(caplog: pytest.LogCaptureFixture) -> str:
    """The messages and every ``extra`` field of the captured records."""
    return caplog.text + "\n".join(
        str(value) for record in caplog.records for value in vars(record).values()
    )


def assert_no_token(text: str) -> None:
    for token in TOKENS:
        assert token not in text
        assert "secret-payload" not in text


# --- reading and the cache ---------------------------------------------------------------


def test_token_is_read_once_and_served_from_the_cache(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()
    assert provider.token() == TOKEN_A
    assert provider.token() == TOKEN_A
    assert provider.api_url == API_URL
    assert provider.document().api_url == API_URL
    assert aws.calls["GetSecretValue"] == 1
    assert aws.calls["DescribeSecret"] == 0, "DescribeSecret only after a failed read"


def test_the_cache_ends_min_validity_seconds_before_expiry(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider(min_validity_seconds=60, max_age_seconds=None)
    assert provider.token() == TOKEN_A
    aws.publish(TOKEN_B)
    aws.clock.advance(DAY - 61)
    assert provider.token() == TOKEN_A, "still fresh: without max_age, bounded by expiry only"
    assert aws.calls["GetSecretValue"] == 1
    aws.clock.advance(1)
    assert provider.token() == TOKEN_B
    assert aws.calls["GetSecretValue"] == 2


def test_a_new_token_is_picked_up_within_max_age_of_its_publication(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider(max_age_seconds=900)
    assert provider.token() == TOKEN_A
    aws.clock.advance(899)
    aws.publish(TOKEN_B)
    assert provider.token() == TOKEN_A, "read 899 s ago: still fresh"
    aws.clock.advance(1)
    assert provider.token() == TOKEN_B, "900 s after the last read: read again"
    assert aws.calls["GetSecretValue"] == 2


def test_the_bounds_are_shortened_by_a_random_share_of_at_most_half(aws: Aws) -> None:
    aws.publish(TOKEN_A, expires_in=3600)
    provider = aws.provider(max_age_seconds=900, random_fraction=lambda: 0.5)
    provider.token()
    aws.clock.advance(675 - 1)
    provider.token()
    assert aws.calls["GetSecretValue"] == 1, "900 * (1 - 0.5/2) = 675 s: still fresh"
    aws.clock.advance(1)
    provider.token()
    assert aws.calls["GetSecretValue"] == 2
    aws.clock.advance(3600 - 675 - 90 - 1)
    provider.token()
    aws.clock.advance(1)
    calls = aws.calls["GetSecretValue"]
    provider.token()
    assert aws.calls["GetSecretValue"] == calls + 1, "60 * (1 + 0.5) = 90 s before expiry"


def test_a_nearly_expired_token_is_served_and_rechecked_every_few_seconds(
    aws: Aws, logs: pytest.LogCaptureFixture
) -> None:
    aws.publish(TOKEN_A, expires_in=30)
    provider = aws.provider(min_validity_seconds=60)
    assert provider.token() == TOKEN_A
    assert provider.token() == TOKEN_A
    assert aws.calls["GetSecretValue"] == 1
    aws.clock.advance(spread.NEAR_EXPIRY_RECHECK_SECONDS)
    assert provider.token() == TOKEN_A
    assert aws.calls["GetSecretValue"] == 2
    assert "expires soon" in logs.text


def test_a_failed_read_serves_the_cached_token_until_it_expires_with_back_off(
    aws: Aws, logs: pytest.LogCaptureFixture
) -> None:
    aws.publish(TOKEN_A, expires_in=100)
    provider = aws.provider(min_validity_seconds=60)
    assert provider.token() == TOKEN_A
    aws.clock.advance(45)  # inside its last minute

    def refuse(**_: Any) -> None:
        error: Any = {"Error": {"Code": "ThrottlingException", "Message": "m"}}
        raise ClientError(error, "GetSecretValue")

    aws.secrets.meta.events.register("before-call.secrets-manager.GetSecretValue", refuse)
    reads = []
    for _ in range(5):  # after each failure the next read waits 1, 2, 4... s
        assert provider.token() == TOKEN_A
        reads.append(aws.calls["GetSecretValue"])
        aws.clock.advance(1)
        assert provider.token() == TOKEN_A
        aws.clock.advance(1)
    assert reads == [2, 3, 4, 4, 5]
    assert "using the cached token, valid until" in logs.text
    aws.clock.advance(100 - 55)
    with pytest.raises(ConsumerError, match="retry later") as caught:
        provider.token()
    assert caught.value.reason == consumer.UNAVAILABLE
    assert_no_token(logged_text(logs))


def test_an_expired_token_with_no_fresher_one_is_a_clear_error(aws: Aws) -> None:
    aws.publish(TOKEN_A, expires_in=100)
    aws.clock.advance(100)
    with pytest.raises(ConsumerError, match=r"expired at .* no fresher one") as caught:
        aws.provider().token()
    assert caught.value.reason == consumer.EXPIRED
    assert "rotate" in str(caught.value)
    assert_no_token(str(caught.value))


def test_an_empty_secret_means_not_bootstrapped(aws: Aws) -> None:
    with pytest.raises(ConsumerError, match="not bootstrapped yet: run the bootstrap") as caught:
        aws.provider().token()
    assert caught.value.reason == consumer.NOT_BOOTSTRAPPED
    assert SECRET in str(caught.value)
    assert "exists but has no value" in str(caught.value)
    assert aws.calls == Counter({"GetSecretValue": 1, "DescribeSecret": 1})


def test_a_missing_secret_is_a_configuration_error_naming_the_secret_and_region(
    aws: Aws,
) -> None:
    provider = ServiceTokenProvider("no/such/secret", secrets_client=aws.secrets, clock=aws.clock)
    with pytest.raises(ConsumerError) as caught:
        provider.token()
    message = str(caught.value)
    assert caught.value.reason == consumer.SECRET_NOT_FOUND
    assert "'no/such/secret' does not exist" in message
    assert "region us-east-1" in message
    assert "the secret id or the consumer's region is wrong" in message
    assert "bootstrap" not in message


def test_the_account_of_a_name_comes_from_the_credentials_without_a_call(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials that carry their account (here ``AWS_ACCOUNT_ID``; SSO and assumed roles
    do too) name it, from the provider's own session (no STS call)."""
    monkeypatch.setenv("AWS_ACCOUNT_ID", "123456789012")
    provider = ServiceTokenProvider("no/such/secret", clock=aws.clock)  # its own session
    with pytest.raises(ConsumerError, match=r"account 123456789012 \(of the credentials\)"):
        provider.token()


def test_without_describe_secret_a_missing_value_names_both_causes(aws: Aws) -> None:
    """A role that may not call DescribeSecret cannot tell an empty secret from a missing one:
    the message says both, and why it cannot tell."""

    def refuse(**_: Any) -> None:
        error: Any = {"Error": {"Code": "AccessDeniedException", "Message": "m"}}
        raise ClientError(error, "DescribeSecret")

    aws.secrets.meta.events.register("before-call.secrets-manager.DescribeSecret", refuse)
    with pytest.raises(ConsumerError) as caught:
        aws.provider().token()
    message = str(caught.value)
    assert caught.value.reason == consumer.NOT_BOOTSTRAPPED
    assert "either the stack is not bootstrapped yet" in message
    assert "no such secret exists there" in message
    assert "DescribeSecret, which tells the two apart, failed (AccessDeniedException)" in message


def test_a_document_that_is_not_one_is_unreadable(aws: Aws) -> None:
    aws.secrets.put_secret_value(SecretId=SECRET, SecretString='{"token": "x"}')
    with pytest.raises(ConsumerError, match="cannot be used: service token: field") as caught:
        aws.provider().token()
    assert caught.value.reason == consumer.UNREADABLE


@pytest.mark.parametrize(
    ("code", "reason", "hint"),
    [
        ("AccessDeniedException", consumer.ACCESS_DENIED, "secret's resource policy"),
        ("UnrecognizedClientException", consumer.UNREADABLE, "secretsmanager:GetSecretValue"),
        ("ThrottlingException", consumer.UNAVAILABLE, "retry later"),
    ],
)
def test_aws_failures_are_named(aws: Aws, code: str, reason: str, hint: str) -> None:
    def refuse(**_: Any) -> None:
        error: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {}}
        raise ClientError(error, "GetSecretValue")

    aws.secrets.meta.events.register("before-call.secrets-manager.GetSecretValue", refuse)
    with pytest.raises(ConsumerError, match=hint) as caught:
        aws.provider().token()
    assert caught.value.reason == reason
    assert code in str(caught.value)


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("DecryptionFailure", "m"),
        ("KMSAccessDeniedException", "m"),
        ("KMSDisabledException", "m"),
        ("AccessDeniedException", "Access to KMS is not allowed"),
    ],
)
def test_a_kms_key_that_cannot_be_used_is_named_not_the_secrets_permission(
    aws: Aws, code: str, text: str
) -> None:
    """A key Secrets Manager cannot use (disabled, pending deletion, a key policy that refuses:
    "Access to KMS is not allowed") is what the message points at (issues 20 and 22)."""

    def refuse(**_: Any) -> None:
        error: Any = {"Error": {"Code": code, "Message": text}, "ResponseMetadata": {}}
        raise ClientError(error, "GetSecretValue")

    aws.secrets.meta.events.register("before-call.secrets-manager.GetSecretValue", refuse)
    with pytest.raises(ConsumerError) as caught:
        aws.provider().token()
    message = str(caught.value)
    assert caught.value.reason == consumer.CANNOT_DECRYPT
    assert f"cannot read secret {SECRET!r}: {code} (region us-east-1" in message
    assert "Secrets Manager cannot use the secret's KMS key (the stack's KmsKeyArn" in message
    assert "the key must be enabled (not disabled or pending deletion)" in message
    assert "kms:Decrypt through Secrets Manager" in message
    assert "secretsmanager:GetSecretValue" not in message


def test_an_arn_of_another_region_is_read_there_and_a_given_client_is_kept(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a client of its own, the helper reads an ARN in the ARN's region (issue 22); a
    secrets_client the workload gave is used as given, and its region's mismatch is named,
    with advice that works (issue 20)."""
    elsewhere = boto3.client("secretsmanager", region_name="eu-west-1")
    arn = elsewhere.create_secret(Name=SECRET)["ARN"]
    document = ServiceTokenDocument(
        token=TOKEN_A, expires_at=aws.clock.now() + DAY, api_url=API_URL, issued_at=aws.clock.now()
    )
    elsewhere.put_secret_value(SecretId=arn, SecretString=document.to_json())
    provider = ServiceTokenProvider(arn, clock=aws.clock)
    assert provider.token() == TOKEN_A
    assert provider.secrets_client.meta.region_name == "eu-west-1"
    here = boto3.client("secretsmanager")
    with pytest.raises(ConsumerError) as caught:
        ServiceTokenProvider(arn, secrets_client=here, clock=aws.clock).token()
    message = str(caught.value)
    assert caught.value.reason == consumer.SECRET_NOT_FOUND
    assert "the given secrets_client asks region us-east-1: give none" in message
    assert "region_name='eu-west-1'" in message
    assert ServiceTokenProvider(arn, secrets_client=elsewhere, clock=aws.clock).token() == TOKEN_A
    # A name is read in the caller's region (the us-east-1 secret here is empty).
    with pytest.raises(ConsumerError, match="exists but has no value"):
        ServiceTokenProvider(SECRET, clock=aws.clock).token()
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert ServiceTokenProvider(SECRET, clock=aws.clock).token() == TOKEN_A


def test_reauthorization_required_serves_a_valid_token_but_names_the_problem(
    aws: Aws, logs: pytest.LogCaptureFixture
) -> None:
    aws.publish(TOKEN_A, status=STATUS_REAUTHORIZATION_REQUIRED)
    provider = aws.provider()
    assert provider.token() == TOKEN_A, "the token itself works until it expires"
    assert "needs reauthorization" in logs.text
    with pytest.raises(ConsumerError, match=r"needs reauthorization.*run the bootstrap") as refused:
        provider.refused(TOKEN_A)
    assert refused.value.reason == consumer.REAUTHORIZATION_REQUIRED
    assert provider.new_resource() == TOKEN_A
    assert aws.sent_events == [], "a refresh request cannot help: none is sent"
    assert aws.clock.sleeps == []
    aws.clock.advance(DAY)
    with pytest.raises(ConsumerError, match="needs reauthorization") as expired:
        provider.token()
    assert expired.value.reason == consumer.REAUTHORIZATION_REQUIRED


# --- refused tokens and refresh requests --------------------------------------------------


def test_a_refused_token_is_replaced_by_a_newer_published_one_without_a_request(
    aws: Aws,
) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()
    assert provider.token() == TOKEN_A
    aws.publish(TOKEN_B)
    assert provider.refused(TOKEN_A) == TOKEN_B
    assert provider.token() == TOKEN_B, "the cache holds the new token"
    assert aws.sent_events == []
    assert aws.clock.sleeps == []


def test_a_token_refused_twice_requests_a_refresh_and_waits_for_it(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider(poll_interval_seconds=5)
    aws.clock.at(10, lambda: aws.publish(TOKEN_B))
    assert provider.refused(TOKEN_A) == TOKEN_B
    assert aws.clock.sleeps == [5, 5]
    [entry] = aws.sent_events
    assert entry["Source"] == "cmstoken.consumer"
    assert entry["DetailType"] == REFRESH_REQUESTED == "Service Token Refresh Requested"
    assert "EventBusName" not in entry, "the default bus"
    detail = json.loads(entry["Detail"])
    assert detail["reason"] == "refused"
    assert detail["token_fingerprint"] == fingerprint(TOKEN_A)
    assert detail["secret_id"] == SECRET
    assert_no_token(entry["Detail"])


def test_no_new_token_within_the_wait_is_a_bounded_clear_error(
    aws: Aws, logs: pytest.LogCaptureFixture
) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider(refresh_wait_seconds=60, poll_interval_seconds=7)
    started = aws.clock.now()
    with pytest.raises(ConsumerError, match="no new one was published within 60 s") as caught:
        provider.refused(TOKEN_A)
    assert caught.value.reason == consumer.REFRESH_TIMEOUT
    assert aws.clock.now() - started == 60
    assert sum(aws.clock.sleeps) == 60
    assert max(aws.clock.sleeps) <= 7
    assert fingerprint(TOKEN_A) in str(caught.value)
    assert_no_token(str(caught.value))
    assert_no_token(logged_text(logs))


def test_a_token_refreshed_within_the_stacks_interval_is_debounced_at_once(aws: Aws) -> None:
    aws.publish(TOKEN_A, refreshed_ago=100, interval=900)
    provider = aws.provider(min_refresh_interval_seconds=60)  # the document's 900 s wins
    with pytest.raises(ConsumerError, match="skips forced refreshes within 900 s") as caught:
        provider.refused(TOKEN_A)
    assert caught.value.reason == consumer.REFRESH_DEBOUNCED
    assert caught.value.retry_at == aws.clock.now() + 800
    assert aws.sent_events == []
    assert aws.clock.sleeps == [], "said at once, no wait"
    assert provider.new_resource() == TOKEN_A
    assert aws.sent_events == []
    assert aws.clock.sleeps == []
    aws.clock.advance(800)
    aws.clock.at(5, lambda: aws.publish(TOKEN_B, refreshed_ago=0, interval=900))
    assert provider.refused(TOKEN_A) == TOKEN_B
    assert len(aws.sent_events) == 1


def test_a_document_without_the_interval_uses_the_providers(aws: Aws) -> None:
    aws.publish(TOKEN_A, refreshed_ago=100, interval=None)
    with pytest.raises(ConsumerError) as caught:
        aws.provider().refused(TOKEN_A)
    assert caught.value.reason == consumer.REFRESH_DEBOUNCED
    assert "within 600 s" in str(caught.value), "the SPEC default"
    aws.clock.at(5, lambda: aws.publish(TOKEN_B))
    assert aws.provider(min_refresh_interval_seconds=60).refused(TOKEN_A) == TOKEN_B
    aws.publish(TOKEN_C, refreshed_ago=None, interval=None)  # no refreshed_at: not debounced
    aws.clock.at(5, lambda: aws.publish(TOKEN_A))
    assert aws.provider().refused(TOKEN_C) == TOKEN_A


def test_a_request_that_brought_nothing_is_not_repeated_within_the_interval(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider(refresh_wait_seconds=60)
    with pytest.raises(ConsumerError, match="no new one") as timeout:
        provider.refused(TOKEN_A)
    assert timeout.value.reason == consumer.REFRESH_TIMEOUT
    assert timeout.value.retry_at == aws.clock.now() - 60 + 600
    # Refused again: no second request and no second wait until the interval has passed.
    sleeps = len(aws.clock.sleeps)
    with pytest.raises(ConsumerError, match="not asking again before") as caught:
        provider.refused(TOKEN_A)
    assert caught.value.reason == consumer.STILL_REFUSED
    assert provider.new_resource() == TOKEN_A
    assert len(aws.sent_events) == 1
    assert len(aws.clock.sleeps) == sleeps
    aws.clock.advance(540)
    aws.clock.at(5, lambda: aws.publish(TOKEN_B, refreshed_ago=0))
    assert provider.refused(TOKEN_A) == TOKEN_B
    assert [d["token_fingerprint"] for d in aws.details()] == [fingerprint(TOKEN_A)] * 2


def test_a_failed_request_is_a_clear_error_and_is_not_debounced(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()

    def refuse(**_: Any) -> None:
        error: Any = {"Error": {"Code": "AccessDeniedException", "Message": "m"}}
        raise ClientError(error, "PutEvents")

    aws.events.meta.events.register("before-call.events.PutEvents", refuse)
    with pytest.raises(ConsumerError, match="events:PutEvents") as caught:
        provider.refused(TOKEN_A)
    assert caught.value.reason == consumer.REQUEST_FAILED
    assert "AccessDeniedException" in str(caught.value)
    aws.events.meta.events.unregister("before-call.events.PutEvents", refuse)
    aws.clock.at(5, lambda: aws.publish(TOKEN_B))
    assert provider.refused(TOKEN_A) == TOKEN_B
    assert aws.calls["PutEvents"] == 2


def refuse_entries(aws: Aws, code: str, message: str) -> list[int]:
    """EventBridge's answer to a refused entry: HTTP 200, ``FailedEntryCount`` 1 and the
    entry's ``ErrorCode`` and ``ErrorMessage`` (PutEventsResultEntry); counts the calls."""
    refused: list[int] = []

    def answer(**_: Any) -> tuple[Any, dict[str, Any]]:
        refused.append(1)
        parsed = {
            "FailedEntryCount": 1,
            "Entries": [{"ErrorCode": code, "ErrorMessage": message}],
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }
        return type("Http", (), {"status_code": 200, "headers": {}})(), parsed

    aws.events.meta.events.register("before-call.events.PutEvents", answer)
    return refused


@pytest.mark.parametrize(
    ("code", "message", "hint"),
    [
        (
            "NotAuthorizedForSourceException",
            "Not authorized for the source.",
            "events:PutEvents on the default bus for source 'cmstoken.consumer'",
        ),
        ("ThrottlingException", "Rate exceeded.", "a retryable failure"),
        ("MalformedDetail", "Detail is malformed.", "the rotator was not asked"),
    ],
)
def test_a_refused_entry_in_a_successful_answer_is_a_clear_error_and_is_not_debounced(
    aws: Aws, code: str, message: str, hint: str
) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()
    refused = refuse_entries(aws, code, message)
    with pytest.raises(ConsumerError) as caught:
        provider.refused(TOKEN_A)
    assert caught.value.reason == consumer.REQUEST_FAILED
    assert f"({code}: {message})" in str(caught.value)
    assert hint in str(caught.value)
    assert aws.clock.sleeps == [], "no wait for a request that was not taken"
    assert_no_token(str(caught.value))
    with pytest.raises(ConsumerError, match=code):
        provider.new_resource()  # not debounced: asked again, refused again
    assert len(refused) == 2


def test_new_resource_requests_a_refresh_and_returns_the_rotated_token(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()
    aws.clock.at(5, lambda: aws.publish(TOKEN_B, refreshed_ago=0))
    assert provider.new_resource() == TOKEN_B
    assert [d["reason"] for d in aws.details()] == ["new_resource"]
    # Refreshed within the stack's interval: the current token, at once.
    assert provider.new_resource() == TOKEN_B
    assert len(aws.sent_events) == 1
    assert aws.clock.sleeps == [5]


def test_new_resource_keeps_the_current_token_when_no_rotation_comes(
    aws: Aws, logs: pytest.LogCaptureFixture
) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider(refresh_wait_seconds=20)
    assert provider.new_resource() == TOKEN_A
    assert sum(aws.clock.sleeps) == 20
    assert "no rotated service token" in logs.text


# --- the requests authentication ------------------------------------------------------------


class ScriptedAdapter(HTTPAdapter):
    """Answers with the next status of a script and records the bearer tokens sent."""

    def __init__(self, statuses: list[int]) -> None:
        super().__init__()
        self.statuses = statuses
        self.bearers: list[str] = []

    def send(self, request: Any, *args: Any, **kwargs: Any) -> requests.Response:
        self.bearers.append(request.headers["Authorization"].removeprefix("Bearer "))
        answer = requests.Response()
        answer.status_code = self.statuses.pop(0)
        answer._content = b'{"data": []}'
        answer.raw = io.BytesIO()
        answer.request = request
        answer.url = request.url
        answer.connection = self
        return answer


class StubProvider(ServiceTokenProvider):
    """Serves TOKEN_A and replaces it with TOKEN_B when refused (401), or after a 403 when
    ``published`` (the token the secret holds now) is another one."""

    def __init__(self, published: str = TOKEN_B) -> None:
        super().__init__(SECRET)
        self.published = published
        self.refusals: list[str] = []
        self.forbidden: list[str] = []

    def token(self) -> str:
        return TOKEN_A

    def refused(self, token: str) -> str:
        self.refusals.append(token)
        return TOKEN_B

    def replacement(self, token: str) -> str | None:
        self.forbidden.append(token)
        return None if self.published == token else self.published


def session_with(statuses: list[int]) -> tuple[requests.Session, ScriptedAdapter]:
    session = requests.Session()
    adapter = ScriptedAdapter(statuses)
    session.mount("https://cms.example.com/", adapter)
    return session, adapter


def test_auth_sets_the_bearer_header() -> None:
    session, adapter = session_with([200])
    answer = session.get(f"{API_URL}/v3/projects", auth=ServiceTokenAuth(StubProvider()))
    assert answer.status_code == 200
    assert adapter.bearers == [TOKEN_A]


@pytest.mark.parametrize("status", [401, 403])
def test_auth_retries_once_with_the_new_token(status: int) -> None:
    provider = StubProvider()
    session, adapter = session_with([status, 200])
    answer = session.post(f"{API_URL}/v3/projects", json={"a": 1}, auth=ServiceTokenAuth(provider))
    assert answer.status_code == 200
    assert adapter.bearers == [TOKEN_A, TOKEN_B]
    assert (provider.refusals, provider.forbidden) == (
        ([TOKEN_A], []) if status == 401 else ([], [TOKEN_A])
    )
    assert [r.status_code for r in answer.history] == [status]
    assert answer.request.body == b'{"a": 1}'


def test_auth_returns_a_403_as_it_is_when_the_token_did_not_change() -> None:
    provider = StubProvider(published=TOKEN_A)
    session, adapter = session_with([403])
    answer = session.get(f"{API_URL}/v3/projects", auth=ServiceTokenAuth(provider))
    assert answer.status_code == 403
    assert answer.history == []
    assert adapter.bearers == [TOKEN_A]
    assert provider.forbidden == [TOKEN_A]
    assert provider.refusals == [], "a 403 never requests a refresh"


def test_a_403_rereads_at_most_every_few_seconds_and_never_requests(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()
    assert provider.token() == TOKEN_A
    assert provider.replacement(TOKEN_A) is None, "read just now: no second read yet"
    assert aws.calls["GetSecretValue"] == 1
    aws.clock.advance(cache.FORBIDDEN_RECHECK_SECONDS)
    assert provider.replacement(TOKEN_A) is None
    assert aws.calls["GetSecretValue"] == 2
    aws.publish(TOKEN_B)
    aws.clock.advance(cache.FORBIDDEN_RECHECK_SECONDS)
    assert provider.replacement(TOKEN_A) == TOKEN_B
    assert provider.token() == TOKEN_B
    assert provider.replacement(TOKEN_A) == TOKEN_B, "the cache already holds another one"
    assert aws.calls["GetSecretValue"] == 3
    assert aws.sent_events == []
    assert aws.clock.sleeps == []


def test_auth_never_loops() -> None:
    provider = StubProvider()
    session, adapter = session_with([401, 401])
    answer = session.get(f"{API_URL}/v3/projects", auth=ServiceTokenAuth(provider))
    assert answer.status_code == 401
    assert adapter.bearers == [TOKEN_A, TOKEN_B]
    assert provider.refusals == [TOKEN_A]


def test_auth_does_not_resend_a_streamed_body() -> None:
    provider = StubProvider()
    session, _ = session_with([401])
    body = iter([b"chunk"])
    answer = session.post(f"{API_URL}/v3/projects", data=body, auth=ServiceTokenAuth(provider))
    assert answer.status_code == 401
    assert provider.refusals == []


def test_auth_with_a_real_provider_uses_the_rotated_token(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = aws.provider()
    aws.clock.at(5, lambda: aws.publish(TOKEN_B))
    session, adapter = session_with([401, 200])
    answer = session.get(f"{provider.api_url}/v3/projects", auth=ServiceTokenAuth(provider))
    assert answer.status_code == 200
    assert adapter.bearers == [TOKEN_A, TOKEN_B]
    assert len(aws.sent_events) == 1


# --- construction ---------------------------------------------------------------------------


def test_clients_are_created_on_first_use(aws: Aws) -> None:
    aws.publish(TOKEN_A)
    provider = ServiceTokenProvider(SECRET, clock=aws.clock)
    connections = provider._connections
    assert connections._stores == {}
    assert connections._events_client is None
    assert connections._session is None
    assert provider.token() == TOKEN_A
    assert provider.secrets_client.meta.service_model.service_name == "secretsmanager"
    assert provider.events_client.meta.service_model.service_name == "events"


@pytest.mark.parametrize(
    "options",
    [
        {"min_validity_seconds": -1},
        {"refresh_wait_seconds": -1},
        {"min_refresh_interval_seconds": -1},
        {"poll_interval_seconds": 0},
    ],
)
def test_options_are_checked(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        ServiceTokenProvider(SECRET, **options)
    with pytest.raises(ConfigurationError):
        ServiceTokenProvider("")


def test_importing_the_helper_does_not_import_boto3() -> None:
    code = (
        "import sys, cmstoken.consumer; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
