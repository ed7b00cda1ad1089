"""Time: an injectable clock, and the ISO 8601 UTC form used in stored documents."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Wall-clock time in epoch seconds, and a way to wait."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (nothing when not positive)."""
        if seconds > 0:
            time.sleep(seconds)


def to_iso(epoch: float) -> str:
    """``2026-11-22T04:00:00Z`` for an epoch time (whole seconds, rounded down)."""
    return datetime.fromtimestamp(int(epoch), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def optional_iso(epoch: float | None) -> str | None:
    """``to_iso`` of a time that may be unknown (``None`` stays ``None``)."""
    return None if epoch is None else to_iso(epoch)


def parse_iso(text: str) -> float:
    """Epoch seconds of an ISO 8601 time that names its offset (``Z`` or ``+00:00``).

    Raises ``ValueError`` for any other form, naive times included.
    """
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"time {text!r} has no UTC offset")
    return parsed.timestamp()
