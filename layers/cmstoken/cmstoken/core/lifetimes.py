"""Token lifetimes: reading a JWT's claims (without verifying it) to learn when it expires."""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

# The longest lifetime believed of any access or service token: a longer one (an ``exp`` of
# 1e30, an ``expires_in`` of 10**12) is clamped to it, so the token is refreshed in time to
# keep the refresh family alive (its idle lifetime is 30 days) and every time stays printable.
MAX_TOKEN_LIFETIME_SECONDS = 7 * 86400
# The lifetime assumed for an access token whose answer states none (``expires_in`` is only
# RECOMMENDED, RFC 6749 section 5.1) and that is not a JWT with an ``exp``: short, so that a
# wrong guess costs an early refresh, never a token used after it expired.
ASSUMED_TOKEN_LIFETIME_SECONDS = 3600


def clamp_expiry(expires_at: float, now: float) -> float:
    """``expires_at`` kept within ``[now, now + MAX_TOKEN_LIFETIME_SECONDS]``."""
    return min(max(expires_at, now), now + MAX_TOKEN_LIFETIME_SECONDS)


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
    except (ValueError, UnicodeError, binascii.Error, RecursionError):
        return None
    return claims if isinstance(claims, dict) else None


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT in epoch seconds, or ``None`` when it has none or it is not a
    finite positive number (callers clamp it with ``clamp_expiry``)."""
    claims = unverified_claims(token)
    if claims is None:
        return None
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        value = float(exp)
    except OverflowError:  # an integer too large for a float
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return value
