"""The consumer helper's refresh request: one ``Service Token Refresh Requested`` event on the
default EventBridge bus, or on a bus named by its ARN in another account (``EventBusName``
takes a bus's name or ARN: PutEventsRequestEntry), the rotator's trigger. Unlike the
best-effort ``notifications``, a request that EventBridge does not take raises an
``EventBusError`` type the caller can report. botocore is imported on the first call."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from cmstoken.aws import clients
from cmstoken.core.errors import EventBusAccessError, EventBusError, EventBusUnavailableError
from cmstoken.core.redaction import printable
from cmstoken.core.triggers import REFRESH_REQUESTED

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

# PutEvents entry errors that EventBridge documents as retryable (PutEventsResultEntry).
_RETRYABLE_ENTRY_CODES = frozenset({"InternalFailure", "ThrottlingException"})
# Whole-call PutEvents errors that a later request may not meet.
_TRANSIENT_REQUEST_CODES = frozenset(
    {"InternalException", "InternalFailure", "ThrottlingException", "ServiceUnavailable"}
)
# PutEvents errors (of the call or of the entry) that a permission fixes.
_PERMISSION_CODES = frozenset(
    {
        "AccessDeniedException",
        "NotAuthorizedForSourceException",
        "NotAuthorizedForDetailTypeException",
    }
)
# EventBridge's text kept in a message: at most this many characters.
_AWS_TEXT_LIMIT = 200


def bus_region(bus: str | None) -> str | None:
    """The region an event bus ARN names (``None`` for a name or the default bus): a client
    there sends to it."""
    parts = (bus or "").split(":", 5)
    if len(parts) == 6 and parts[0] == "arn" and parts[2] == "events" and parts[3]:
        return parts[3]
    return None


def request_refresh(
    client: EventBridgeClient,
    *,
    source: str,
    detail: Mapping[str, str],
    bus: str | None = None,
) -> str:
    """Put one refresh request from ``source`` (``detail`` as JSON, keys sorted) on ``bus``
    (name or ARN; ``None``: the default bus); its event id. ``EventBusError`` when the call
    fails, or when EventBridge refuses the entry in a successful answer (``FailedEntryCount``,
    the entry's ``ErrorCode`` and ``ErrorMessage``: PutEventsResultEntry)."""
    from botocore.exceptions import BotoCoreError, ClientError

    entry: PutEventsRequestEntryTypeDef = {
        "Source": source,
        "DetailType": REFRESH_REQUESTED,
        "Detail": json.dumps(detail, sort_keys=True),
    }
    if bus:
        entry["EventBusName"] = bus
    try:
        answer = client.put_events(Entries=[entry])
    except (ClientError, BotoCoreError) as exc:  # BotoCoreError: no answer, transient
        code, transient = clients.failure(exc, clients.TRANSIENT_CODES | _TRANSIENT_REQUEST_CODES)
        raise _failure(code, transient=transient) from exc
    entries = answer.get("Entries") or [{}]
    result = entries[0]
    if answer.get("FailedEntryCount") or "ErrorCode" in result or "EventId" not in result:
        code = result.get("ErrorCode") or "no EventId in the answer"
        raise _failure(code, result.get("ErrorMessage"), transient=code in _RETRYABLE_ENTRY_CODES)
    return result["EventId"]


def _failure(code: str | None, message: str | None = None, *, transient: bool) -> EventBusError:
    text = f"{code}: {_aws_text(message)}" if message else f"{code}"
    if transient:
        return EventBusUnavailableError(text, code=code)
    if code in _PERMISSION_CODES:
        return EventBusAccessError(text, code=code)
    return EventBusError(text, code=code)


def _aws_text(text: str) -> str:
    """An error text from AWS, printable and short."""
    text = printable(text)
    if len(text) > _AWS_TEXT_LIMIT:
        text = text[: _AWS_TEXT_LIMIT - 3] + "..."
    return text
