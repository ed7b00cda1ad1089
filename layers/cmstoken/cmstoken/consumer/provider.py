"""``ServiceTokenProvider``: the published service token in any AWS workload, for ``requests``
through ``ServiceTokenAuth`` (``auth``).

``ServiceTokenProvider`` reads the service token secret (``GetSecretValue``) and caches the
document for ``max_age_seconds``, never until its token is about to expire; when Secrets Manager
cannot be read then, the cached token is served (with back-off between reads) until it expires.
Every wait is shortened by a random share (``spread``), so that a fleet's reads and refresh
requests do not meet in the same second. ``ServiceTokenAuth`` sets the
bearer header of ``requests`` calls:

- on 401 (``refused``) the secret is re-read, after a random part of
  ``refused_spread_seconds``; a different token there is used at once;
  otherwise the helper asks the rotator for a new one with a ``Service Token Refresh
  Requested`` event (on ``event_bus``: the default bus, or the stack's bus by ARN from another
  account) and waits for it. Every thread refused with the same
  token shares that one request and that one wait, and gets its outcome when it ends. When the
  rotator would skip the request (the stack refreshed within its
  ``MIN_REFRESH_INTERVAL_SECONDS``, which the published document carries), the helper says so
  at once instead of asking and waiting;
- on 403 (``replacement``) the secret is re-read and the call retried only when the token
  there changed: a 403 also means "this token may not do that", and no refresh changes that.

``new_resource`` asks for a rotated token right after the workload created a resource it will
use (the API's rule), with the same debounce. The call is retried once.

A full ARN is read in its own region, or in the caller's region when ``replica_regions`` lists
it (the replica there; ``regions``), and then in its own region as well when the replica's
token has expired, is the refused one or is older than one already read (``fallback``); a name
is read in the caller's region and account only.

Secrets Manager answers ``ResourceNotFoundException`` both for a secret that does not exist
where the client asked (a mistyped ARN, another region or account) and for the empty secret of
a stack that is not bootstrapped yet; on that answer (never on the hot path) the helper asks
``DescribeSecret`` (the stack's ConsumerPolicy grants it), which tells the two apart:
``secret_not_found`` names the secret, region and account asked, ``not_bootstrapped`` is the
existing secret with no value; ``access_denied`` (the policies) and ``cannot_decrypt`` (the
KMS key) say which refused. A refresh request that EventBridge refuses (``FailedEntryCount``
in a successful answer) is a ``request_failed`` error naming the entry's error.

boto3 is imported on first use only, in a session of the provider's own; messages and logs carry
fingerprints, never a token.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from cmstoken.aws.documents import STATUS_ACTIVE, ServiceTokenDocument
from cmstoken.consumer.cache import TokenCache
from cmstoken.consumer.connections import Connections
from cmstoken.consumer.errors import (
    REFRESH_DEBOUNCED,
    REFRESH_TIMEOUT,
    ROTATOR_HINT,
    STILL_REFUSED,
    ConsumerError,
    require_active,
)
from cmstoken.consumer.fallback import RegionalReads
from cmstoken.consumer.refresh import RefreshRequests
from cmstoken.consumer.regions import checked_regions
from cmstoken.consumer.spread import Fraction, refused_delay
from cmstoken.consumer.waits import SharedWaits, wait_for_other_than
from cmstoken.core.clock import Clock, SystemClock, optional_iso
from cmstoken.core.errors import ConfigurationError
from cmstoken.core.redaction import fingerprint
from cmstoken.core.triggers import CONSUMER_SOURCE

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_secretsmanager import SecretsManagerClient


logger = logging.getLogger(__name__)

# The rotator's MIN_REFRESH_INTERVAL_SECONDS (SPEC default) when the published document does not
# carry it (written by an older stack).
DEFAULT_MIN_REFRESH_INTERVAL_SECONDS = 600
# new_resource keeps the current token (with a warning) after these outcomes.
_NO_ROTATION = frozenset({REFRESH_DEBOUNCED, REFRESH_TIMEOUT, STILL_REFUSED})


class ServiceTokenProvider:
    """The published service token of one stack, read from ``secret_id`` (name or ARN; the
    full ARN from another account or region).

    Thread-safe; make one per process and reuse it (in Lambda: at module level). Its AWS
    clients come from a boto3 session of its own, created once, on first use; a
    ``secrets_client`` given is used for every read, in its own region.

    ``replica_regions`` (the stack's ``ServiceTokenReplicaRegions``) are the regions with a
    replica: in one of them the replica is read, the primary only when that read fails or the
    replica is stale (expired, refused, or older than a token already read: ``fallback``).
    ``event_bus`` (name or ARN; the stack's ``RefreshRequestBusArn`` from another account)
    receives the refresh requests; ``None`` is the default bus of the caller's account and region.
    ``min_refresh_interval_seconds`` is used only when the published document does not carry
    the stack's ``MIN_REFRESH_INTERVAL_SECONDS`` (stacks older than this helper).

    A fleet (``spread``): a token read is kept at most ``max_age_seconds`` (``None``: until
    shortly before it expires), so a new one is picked up within that time of its publication;
    a refused token is re-read after a random part of ``refused_spread_seconds``; each of these
    waits, and the polls of a refresh wait, are shortened by a share of ``random_fraction()``
    (a number in [0, 1); ``random.random`` unless given).
    """

    def __init__(
        self,
        secret_id: str,
        *,
        secrets_client: SecretsManagerClient | None = None,
        events_client: EventBridgeClient | None = None,
        clock: Clock | None = None,
        min_validity_seconds: float = 60,
        refresh_wait_seconds: float = 60,
        poll_interval_seconds: float = 5,
        min_refresh_interval_seconds: float = DEFAULT_MIN_REFRESH_INTERVAL_SECONDS,
        event_source: str = CONSUMER_SOURCE,
        replica_regions: Iterable[str] = (),
        event_bus: str | None = None,
        max_age_seconds: float | None = 900,
        refused_spread_seconds: float = 10,
        random_fraction: Fraction | None = None,
    ) -> None:
        if not secret_id:
            raise ConfigurationError("secret_id must name the service token secret")
        _require_non_negative(
            min_validity_seconds=min_validity_seconds,
            refresh_wait_seconds=refresh_wait_seconds,
            min_refresh_interval_seconds=min_refresh_interval_seconds,
            refused_spread_seconds=refused_spread_seconds,
        )
        if poll_interval_seconds <= 0:
            raise ConfigurationError("poll_interval_seconds must be positive")
        if max_age_seconds is not None and max_age_seconds <= 0:
            raise ConfigurationError("max_age_seconds must be positive (or None: no bound)")
        self.secret_id = secret_id
        self.clock: Clock = clock or SystemClock()
        self.min_validity_seconds = min_validity_seconds
        self.refresh_wait_seconds = refresh_wait_seconds
        self.poll_interval_seconds = poll_interval_seconds
        self.min_refresh_interval_seconds = min_refresh_interval_seconds
        self.max_age_seconds = max_age_seconds
        self.refused_spread_seconds = refused_spread_seconds
        self.random_fraction: Fraction = random_fraction or random.random
        self.event_source = event_source
        self.replica_regions = checked_regions(secret_id, replica_regions)
        self.event_bus = event_bus or None
        self._connections = Connections(
            secret_id,
            self.replica_regions,
            self.event_bus,
            self.clock,
            secrets_client=secrets_client,
            events_client=events_client,
        )
        self._reads = RegionalReads(self, self._connections.targets, self._connections.read_at)
        self._cache = TokenCache(self, self._read)
        self._waits = SharedWaits()
        self._requests = RefreshRequests(self)

    # --- AWS clients, created once, on first use, from a session of the provider's own ----

    @property
    def secrets_client(self) -> SecretsManagerClient:
        """The Secrets Manager client of the first place read (honours ``AWS_ENDPOINT_URL``)."""
        return self._connections.secrets_client

    @property
    def events_client(self) -> EventBridgeClient:
        """The EventBridge client, in the bus ARN's region (honours ``AWS_ENDPOINT_URL``)."""
        return self._connections.events_client

    def _read(self, refused: str | None = None) -> ServiceTokenDocument:
        """The secret's document, read now (no cache): the replica in this region first when
        there is one, the primary when that fails or is stale (``fallback``; ``refused``: a
        token the service refused); ``ConsumerError`` when there is none."""
        return self._reads.read(refused)

    # --- the token --------------------------------------------------------------------------

    def token(self) -> str:
        """The service token, from the cache (at most ``max_age_seconds``, and while it has more
        than ``min_validity_seconds`` left)."""
        return self.document().token

    @property
    def api_url(self) -> str:
        """The management API's address (``{base_url}/api``), for ``f"{api_url}/v3/projects"``."""
        return self.document().api_url

    def document(self) -> ServiceTokenDocument:
        """The published document, cached for at most ``max_age_seconds``, never within
        ``min_validity_seconds`` of its expiry (both shortened by a random share).

        After that one thread re-reads the secret while the others keep the cached token; when
        the read fails the cached token is served until it expires (reads back off meanwhile).
        """
        return self._cache.document()

    def refused(self, token: str) -> str:
        """A replacement for ``token``, which the service answered with 401.

        Re-reads the secret, after a random part of ``refused_spread_seconds`` (so that a
        fleet refused at once does not read and request in the same second); a different
        token there is returned at once. Otherwise requests
        a refresh and waits up to ``refresh_wait_seconds`` for the rotated token: one request
        and one wait per token, shared by every thread refused with it. Raises
        ``ConsumerError`` when none comes, at once when none can come yet
        (``refresh_debounced``: the stack refreshed within its minimum interval;
        ``still_refused``: this token's refresh was already requested and none came).
        """
        other = self._cache.other_than(token)
        if other is not None:
            return other  # another thread already replaced it
        return self._waits.run(token, lambda: self._replace(token, "refused", None)).token

    def replacement(self, token: str) -> str | None:
        """For a 403: the published token when it is no longer ``token``, else ``None``.

        Re-reads the secret (at most every ``FORBIDDEN_RECHECK_SECONDS``) and never requests a
        refresh: a 403 can also mean that the token may not do what was asked.
        """
        return self._cache.recheck(token)

    def new_resource(self) -> str:
        """Ask for a rotated token right after creating a resource to access (service-api.md 5,
        "Refreshing", rule 1): call it then, never on every call.

        Returns the rotated token, or, with a warning, the current one (still valid) when none
        comes within ``refresh_wait_seconds``, or none can come: at once when the stack
        refreshed within its minimum interval (the rotator would skip the request), when the
        current token's refresh was already requested, or when reauthorization is required
        (no request is sent then).
        """
        current = self._read()
        if current.credential_status != STATUS_ACTIVE:
            return self._cache.remember(current).token
        try:
            return self._waits.run(
                current.token, lambda: self._replace(current.token, "new_resource", current)
            ).token
        except ConsumerError as exc:
            if exc.reason not in _NO_ROTATION:
                raise
            logger.warning(
                "no rotated service token for the new resource; using the current one: %s",
                exc,
                extra={"reason": exc.reason, "retry_at": optional_iso(exc.retry_at)},
            )
        return self._cache.remember(current).token

    # --- replacing a refused token ----------------------------------------------------------

    def _replace(
        self, token: str, reason: str, current: ServiceTokenDocument | None
    ) -> ServiceTokenDocument:
        """Re-read (unless ``current`` was just read), then request a refresh and wait."""
        if current is None:
            delay = refused_delay(self.refused_spread_seconds, self.random_fraction)
            if delay > 0:
                self.clock.sleep(delay)
            current = self._read(token)
        if current.token != token:
            logger.info(
                "refused service token replaced by the published one",
                extra={"refused": fingerprint(token), "current": fingerprint(current.token)},
            )
            return self._cache.remember(current)
        require_active(current)
        interval = self._interval(current)
        self._requests.check(current, interval)
        requested_at = self._requests.send(current, reason)
        rotated = wait_for_other_than(
            token,
            partial(self._read, token),
            clock=self.clock,
            seconds=self.refresh_wait_seconds,
            poll_interval=self.poll_interval_seconds,
            fraction=self.random_fraction,
        )
        if rotated is None:
            raise ConsumerError(
                f"the service refused the service token {fingerprint(token)} and no new "
                f"one was published within {self.refresh_wait_seconds:.0f} s of the "
                f"refresh request; {ROTATOR_HINT}",
                reason=REFRESH_TIMEOUT,
                retry_at=requested_at + interval,
            )
        return self._cache.remember(rotated)

    def _interval(self, document: ServiceTokenDocument) -> float:
        """The stack's minimum interval between forced refreshes."""
        if document.min_refresh_interval_seconds is not None:
            return float(document.min_refresh_interval_seconds)
        return self.min_refresh_interval_seconds


def _require_non_negative(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ConfigurationError(f"{name} must not be negative")
