"""Minimal HS256 JSON Web Tokens (enough to mint and check the emulator's own tokens)."""

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

_HEADER = {"alg": "HS256", "typ": "JWT"}


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(signing_input: str, key: bytes) -> bytes:
    return hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()


def _segment(value: Mapping[str, object]) -> str:
    return _b64encode(json.dumps(value, separators=(",", ":")).encode("utf-8"))


def encode(claims: Mapping[str, object], key: bytes) -> str:
    """Return a compact HS256 JWT carrying `claims`."""
    signing_input = f"{_segment(_HEADER)}.{_segment(claims)}"
    return f"{signing_input}.{_b64encode(_sign(signing_input, key))}"


def decode(token: str, key: bytes) -> dict[str, Any] | None:
    """Return the claims of a JWT signed with `key`, or None if it is not one."""
    parts = token.split(".")
    if len(parts) != 3 or not token.isascii():
        return None
    signing_input = f"{parts[0]}.{parts[1]}"
    expected = _b64encode(_sign(signing_input, key)).encode("ascii")
    if not hmac.compare_digest(expected, parts[2].encode("ascii")):
        return None
    try:
        header = json.loads(_b64decode(parts[0]))
        claims = json.loads(_b64decode(parts[1]))
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        return None
    return claims if isinstance(claims, dict) else None
