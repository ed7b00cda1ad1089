"""The lines of ``cmstoken-admin status`` (``Line``), and what the lines of every source share:
the stack's settings they measure against, the command that fixes things, how times read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.stack import DeployedStack
from cmstoken.core.clock import parse_iso

# The stack parameters the report measures against, as the template defaults them.
DEFAULTS = {
    "RotationIntervalMinutes": 60.0,
    "ExpiryAlarmThresholdSeconds": 7200.0,
    "ReauthorizationWarningSeconds": 2160000.0,
}


@dataclass
class Line:
    """One line of the report: its text, its data for ``--json``, and what needs attention."""

    name: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def unreadable(name: str, failure: AdminError) -> Line:
    """The line of a source that could not be read: it says so, and what to do."""
    return Line(
        name,
        f"not readable ({failure.short})",
        {"readable": False, "error": failure.short},
        [str(failure)],
    )


def setting(stack: DeployedStack | None, parameter: str) -> float:
    """The stack's numeric ``parameter``, else its default (``DEFAULTS``)."""
    default = DEFAULTS[parameter]
    return stack.number(parameter, default) if stack else default


def command(stack: DeployedStack | None) -> str:
    """This command on the stack, as advice names it (``NAME`` when the stack is unknown)."""
    return f"cmstoken-admin --stack {stack.name if stack else 'NAME'}"


def epoch(value: Any) -> float | None:
    """An ISO 8601 time from a function's report, in epoch seconds; ``None`` if it is none."""
    if not isinstance(value, str):
        return None
    try:
        return parse_iso(value)
    except ValueError:
        return None


def relative(seconds: float, *, ago: bool = True) -> str:
    """``in 3 h 12 min`` or ``7 min ago`` (``ago=False``: the bare length)."""
    span = abs(int(seconds))
    hours, minutes = divmod(span // 60, 60)
    length = f"{hours} h {minutes} min" if hours else f"{minutes} min"
    if hours >= 48:
        length = f"{span / 86400:.1f} days"
    if not ago:
        return length
    return f"{length} ago" if seconds < 0 else f"in {length}"


def days(count: float) -> str:
    """``in 3.5 days`` or ``2.0 days ago``."""
    return f"in {count:.1f} days" if count >= 0 else f"{-count:.1f} days ago"
