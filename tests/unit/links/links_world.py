"""A stack for the links' tests (no sockets): the real portal over moto in-process (the signing
key's secret, the links' table, the alarm topic with a queue subscribed) and a bootstrap
function that keeps the contract of the real one's ``status``, ``start`` and ``poll`` (the
integration tests call the real one through Lambda's API)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws

from cmstoken.aws.link_state import KEY, LinkState
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.topic import Topic
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import FunctionUnavailableError
from cmstoken.links import tokens
from cmstoken.links.portal import AwsPortal
from cmstoken.links.stack import Stack
from cmstoken.links.web import Request

NOW = 1_795_500_000
STACK = Stack(name="cmstoken-prod", account="123456789012", region="eu-west-1")
DOMAIN = "abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws"
URL = f"https://{DOMAIN}/"
KEY_TEXT = "K" * 32 + "e" * 32
AUTHORIZED_AT = NOW - 25 * 86_400
USER_CODE = "WDJB-MJHT"


@dataclass
class Bootstrap:
    """The bootstrap's contract through the links' alias: ``status`` (metadata: what is
    pending, without its code), ``start`` (a pending authorization for the asking link, the
    same one while it is valid; another's only says until when) and ``poll`` (queued)."""

    status: str = "active"
    authorized_at: int | None = AUTHORIZED_AT
    pending_until: int | None = None
    pending_link: str | None = None  # the tag of the link that started it; None: an operator
    authorizations: int = 0  # started by a link's start
    calls: list[str] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False
    refuse_start: bool = False  # start fails (the provider or the stack's secret is busy)
    delay: float = 0.0  # how long a start takes (the device code request), in real seconds
    budget_spent: bool = False  # the version budget refuses a new start (core.version_budget)
    frees_at: int | None = None  # when a version ages out, as such a refusal says
    now: int = NOW

    def call(self, payload: dict[str, Any]) -> Any:
        self.calls.append(payload["action"])
        if self.down:
            raise FunctionUnavailableError("cannot invoke bootstrap: TooManyRequestsException")
        if payload["action"] == "start":
            if self.refuse_start:
                raise FunctionUnavailableError("cannot invoke bootstrap: ThrottlingException")
            time.sleep(self.delay)
            if self.pending_until is None or self.pending_until <= self.now:
                if self.budget_spent:  # results.failed of a VersionQuotaError
                    retry_at = None if self.frees_at is None else to_iso(self.frees_at)
                    message = "not started: outside callers may fill 16 versions"
                    reason = {"reason": "version_budget", "retry_at": retry_at}
                    return {"status": "failed", "message": message, **reason}
                self.pending_until, self.pending_link = self.now + 900, payload["link"]
                self.authorizations += 1
            elif self.pending_link != payload["link"]:
                return {"status": "pending_elsewhere", "expires_at": to_iso(self.pending_until)}
            return {"status": "pending", **self._pending(), "verification_uri": "https://idp/d"}
        assert payload["action"] == "status"
        authorized = None if self.authorized_at is None else to_iso(self.authorized_at)
        pending = self.pending_until is not None and self.pending_until > self.now
        return {
            "credential": {
                "status": self.status,
                "authorized_at": authorized,
                "refreshed_at": authorized,
                "reauthorize_by": None
                if self.authorized_at is None
                else to_iso(self.authorized_at + 30 * 86_400),
                "service_token_expires_at": to_iso(self.now + 3600),
            },
            "pending": {"link": self.pending_link, "expires_at": to_iso(self.pending_until)}
            if pending and self.pending_until is not None
            else None,
        }

    def send(self, payload: dict[str, Any]) -> None:
        self.sent.append(payload)

    def _pending(self) -> dict[str, Any]:
        assert self.pending_until is not None
        return {
            "user_code": USER_CODE,
            "verification_uri_complete": f"https://idp.example/activate?user_code={USER_CODE}",
            "expires_at": to_iso(self.pending_until),
        }


@dataclass
class World:
    portal: AwsPortal
    bootstrap: Bootstrap
    clients: dict[str, Any]
    queue: str
    aws_calls: list[str] = field(default_factory=list)  # every AWS operation, in order
    issued: int = 0

    def link(self, *, binding: int = AUTHORIZED_AT, now: int = NOW, lifetime: int = 86_400) -> str:
        token, _ = tokens.new_link(
            STACK,
            binding=binding,
            key=KEY_TEXT.encode(),
            now=now,
            lifetime=lifetime,
            nonce=self.issued.to_bytes(16, "big"),  # another nonce for every link
        )
        self.issued += 1
        return token

    def tag(self, link: str) -> str:
        """The tag the bootstrap records for what ``link`` starts."""
        addressed = tokens.addressed(link, STACK.name, STACK.account, STACK.region, NOW)
        assert isinstance(addressed, tokens.Addressed)
        return tokens.tag(addressed.claims)

    def table_items(self) -> list[str]:
        items = self.clients["dynamodb"].scan(TableName="links")["Items"]
        return sorted(item[KEY]["S"] for item in items)

    def messages(self) -> list[dict[str, Any]]:
        """The notices the topic sent to the queue since the last call (the ``sqs`` body: the
        facts), oldest first."""
        sqs, facts = self.clients["sqs"], []
        while found := sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10).get(
            "Messages"
        ):
            for message in found:
                facts.append(json.loads(json.loads(message["Body"])["Message"]))
                sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])
        return facts

    def counted(self, kind: str, now: int = NOW) -> int:
        """How many ``start`` or ``poll`` the links' table counted in ``now``'s hour."""
        key = {KEY: {"S": f"{kind}#{now - now % 3600}"}}
        item = self.clients["dynamodb"].get_item(TableName="links", Key=key).get("Item")
        return 0 if item is None else int(item["counted"]["N"])

    def one_at_a_time(self) -> None:
        """The links' table applies one call at a time, as DynamoDB applies the conditional
        writes to an item (moto in-process takes no lock: threads could interleave inside
        one call)."""
        self.portal.table = LinkState("links", cast(Any, Serialized(self.clients["dynamodb"])))


