"""Reading the secret where it is best read (``regions``): the replica in the caller's region,
and the primary as well when the replica cannot be read or is stale (``staleness``).

- A replica read that fails: the primary is read and served instead.
- A stale replica (expired or expiring within ``min_validity_seconds``, holding the refused
  token, or older than a document already read): the primary is read too and the fresher of
  the two served (``preferred``), so an expired token is never served while the primary holds a
  valid one, and a wait for a token other than a refused one reads the primary too at every
  poll that finds the refused token in the replica.
  When the primary's is fresher the replica is *behind* (replication to its region failed or
  has not caught up yet): that is logged as a warning, with how far behind.

After a failed read, or one behind, the replica is left alone (the primary alone is read) for
``REPLICA_RETRY_SECONDS``; a stale replica that holds what the primary holds is not (the token
itself is old, or refused, everywhere). When the primary cannot be read either, a stale
replica's token is served, with a warning, while it is still valid; an expired one raises one
``ConsumerError`` line that names the replica's region, why it is stale, and the primary's
error, with the primary's ``reason``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.consumer.errors import ConsumerError
from cmstoken.consumer.regions import REPLICA_RETRY_SECONDS, Target, Targets
from cmstoken.consumer.staleness import Need, behind, lag, preferred, stale_because
from cmstoken.core.clock import Clock
from cmstoken.core.redaction import fingerprint

logger = logging.getLogger(__name__)


class ReadSettings(Protocol):
    """What the reads use of their provider at each use (a workload may change them)."""

    clock: Clock
    min_validity_seconds: float


class RegionalReads:
    """The reads of one provider: ``targets`` gives where (decided on first use), ``read_at``
    reads one place. Keeps the newest ``issued_at`` read. Thread-safe."""

    def __init__(
        self,
        settings: ReadSettings,
        targets: Callable[[], Targets],
        read_at: Callable[[Target], ServiceTokenDocument],
    ) -> None:
        self._settings = settings
        self._targets = targets
        self._read_at = read_at
        self._newest: float | None = None
        self._lock = threading.Lock()  # the newest issued_at

    def read(self, refused: str | None = None) -> ServiceTokenDocument:
        """The document to use now, read now (no cache): ``refused`` is a token the service
        refused, which a replica's document may not hold; ``ConsumerError`` when there is
        none."""
        targets = self._targets()
        replica = targets.replica_to_read()
        if replica is not None:
            try:
                document = self._read_at(replica)
            except ConsumerError as exc:
                targets.rest_replica()
                logger.warning(
                    "could not read the service token's replica in %s; reading the primary",
                    replica.region,
                    extra={"reason": exc.reason, "error": str(exc)},
                )
            else:
                why = stale_because(document, self._need(refused))
                if why is not None:
                    document = self._against_primary(document, why, replica, targets)
                return self._seen(document)
        return self._seen(self._read_at(targets.primary))

    def _need(self, refused: str | None) -> Need:
        with self._lock:
            newest = self._newest
        settings = self._settings
        return Need(settings.clock.now(), settings.min_validity_seconds, refused, newest)

    def _seen(self, document: ServiceTokenDocument) -> ServiceTokenDocument:
        with self._lock:
            if self._newest is None or document.issued_at > self._newest:
                self._newest = document.issued_at
        return document

    def _against_primary(
        self, document: ServiceTokenDocument, why: str, replica: Target, targets: Targets
    ) -> ServiceTokenDocument:
        """The stale replica's ``document`` or the primary's, whichever is fresher."""
        primary = targets.primary
        try:
            current = self._read_at(primary)
        except ConsumerError as exc:
            if self._settings.clock.now() >= document.expires_at:
                raise ConsumerError(
                    f"the service token's replica in {replica.region} is stale ({why}) and "
                    f"the primary in {primary.region} could not be read either: {exc}",
                    reason=exc.reason,
                ) from exc
            logger.warning(
                "the service token's replica in %s is stale (%s) and the primary could not be "
                "read; serving the replica's token while it is valid",
                replica.region,
                why,
                extra={"reason": exc.reason, "error": str(exc)},
            )
            return document
        now = self._settings.clock.now()
        if behind(document, current, now):
            targets.rest_replica()
            logger.warning(
                "the service token's replica in %s is behind the primary: %s, and the "
                "primary's token was issued %s later; serving the primary's and reading it "
                "alone for %.0f s (replication to %s may have failed: see its ReplicationStatus)",
                replica.region,
                why,
                lag(current.issued_at - document.issued_at),
                REPLICA_RETRY_SECONDS,
                replica.region,
                extra={
                    "replica": fingerprint(document.token),
                    "primary": fingerprint(current.token),
                },
            )
        return preferred(document, current, now)
