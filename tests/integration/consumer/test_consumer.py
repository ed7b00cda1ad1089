"""The consumer helper against moto's server and the emulator over HTTP: reading the published
token, the cache, refused tokens, refresh requests delivered to the rotator through EventBridge,
and the errors a consumer sees."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
import requests

from cmstoken import consumer
from cmstoken.consumer import ConsumerError, ServiceTokenAuth, ServiceTokenProvider
from cmstoken.core.errors import ReauthorizationRequiredError
from cmstoken.core.redaction import fingerprint
from cmstoken.core.triggers import REFRESH_REQUESTED
from harness import SERVICE_SECRET, Stack, refresh_request_queue, secret_values
from support import no_spread

pytestmark = pytest.mark.integration

HOUR = 3600


@dataclass
class Consumer:
    """A seeded stack, an EventBridge rule that copies refresh requests to an SQS queue (as the
    template's rule sends them to the rotator), and counted Secrets Manager reads."""

    stack: Stack
    sqs: Any
    queue_url: str
    reads: Counter[str] = field(default_factory=Counter)
    delivered: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)

    def provider(self, **options: Any) -> ServiceTokenProvider:
        """A provider on the emulator's clock, its Secrets Manager reads counted (its waits not
        spread unless asked)."""
        options.setdefault("random_fraction", no_spread)
        client = boto3.client("secretsmanager")
        client.meta.events.register(
            "before-call.secrets-manager.*", lambda model, **_: self.reads.update([model.name])
        )
        return ServiceTokenProvider(
            SERVICE_SECRET, secrets_client=client, clock=self.stack.clock, **options
        )

    def deliver(self) -> None:
        """Hand the queued refresh requests to the rotator, as the template's rule does."""
        for event in self.receive():
            self.delivered.append(event)
            self.outcomes.append(self.stack.invoke("rotator", event)["outcome"])

    def deliver_in(self, seconds: float) -> None:
        """Deliver once the provider has slept ``seconds`` on the emulator's clock."""
        clock = self.stack.clock
        clock.at(clock.now() - clock.start + seconds, self.deliver)

    def receive(self) -> list[dict[str, Any]]:
        answer = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        messages = answer.get("Messages", [])
        for message in messages:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return [json.loads(message["Body"]) for message in messages]

    def published(self) -> str:
        return self.stack.service_document().token


@pytest.fixture
def setup(server_stack: Stack) -> Consumer:
    """A bootstrapped stack whose last refresh is an hour old (forced rotations not debounced)."""
    sqs, queue_url = refresh_request_queue()
    server_stack.seed()
    server_stack.emulator.advance(HOUR)
    return Consumer(server_stack, sqs, queue_url)


def list_projects(provider: ServiceTokenProvider) -> requests.Response:
    with requests.Session() as session:
        return session.get(
            f"{provider.api_url}/v3/projects", auth=ServiceTokenAuth(provider), timeout=10
        )


def rotate(stack: Stack) -> None:
    """A scheduled rotator run once the token is inside the refresh margin."""
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"


def test_the_helper_reads_the_published_token_and_lists_projects(setup: Consumer) -> None:
    stack = setup.stack
    provider = ServiceTokenProvider(SERVICE_SECRET, clock=stack.clock)  # clients made lazily
    assert provider.token() == setup.published()
    assert provider.api_url == stack.emulator.api_url
    with requests.Session() as session:
        answer = session.get(
            stack.emulator.api_url + "/v3/projects", auth=ServiceTokenAuth(provider), timeout=10
        )
    assert answer.status_code == 200
    assert answer.json()["data"][0]["projectId"].startswith("prj_")
    assert answer.history == []
    assert stack.emulator.counts["projects"] == 1


def test_the_cache_makes_no_aws_call_until_the_token_nears_expiry(setup: Consumer) -> None:
    stack = setup.stack
    provider = setup.provider(min_validity_seconds=60, max_age_seconds=None)
    old = provider.token()
    assert provider.token() == old
    assert list_projects(provider).status_code == 200
    assert setup.reads == Counter({"GetSecretValue": 1})
    rotate(stack)
    assert provider.token() == old, "without max_age, the cache is bounded by the expiry"
    assert setup.reads["GetSecretValue"] == 1
    stack.emulator.advance(provider.document().expires_at - 60 - stack.clock.now())
    assert provider.token() == setup.published() != old
    assert setup.reads["GetSecretValue"] == 2


