"""What started a rotator run: the schedule, a forced run, or a refresh request event."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cmstoken.core.errors import ConfigurationError

REFRESH_REQUESTED = "Service Token Refresh Requested"
# The source the consumer helper sends refresh requests from: the one the stack's bus policy
# and consumer.yaml allow.
CONSUMER_SOURCE = "cmstoken.consumer"
# The source of a run on requests that coalesced in the stack's queue (RefreshRequestQueue).
QUEUED = "requests"


@dataclass(frozen=True)
class RotationRequest:
    """A rotator run's trigger. ``forced`` runs refresh even when the token is not near expiry
    (debounced by ``MIN_REFRESH_INTERVAL_SECONDS``)."""

    forced: bool
    source: str

    @property
    def by_operator(self) -> bool:
        """Whether the function was invoked directly with ``{"force": true}``
        (``cmstoken-admin rotate``): only IAM in the stack's account lets a caller do that."""
        return self.source == "force"

    @classmethod
    def from_event(cls, event: Any) -> RotationRequest:
        """Classify an invocation event (SPEC section 3).

        Any JSON object is a scheduled run; ``{"force": true}`` forces one; an EventBridge event
        whose ``detail-type`` is ``Service Token Refresh Requested`` (any ``source``) forces one,
        and so does a batch of such requests from the stack's queue, where they coalesce (an
        SQS event source mapping's ``{"Records": [...]}``, every record from ``aws:sqs``).
        ``force`` must be a JSON boolean: ``"true"`` is refused rather than guessed.
        """
        if not isinstance(event, dict):
            raise ConfigurationError(
                f"rotator event must be a JSON object, got JSON {type(event).__name__}"
            )
        records = event.get("Records")
        if isinstance(records, list) and records and all(map(_from_queue, records)):
            return cls(forced=True, source=QUEUED)
        if event.get("detail-type") == REFRESH_REQUESTED:
            source = event.get("source")
            return cls(
                forced=True, source=f"event:{source}" if isinstance(source, str) else "event"
            )
        force = event.get("force", False)
        if not isinstance(force, bool):
            raise ConfigurationError(
                "rotator event field 'force' must be true or false (a JSON boolean), "
                f"got JSON {type(force).__name__}"
            )
        return cls(forced=force, source="force" if force else "schedule")


def _from_queue(record: Any) -> bool:
    return isinstance(record, dict) and record.get("eventSource") == "aws:sqs"
