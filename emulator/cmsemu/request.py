"""A parsed HTTP request and the ways endpoints read its body and headers."""

import json
from dataclasses import dataclass
from email.message import Message
from urllib.parse import parse_qs


@dataclass(frozen=True)
class Request:
    """What a handler needs from one HTTP request."""

    method: str
    path: str
    query: str
    headers: Message
    body: bytes
    client_ip: str

    def media_type(self) -> str:
        """The content type without parameters, lower-case."""
        return self.headers.get("Content-Type", "").split(";")[0].strip().lower()

    def json(self) -> object:
        """The body as JSON, or None if it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def form(self) -> dict[str, str]:
        """Form fields (first value of each); a JSON object body is accepted too, like Auth0."""
        if self.media_type() == "application/json":
            payload = self.json()
            if not isinstance(payload, dict):
                return {}
            return {k: v for k, v in payload.items() if isinstance(v, str)}
        return _first_values(self.body.decode("utf-8", "replace"))

    def query_params(self) -> dict[str, str]:
        """Query string parameters (first value of each)."""
        return _first_values(self.query)

    def bearer(self) -> str | None:
        """The bearer token of the Authorization header, if any."""
        scheme, _, token = self.headers.get("Authorization", "").strip().partition(" ")
        token = token.strip()
        return token if scheme.lower() == "bearer" and token else None


def _first_values(text: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}
