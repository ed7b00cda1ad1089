"""The consumer helper: a workload reads the service token from Secrets Manager, caches it until
it expires, and asks the rotator for a new one when the API refuses it.

``provider`` holds ``ServiceTokenProvider``, which puts together the cache (``cache``), its AWS
clients (``connections``), the reading of the secret (``reading``), how its waits are spread
across a fleet (``spread``), the shared waits for a token other than a refused one
(``waits``), the refresh requests (``refresh``), where to read (``regions``: the
replica in the caller's region, or the primary) and reading there (``fallback``: the primary
as well when the replica fails or is stale, which ``staleness`` decides); ``check`` is
``cmstoken-admin check-consumer``'s checks; ``auth`` is the ``requests`` adapter
(``ServiceTokenAuth``); ``errors`` holds ``ConsumerError`` and its reasons. The AWS calls are
the ``aws`` layer's (boto3 only there).

This folder, ``aws`` and ``core`` are what the ``cmstoken-consumer`` wheel ships. Imports
``aws`` and ``core`` only (and ``requests``, for ``auth``).
"""

from cmstoken.consumer.auth import ServiceTokenAuth
from cmstoken.consumer.errors import (
    ACCESS_DENIED,
    CANNOT_DECRYPT,
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
)
from cmstoken.consumer.provider import ServiceTokenProvider

__all__ = [
    "ACCESS_DENIED",
    "CANNOT_DECRYPT",
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
