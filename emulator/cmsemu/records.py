"""The request log: one record per request, with credentials reduced to fingerprints."""

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """What the emulator saw and answered (status None: the response was dropped)."""

    endpoint: str
    method: str
    path: str
    status: int | None
    at: float
    grant_type: str | None
    error: str | None
    credential: str | None


def fingerprint(value: str | None) -> str | None:
    """Return a short sha256 fingerprint of a credential (never the value itself)."""
    if value is None:
        return None
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:12]
