"""Token lifetimes: reading a JWT's claims (without verifying it) to learn when it expires."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


def unverified_claims(token: str) -> dict[str, Any] | None:
    """The payload of a JWT, or ``None`` when ``token`` is not a well-formed JWT.

    The signature is not checked: the claims only tell us when to refresh, the upstream remains
    the judge of validity.
    """
    parts = token.split(".")
    if len(parts) != 3 or not parts[1]:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        return None
    return claims if isinstance(claims, dict) else None


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT in epoch seconds, or ``None`` when it has none."""
    claims = unverified_claims(token)
    if claims is None:
        return None
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float) or exp <= 0:
        return None
    return float(exp)
