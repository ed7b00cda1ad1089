"""Reading upstream responses: JSON bodies, and errors mapped onto the taxonomy in ``errors``.

Pure functions over ``HttpResponse``, so the mapping is testable without a socket. Every message
is scrubbed of the request's secrets (plain or percent-encoded) and of anything shaped like a JWT,
each upstream text before it is shortened, so that no part of a secret survives the cut. No
message quotes a body that is not JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from email.utils import parsedate_to_datetime
from typing import Any

from cmstoken.core.errors import (
    AccessDeniedError,
    AuthorizationPendingError,
    ExchangeFailedError,
    ExpiredTokenError,
    InvalidClientError,
    InvalidGrantError,
    MalformedResponseError,
    RateLimitedError,
    RequestRejectedError,
    ServerError,
    SlowDownError,
    TokenRefusedError,
    UpstreamError,
)
from cmstoken.core.redaction import scrub
from cmstoken.upstream.http import HttpResponse

_MAX_TEXT = 300
# The longest echo of one character of a secret: four UTF-8 bytes, percent-encoded.
_MAX_ECHO_PER_CHARACTER = 12
# The service's documented exchange failure (HTTP 500 "failed to get ... token").
_DOCUMENTED_EXCHANGE_FAILURE = re.compile(r"failed to get\b.*\btoken", re.IGNORECASE)
# A gateway's answer (bad gateway, gateway timeout) says nothing of whether the server behind it
# acted on the request: its outcome is unknown.
GATEWAY_STATUSES = frozenset({502, 504})
_OAUTH_ERRORS: dict[str, type[UpstreamError]] = {
    "authorization_pending": AuthorizationPendingError,
    "slow_down": SlowDownError,
    "expired_token": ExpiredTokenError,
    "access_denied": AccessDeniedError,
    "invalid_grant": InvalidGrantError,
    "invalid_client": InvalidClientError,
    "unauthorized_client": InvalidClientError,
    "server_error": ServerError,
    "temporarily_unavailable": ServerError,
}
_ADVICE: dict[type[UpstreamError], str] = {
    ExpiredTokenError: "the code expired before it was authorized; start the flow again",
    AccessDeniedError: "authorization was denied; start again and approve it in the browser",
    InvalidGrantError: "the credential is no longer valid; authorize again with the device flow",
    InvalidClientError: "the client id is not accepted; check the provider information",
}


def json_value(response: HttpResponse, *, endpoint: str) -> Any:
    """The body decoded as JSON (any type); ``MalformedResponseError`` when it is not JSON."""
    description = f"HTTP {response.status}, {response.content_type or 'no content type'}"
    if not response.body.strip():
        raise MalformedResponseError(
            f"{endpoint}: empty response body ({description})",
            endpoint=endpoint,
            status=response.status,
            outcome_unknown=True,
        )
    try:
        return json.loads(response.body)
    except RecursionError as exc:
        raise MalformedResponseError(
            f"{endpoint}: response body is JSON nested too deeply to read ({description})",
            endpoint=endpoint,
            status=response.status,
            outcome_unknown=True,
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        kind = "an HTML page" if _looks_like_html(response) else "not valid JSON"
        raise MalformedResponseError(
            f"{endpoint}: response body is {kind} ({description})",
            endpoint=endpoint,
            status=response.status,
            outcome_unknown=True,
        ) from exc


def json_object(response: HttpResponse, *, endpoint: str) -> dict[str, Any]:
    """The body as a JSON object; ``MalformedResponseError`` for anything else."""
    document = json_value(response, endpoint=endpoint)
    if not isinstance(document, dict):
        raise MalformedResponseError(
            f"{endpoint}: expected a JSON object, got JSON {type(document).__name__} "
            f"(HTTP {response.status})",
            endpoint=endpoint,
            status=response.status,
            outcome_unknown=True,
        )
    return document


def retry_after_seconds(response: HttpResponse, *, now: float) -> float | None:
    """The wait the upstream asked for: ``Retry-After`` (seconds or HTTP date), else
    ``X-RateLimit-Reset`` (epoch seconds); ``None`` when neither is usable."""
    retry_after = response.headers.get("Retry-After", "").strip()
    if retry_after:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(retry_after).timestamp() - now)
        except (TypeError, ValueError, IndexError):
            pass
    reset = response.headers.get("X-RateLimit-Reset", "").strip()
    if reset:
        try:
            return max(0.0, float(reset) - now)
        except ValueError:
            return None
    return None


def oauth_error(
    response: HttpResponse, *, endpoint: str, now: float, secrets: Iterable[str | None] = ()
) -> UpstreamError:
    """The error an identity-provider response stands for (``{"error", "error_description"}``)."""
    secrets = tuple(secrets)
    code, description = _oauth_fields(response, secrets)
    error_type = _OAUTH_ERRORS.get(code or "")
    if error_type is None:
        error_type = _by_status(response.status)
    text = f"{endpoint}: HTTP {response.status}"
    if code:
        text += f" {code}"
    if description:
        text += f": {description}"
    advice = _ADVICE.get(error_type)
    if advice:
        text += f" ({advice})"
    return _build(error_type, scrub(text, secrets), response, endpoint, code, now)


def service_error(
    response: HttpResponse, *, endpoint: str, now: float, secrets: Iterable[str | None] = ()
) -> UpstreamError:
    """The error a service response stands for.

    The service's envelope is ``{"error": {"status", "message", "details" | "errors": [...],
    "reference", "source"}}``; 401 and 403 mean the bearer token is not accepted.
    """
    secrets = tuple(secrets)
    message, details, reference = _service_fields(response, secrets)
    if response.status in (401, 403):
        error_type: type[UpstreamError] = TokenRefusedError
    elif response.status == 500 and _DOCUMENTED_EXCHANGE_FAILURE.search(
        f"{message or ''} {details or ''}"
    ):
        error_type = ExchangeFailedError
    else:
        error_type = _by_status(response.status)
    text = f"{endpoint}: HTTP {response.status}"
    if message:
        text += f" {message}"
    if details:
        text += f": {details}"
    if reference:
        text += f" (reference {reference})"
    return _build(error_type, scrub(text, secrets), response, endpoint, None, now)


def _build(
    error_type: type[UpstreamError],
    message: str,
    response: HttpResponse,
    endpoint: str,
    code: str | None,
    now: float,
) -> UpstreamError:
    if issubclass(error_type, RateLimitedError | ServerError):
        return error_type(
            message,
            endpoint=endpoint,
            status=response.status,
            code=code,
            retry_after=retry_after_seconds(response, now=now),
            outcome_unknown=response.status in GATEWAY_STATUSES,
        )
    return error_type(message, endpoint=endpoint, status=response.status, code=code)


def _by_status(status: int) -> type[UpstreamError]:
    if status == 429:
        return RateLimitedError
    if status >= 500:
        return ServerError
    if 300 <= status < 400:
        return MalformedResponseError
    return RequestRejectedError


def _oauth_fields(
    response: HttpResponse, secrets: Sequence[str | None]
) -> tuple[str | None, str | None]:
    document = _lenient_json(response)
    if document is None:
        return None, _non_json_summary(response)
    code = document.get("error")
    description = document.get("error_description")
    return (
        _short(code, secrets) if isinstance(code, str) else None,
        _short(description, secrets) if isinstance(description, str) else None,
    )


def _service_fields(
    response: HttpResponse, secrets: Sequence[str | None]
) -> tuple[str | None, str | None, str | None]:
    document = _lenient_json(response)
    if document is None:
        return None, _non_json_summary(response), None
    error = document.get("error")
    if not isinstance(error, dict):
        return (_short(error, secrets) if isinstance(error, str) else None), None, None
    message = error.get("message")
    details = error.get("details")
    if not isinstance(details, str):
        listed = error.get("errors")
        if isinstance(listed, list):
            parts = [item.get("message") for item in listed if isinstance(item, dict)]
            details = "; ".join(part for part in parts if isinstance(part, str)) or None
        else:
            details = None
    reference = error.get("reference")
    return (
        _short(message, secrets) if isinstance(message, str) else None,
        _short(details, secrets) if isinstance(details, str) else None,
        _short(reference, secrets) if isinstance(reference, str) else None,
    )


def _lenient_json(response: HttpResponse) -> dict[str, Any] | None:
    try:
        document = json.loads(response.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def _non_json_summary(response: HttpResponse) -> str | None:
    """What a body that is not a JSON object is, never what it says."""
    if not response.body.strip():
        return None
    if _looks_like_html(response):
        return "an HTML page instead of JSON"
    return f"a non-JSON body ({response.content_type or 'no content type'})"


def _looks_like_html(response: HttpResponse) -> bool:
    head = response.body[:200].lstrip().lower()
    return response.content_type == "text/html" or head.startswith((b"<!doctype", b"<html"))


def _short(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` on one line, scrubbed of ``secrets`` and JWTs, then cut to ``_MAX_TEXT``
    characters: scrubbed first, so that a secret near the cut leaves no prefix behind.

    Only a head of the text is scrubbed (looking for JWTs in a whole 1 MB body can take
    minutes), one long enough that an echo cut at its end starts beyond what is shown: the
    head doubles until its scrubbed form is that long or it is the whole text."""
    text = " ".join(text.split())
    longest = max((len(secret) for secret in secrets if secret), default=0)
    needed = _MAX_TEXT + _MAX_ECHO_PER_CHARACTER * longest
    size = 2 * needed
    head = scrub(text[:size], secrets)
    while size < len(text) and len(head) < needed:
        size *= 2
        head = scrub(text[:size], secrets)
    return head if len(head) <= _MAX_TEXT else head[: _MAX_TEXT - 3] + "..."
