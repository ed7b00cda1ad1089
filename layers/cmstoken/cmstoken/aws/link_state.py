"""DynamoDB adapter for the re-authorization links' state: which links were used, when each
need was last notified, and how many authorizations links started in the current hour.

Every decision is one conditional write, so two invocations that race (a double click, a
notice sent by two runs at once) cannot both win, and nothing is read first. Items expire
through the table's TTL attribute ``ttl`` (epoch seconds; a reserved word in expressions, so
every attribute is named through ``ExpressionAttributeNames``); DynamoDB deletes expired items
only eventually (usually within days), so each condition also compares the times itself.
``ClientError`` codes and botocore failures become ``LinkStateError`` types.
"""

from __future__ import annotations

import hashlib
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
_REFUSED = "ConditionalCheckFailedException"
_TRANSIENT_CODES = frozenset({"TransactionConflictException"})


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

    def use_link(self, nonce: str, *, now: int, expires_at: int) -> bool:
        """Record the link ``nonce`` as used until ``expires_at``; ``False`` when it already
        was."""
        return self._write(
            "put_item",
            Item={KEY: {"S": link_key(nonce)}, TTL: {"N": str(expires_at)}, "used_at": _n(now)},
            ConditionExpression="attribute_not_exists(#key)",
            ExpressionAttributeNames={"#key": KEY},
        )

    def was_used(self, nonce: str) -> bool:
        """Whether the link ``nonce`` was used (a strongly consistent read)."""
        try:
            answer = self.client.get_item(
                TableName=self.table, Key={KEY: {"S": link_key(nonce)}}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as exc:
            raise link_state_error(exc, self.table) from exc
        return "Item" in answer

    def claim_notice(self, need: str, *, now: int, every: int) -> bool:
        """Take the right to send the notice of ``need`` now: ``True`` at most once per
        ``every`` seconds for the same ``need`` (the caller names a need so that a new one,
        after a new authorization, starts afresh)."""
        return self._write(
            "update_item",
            Key={KEY: {"S": "notice#" + need}},
            UpdateExpression="SET #sent = :now, #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#key) OR #sent <= :before",
            ExpressionAttributeNames={"#key": KEY, "#sent": "sent_at", "#ttl": TTL},
            ExpressionAttributeValues={
                ":now": _n(now),
                ":ttl": _n(now + 2 * every),
                ":before": _n(now - every),
            },
        )

    def release_notice(self, need: str, *, sent_at: int) -> None:
        """Give back the notice of ``need`` claimed at ``sent_at`` (it could not be sent), so
        that a retry sends it; a later claim is left alone."""
        self._write(
            "delete_item",
            Key={KEY: {"S": "notice#" + need}},
            ConditionExpression="#sent = :sent",
            ExpressionAttributeNames={"#sent": "sent_at"},
            ExpressionAttributeValues={":sent": _n(sent_at)},
        )

    def count_start(self, *, now: int, limit: int) -> bool:
        """Count one authorization started from a link in the current hour; ``False`` (nothing
        counted) when ``limit`` were started already."""
        hour = now - now % 3600
        return self._write(
            "update_item",
            Key={KEY: {"S": f"start#{hour}"}},
            UpdateExpression="ADD #started :one SET #ttl = :ttl",
            ConditionExpression="attribute_not_exists(#started) OR #started < :limit",
            ExpressionAttributeNames={"#started": "started", "#ttl": TTL},
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
