"""What invoked the links' function, read into a typed request: a function URL request
(payload format 2.0), a reminder (the daily schedule, or one of the stack's alarms going off),
or the outcome of the bootstrap's background poll (a Lambda destination's invocation record)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cmstoken.core.errors import ConfigurationError
from cmstoken.core.link_tags import is_link_tag
from cmstoken.links.web import Request

ALARM_CHANGE = "CloudWatch Alarm State Change"


@dataclass(frozen=True)
class Remind:
    """Send the notice of what the stack needs; ``reason`` says what asked (for the log)."""

    reason: str


@dataclass(frozen=True)
class Outcome:
    """How the background poll ended: its result, or ``None`` when it raised (``error``), and
    the tag of the link whose authorization it polled (``None``: not a link's poll)."""

    result: Any
    error: str | None = None
    link: str | None = None


def read_event(event: Any) -> Request | Remind | Outcome:
    """Classify ``event``; ``ConfigurationError`` for anything else, or for one of these kinds
    whose fields are not what AWS sends."""
    if not isinstance(event, dict):
        raise ConfigurationError(f"the event must be a JSON object, not {type(event).__name__}")
    context = event.get("requestContext")
    try:
        if isinstance(context, dict) and isinstance(context.get("http"), dict):
            return Request.from_event(event)
        if isinstance(context, dict) and "condition" in context and "requestPayload" in event:
            return _outcome(context, event)
        if event.get("action") == "remind":
            return Remind("schedule")
        if event.get("source") == "aws.cloudwatch" and event.get("detail-type") == ALARM_CHANGE:
            detail = event.get("detail")
            name = detail.get("alarmName", "?") if isinstance(detail, dict) else "?"
            return Remind(f"alarm {name} is {_state(detail)}")
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigurationError(
            f"a malformed event of the links' function ({type(exc).__name__})"
        ) from exc
    raise ConfigurationError(
        "not an event of the links' function: a function URL request, "
        '{"action": "remind"}, an alarm state change or a destination record'
    )


def _outcome(context: dict[str, Any], event: dict[str, Any]) -> Outcome:
    request = event["requestPayload"]
    link = request.get("link") if isinstance(request, dict) else None
    link = link if is_link_tag(link) else None
    response = event.get("responsePayload")
    response_context = event.get("responseContext")
    failed = context.get("condition") != "Success" or (
        isinstance(response_context, dict) and "functionError" in response_context
    )
    if failed:
        kind = response.get("errorType") if isinstance(response, dict) else None
        return Outcome(None, error=str(kind or context.get("condition")), link=link)
    return Outcome(response, link=link)


def _state(detail: Any) -> str:
    state = detail.get("state") if isinstance(detail, dict) else None
    return str(state.get("value", "?")) if isinstance(state, dict) else "?"
