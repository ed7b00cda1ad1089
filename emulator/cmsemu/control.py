"""The HTTP control API under /_emulator/, for standalone and demo use (no secrets shown)."""

from collections.abc import Callable
from typing import Any

from cmsemu.request import Request
from cmsemu.responses import Response, json_response
from cmsemu.state import State

PREFIX = "/_emulator/"


def _body(request: Request) -> dict[str, Any]:
    payload = request.json() if request.body else {}
    if not isinstance(payload, dict):
        raise ValueError("the body must be a JSON object")
    return payload


def _set_status(status: str) -> Callable[[State, dict[str, Any]], object]:
    def command(state: State, body: dict[str, Any]) -> object:
        subject = body.get("subject") if status == "approved" else None
        state.devices.set_status(
            str(body.get("user_code", "")), status, None if subject is None else str(subject)
        )
        return {"ok": True}

    return command


def _advance(state: State, body: dict[str, Any]) -> object:
    state.clock.advance(float(body.get("seconds", 0)))
    return {"now": state.now()}


def _inject(state: State, body: dict[str, Any]) -> object:
    params = dict(body)
    endpoint, kind = str(params.pop("endpoint", "")), str(params.pop("fault", ""))
    state.faults.add(endpoint, kind, int(params.pop("times", 1)), params)
    return {"ok": True}


def _clear_faults(state: State, body: dict[str, Any]) -> object:
    state.faults.clear()
    return {"ok": True}


def _state(state: State, body: dict[str, Any]) -> object:
    now = state.now()
    return {
        "now": now,
        "counts": dict(state.counts),
        "pending_user_codes": state.devices.pending_user_codes(now),
    }


def _reset(state: State, body: dict[str, Any]) -> object:
    state.reset()
    return {"ok": True}


COMMANDS: dict[str, dict[str, Callable[[State, dict[str, Any]], object]]] = {
    "approve": {"POST": _set_status("approved")},
    "deny": {"POST": _set_status("denied")},
    "advance": {"POST": _advance},
    "faults": {"POST": _inject, "DELETE": _clear_faults},
    "state": {"GET": _state},
    "reset": {"POST": _reset},
}


# What each route does and takes: `cms-emulator --help` prints this, the README repeats it.
ROUTES: tuple[tuple[str, str, str, str], ...] = (
    (
        "POST",
        "approve",
        '{"user_code": "HHHJ-MMSZ", "subject": "..."}',
        "approve a pending user code (as another account's subject, optionally)",
    ),
    ("POST", "deny", '{"user_code": "HHHJ-MMSZ"}', "deny a pending user code"),
    ("POST", "advance", '{"seconds": 3600}', "move the emulator's clock forward"),
    (
        "POST",
        "faults",
        '{"endpoint": E, "fault": F, "times": 1, ...parameters}',
        "queue a fault for the next `times` requests to an endpoint",
    ),
    ("DELETE", "faults", "(none)", "forget every queued fault"),
    ("GET", "state", "(none)", "the clock, request counts per endpoint, pending user codes"),
    ("POST", "reset", "(none)", "forget codes, tokens, families, faults, counts and the clock"),
)
FAULTS: dict[str, str] = {
    "status": "answer an error without acting: status (4xx/5xx), error, description; acted: "
    "true: act first, then answer the error (a gateway's 502/504 after the provider acted)",
    "rate_limit": "answer 429 without acting: retry_after (Retry-After), reset_in "
    "(X-RateLimit-Reset)",
    "delay": "wait seconds before acting (acted: true: act first, then wait before answering)",
    "drop": "act, then close the connection without an answer",
    "malformed": "answer a broken body: body (html, truncated, empty, not_object, "
    "missing_fields, null_token, huge); acted: act first",
    "rewrite": "act, then change the answer: drop (field names), set (field: JSON value), raw "
    "(field: JSON text such as NaN or 1e400), body (the whole body text)",
    "trickle": "act, then send the answer chunk bytes every interval seconds",
}


def reference() -> str:
    """The control API, for `cms-emulator --help` and the README."""
    from cmsemu.faults import ENDPOINTS

    lines = ['control API (JSON bodies; errors are {"error": message}):']
    for method, name, body, what in ROUTES:
        lines.append(f"  {method:<6} {PREFIX}{name:<8} {what}")
        lines.append(f"         body: {body}")
    lines.append("faults (F), per endpoint (E: " + ", ".join(sorted(ENDPOINTS)) + "):")
    lines.extend(f"  {kind:<10} {what}" for kind, what in FAULTS.items())
    return "\n".join(lines)


def handle(state: State, request: Request) -> Response:
    """Run one control command; errors are {"error": message}."""
    methods = COMMANDS.get(request.path.removeprefix(PREFIX))
    if methods is None:
        return json_response(404, {"error": "unknown control command"}, error="not_found")
    command = methods.get(request.method)
    if command is None:
        response = json_response(405, {"error": "method not allowed"}, error="method_not_allowed")
        response.headers["Allow"] = ", ".join(methods)
        return response
    try:
        return json_response(200, command(state, _body(request)))
    except KeyError:
        return json_response(404, {"error": "unknown user_code"}, error="unknown_user_code")
    except (TypeError, ValueError) as exc:
        return json_response(400, {"error": str(exc)}, error="invalid_request")
