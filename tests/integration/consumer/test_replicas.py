"""A replica whose replication stopped (issue 29, item 7), over HTTP: the stack's secrets on
moto's server in us-east-1, the service token replicated to eu-west-1 and then no more (as
``replication`` makes moto's replica: it keeps the versions it has, its ReplicationStatus says
Failed), the emulator, and the real rotator. A consumer in eu-west-1 reads the replica; it must
get the primary's token when the replica's has expired, and the rotator's new one after a 401,
without waiting for the replica until its wait times out; ``check-consumer`` reports the
replica behind."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
import requests

from cmstoken.aws import clients
from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.cli.admin import command
from cmstoken.consumer import ServiceTokenAuth, ServiceTokenProvider
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack, refresh_request_queue, secret_values
from replication import stop_replication
from support import no_spread

pytestmark = pytest.mark.integration

PRIMARY, REPLICA = "us-east-1", "eu-west-1"
HOUR = 3600


@dataclass
class Replicated:
    """A seeded stack (its last refresh an hour old) whose service token's replica in REPLICA
    stopped receiving versions, and a queue standing in for the rotator's rule."""

    stack: Stack
    arn: str
    sqs: Any
    queue_url: str
    outcomes: list[str] = field(default_factory=list)

    def provider(self, **options: Any) -> ServiceTokenProvider:
        """A consumer in REPLICA (its own session's region) on the emulator's clock, its waits
        not spread unless asked (the scripted delivery comes 5 s after the refusal)."""
        options.setdefault("random_fraction", no_spread)
        return ServiceTokenProvider(
            self.arn,
            clock=self.stack.clock,
            replica_regions=[REPLICA],
            event_bus=f"arn:aws:events:{PRIMARY}:123456789012:event-bus/default",
            **options,
        )

    def replica(self) -> ServiceTokenDocument:
        client = boto3.client("secretsmanager", region_name=REPLICA)
        replica_arn = self.arn.replace(f":{PRIMARY}:", f":{REPLICA}:")
        return ServiceTokenDocument.from_json(
            client.get_secret_value(SecretId=replica_arn)["SecretString"]
        )

    def rotate(self) -> None:
        """A scheduled rotator run once the token is inside the refresh margin."""
        self.stack.emulator.advance(19 * HOUR)
        assert self.stack.invoke("rotator", {})["outcome"] == "rotated"

    def deliver(self) -> None:
        """Hand the queued refresh requests to the rotator, as the template's rule does."""
        answer = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
        for message in answer.get("Messages", []):
            event = json.loads(message["Body"])
            self.outcomes.append(self.stack.invoke("rotator", event)["outcome"])


@pytest.fixture
def replicated(server_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Replicated:
    server_stack.seed()
    server_stack.emulator.advance(HOUR)  # a forced refresh is not debounced
    secrets = server_stack.secretsmanager
    arn = secrets.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    secrets.replicate_secret_to_regions(SecretId=arn, AddReplicaRegions=[{"Region": REPLICA}])
    stop_replication(arn, REPLICA)
    sqs, queue_url = refresh_request_queue()
    consumer_session = boto3.Session(region_name=REPLICA)
    monkeypatch.setattr(clients, "session", lambda: consumer_session)
    return Replicated(server_stack, arn, sqs, queue_url)


def list_projects(provider: ServiceTokenProvider) -> requests.Response:
    with requests.Session() as session:
        return session.get(
            f"{provider.api_url}/v3/projects", auth=ServiceTokenAuth(provider), timeout=10
        )


def test_an_expired_replica_gives_way_to_the_primarys_token(replicated: Replicated) -> None:
    """Before, the helper raised ``expired`` and never asked the primary."""
    stack = replicated.stack
    old = stack.service_document().token
    replicated.rotate()
    stack.emulator.advance(replicated.replica().expires_at - stack.clock.now())
    assert replicated.replica().token == old, "the replica kept the old version"
    provider = replicated.provider()
    assert provider.token() == stack.service_document().token != old
    answer = list_projects(provider)
    assert (answer.status_code, answer.history) == (200, [])


def test_a_token_refused_at_a_stale_replica_is_replaced_by_the_rotators_new_one(
    replicated: Replicated, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the 401 led to a refresh request, which the rotator answered in the primary,
    and then to a wait that polled the replica until it timed out."""
    library = logging.getLogger("cmstoken")
    library.addHandler(caplog.handler)
    library.setLevel(logging.DEBUG)
    stack = replicated.stack
    provider = replicated.provider(refresh_wait_seconds=60, poll_interval_seconds=5)
    old = provider.token()
    stack.emulator.inject("projects", "status", status=401)
    stack.clock.at(stack.clock.now() - stack.clock.start + 5, replicated.deliver)
    started = stack.clock.now()
    answer = list_projects(provider)
    assert answer.status_code == 200
    assert [r.status_code for r in answer.history] == [401]
    assert replicated.outcomes == ["rotated"]
    new = stack.service_document().token
    assert provider.token() == new != old
    assert replicated.replica().token == old, "the replica never got it"
    assert stack.clock.now() - started < 60, "no wait until the timeout"
    assert any("is behind the primary" in r.getMessage() for r in caplog.records)
    logged = caplog.text + "\n".join(
        str(value) for record in caplog.records for value in vars(record).values()
    )
    for secret in secret_values(stack):
        assert secret not in logged


def test_check_consumer_reports_the_replica_behind(
    replicated: Replicated, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = replicated.stack
    replicated.rotate()
    monkeypatch.setattr(command, "open_session", lambda region, profile=None: boto3.Session())
    credential = stack.secretsmanager.describe_secret(SecretId=REFRESH_SECRET)["ARN"]
    code = command.main(
        [
            "check-consumer",
            "--secret-arn",
            replicated.arn,
            "--refresh-credential-arn",
            credential,
            "--replica-regions",
            REPLICA,
        ]
    )
    out = capsys.readouterr().out
    lines = {line[5:].split(":")[0]: line for line in out.splitlines()}
    assert code == 1
    assert lines[f"token {REPLICA}"].startswith("ok   "), "the replica's token is still valid"
    assert lines[f"replica {REPLICA}"].startswith(
        f"FAIL replica {REPLICA}: 20 h 00 min behind the primary: its token was issued at "
    )
    for secret in secret_values(stack):
        assert secret not in out
