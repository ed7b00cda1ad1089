"""A bootstrap invocation's event, validated (SPEC section 3, bootstrap function)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from cmstoken.core.errors import ConfigurationError
from cmstoken.core.link_tags import LINKS_ALIAS, is_link_tag

ACTIONS = ("start", "poll", "status")
_LINK_FIELDS = frozenset({"action", "link"})


@dataclass(frozen=True)
class BootstrapRequest:
    """A bootstrap invocation: ``action``, the free-trial choice for ``start``, an optional
    cap on how long one ``poll`` waits (so an operator's tool can show progress), whether the
    authorization may switch the stack to another identity, and ``link``: the tag of the link
    that asks, for a request through the links' alias (``None``: an operator's)."""

    action: str
    free_trial: bool | None = None
    max_wait_seconds: float | None = None
    allow_new_identity: bool = False
    # Through the links' alias: no new identity, the stack's free-trial choice, no user code
    # in a status, and only what ``link`` started shown or polled.
    via_links: bool = False
    link: str | None = None

    @classmethod
    def from_event(cls, event: Any, *, via_links: bool = False) -> BootstrapRequest:
        """Validate ``{"action": "start" | "poll" | "status", ...}``; ``via_links``: the
        function was invoked through the links' alias, whose requests carry ``action`` and
        ``link`` only."""
        if not isinstance(event, dict):
            raise ConfigurationError(
                f"bootstrap event must be a JSON object, got JSON {type(event).__name__}"
            )
        action = event.get("action")
        if action not in ACTIONS:
            raise ConfigurationError(
                f"bootstrap event field 'action' must be one of {', '.join(ACTIONS)}"
            )
        if via_links:
            return cls._from_link(event, action)
        if "link" in event:
            raise ConfigurationError(
                f"bootstrap event field 'link' is sent only through the alias {LINKS_ALIAS!r}"
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

    @classmethod
    def _from_link(cls, event: dict[str, Any], action: str) -> BootstrapRequest:
        """A request through the links' alias: ``action`` and the asking link's tag (which a
        ``status`` may leave out: what is pending is then shown to no link)."""
        extra = sorted(str(name) for name in event.keys() - _LINK_FIELDS)
        if extra:
            raise ConfigurationError(
                f"bootstrap event through the alias {LINKS_ALIAS!r} may carry only 'action' "
                f"and 'link', not {', '.join(map(repr, extra))}"
            )
        link = event.get("link")
        if (link is not None or action != "status") and not is_link_tag(link):
            raise ConfigurationError(
                f"bootstrap event through the alias {LINKS_ALIAS!r} must carry field 'link', "
                "a link's tag (32 hexadecimal digits)"
            )
        return cls(action=action, via_links=True, link=link)


def through_links(invoked_function_arn: str) -> bool:
    """Whether the function was invoked through the links' alias (its ARN qualified with
    it: ``arn:aws:lambda:REGION:ACCOUNT:function:NAME:links``)."""
    parts = invoked_function_arn.split(":")
    return len(parts) == 8 and parts[7] == LINKS_ALIAS


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
