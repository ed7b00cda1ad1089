"""Rotation: keep a fresh, verified service token published without ever losing the credential.

One run, in order (SPEC section 4):

1. Read the published service token document. Not due (fresh, or a forced run within the
   debounce interval): stop here, one AWS call, no upstream call.
2. Read the refresh credential. Not bootstrapped: fail. Reauthorization required: report it
   without calling the identity provider.
3. If the newest refresh already produced a raw access token that was never published (a crash or
   a failed exchange after the refresh was stored), exchange that one: no refresh is spent.
4. Otherwise check that enough of the invocation is left, claim the credential (a lease written
   as the version that replaces the one read, so a second writer that read the same version is
   refused), refresh, and store the rotated refresh token and the raw access token before
   anything else, retrying every failure of that write until just before the deadline (if it
   still fails: a CRITICAL log, the ``CredentialLost`` metric, the lease released). Any 2xx
   answer holding a refresh token is stored, however sloppy the rest of it; only then is the
   rest judged. The refresh gets its whole time limit (a slow answer is waited for), room for
   one more whole call, and the time to store its answer (``write_reserve``, sized from the
   Secrets Manager client's limits): after an answer that can no longer arrive the same token
   is presented again at once, once (``refreshing``). A refresh that fails gives its lease back
   and records the failed attempt (``core.refresh_backoff``); a stored answer records it with
   the store, in case no token is published, and its lease lapses by itself.
5. Exchange, verify with a project listing, and only then publish the new service token.

A lease of another invocation over the stored token (``decisions.lease_verdict``) is taken over
when that invocation cannot still be running (reserved concurrency 1), and otherwise fails the
run so that Lambda retries it: no run returns success while the credential may hold a token
that a run of ours spent.

``invalid_grant`` / ``invalid_client`` re-read the credential first: a changed refresh token
means another writer won a race (the run starts over); an unchanged one is marked
``reauthorization_required``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from cmstoken.aws.documents import (
    STATUS_REAUTHORIZATION_REQUIRED,
    RawAccessToken,
    RefreshCredential,
    ServiceTokenDocument,
)
from cmstoken.aws.notifications import Notifier
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import Check, CredentialVault, Snapshot
from cmstoken.core import refresh_backoff
from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.errors import (
    CredentialRejectedError,
    InsufficientTimeError,
    LeaseHeldError,
    MalformedResponseError,
    NotBootstrappedError,
    ReauthorizationRequiredError,
    RefreshBackoffError,
    RotationError,
    VersionConflictError,
    VersionQuotaError,
)
from cmstoken.core.redaction import fingerprint
from cmstoken.core.retry import RetryPolicy
from cmstoken.core.settings import Settings
from cmstoken.core.triggers import RotationRequest
from cmstoken.core.version_budget import PER_REFRESH, Writer
from cmstoken.rotation import decisions
from cmstoken.rotation.decisions import LeaseVerdict, RotationResult
from cmstoken.rotation.publishing import Publisher
from cmstoken.rotation.reauthorization import Reauthorization
from cmstoken.rotation.refreshing import LOST_RESERVE_SECONDS, RaceLostError, Refresher
from cmstoken.upstream.service import ServiceClient

if TYPE_CHECKING:
    from cmstoken.upstream.models import TokenAnswer

logger = logging.getLogger(__name__)

# Secrets Manager calls that storing a refresh's answer may take in the worst case: the write,
# and after another writer came first, the re-read and the merged write.
WRITE_CALLS = 3
# Whole refresh calls a run keeps time for: the first, and the same token presented again
# after an answer that can no longer arrive.
PRESENTATIONS = 2
# How often one run starts over after losing a race to another writer.
MAX_RACES = 3


class Rotator:
    """Runs rotations for one stack. ``owner`` identifies this invocation in leases.

    It reads the documents, applies ``decisions`` to what it read, and makes the calls and
    writes they lead to: the refresh and its storage (``Refresher``), the publication
    (``Publisher``), the marking of a refused credential (``Reauthorization``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: SecretStore,
        service: ServiceClient,
        clock: Clock,
        owner: str,
        upstream_retry: RetryPolicy | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.service = service
        self.clock = clock
        self.owner = owner
        self.vault = CredentialVault(settings, store, clock, whole_calls=True)
        self.publisher = Publisher(
            service,
            self.vault,
            clock,
            verify=settings.verify_service_token,
            retry=upstream_retry,
            notifier=notifier,
        )
        self.refresher = Refresher(self.publisher, self.vault, clock, owner=owner)
        self.reauthorization = Reauthorization(self.vault, notifier, owner=owner)
        self.credential: RefreshCredential | None = None

    @property
    def write_reserve(self) -> float:
        """Seconds kept after a refresh for storing its answer: ``WRITE_CALLS`` Secrets Manager
        calls at their longest (``StoreTimeouts``), and the reserve for reporting a loss."""
        return LOST_RESERVE_SECONDS + WRITE_CALLS * self.vault.store.timeouts.attempt_limit

    @property
    def refresh_guard(self) -> float:
        """No refresh starts with less than this left: the claim (one Secrets Manager call),
        the refresh's whole time limit twice (a slow answer is waited for, never cut short;
        a lost one is presented again at once) and the write reserve."""
        return (
            self.vault.store.timeouts.attempt_limit
            + PRESENTATIONS * self.service.transport.timeouts.total
            + self.write_reserve
        )

    @property
    def published(self) -> ServiceTokenDocument | None:
        """The service token document this run last read or wrote."""
        return self.vault.published

    def run(self, request: RotationRequest, *, deadline: float) -> RotationResult:
        """One rotator run; returns the result or raises (see the module docstring)."""
        for _ in range(MAX_RACES):
            published = self.vault.read_published(deadline)
            due = decisions.due(
                published,
                forced=request.forced,
                now=self.clock.now(),
                margin=self.settings.refresh_margin_seconds,
                min_interval=self.settings.min_refresh_interval_seconds,
            )
            if due.skipped:
                return self._skip(due.reason, published)
            snapshot = self.vault.read_refresh(deadline)
            try:
                return self._rotate(request, due.reason, snapshot, deadline)
            except RaceLostError:
                logger.info("credential changed by another writer; deciding again")
        raise RotationError(
            "the refresh credential kept changing while this run worked; another writer is "
            "active (a bootstrap, or a rotator without reserved concurrency); retry later"
        )

    def _rotate(
        self, request: RotationRequest, due: str, snapshot: Snapshot, deadline: float
    ) -> RotationResult:
        """Decide from the credential read: report a refused one, skip, exchange the stored
        raw access token, or refresh (when enough of the invocation is left)."""
        credential = snapshot.secret.credential
        if credential is None:
            raise NotBootstrappedError(
                "the refresh credential secret holds no credential: run the bootstrap "
                "(start, then poll) to authorize this stack"
            )
        self.credential = credential
        if credential.status == STATUS_REAUTHORIZATION_REQUIRED:
            self.reauthorization.found(credential, deadline)
            return decisions.reauthorization_required(credential, self.published)
        now = self.clock.now()
        lease = self._judge_lease(snapshot, credential, now)
        skip = decisions.skip_reason(
            credential,
            lease,
            due_reason=due,
            now=now,
            min_interval=self.settings.min_refresh_interval_seconds,
        )
        if skip is not None:
            return self._skip(skip, self.published)
        raw = snapshot.secret.raw_access_token
        if (
            lease is not LeaseVerdict.TAKE_OVER
            and raw is not None
            and decisions.exchange_stored(raw, credential, self.published, now=now)
        ):
            reason = decisions.EXCHANGED_STORED
            return self._rotated(reason, self.publisher.publish(credential, raw, deadline, reason))
        failures = _streak(snapshot, self.published)
        if (held := _held_back(self.vault, request, lease, failures, now, deadline)) is not None:
            return self._skip(held, self.published)
        late = decisions.too_late_refusal(
            now=self.clock.now(), deadline=deadline, guard=self.refresh_guard
        )
        if late is not None:
            raise InsufficientTimeError(late)
        return self._refresh(request, due, snapshot, credential, deadline)

    def _judge_lease(
        self, snapshot: Snapshot, credential: RefreshCredential, now: float
    ) -> LeaseVerdict:
        """``decisions.lease_verdict`` for the lease read; ``LeaseHeldError`` when another
        invocation that may still be running holds it over the stored token."""
        lease = snapshot.secret.lease
        verdict = decisions.lease_verdict(
            lease,
            credential,
            owner=self.owner,
            now=now,
            one_at_a_time=self.settings.rotator_reserved_concurrency == 1,
        )
        if verdict is LeaseVerdict.AT_RISK:
            assert lease is not None  # only a lease is at risk
            raise LeaseHeldError(
                "another rotator invocation holds the lease over the stored refresh token until "
                f"{to_iso(lease.expires_at)} and may be refreshing it (the rotator's concurrency "
                "is not reserved); failing so that Lambda retries this run after it"
            )
        if verdict is LeaseVerdict.TAKE_OVER:
            logger.warning(
                "taking over the lease of an invocation that ended before storing the answer "
                "to its refresh; presenting its refresh token again",
                extra={"credential": fingerprint(credential.refresh_token)},
            )
        return verdict

    def _claim(
        self, snapshot: Snapshot, deadline: float, credential: RefreshCredential
    ) -> Snapshot:
        """Write the lease as the version replacing the one read; a lost race starts over."""
        claimed = replace(
            snapshot.secret, lease=decisions.new_lease(self.owner, deadline, credential)
        )
        try:
            return self.vault.write_refresh(claimed, snapshot.version_id, deadline)
        except VersionConflictError as exc:
            raise RaceLostError from exc

    def _refresh(
        self,
        request: RotationRequest,
        due: str,
        snapshot: Snapshot,
        credential: RefreshCredential,
        deadline: float,
    ) -> RotationResult:
        """Claim, refresh (with its whole time limit, and ``write_reserve`` kept to store the
        answer), store any 2xx answer holding a refresh token before anything else, and only
        then judge the rest of it and publish."""
        claimed = self._claim(snapshot, deadline, credential)
        logger.info(
            "refreshing",
            extra={
                "reason": due,
                "source": request.source,
                "credential": fingerprint(credential.refresh_token),
            },
        )
        try:
            answer = self.refresher.send(
                credential, claimed, deadline - self.write_reserve, deadline
            )
        except CredentialRejectedError as exc:
            raise self._credential_rejected(credential, exc, deadline) from exc
        rotated = decisions.rotated_credential(credential, answer)
        new_raw = decisions.usable_raw_token(answer)
        self.refresher.store(claimed, credential, rotated, new_raw, deadline)
        self.credential = rotated
        _log_rotated(credential, rotated, answer)
        if new_raw is None:  # the store recorded the failed attempt; the lease lapses
            raise MalformedResponseError(
                "refresh: the answer's new refresh token is stored, but the rest of the answer "
                "is not usable (" + "; ".join(answer.problems) + "); the next run refreshes again",
                endpoint="refresh",
                status=200,
            )
        return self._publish_rotated(due, rotated, new_raw, deadline)

    def _publish_rotated(
        self,
        due: str,
        rotated: RefreshCredential,
        raw: RawAccessToken,
        deadline: float,
    ) -> RotationResult:
        """Exchange, verify and publish the stored refresh's access token. When that fails,
        the store already recorded the failed attempt and the lease, over a token no longer
        stored, lapses by itself: no further write."""
        published = self.publisher.publish(rotated, raw, deadline, due)
        return self._rotated(due, published, refreshed=True)

    def _credential_rejected(
        self, credential: RefreshCredential, error: CredentialRejectedError, deadline: float
    ) -> ReauthorizationRequiredError:
        """``invalid_grant`` / ``invalid_client``: a race (raises ``RaceLostError``) or a dead
        credential, marked as such; returns the error to raise."""
        marked = self.reauthorization.mark(credential, deadline)
        if marked is None:
            raise RaceLostError from error
        self.credential = marked
        return self.reauthorization.refused(
            credential, marked, error, deadline, answer_lost=self.refresher.presented_again
        )

    def _skip(self, reason: str, published: ServiceTokenDocument | None) -> RotationResult:
        logger.info("rotation skipped", extra={"reason": reason})
        return decisions.skipped(reason, published)

    def _rotated(
        self, reason: str, published: ServiceTokenDocument, *, refreshed: bool = False
    ) -> RotationResult:
        logger.info(
            "service token published",
            extra={"reason": reason, "expires_at": to_iso(published.expires_at)},
        )
        return decisions.rotated(reason, self.credential, self.published, refreshed=refreshed)


def _streak(
    snapshot: Snapshot, published: ServiceTokenDocument | None
) -> refresh_backoff.Failures | None:
    """The streak of failed attempts the credential records, while it lasts."""
    return refresh_backoff.streak(
        snapshot.secret.failures, published.issued_at if published else None
    )


def _held_back(
    vault: CredentialVault,
    request: RotationRequest,
    lease: LeaseVerdict,
    failures: refresh_backoff.Failures | None,
    now: float,
    deadline: float,
) -> str | None:
    """Why a refresh does not start now: the back-off of failed attempts, then the version
    budget. A forced run is skipped (the reason returned); any other raises. A takeover
    finishes what another run started: never held back. An operator's forced run (after
    fixing a cause, say) is not delayed by the back-off."""
    takeover = lease is LeaseVerdict.TAKE_OVER
    forced = request.forced and not takeover
    if not takeover and not request.by_operator:
        wait = refresh_backoff.refusal(failures, now=now)
        if wait is not None and forced:
            return wait
        if wait is not None:
            raise RefreshBackoffError(wait)
    return _budget_refusal(vault, forced, deadline)


def _budget_refusal(vault: CredentialVault, forced: bool, deadline: float) -> str | None:
    """The version budget of a refresh: a forced one is an outside caller's, skipped (the
    reason returned) when its writes do not fit; any other raises ``VersionQuotaError``."""
    checked = (
        Check(Writer.OUTSIDE, "a forced refresh") if forced else Check(Writer.INSIDE, "a refresh")
    )
    try:
        vault.room(checked, PER_REFRESH, deadline)
    except VersionQuotaError as exc:
        if not forced:
            raise
        return str(exc)
    return None


def _log_rotated(
    previous: RefreshCredential, rotated: RefreshCredential, answer: TokenAnswer
) -> None:
    """The refresh token stored; a warning when the answer's access token lifetime was assumed."""
    logger.info(
        "refresh credential rotated and stored",
        extra={
            "previous": fingerprint(previous.refresh_token),
            "current": fingerprint(rotated.refresh_token),
        },
    )
    if answer.expiry_assumed:
        logger.warning(
            "the refresh answer states no usable access token lifetime; assumed one",
            extra={
                "expiry_source": answer.expiry_source,
                "expires_at": to_iso(answer.access_token_expires_at),
            },
        )
