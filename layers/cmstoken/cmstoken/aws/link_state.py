"""DynamoDB adapter for the re-authorization links' state: which links were used (by which
press, and whether a poll of what they started was queued), when each need was last notified
(and who is notifying it now), and how many authorizations links started, and polls they
queued, in the current hour.

Every decision is one conditional write, so two invocations that race (presses of one link,
a notice sent by two runs at once) cannot both win, and nothing is read first. Items expire
through the table's TTL attribute ``ttl`` (epoch seconds; a reserved word in expressions, so
every attribute is named through ``ExpressionAttributeNames``); DynamoDB deletes expired items
only eventually (usually within days), so each condition also compares the times itself.
``ClientError`` codes and botocore failures become ``LinkStateError`` types.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from cmstoken.aws import clients
from cmstoken.core.errors import (
    LinkStateAccessError,
    LinkStateError,
    LinkStateUnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY = "pk"
TTL = "ttl"
# How long a notice's claim holds: longer than the links function runs (its timeout, 30 s, in
# template.yaml), shorter than Lambda waits before retrying an asynchronous invocation that
# failed (a minute).
LEASE_SECONDS = 50
_REFUSED = "ConditionalCheckFailedException"
_TRANSIENT_CODES = frozenset({"TransactionConflictException"})


@dataclass(frozen=True)
class LinkUse:
    """When a link was pressed (``None``: that press gave the use back) and when it started
    an authorization (``None``: not yet, or never: the press failed or died before)."""

    used_at: int | None
    started_at: int | None


def link_key(nonce: str) -> str:
    """The item of a used link: its nonce hashed (the table never holds a usable part of a
    link, and every key has one length)."""
    return "link#" + hashlib.sha256(nonce.encode()).hexdigest()


class LinkState:
    """The links' table. The boto3 client is created on first use (it honours
    ``AWS_ENDPOINT_URL``); tests may inject one."""

    def __init__(self, table: str, client: DynamoDBClient | None = None) -> None:
        self.table = table
        self._client = client

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = clients.client("dynamodb")
        return self._client

    def use_link(self, nonce: str, *, now: int, expires_at: int, press: str) -> bool:
        """Record the link ``nonce`` as used by ``press`` (a random id) at ``now``, until
        ``expires_at``; ``False`` when it already was."""
        return self._write(
            "put_item",
            Item={
                KEY: {"S": link_key(nonce)},
                TTL: {"N": str(expires_at)},
                "used_at": _n(now),
                "press": {"S": press},
            },
            ConditionExpression="attribute_not_exists(#key)",
            ExpressionAttributeNames={"#key": KEY},
        )

    def link_started(self, nonce: str, *, now: int, expires_at: int) -> None:
        """Record that the link ``nonce`` started an authorization (whichever press did, and
        whether or not the use is still recorded: a press that failed may have given it
        back)."""
        self._write(
            "update_item",
            Key={KEY: {"S": link_key(nonce)}},
            UpdateExpression="SET #started = :now, #ttl = :ttl",
            ExpressionAttributeNames={"#started": "started_at", "#ttl": TTL},
            ExpressionAttributeValues={":now": _n(now), ":ttl": _n(expires_at)},
        )

    def take_over_link(self, nonce: str, *, now: int, used_at: int, press: str) -> bool:
        """Record the link ``nonce`` as used by ``press`` at ``now`` in place of the press that
        used it at ``used_at`` and started nothing (it failed or died); ``False`` when another
        press took it over first, or the link started an authorization meanwhile."""
        return self._write(
            "update_item",
            Key={KEY: {"S": link_key(nonce)}},
            UpdateExpression="SET #used = :now, #press = :press",
            ConditionExpression="#used = :before AND attribute_not_exists(#started)",
            ExpressionAttributeNames={
                "#used": "used_at",
                "#press": "press",
                "#started": "started_at",
            },
            ExpressionAttributeValues={
                ":now": _n(now),
                ":press": {"S": press},
                ":before": _n(used_at),
            },
        )

    def claim_follow(self, nonce: str, *, now: int) -> bool:
        """Take the right to queue the background poll of what the link ``nonce`` started:
        ``True`` when none was queued and no other press is queueing one (a claim lapses after
        ``LEASE_SECONDS``). The caller then calls ``link_followed``, else ``release_follow``."""
        return self._write(
            "update_item",
            Key={KEY: {"S": link_key(nonce)}},
            UpdateExpression="SET #lease = :until",
            ConditionExpression=(
                "attribute_exists(#key) AND attribute_not_exists(#followed) "
                "AND (attribute_not_exists(#lease) OR #lease <= :now)"
            ),
            ExpressionAttributeNames={
                "#key": KEY,
                "#followed": "followed_at",
                "#lease": "follow_lease_until",
            },
            ExpressionAttributeValues={":until": _n(now + LEASE_SECONDS), ":now": _n(now)},
        )

    def link_followed(self, nonce: str, *, now: int) -> None:
        """Record that a background poll of what the link ``nonce`` started was queued."""
        self._write(
            "update_item",
            Key={KEY: {"S": link_key(nonce)}},
            UpdateExpression="SET #followed = :now REMOVE #lease",
            ConditionExpression="attribute_exists(#key)",
            ExpressionAttributeNames={
                "#followed": "followed_at",
                "#key": KEY,
                "#lease": "follow_lease_until",
            },
            ExpressionAttributeValues={":now": _n(now)},
        )

    def release_follow(self, nonce: str, *, claimed_at: int) -> None:
        """Give back the claim to queue the poll of the link ``nonce`` taken at ``claimed_at``
        (nothing was queued), so that a press again queues it; a later claim is left alone."""
        self._write(
            "update_item",
            Key={KEY: {"S": link_key(nonce)}},
            UpdateExpression="REMOVE #lease",
            ConditionExpression="#lease = :until",
            ExpressionAttributeNames={"#lease": "follow_lease_until"},
            ExpressionAttributeValues={":until": _n(claimed_at + LEASE_SECONDS)},
        )

    def unuse_link(self, nonce: str, *, press: str) -> None:
        """Forget that ``press`` used the link ``nonce`` (nothing started); a use by another
        press, or one with which the link started an authorization, is left alone."""
        self._write(
            "delete_item",
            Key={KEY: {"S": link_key(nonce)}},
            ConditionExpression="#press = :press AND attribute_not_exists(#started)",
            ExpressionAttributeNames={"#press": "press", "#started": "started_at"},
            ExpressionAttributeValues={":press": {"S": press}},
        )

    def link_use(self, nonce: str) -> LinkUse | None:
        """The use of the link ``nonce`` (a strongly consistent read); ``None``: never used."""
        try:
            answer = self.client.get_item(
                TableName=self.table, Key={KEY: {"S": link_key(nonce)}}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise link_state_error(exc, self.table) from exc
        item = answer.get("Item")
        if item is None:
            return None
        used, started = (
            None if item.get(name) is None else int(item[name]["N"])
            for name in ("used_at", "started_at")
        )
        return LinkUse(used_at=used, started_at=started)

    def claim_notice(self, need: str, *, now: int, every: int) -> bool:
        """Take the right to send the notice of ``need`` now: ``True`` when it was not sent in
        the last ``every`` seconds and no other invocation holds it (a claim lapses after
        ``LEASE_SECONDS``, so an invocation that died holding it delays the notice by a minute,
        not a day). The caller names a need so that a new one, after a new authorization,
        starts afresh; after sending it calls ``notice_sent``, else ``release_notice``."""
        return self._write(
            "update_item",
            Key={KEY: {"S": "notice#" + need}},
            UpdateExpression="SET #lease = :until, #ttl = :ttl",
            ConditionExpression=(
                "(attribute_not_exists(#sent) OR #sent <= :before) "
                "AND (attribute_not_exists(#lease) OR #lease <= :now)"
            ),
            ExpressionAttributeNames={"#sent": "sent_at", "#lease": "lease_until", "#ttl": TTL},
            ExpressionAttributeValues={
                ":until": _n(now + LEASE_SECONDS),
                ":ttl": _n(now + 2 * every),
                ":before": _n(now - every),
                ":now": _n(now),
            },
        )

    def notice_sent_at(self, need: str) -> int | None:
        """When the notice of ``need`` was last recorded as sent (a strongly consistent
        read); ``None``: never, or its record expired."""
        try:
            answer = self.client.get_item(
                TableName=self.table, Key={KEY: {"S": "notice#" + need}}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise link_state_error(exc, self.table) from exc
        sent = answer.get("Item", {}).get("sent_at")
        return None if sent is None else int(sent["N"])

    def notice_sent(self, need: str, *, claimed_at: int, now: int, every: int) -> bool:
        """Record the notice of ``need`` (claimed at ``claimed_at``) as sent at ``now``;
        ``False`` when the claim had lapsed and another invocation took it (then the notice
        may go twice: at least once is the guarantee)."""
        return self._write(
            "update_item",
            Key={KEY: {"S": "notice#" + need}},
            UpdateExpression="SET #sent = :now, #ttl = :ttl REMOVE #lease",
            ConditionExpression="#lease = :until",
            ExpressionAttributeNames={"#sent": "sent_at", "#lease": "lease_until", "#ttl": TTL},
            ExpressionAttributeValues={
                ":now": _n(now),
                ":ttl": _n(now + 2 * every),
                ":until": _n(claimed_at + LEASE_SECONDS),
            },
        )

    def release_notice(self, need: str, *, claimed_at: int) -> None:
        """Give back the claim on ``need`` taken at ``claimed_at`` (the notice could not be
        sent), so that a retry sends it at once; a later claim is left alone."""
        self._write(
            "update_item",
            Key={KEY: {"S": "notice#" + need}},
            UpdateExpression="REMOVE #lease",
            ConditionExpression="#lease = :until",
            ExpressionAttributeNames={"#lease": "lease_until"},
            ExpressionAttributeValues={":until": _n(claimed_at + LEASE_SECONDS)},
        )

    def count(self, kind: str, *, now: int, limit: int) -> bool:
        """Count one ``kind`` of event (an authorization started from a link, a background
        poll queued) in the current hour; ``False`` (nothing counted) when ``limit`` were
        counted already."""
        hour = now - now % 3600
        return self._write(
            "update_item",
            Key={KEY: {"S": f"{kind}#{hour}"}},
            UpdateExpression="ADD #count :one SET #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#count) OR #count < :limit",
            ExpressionAttributeNames={"#count": "counted", "#ttl": TTL},
            ExpressionAttributeValues={
                ":one": _n(1),
                ":ttl": _n(hour + 7200),
                ":limit": _n(limit),
            },
        )

    def _write(self, operation: str, **request: Any) -> bool:
        """One conditional write: ``True`` when it was made, ``False`` when its condition
        refused it."""
        try:
            getattr(self.client, operation)(TableName=self.table, **request)
        except (ClientError, BotoCoreError) as exc:
            if clients.failure(exc)[0] == _REFUSED:
                return False
            raise link_state_error(exc, self.table) from exc
        return True


def _n(number: int) -> dict[str, str]:
    return {"N": str(number)}


def link_state_error(exc: ClientError | BotoCoreError, table: str) -> LinkStateError:
    """The ``LinkStateError`` type of a failed call to ``table``."""
    code, transient = clients.failure(exc, clients.TRANSIENT_CODES | _TRANSIENT_CODES)
    kind = LinkStateUnavailableError if transient else LinkStateAccessError
    return kind(f"cannot use table {table!r}: {code}", code=code)
