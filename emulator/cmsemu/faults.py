"""Injected faults: queued per endpoint, each consumed by one request to that endpoint."""

import json
import math
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from cmsemu.responses import Response, Style, html_page, json_response, styled_error

ENDPOINTS = frozenset(
    {
        "provider",
        "device_code",
        "device_token",
        "refresh",
        "token",
        "exchange",
        "projects",
        "activate",
        "control",
    }
)
_PARAMS = {
    "status": {"status", "error", "description", "acted"},
    "rate_limit": {"retry_after", "reset_in"},
    "delay": {"seconds", "acted"},
    "drop": set(),
    "malformed": {"body", "acted"},
    "rewrite": {"drop", "set", "raw", "body"},
    "trickle": {"interval", "chunk"},
}
# Faults that let the request act and then shape its real answer.
ACTING = frozenset({"drop", "rewrite", "trickle"})
MALFORMED_BODIES = frozenset(
    {"html", "truncated", "empty", "not_object", "missing_fields", "null_token", "huge"}
)
HUGE_SIZE = 2 * 1024 * 1024 + 1024


@dataclass(frozen=True)
class Fault:
    """One injected fault and its parameters."""

    kind: str
    params: dict[str, Any]

    @property
    def acts(self) -> bool:
        """True if the request is carried out before the fault shapes the answer."""
        return self.kind in ACTING or (
            self.kind in ("malformed", "delay", "status") and bool(self.params.get("acted"))
        )


def _validate(endpoint: str, kind: str, times: int, params: dict[str, Any]) -> None:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}")
    if kind not in _PARAMS:
        raise ValueError(f"unknown fault {kind!r}")
    unknown = set(params) - _PARAMS[kind]
    if unknown:
        raise ValueError(f"unknown parameters for {kind}: {sorted(unknown)}")
    if times < 1:
        raise ValueError("times must be at least 1")
    if kind == "status" and not 400 <= int(params.get("status", 503)) <= 599:
        raise ValueError("status must be 4xx or 5xx")
    if kind == "delay" and float(params.get("seconds", -1)) < 0:
        raise ValueError("delay needs seconds >= 0")
    if kind == "malformed" and params.get("body") not in MALFORMED_BODIES:
        raise ValueError(f"malformed needs body in {sorted(MALFORMED_BODIES)}")
    if kind == "rewrite":
        _validate_rewrite(params)
    if kind == "trickle" and (
        float(params.get("interval", 0.05)) < 0 or int(params.get("chunk", 1)) < 1
    ):
        raise ValueError("trickle needs interval >= 0 and chunk >= 1")


def _validate_rewrite(params: dict[str, Any]) -> None:
    drop, values, raw = params.get("drop", []), params.get("set", {}), params.get("raw", {})
    if not isinstance(drop, list) or not all(isinstance(name, str) for name in drop):
        raise ValueError("rewrite: drop must be a list of field names")
    if not isinstance(values, dict):
        raise ValueError("rewrite: set must be an object of field names to JSON values")
    if not isinstance(raw, dict) or not all(isinstance(text, str) for text in raw.values()):
        raise ValueError("rewrite: raw must be an object of field names to JSON texts")
    if "body" in params and not isinstance(params["body"], str):
        raise ValueError("rewrite: body must be a string")


class FaultQueue:
    """Faults waiting for their endpoint, in injection order."""

    def __init__(self) -> None:
        self._queues: defaultdict[str, deque[Fault]] = defaultdict(deque)

    def add(self, endpoint: str, kind: str, times: int, params: dict[str, Any]) -> None:
        """Queue a fault for the next `times` requests to `endpoint`; ValueError if invalid."""
        _validate(endpoint, kind, times, params)
        self._queues[endpoint].extend(Fault(kind, dict(params)) for _ in range(times))

    def take(self, endpoint: str) -> Fault | None:
        """Remove and return the next fault for `endpoint`, if any."""
        queue = self._queues.get(endpoint)
        return queue.popleft() if queue else None

    def clear(self) -> None:
        """Forget every queued fault."""
        self._queues.clear()


def _oauth_code(status: int) -> str:
    if status == 503:
        return "temporarily_unavailable"
    if status == 429:
        return "too_many_requests"
    return "server_error" if status >= 500 else "invalid_request"


def interruption(fault: Fault, style: Style, now: float, service_style: str) -> Response:
    """Answer a "status" or "rate_limit" fault without acting."""
    if fault.kind == "status":
        status = int(fault.params.get("status", 503))
        error = str(fault.params.get("error", _oauth_code(status)))
        description = str(fault.params.get("description", "Injected failure."))
        return styled_error(style, status, error, description, service_style)
    response = styled_error(
        style, 429, "too_many_requests", "Global limit has been reached", service_style
    )
    if fault.params.get("retry_after") is not None:
        response.headers["Retry-After"] = str(int(fault.params["retry_after"]))
    if fault.params.get("reset_in") is not None:
        response.headers["X-RateLimit-Limit"] = "0"
        response.headers["X-RateLimit-Remaining"] = "0"
        response.headers["X-RateLimit-Reset"] = str(math.ceil(now + fault.params["reset_in"]))
    return response


def _json_object(response: Response | None, main_field: str | None) -> dict[str, Any]:
    """The body to garble: the real answer when the request acted, else a plausible one."""
    if response is not None:
        try:
            body = json.loads(response.body)
        except ValueError:
            body = None
        if isinstance(body, dict):
            return body
    placeholder: dict[str, Any] = {"token_type": "Bearer"}
    if main_field:
        placeholder[main_field] = "eyJnYXJibGVkIjp0cnVlfQ.garbled.garbled"
    return placeholder


def garble(fault: Fault, main_field: str | None, acted: Response | None) -> Response:
    """Answer a "malformed" fault; `acted` is the real response when the request acted."""
    kind = fault.params["body"]
    base = _json_object(acted, main_field)
    if kind == "html":
        return html_page(200, "Service Unavailable", "<p>Something went wrong.</p>")
    if kind == "empty":
        return Response(200)
    if kind == "not_object":
        return json_response(200, ["unexpected", "array"])
    if kind == "truncated":
        text = json.dumps(base).encode("utf-8")
        return Response(200, text[: len(text) // 2])
    if main_field and kind == "missing_fields":
        base.pop(main_field, None)
    if main_field and kind == "null_token":
        base[main_field] = None
    if kind == "huge":
        base["padding"] = "x" * HUGE_SIZE
    return json_response(200, base)


def rewrite(fault: Fault, acted: Response) -> Response:
    """Answer a "rewrite" fault: the real answer (the request acted) with fields dropped
    (``drop``), replaced by JSON values (``set``) or by raw JSON texts (``raw``: ``NaN``,
    ``1e400``, deep nesting, which ``json.dumps`` cannot write), or the whole body replaced
    (``body``). The status stays the real one."""
    if "body" in fault.params:
        return Response(acted.status, str(fault.params["body"]).encode("utf-8"))
    document = _json_object(acted, None)
    for name in fault.params.get("drop", []):
        document.pop(name, None)
    document.update(fault.params.get("set", {}))
    raw: dict[str, str] = dict(fault.params.get("raw", {}))
    parts = [
        f"{json.dumps(key)}:{raw.pop(key) if key in raw else json.dumps(value)}"
        for key, value in document.items()
    ]
    parts += [f"{json.dumps(key)}:{text}" for key, text in raw.items()]
    body = ("{" + ",".join(parts) + "}").encode("utf-8")
    return Response(acted.status, body, headers=dict(acted.headers))
