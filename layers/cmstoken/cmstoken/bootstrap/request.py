"""A bootstrap invocation's event, validated (SPEC section 3, bootstrap function)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cmstoken.core.errors import ConfigurationError

ACTIONS = ("start", "poll", "status")


@dataclass(frozen=True)
class BootstrapRequest:
    """A bootstrap invocation: ``action``, the free-trial choice for ``start``, an optional
    cap on how long one ``poll`` waits (so an operator's tool can show progress), and whether
    the authorization may switch the stack to another identity."""

    action: str
    free_trial: bool | None = None
    max_wait_seconds: float | None = None
    allow_new_identity: bool = False

    @classmethod
    def from_event(cls, event: Any) -> BootstrapRequest:
        """Validate ``{"action": "start" | "poll" | "status", ...}``."""
        if not isinstance(event, dict):
            raise ConfigurationError(
                f"bootstrap event must be a JSON object, got JSON {type(event).__name__}"
            )
        action = event.get("action")
        if action not in ACTIONS:
            raise ConfigurationError(
                f"bootstrap event field 'action' must be one of {', '.join(ACTIONS)}"
            )
        free_trial = event.get("free_trial")
        if free_trial is not None and not isinstance(free_trial, bool):
            raise ConfigurationError("bootstrap event field 'free_trial' must be true or false")
        wait = _seconds(event.get("max_wait_seconds"), "max_wait_seconds")
        allow = event.get("allow_new_identity", False)
        if not isinstance(allow, bool):
            raise ConfigurationError(
                "bootstrap event field 'allow_new_identity' must be true or false"
            )
        return cls(
            action=action, free_trial=free_trial, max_wait_seconds=wait, allow_new_identity=allow
        )


def _seconds(value: Any, name: str) -> float | None:
    """An optional, positive, finite number of seconds from an event (JSON allows ``1e400``,
    which reads as infinity, and Python's reader ``NaN`` and ``Infinity``)."""
    if value is None:
        return None
    problem = f"bootstrap event field {name!r} must be a positive, finite number of seconds"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(problem)
    try:
        seconds = float(value)
    except OverflowError as exc:  # an integer too large for a float
        raise ConfigurationError(problem) from exc
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigurationError(problem)
    return seconds
