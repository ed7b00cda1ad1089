"""The cached document: served for ``max_age_seconds`` and at most until shortly before it expires,
each bound shortened by a random share (``spread``). After that one thread re-reads the secret
while the others keep the cached token; when the read fails the cached token is served until it
expires (reads back off meanwhile). A 403 re-reads it at most every
``FORBIDDEN_RECHECK_SECONDS``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from cmstoken.aws.documents import STATUS_ACTIVE, ServiceTokenDocument
from cmstoken.consumer.errors import BOOTSTRAP_HINT, ConsumerError, expired
from cmstoken.consumer.spread import Fraction, fresh_until, near_expiry_recheck
from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.redaction import fingerprint

logger = logging.getLogger(__name__)

# When a read fails while the cached token is still valid, the cached token is served and the
# next read waits 1, 2, 4... seconds (at most this long), never past the token's expiry.
READ_RETRY_BASE_SECONDS = 1.0
READ_RETRY_MAX_SECONDS = 30.0
# A 403 re-reads the secret at most this often.
FORBIDDEN_RECHECK_SECONDS = 5.0


class CacheSettings(Protocol):
    """What the cache reads of its provider at each use (a workload may change them)."""

    clock: Clock
    min_validity_seconds: float
    max_age_seconds: float | None
    random_fraction: Fraction


@dataclass(frozen=True)
class _Entry:
    """The cached document: served until ``fresh_until``; ``read_at`` is the last successful
    read, ``failures`` the failed reads since then."""

    document: ServiceTokenDocument
    fresh_until: float
    read_at: float
    failures: int = 0


class TokenCache:
    """The cached document of one provider, which ``read`` reads from the secret (given a token
    the service refused, which the document read may then not hold). Thread-safe."""

    def __init__(
        self, settings: CacheSettings, read: Callable[[str | None], ServiceTokenDocument]
    ) -> None:
        self._settings = settings
        self._read = read
        self._entry: _Entry | None = None
        self._lock = threading.Lock()  # the entry
        self._read_lock = threading.Lock()  # one cache read at a time

    def other_than(self, token: str) -> str | None:
        """The cached token when it is still valid and not ``token`` (another thread replaced
        ``token`` already), else ``None``."""
        entry = self._entry
        if (
            entry is not None
            and entry.document.token != token
            and self._settings.clock.now() < entry.document.expires_at
        ):
            return entry.document.token
        return None

    def document(self) -> ServiceTokenDocument:
        """The cached document while it is fresh, else the one read now (see the module)."""
        clock = self._settings.clock
        entry = self._entry
        if entry is not None and clock.now() < entry.fresh_until:
            return entry.document
        if entry is not None and clock.now() < entry.document.expires_at:
            if not self._read_lock.acquire(blocking=False):
                return entry.document  # another thread is reading; this token still works
        else:
            self._read_lock.acquire()
        try:
            entry = self._entry
            if entry is not None and clock.now() < entry.fresh_until:
                return entry.document
            try:
                document = self._read(None)
            except ConsumerError as exc:
                if entry is None or clock.now() >= entry.document.expires_at:
                    raise
                return self._serve_cached(entry, exc)
            return self.remember(document)
        finally:
            self._read_lock.release()

    def remember(self, document: ServiceTokenDocument) -> ServiceTokenDocument:
        """Cache a usable document; ``ConsumerError`` when its token has expired."""
        now = self._settings.clock.now()
        if now >= document.expires_at:
            raise expired(document)
        settings = self._settings
        fresh = fresh_until(
            now,
            document.expires_at,
            max_age=settings.max_age_seconds,
            min_validity=settings.min_validity_seconds,
            fraction=settings.random_fraction,
        )
        if now >= fresh:
            logger.warning(
                "the published service token expires soon and no fresher one is published",
                extra={"expires_at": to_iso(document.expires_at)},
            )
            fresh = near_expiry_recheck(now, document.expires_at, settings.random_fraction)
        if document.credential_status != STATUS_ACTIVE:
            logger.warning(
                "the stack's refresh credential needs reauthorization: the service token works "
                "until it expires; %s",
                BOOTSTRAP_HINT,
                extra={"expires_at": to_iso(document.expires_at)},
            )
        with self._lock:
            self._entry = _Entry(document, fresh, now)
        return document

    def recheck(self, token: str) -> str | None:
        """For a 403: the published token when it is no longer ``token``, else ``None``.
        Re-reads the secret unless it was read within ``FORBIDDEN_RECHECK_SECONDS``."""
        other = self.other_than(token)
        if other is not None:
            return other
        with self._read_lock:
            entry = self._entry
            now = self._settings.clock.now()
            if entry is not None and now < entry.document.expires_at:
                if entry.document.token != token:
                    return entry.document.token
                if now - entry.read_at < FORBIDDEN_RECHECK_SECONDS:
                    return None
            try:
                current = self.remember(self._read(token))
            except ConsumerError as exc:
                logger.warning(
                    "could not re-read the service token secret after a 403",
                    extra={"reason": exc.reason, "error": str(exc)},
                )
                return None
        if current.token == token:
            return None
        logger.info(
            "service token replaced by the published one after a 403",
            extra={"refused": fingerprint(token), "current": fingerprint(current.token)},
        )
        return current.token

    def _serve_cached(self, entry: _Entry, error: ConsumerError) -> ServiceTokenDocument:
        """The cached document after a failed read (it is still valid): the next read backs
        off, never past its expiry."""
        failures = entry.failures + 1
        now = self._settings.clock.now()
        delay = min(READ_RETRY_BASE_SECONDS * 2 ** (failures - 1), READ_RETRY_MAX_SECONDS)
        expires_at = entry.document.expires_at
        with self._lock:
            if self._entry is entry:
                self._entry = replace(
                    entry, fresh_until=min(now + delay, expires_at), failures=failures
                )
        logger.warning(
            "could not read the service token secret; using the cached token, valid until %s",
            to_iso(expires_at),
            extra={"reason": error.reason, "error": str(error), "retry_in_seconds": delay},
        )
        return entry.document