class Serialized:
    """A client whose calls run one at a time."""

    def __init__(self, client: Any) -> None:
        self.client, self.lock = client, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(**request: Any) -> Any:
            with self.lock:
                return method(**request)

        return call


def tamper(link: str) -> str:
    """The link with the first character of its signature changed."""
    head, payload, mac = link.split(".")
    return f"{head}.{payload}.{'A' if mac[0] != 'A' else 'B'}{mac[1:]}"


def get(path: str, **headers: str) -> Request:
    return Request(method="GET", path=path, domain=DOMAIN, headers=headers)


def post(path: str, body: str, **headers: str) -> Request:
    return Request(method="POST", path=path, domain=DOMAIN, headers=headers, body=body.encode())


@pytest.fixture
def world(aws_credentials: None) -> Iterator[World]:
    with mock_aws():
        clients: dict[str, Any] = {
            "secretsmanager": boto3.client("secretsmanager"),
            "dynamodb": boto3.client("dynamodb"),
            "sns": boto3.client("sns"),
            "sqs": boto3.client("sqs"),
        }
        key = clients["secretsmanager"].create_secret(Name="links-key", SecretString=KEY_TEXT)
        clients["dynamodb"].create_table(
            TableName="links",
            AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
            KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        topic = clients["sns"].create_topic(Name="alarms")["TopicArn"]
        queue = clients["sqs"].create_queue(QueueName="inbox")["QueueUrl"]
        queue_arn = clients["sqs"].get_queue_attributes(
            QueueUrl=queue, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        clients["sns"].subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
        bootstrap = Bootstrap()
        portal = AwsPortal(
            stack=STACK,
            locate=lambda: URL,
            secrets=SecretStore(clients["secretsmanager"]),
            key_secret_id=key["ARN"],
            bootstrap=bootstrap,
            table=LinkState("links", clients["dynamodb"]),
            topic=Topic(topic, clients["sns"]),
            starts_per_hour=2,
        )
        world = World(portal, bootstrap, clients, queue)
        for client in clients.values():
            client.meta.events.register(
                "before-call", lambda model, **_: world.aws_calls.append(model.name)
            )
        yield world