def test_a_refused_token_is_replaced_from_the_secret_and_the_request_retried_once(
    setup: Consumer,
) -> None:
    stack = setup.stack
    provider = setup.provider(max_age_seconds=None)  # the old token stays cached
    old = provider.token()
    rotate(stack)
    stack.emulator.inject("projects", "status", status=401)
    before = stack.emulator.counts["projects"]
    answer = list_projects(provider)
    assert answer.status_code == 200
    assert [r.status_code for r in answer.history] == [401]
    assert provider.token() == setup.published() != old
    assert stack.emulator.counts["projects"] - before == 2
    assert setup.receive() == [], "a newer token was published: no refresh request"


def test_a_token_still_refused_requests_a_refresh_that_the_rotator_answers(
    setup: Consumer,
) -> None:
    stack = setup.stack
    provider = setup.provider(refresh_wait_seconds=60, poll_interval_seconds=5)
    old = provider.token()
    stack.emulator.inject("projects", "status", status=401)
    setup.deliver_in(5)
    started = stack.clock.now()
    answer = list_projects(provider)
    assert answer.status_code == 200
    assert [r.status_code for r in answer.history] == [401]
    assert setup.outcomes == ["rotated"]
    new = setup.published()
    assert new != old
    assert provider.token() == new
    assert stack.emulator.service_token_valid(new)
    assert stack.clock.now() - started <= 60
    [event] = setup.delivered
    assert event["source"] == "cmstoken.consumer"
    assert event["detail-type"] == "Service Token Refresh Requested"
    assert event["detail"]["reason"] == "refused"
    assert event["detail"]["token_fingerprint"] == fingerprint(old)
    serialized = json.dumps(event)
    for secret in secret_values(stack):
        assert secret not in serialized


def test_two_refusals_in_a_row_send_one_request(setup: Consumer) -> None:
    provider = setup.provider()
    old = provider.token()
    setup.deliver_in(5)
    new = provider.refused(old)
    assert new == setup.published() != old
    with pytest.raises(ConsumerError, match="skips forced refreshes within 600 s") as caught:
        provider.refused(new)
    assert caught.value.reason == consumer.REFRESH_DEBOUNCED
    assert len(setup.delivered) == 1
    assert setup.receive() == []


def test_no_new_token_within_the_wait_is_a_clear_bounded_error(setup: Consumer) -> None:
    stack = setup.stack
    provider = setup.provider(refresh_wait_seconds=60)
    old = provider.token()
    started = stack.clock.now()
    with pytest.raises(ConsumerError, match="no new one was published within 60 s") as caught:
        provider.refused(old)
    assert caught.value.reason == consumer.REFRESH_TIMEOUT
    # 60 s waited on the emulator's clock, plus the real time the calls took (generously)
    assert 60 <= stack.clock.now() - started <= 60 + 10
    [event] = setup.receive()
    assert event["detail-type"] == REFRESH_REQUESTED
    assert setup.published() == old


def test_an_empty_secret_says_not_bootstrapped(server_stack: Stack) -> None:
    """The stack's secret, created with no value: moto's server answers GetSecretValue with
    ResourceNotFoundException ("Secrets Manager can't find the specified secret value for
    staging label: AWSCURRENT"), the same code as for a secret that does not exist, and
    DescribeSecret with the secret. AWS documents only the code for both cases ("Secrets
    Manager can't find the resource that you asked for", HTTP 400, where moto answers 404:
    https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html),
    not the message, so the helper asks DescribeSecret, which describes a secret whether or not
    it holds a value
    (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_DescribeSecret.html)."""
    provider = ServiceTokenProvider(SERVICE_SECRET, clock=server_stack.clock)
    with pytest.raises(ConsumerError, match="not bootstrapped yet: run the bootstrap") as caught:
        provider.token()
    assert caught.value.reason == consumer.NOT_BOOTSTRAPPED
    assert f"{SERVICE_SECRET!r} exists but has no value" in str(caught.value)


def service_secret_arn(stack: Stack) -> str:
    arn: str = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    return arn


def not_found(provider: ServiceTokenProvider, stack: Stack) -> str:
    """The message of the configuration error the provider raises; it holds no token."""
    with pytest.raises(ConsumerError) as caught:
        provider.token()
    message = str(caught.value)
    assert caught.value.reason == consumer.SECRET_NOT_FOUND, message
    assert "bootstrap" not in message
    assert "the secret id or the consumer's region is wrong" in message
    for secret in secret_values(stack):
        assert secret not in message
    return message


def test_a_mistyped_arn_names_the_secret_region_and_account(setup: Consumer) -> None:
    arn = service_secret_arn(setup.stack)
    mistyped = arn[:-1] + ("A" if arn[-1] != "A" else "B")  # the random suffix, one letter off
    provider = ServiceTokenProvider(mistyped, clock=setup.stack.clock)
    message = not_found(provider, setup.stack)
    assert f"{mistyped!r} does not exist" in message
    assert "region us-east-1, account 123456789012 (from the ARN)" in message


