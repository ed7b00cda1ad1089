"""Refresh requests: whether one can bring a new token now, and sending one (a ``Service Token
Refresh Requested`` event on the default bus or the stack's bus, which the rotator answers)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Protocol

from cmstoken.aws.refresh_requests import request_refresh
from cmstoken.consumer.errors import (
    REFRESH_DEBOUNCED,
    REQUEST_FAILED,
    ROTATOR_HINT,
    STILL_REFUSED,
    ConsumerError,
)
from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.errors import EventBusAccessError, EventBusError, EventBusUnavailableError
from cmstoken.core.redaction import fingerprint
from cmstoken.core.triggers import CONSUMER_SOURCE

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient

    from cmstoken.aws.documents import ServiceTokenDocument

logger = logging.getLogger(__name__)


class RequestSettings(Protocol):
    """What the requests read of their provider at each use (a workload may change them)."""

    clock: Clock
    secret_id: str
    event_source: str
    event_bus: str | None

    @property
    def events_client(self) -> EventBridgeClient:
        """The EventBridge client."""
        ...


class RefreshRequests:
    """The refresh requests of one provider, and the last one it sent. Thread-safe."""

    def __init__(self, settings: RequestSettings) -> None:
        self._settings = settings
        # (fingerprint of the token it was for, when) of the last refresh request sent.
        self._last: tuple[str, float] | None = None
        self._lock = threading.Lock()  # the last request

    def check(self, current: ServiceTokenDocument, interval: float) -> None:
        """``ConsumerError`` when no request can replace the refused ``current`` token now:
        the stack refreshed it within its minimum ``interval`` (the rotator would skip the
        request: ``refresh_debounced``), or its refresh was requested within it and brought
        nothing (``still_refused``)."""
        refused = fingerprint(current.token)
        now = self._settings.clock.now()
        if current.refreshed_at is not None and now < current.refreshed_at + interval:
            ready_at = current.refreshed_at + interval
            raise ConsumerError(
                f"the service refused the service token {refused}, and no refresh "
                f"can replace it before {to_iso(ready_at)}: the stack refreshed it at "
                f"{to_iso(current.refreshed_at)} and its rotator skips forced refreshes within "
                f"{interval:.0f} s of the last one (MIN_REFRESH_INTERVAL_SECONDS); not "
                "requesting one now (a resource created since the last refresh becomes "
                "accessible with the next one)",
                reason=REFRESH_DEBOUNCED,
                retry_at=ready_at,
            )
        with self._lock:
            last = self._last
        if last is not None and last[0] == refused and now < last[1] + interval:
            raise ConsumerError(
                f"the service refused the service token {refused}; a refresh "
                f"was requested for it at {to_iso(last[1])} and no new token came; "
                f"not asking again before {to_iso(last[1] + interval)}; {ROTATOR_HINT}",
                reason=STILL_REFUSED,
                retry_at=last[1] + interval,
            )

    def send(self, current: ServiceTokenDocument, reason: str) -> float:
        """Send a refresh request for the current token; returns when it was sent.
        ``ConsumerError`` (``request_failed``) when EventBridge does not take it."""
        settings = self._settings
        now = settings.clock.now()
        detail = {
            "reason": reason,
            "secret_id": settings.secret_id,
            "token_fingerprint": fingerprint(current.token),
            "token_expires_at": to_iso(current.expires_at),
            "requested_at": to_iso(now),
        }
        try:
            event_id = request_refresh(
                settings.events_client,
                source=settings.event_source,
                detail=detail,
                bus=settings.event_bus,
            )
        except EventBusError as exc:
            raise _request_failed(exc, settings.event_source, settings.event_bus) from exc
        with self._lock:
            self._last = (fingerprint(current.token), now)
        logger.info("service token refresh requested", extra={**detail, "event_id": event_id})
        return now


def _request_failed(exc: EventBusError, source: str, bus: str | None) -> ConsumerError:
    bus_name = f"the bus {bus}" if bus else "the default bus"
    where = f"the event bus {bus}" if bus else "the default event bus"
    if isinstance(exc, EventBusUnavailableError):
        hint = "a retryable failure: EventBridge may take a later request"
    elif isinstance(exc, EventBusAccessError):
        hint = (
            f"the workload needs events:PutEvents on {bus_name} for source {source!r} (the "
            f"stack's ConsumerRefreshRequestPolicy grants it for {CONSUMER_SOURCE!r}; "
            "consumer.yaml's policy with RefreshRequestBusArn in another account), and a bus "
            "of another account must allow this account in its policy"
        )
    else:
        hint = "EventBridge refused the event; the rotator was not asked"
    return ConsumerError(
        f"could not request a service token refresh on {where} ({exc}); {hint}",
        reason=REQUEST_FAILED,
    )
