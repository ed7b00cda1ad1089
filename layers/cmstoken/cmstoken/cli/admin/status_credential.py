"""The lines of ``cmstoken-admin status`` that the bootstrap function reports: the credential
and its re-authorization date, a pending authorization (never its code), and the published
service token's expiry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.invokers import Invoker
from cmstoken.cli.admin.stack import DeployedStack, StackFunctions
from cmstoken.cli.admin.status_lines import Line, command, days, epoch, relative, setting

# An active credential whose service token the service refused (the bootstrap function reports
# ``service_refused_at``): only another account helps.
REFUSED = "refused"


def credential_lines(
    invoker: Invoker, functions: StackFunctions, stack: DeployedStack | None, now: float
) -> list[Line]:
    """The credential, a pending authorization and the service token, from the bootstrap
    function's ``status``; both lines say so when it cannot be invoked."""
    try:
        report = invoker.invoke(functions.bootstrap, {"action": "status"})
    except AdminError as exc:
        unread = {"readable": False, "error": exc.short}
        return [
            Line("credential", f"not readable ({exc.short})", unread, [str(exc)]),
            Line("service_token", "not readable (see credential)", dict(unread)),
        ]
    found = report.get("credential") or {}
    state = str(found.get("status"))
    if state == "active" and found.get("service_refused_at"):
        state = REFUSED  # what to do differs: no rotation can publish a token
    lines = [_credential_line(state, found, stack, now)]
    pending = report.get("pending")
    if isinstance(pending, dict):
        until = str(pending.get("expires_at"))
        lines.append(
            Line(
                "pending",
                f"an authorization waits for approval until {until} (its code is shown "
                f"only to whoever runs `{command(stack)} bootstrap`)",
                {"expires_at": until},
            )
        )
    lines.append(_token_line(found.get("service_token_expires_at"), state, stack, now))
    return lines


def _credential_line(
    state: str, found: Mapping[str, Any], stack: DeployedStack | None, now: float
) -> Line:
    data: dict[str, Any] = {
        key: found.get(key) for key in ("status", "authorized_at", "refreshed_at", "reauthorize_by")
    }
    problems = []
    text = state
    if state == "absent":
        text = "absent: the stack was never authorized"
        problems.append(f"not bootstrapped: run `{command(stack)} bootstrap`")
    elif state == REFUSED:
        refused_at = found.get("service_refused_at")
        data["service_refused_at"] = refused_at
        text = f"active, but the service refused its token at {refused_at}"
        problems.append(
            "the service refused the service token of the account that authorized the stack: "
            f"run `{command(stack)} bootstrap --new-identity`, approving with an account the "
            "service accepts"
        )
    elif state != "active":
        problems.append(
            f"authorization required (the identity provider refused the credential): run "
            f"`{command(stack)} bootstrap`"
        )
    if found.get("authorized_at"):
        text += f", authorized {found['authorized_at']}, refreshed {found.get('refreshed_at')}"
    reauthorize_by = epoch(found.get("reauthorize_by"))
    authorized_at = epoch(found.get("authorized_at"))
    if reauthorize_by is not None:
        left = (reauthorize_by - now) / 86400
        data["days_until_reauthorization"] = round(left, 1)
        text += f"; re-authorize by {found['reauthorize_by']} ({days(left)})"
        warning = setting(stack, "ReauthorizationWarningSeconds")
        aging = authorized_at is not None and 0 < warning <= now - authorized_at
        if state in ("active", REFUSED) and (left <= 0 or aging):
            problems.append(
                f"re-authorize by {found['reauthorize_by']} ({days(left)}): run "
                f"`{command(stack)} bootstrap`"
            )
    elif state in ("active", REFUSED):
        text += "; no fixed re-authorization date"
    return Line("credential", text, data, problems)


def _token_line(expires: Any, state: str, stack: DeployedStack | None, now: float) -> Line:
    expires_at = epoch(expires)
    if expires_at is None:
        # A rotation needs an active credential whose tokens the service accepts: without
        # one, the credential line's advice (a bootstrap) is the only one that helps.
        problems = (
            [f"no service token is published: run `{command(stack)} rotate`"]
            if state == "active"
            else []
        )
        return Line("service_token", "none published", {"expires_at": None}, problems)
    left = expires_at - now
    data = {"expires_at": expires, "seconds_left": round(left)}
    problems = []
    if left <= 0:
        problems.append(f"the service token expired at {expires}")
    elif left < setting(stack, "ExpiryAlarmThresholdSeconds") and state == "active":
        problems.append(
            f"the service token expires {relative(left)}: run `{command(stack)} rotate`"
        )
    text = f"expires {expires} ({relative(left)})"
    return Line("service_token", text, data, problems)