def test_a_client_in_another_region_names_both_regions(setup: Consumer) -> None:
    arn = service_secret_arn(setup.stack)
    elsewhere = boto3.client("secretsmanager", region_name="eu-west-1")
    by_arn = ServiceTokenProvider(arn, secrets_client=elsewhere, clock=setup.stack.clock)
    message = not_found(by_arn, setup.stack)
    assert "region eu-west-1, account 123456789012 (from the ARN)" in message
    assert "the ARN is in region us-east-1, the given secrets_client asks region eu-west-1" in (
        message
    )
    by_name = ServiceTokenProvider(
        SERVICE_SECRET, secrets_client=elsewhere, clock=setup.stack.clock
    )
    message = not_found(by_name, setup.stack)
    assert f"{SERVICE_SECRET!r} does not exist" in message
    assert "region eu-west-1, the credentials' account" in message


def test_an_arn_of_another_account_names_both_accounts(
    setup: Consumer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCOUNT_ID", "123456789012")  # credentials that carry their account
    other = service_secret_arn(setup.stack).replace(":123456789012:", ":210987654321:")
    provider = ServiceTokenProvider(other, clock=setup.stack.clock)
    message = not_found(provider, setup.stack)
    assert "region us-east-1, account 210987654321 (from the ARN)" in message
    assert "the ARN is in account 210987654321, the credentials in account 123456789012" in message


def test_a_refused_entry_is_a_clear_error_and_nothing_is_delivered(setup: Consumer) -> None:
    """moto's EventBridge refuses an entry without a source the way EventBridge does: HTTP 200,
    FailedEntryCount 1 and the entry's ErrorCode and ErrorMessage."""
    provider = setup.provider(event_source="")
    old = provider.token()
    with pytest.raises(ConsumerError) as caught:
        provider.refused(old)
    assert caught.value.reason == consumer.REQUEST_FAILED
    assert "(InvalidArgument: Parameter Source is not valid." in str(caught.value)
    assert "the rotator was not asked" in str(caught.value)
    assert setup.receive() == []


def test_reauthorization_required_is_named_and_sends_no_request(setup: Consumer) -> None:
    stack = setup.stack
    stack.emulator.revoke_family(stack.newest_refresh_token())
    stack.emulator.advance(19 * HOUR)
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})
    provider = setup.provider()
    token = provider.token()
    assert stack.emulator.service_token_valid(token), "still valid until it expires"
    with pytest.raises(ConsumerError, match="needs reauthorization") as refused:
        provider.refused(token)
    assert refused.value.reason == consumer.REAUTHORIZATION_REQUIRED
    assert setup.receive() == []
    stack.emulator.advance(provider.document().expires_at - stack.clock.now())
    with pytest.raises(ConsumerError, match="run the bootstrap") as expired:
        provider.token()
    assert expired.value.reason == consumer.REAUTHORIZATION_REQUIRED


def test_no_token_in_logs_events_or_messages(
    setup: Consumer, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    library = logging.getLogger("cmstoken")
    library.addHandler(caplog.handler)
    library.setLevel(logging.DEBUG)
    stack = setup.stack
    provider = setup.provider(refresh_wait_seconds=20)
    messages = []
    old = provider.token()
    stack.emulator.inject("projects", "status", status=401)
    setup.deliver_in(5)
    assert list_projects(provider).status_code == 200
    new = provider.token()
    assert new != old
    stack.emulator.inject("projects", "status", status=403)
    assert list_projects(provider).status_code == 403
    with pytest.raises(ConsumerError) as caught:
        provider.refused(new)  # refused again at once: the rotator would skip the request
    messages.append(str(caught.value))
    stack.emulator.advance(600)
    with pytest.raises(ConsumerError) as caught:
        setup.provider(refresh_wait_seconds=10).refused(new)  # the refresh never comes
    messages.append(str(caught.value))
    assert "no refresh can replace it before" in messages[0]
    assert "no new one was published within 10 s" in messages[1]
    assert caplog.records
    logged = caplog.text + "\n".join(
        str(value) for record in caplog.records for value in vars(record).values()
    )
    events = json.dumps([*setup.delivered, *setup.receive()])
    text = "\n".join([logged, capsys.readouterr().out, *messages, events])
    secrets = secret_values(stack)
    assert len(secrets) >= 4
    for secret in secrets:
        assert secret not in text
