"""Keeping secrets out of messages: fingerprints and scrubbing."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

REDACTED = "[redacted]"
# A JWT (header.payload.signature, base64url), as upstream tokens are.
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*")
# The shortest value treated as a secret when scrubbing known values.
_MIN_SECRET_LENGTH = 8


def fingerprint(secret: str) -> str:
    """A short, stable, non-reversible identifier of a secret, safe to log."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()[:12]


def printable(text: str) -> str:
    """``text`` (from an upstream, say) safe to print on a terminal or log: control characters
    (escape sequences included) and bidirectional overrides become ``?``."""
    return "".join("?" if _unprintable(char) else char for char in text)


def _unprintable(char: str) -> bool:
    code = ord(char)
    return (
        code < 0x20 or 0x7F <= code < 0xA0 or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069
    )


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every given secret value and every JWT-shaped string replaced."""
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
    return _JWT.sub(REDACTED, text)
