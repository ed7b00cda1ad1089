"""What the links' pages and notices need of the world, through the AWS adapters: the signing
key (read on every use, so that a rotated key voids links at once), the stack's state and its
device authorization (the bootstrap function: the links never read either secret), the links'
table, and the alarm topic."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cmstoken.aws.link_state import LinkState, LinkUse
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.topic import Topic
from cmstoken.core.errors import ConfigurationError
from cmstoken.links import tokens
from cmstoken.links.messages import PublishRequest
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import (
    Elsewhere,
    Pending,
    Spent,
    StackState,
    read_started,
    read_status,
)

# Background polls queued in an hour, at most: a poll runs until the code is approved or
# expires, so a few cover an authorization; a bound stops a loop of polls that fail at once.
POLLS_PER_HOUR = 20


class Function(Protocol):
    """Another function of the stack (``aws.functions.FunctionCaller``)."""

    def call(self, payload: dict[str, Any]) -> Any: ...

    def send(self, payload: dict[str, Any]) -> None: ...


@dataclass
class AwsPortal:
    """The links' view of one deployed stack; ``locate()`` gives the function URL (ending in
    ``/``), looked up only when a link is made."""

    stack: Stack
    locate: Callable[[], str]
    secrets: SecretStore
    key_secret_id: str
    bootstrap: Function
    table: LinkState
    topic: Topic
    starts_per_hour: int

    @property
    def url(self) -> str:
        return self.locate()

    def key(self) -> bytes:
        text = self.secrets.read(self.key_secret_id).text
        if text is None or len(text) < tokens.MIN_KEY_BYTES:
            raise ConfigurationError(
                f"the links' signing key {self.key_secret_id!r} is missing or too short"
            )
        return text.encode()

    def state(self) -> StackState:
        return read_status(self.bootstrap.call({"action": "status"}))

    def used(self, claims: tokens.Claims) -> LinkUse | None:
        return self.table.link_use(claims.nonce)

    def use(self, claims: tokens.Claims, now: int) -> str | None:
        press = secrets.token_hex(8)
        used = self.table.use_link(claims.nonce, now=now, expires_at=claims.expires_at, press=press)
        return press if used else None

    def take_over(self, claims: tokens.Claims, used_at: int, now: int) -> str | None:
        press = secrets.token_hex(8)
        taken = self.table.take_over_link(claims.nonce, now=now, used_at=used_at, press=press)
        return press if taken else None

    def started(self, claims: tokens.Claims, now: int) -> None:
        self.table.link_started(claims.nonce, now=now, expires_at=claims.expires_at)

    def unuse(self, claims: tokens.Claims, press: str) -> None:
        self.table.unuse_link(claims.nonce, press=press)

    def may_start(self, now: int) -> bool:
        return self.table.count("start", now=now, limit=self.starts_per_hour)

    def may_follow(self, now: int) -> bool:
        return self.table.count("poll", now=now, limit=POLLS_PER_HOUR)

    def start(self, claims: tokens.Claims) -> Pending | Elsewhere | Spent:
        """Start a device authorization for the link (or get the one it started) through the
        bootstrap; ``Elsewhere`` when another is pending, ``Spent`` when the version budget
        refused it."""
        return read_started(self.bootstrap.call({"action": "start", "link": tokens.tag(claims)}))

    def follow(self, link: str) -> None:
        """Let the bootstrap poll what the link tagged ``link`` started, in the background;
        its outcome comes back as a destination."""
        self.bootstrap.send({"action": "poll", "link": link})

    def claim_follow(self, claims: tokens.Claims, now: int) -> bool:
        return self.table.claim_follow(claims.nonce, now=now)

    def followed(self, claims: tokens.Claims, now: int) -> None:
        self.table.link_followed(claims.nonce, now=now)

    def release_follow(self, claims: tokens.Claims, now: int) -> None:
        self.table.release_follow(claims.nonce, claimed_at=now)

    def claim_notice(self, need: str, now: int, every: int) -> bool:
        return self.table.claim_notice(need, now=now, every=every)

    def notice_sent(self, need: str, now: int, every: int) -> None:
        self.table.notice_sent(need, claimed_at=now, now=now, every=every)

    def release_notice(self, need: str, now: int) -> None:
        self.table.release_notice(need, claimed_at=now)

    def last_sent(self, need: str) -> int | None:
        return self.table.notice_sent_at(need)

    def publish(self, request: PublishRequest) -> str:
        return self.topic.publish(
            subject=request["Subject"],
            message=request["Message"],
            structure=request["MessageStructure"],
        )

    def nonce(self) -> bytes:
        return secrets.token_bytes(tokens.NONCE_BYTES)
