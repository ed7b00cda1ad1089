"""Keeping secrets out of messages: fingerprints and scrubbing."""

from __future__ import annotations

import hashlib
import re
import unicodedata
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


def displayable(text: str) -> bool:
    """True when ``text`` holds no control character, no invisible formatting character
    (bidirectional controls, zero-width characters) and no whitespace: a value shown on its
    own, such as a user code or an address, then prints as exactly what it is."""
    return not any(
        _unprintable(char) or char.isspace() or unicodedata.category(char) in _HIDDEN
        for char in text
    )


# Unicode categories that print as nothing, or as something else: controls, formatting
# characters (bidirectional marks and overrides, zero-width ones), separators, surrogates,
# private use.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Zs", "Zl", "Zp"})


def _unprintable(char: str) -> bool:
    code = ord(char)
    return (
        code < 0x20 or 0x7F <= code < 0xA0 or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069
    )


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with every given secret value and every JWT-shaped string replaced.

    A secret is found plain and percent-encoded (as a form body echoed back carries it:
    ``quote`` or ``quote_plus``, hex digits in either case, ``+`` for a space), each character
    either way. Scrub before shortening a text: a cut secret is no longer found."""
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET_LENGTH:
            text = _echoes(secret).sub(REDACTED, text)
    return _JWT.sub(REDACTED, text)


def _echoes(secret: str) -> re.Pattern[str]:
    """A pattern matching ``secret`` with each character as is or percent-encoded."""
    return re.compile("".join(_character(char) for char in secret))


def _character(char: str) -> str:
    """A pattern of one character: itself, its UTF-8 bytes as ``%HH`` (any case), and ``+``
    for a space."""
    forms = [re.escape(char), "".join(map(_percent, char.encode("utf-8", "surrogatepass")))]
    if char == " ":
        forms.append(r"\+")
    return "(?:" + "|".join(forms) + ")"


def _percent(byte: int) -> str:
    return "%" + "".join(f"[{d}{d.lower()}]" if d.isalpha() else d for d in f"{byte:02X}")
