"""The consumer helper: a workload reads the service token from Secrets Manager, caches it until
it expires, and asks the rotator for a new one when the API refuses it.

This folder, ``aws`` and ``core`` are what the ``cmstoken-consumer`` wheel ships. Imports
``aws`` and ``core`` only.
"""

from cmstoken.consumer.provider import (
    EXPIRED,
    NOT_BOOTSTRAPPED,
    REAUTHORIZATION_REQUIRED,
    REFRESH_DEBOUNCED,
    REFRESH_TIMEOUT,
    REQUEST_FAILED,
    SECRET_NOT_FOUND,
    STILL_REFUSED,
    UNAVAILABLE,
    UNREADABLE,
    ConsumerError,
    ServiceTokenAuth,
    ServiceTokenProvider,
)

__all__ = [
    "EXPIRED",
    "NOT_BOOTSTRAPPED",
    "REAUTHORIZATION_REQUIRED",
    "REFRESH_DEBOUNCED",
    "REFRESH_TIMEOUT",
    "REQUEST_FAILED",
    "SECRET_NOT_FOUND",
    "STILL_REFUSED",
    "UNAVAILABLE",
    "UNREADABLE",
    "ConsumerError",
    "ServiceTokenAuth",
    "ServiceTokenProvider",
]
