"""Responses and the error bodies of the identity provider (OAuth) and the service (envelope)."""

import html
import json
import secrets
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Literal

Style = Literal["oauth", "service", "html"]


@dataclass
class Response:
    """An HTTP response; `error` is the OAuth or service error code for the request log;
    `trickle` (interval, chunk) sends the body slowly."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    # Send the body `chunk` bytes at a time, `interval` seconds apart (a "trickle" fault).
    trickle: tuple[float, int] | None = None


class OAuthError(Exception):
    """An identity provider error, answered as {"error", "error_description"}."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.description = description

    def response(self) -> Response:
        """Return the JSON error response."""
        return oauth_error(self.status, self.error, self.description)


def json_response(status: int, payload: object, error: str | None = None) -> Response:
    """Return `payload` as a JSON response."""
    return Response(status, json.dumps(payload).encode("utf-8"), error=error)


def oauth_error(status: int, error: str, description: str) -> Response:
    """Return an Auth0-style error response."""
    body = {"error": error, "error_description": description}
    return json_response(status, body, error=error)


def service_error(status: int, details: str, style: str) -> Response:
    """Return the service's error envelope ("details" or newer "errors" style)."""
    envelope: dict[str, object] = {
        "status": status,
        "message": HTTPStatus(status).phrase,
        "reference": f"upmrid/{secrets.token_hex(8)}",
        "source": "API",
    }
    if style == "errors":
        envelope["errors"] = [{"message": details}]
    else:
        envelope["details"] = details
    return json_response(status, {"error": envelope}, error=details)


def html_page(status: int, title: str, inner_html: str) -> Response:
    """Return an HTML page; `inner_html` must already be escaped."""
    page = (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title, quote=False)}</title></head>\n"
        f"<body><h1>{html.escape(title, quote=False)}</h1>\n{inner_html}\n</body></html>\n"
    )
    return Response(status, page.encode("utf-8"), content_type="text/html; charset=utf-8")


def styled_error(
    style: Style, status: int, error: str, description: str, service_style: str
) -> Response:
    """Return an error in the style of the endpoint that answers it."""
    if style == "oauth":
        return oauth_error(status, error, description)
    if style == "html":
        return html_page(status, HTTPStatus(status).phrase, f"<p>{html.escape(description)}</p>")
    return service_error(status, description, service_style)
