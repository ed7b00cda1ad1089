"""Rotation: keep a fresh, verified service token published without ever losing the credential.

One run, in order (SPEC section 4):

1. Read the published service token document. Not due (fresh, or a forced run within the
   debounce interval): stop here, one AWS call, no upstream call.
2. Read the refresh credential. Not bootstrapped: fail. Reauthorization required: report it
   without calling the identity provider.
3. If the newest refresh already produced a raw access token that was never published (a crash or
   a failed exchange after the refresh was stored), exchange that one: no refresh is spent.
4. Otherwise claim the credential (a lease written as the version that replaces the one read, so
   a second writer that read the same version is refused), check that enough of the invocation
   is left, refresh, and store the rotated refresh token and the raw access token before anything
   else, retrying every failure of that write until just before the deadline (if it still
   fails: a CRITICAL log, the ``CredentialLost`` metric, the lease released). Any 2xx answer
   holding a refresh token is stored, however sloppy the rest of it; only then is the rest
   judged. The refresh gets its whole time limit (a slow answer is waited for) and the time
   to store its answer (``write_reserve``, sized from the Secrets Manager client's limits).
   A refresh is sent again only when it provably was not acted on (``may_send_again``); after
   one whose outcome is unknown the lease stays until it expires, so that no run presents the
   token while its answer could still come.
5. Exchange, verify with a project listing, and only then publish the new service token.

``invalid_grant`` / ``invalid_client`` re-read the credential first: a changed refresh token
means another writer won a race (the run starts over); an unchanged one is marked
``reauthorization_required``.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cmstoken.aws.documents import (
    STATUS_REAUTHORIZATION_REQUIRED,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.aws.notifications import Notifier
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import CredentialVault, Snapshot
from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.errors import (
    CredentialLostError,
    CredentialRejectedError,
    InsufficientTimeError,
    MalformedResponseError,
    NotBootstrappedError,
    ReauthorizationRequiredError,
    RotationError,
    VersionConflictError,
    may_send_again,
)
from cmstoken.core.redaction import fingerprint
from cmstoken.core.retry import RetryPolicy, call_with_retries
from cmstoken.core.settings import Settings
from cmstoken.core.triggers import RotationRequest
from cmstoken.rotation import decisions
from cmstoken.rotation.decisions import RefreshFailure, RotationResult
from cmstoken.rotation.publishing import Publisher
from cmstoken.upstream.service import ServiceClient

logger = logging.getLogger(__name__)

# Secrets Manager calls that storing a refresh's answer may take in the worst case: the write,
# and after another writer came first, the re-read and the merged write.
WRITE_CALLS = 3
# How often one run starts over after losing a race to another writer.
MAX_RACES = 3
# Storing a refresh's answer is retried, whatever the failure, until this long before the
# deadline; what is left is for the CRITICAL log, the metric and releasing the lease.
LOST_RESERVE_SECONDS = 2.0
AFTER_REFRESH_STORE_RETRY = RetryPolicy(attempts=1_000_000, base_delay=0.25, max_delay=2.0)


class _RaceLostError(Exception):
    """Another writer changed the credential while this run worked: re-read and decide again."""


class Rotator:
    """Runs rotations for one stack. ``owner`` identifies this invocation in leases."""

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
        self.notifier = notifier
        self.publisher = Publisher(
            service,
            self.vault,
            clock,
            verify=settings.verify_service_token,
            retry=upstream_retry,
            notifier=notifier,
        )
        self.credential: RefreshCredential | None = None

    @property
    def write_reserve(self) -> float:
        """Seconds kept after a refresh for storing its answer: ``WRITE_CALLS`` Secrets Manager
        calls at their longest (``StoreTimeouts``), and the reserve for reporting a loss."""
        return LOST_RESERVE_SECONDS + WRITE_CALLS * self.vault.store.timeouts.attempt_limit

    @property
    def refresh_guard(self) -> float:
        """No refresh starts with less than this left: the refresh's whole time limit (a slow
        answer is waited for, never cut short and sent again) and the write reserve."""
        return self.service.transport.timeouts.total + self.write_reserve

    @property
    def published(self) -> ServiceTokenDocument | None:
        """The service token document this run last read or wrote."""
        return self.vault.published

    # --- the run --------------------------------------------------------------------------

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
            except _RaceLostError:
                logger.info("credential changed by another writer; deciding again")
        raise RotationError(
            "the refresh credential kept changing while this run worked; another writer is "
            "active (a bootstrap, or a rotator without reserved concurrency); retry later"
        )

    def _rotate(
        self, request: RotationRequest, due: str, snapshot: Snapshot, deadline: float
    ) -> RotationResult:
        credential = snapshot.secret.credential
        if credential is None:
            raise NotBootstrappedError(
                "the refresh credential secret holds no credential: run the bootstrap "
                "(start, then poll) to authorize this stack"
            )
        self.credential = credential
        if credential.status == STATUS_REAUTHORIZATION_REQUIRED:
            logger.error(
                "reauthorization required: the identity provider refused the refresh credential;"
                " run the bootstrap again",
                extra={"credential": fingerprint(credential.refresh_token)},
            )
            if decisions.published_still_active(self.published):
                # The run that marked the credential ended before marking the published copy
                # (a crash, a timeout): finish that, announcement included.
                self._mark_published(credential, "refused earlier", deadline)
            return decisions.reauthorization_required(credential, self.published)
        now = self.clock.now()
        skip = decisions.skip_reason(
            credential,
            snapshot.secret.lease,
            due_reason=due,
            owner=self.owner,
            now=now,
            min_interval=self.settings.min_refresh_interval_seconds,
        )
        if skip is not None:
            return self._skip(skip, self.published)
        raw = snapshot.secret.raw_access_token
        if raw is not None and decisions.exchange_stored(raw, credential, self.published, now=now):
            reason = decisions.EXCHANGED_STORED
            published = self.publisher.publish(credential, raw, deadline, reason)
            return self._rotated(reason, published, False)

        if decisions.too_late_to_refresh(now=now, deadline=deadline, guard=self.refresh_guard):
            raise InsufficientTimeError(
                f"only {deadline - now:.0f} s left of the invocation; not starting a refresh "
                f"(needs {self.refresh_guard:.0f} s to wait for its answer and store it); "
                "retry later"
            )
        claimed = self._claim(snapshot, deadline)
        logger.info(
            "refreshing",
            extra={
                "reason": due,
                "source": request.source,
                "credential": fingerprint(credential.refresh_token),
            },
        )
        try:
            from cmstoken.upstream.identity import (
                IdentityClient,  # only a refresh needs it (not a no-op's start)
            )

            identity = IdentityClient(
                credential.issuer_url, transport=self.service.transport, clock=self.clock
            )
            answer = self.publisher.upstream(
                lambda timeout: identity.refresh(
                    client_id=credential.client_id,
                    refresh_token=credential.refresh_token,
                    time_limit=timeout,
                ),
                deadline - self.write_reserve,
                "refresh",
                retryable=may_send_again,
            )
        except CredentialRejectedError as exc:
            raise self._credential_rejected(credential, exc, deadline) from exc
        except Exception as exc:
            failure = decisions.refresh_failure(exc)
            if failure is RefreshFailure.SPENT:
                logger.critical(
                    "the identity provider answered the refresh (2xx) but no usable refresh "
                    "token could be read from its answer; the one sent is spent and is not "
                    "sent again",
                    extra={"previous": fingerprint(credential.refresh_token)},
                )
            elif failure is RefreshFailure.UNKNOWN:
                # The request may still be in the provider's hands: the lease stays until it
                # expires, so that no run presents the same token while its answer could come.
                logger.error(
                    "no answer to the refresh; the identity provider may have acted on it, so "
                    "the refresh token is not sent again before the lease expires",
                    extra={
                        "previous": fingerprint(credential.refresh_token),
                        "error": type(exc).__name__,
                        "lease_expires_at": to_iso(claimed.secret.lease.expires_at)
                        if claimed.secret.lease
                        else None,
                    },
                )
                raise
            self._release(claimed, deadline)
            raise
        rotated = decisions.rotated_credential(credential, answer)
        new_raw = decisions.usable_raw_token(answer)
        stored = self._store_rotation(claimed, credential, rotated, new_raw, deadline)
        self.credential = rotated
        logger.info(
            "refresh credential rotated and stored",
            extra={
                "previous": fingerprint(credential.refresh_token),
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
        if new_raw is None:
            self._release(stored, deadline)
            raise MalformedResponseError(
                "refresh: the answer's new refresh token is stored, but the rest of the answer "
                "is not usable (" + "; ".join(answer.problems) + "); the next run refreshes again",
                endpoint="refresh",
                status=200,
            )
        try:
            published = self.publisher.publish(rotated, new_raw, deadline, due)
        except Exception:
            self._release(stored, deadline)
            raise
        return self._rotated(due, published, True)

    # --- steps ------------------------------------------------------------------------------

    def _claim(self, snapshot: Snapshot, deadline: float) -> Snapshot:
        """Write the lease as the version replacing the one read; a lost race starts over."""
        claimed = replace(snapshot.secret, lease=decisions.new_lease(self.owner, deadline))
        try:
            return self.vault.write_refresh(claimed, snapshot.version_id, deadline)
        except VersionConflictError as exc:
            raise _RaceLostError from exc

    def _store_rotation(
        self,
        claimed: Snapshot,
        previous: RefreshCredential,
        rotated: RefreshCredential,
        raw: RawAccessToken | None,
        deadline: float,
    ) -> Snapshot:
        """Store the rotated credential over the claim, merging with any writer that came
        between (a bootstrap's pending authorization, say) as long as the credential is ours.
        The lease stays until it expires, covering the exchange and the publication.

        The refresh token exists nowhere else, so every failure of this write (throttling,
        limits, KMS, a document error) is retried until ``LOST_RESERVE_SECONDS`` before the
        deadline. If it still fails: CRITICAL log, lease released,
        ``CredentialLostError``."""

        def merge(document: RefreshSecret) -> RefreshSecret | None:
            return decisions.merge_rotation(
                document, previous=previous, rotated=rotated, raw=raw, lease=claimed.secret.lease
            )

        give_up_at = deadline - LOST_RESERVE_SECONDS
        try:
            stored = call_with_retries(
                lambda: self.vault.update_refresh(claimed, merge, give_up_at),
                retry_on=(Exception,),
                policy=AFTER_REFRESH_STORE_RETRY,
                clock=self.clock,
                deadline=give_up_at,
                description="store the rotated refresh token",
                attempt_seconds=self.vault.store.timeouts.attempt_limit,
            )
        except Exception as exc:
            logger.critical(
                "the rotated refresh token could not be stored before the deadline and is "
                "lost; the next run will find the used one and report reauthorization",
                extra={
                    "previous": fingerprint(previous.refresh_token),
                    "lost": fingerprint(rotated.refresh_token),
                    "error": type(exc).__name__,
                },
            )
            self._release(claimed, deadline, read_first=True)
            raise CredentialLostError(
                "the refresh succeeded but its rotated refresh token could not be stored "
                f"before the deadline ({type(exc).__name__}); it is lost: expect to run the "
                "bootstrap again"
            ) from exc
        if stored is None:
            logger.warning(
                "a new authorization replaced the credential during the refresh; "
                "the rotated token of the old one is dropped"
            )
            raise _RaceLostError
        return stored

    def _credential_rejected(
        self, credential: RefreshCredential, error: CredentialRejectedError, deadline: float
    ) -> ReauthorizationRequiredError:
        """``invalid_grant`` / ``invalid_client``: a race (raises ``_RaceLostError``) or a dead
        credential, marked as such (merged into the newest document: a pending authorization
        or a candidate written meanwhile stays); returns the error to raise."""

        def mark(document: RefreshSecret) -> RefreshSecret | None:
            return decisions.mark_refused(
                document, refused=credential.refresh_token, owner=self.owner
            )

        written = self.vault.update_refresh(self.vault.read_refresh(deadline), mark, deadline)
        if written is None:
            raise _RaceLostError from error
        marked = written.secret.credential
        assert marked is not None  # mark_refused wrote it
        self.credential = marked
        logger.error(
            "reauthorization required: the identity provider refused the refresh credential; "
            "run the bootstrap again",
            extra={"error": str(error), "credential": fingerprint(credential.refresh_token)},
        )
        self._mark_published(marked, error.code or str(error.status), deadline)
        return ReauthorizationRequiredError(
            f"the identity provider refused the refresh credential ({error.code or error.status});"
            " a person must authorize again: run the bootstrap"
        )

    def _mark_published(self, credential: RefreshCredential, error: str, deadline: float) -> None:
        """Copy the credential's ``reauthorization_required`` into the published document
        (kept when another writer published meanwhile: a new authorization's token) and
        announce it."""
        if self.published is not None:
            self.vault.write_published(decisions.marked_published(self.published), deadline)
        if self.notifier is not None:
            self.notifier.reauthorization_required(
                secret_id=self.settings.refresh_secret_id,
                authorized_at=credential.authorized_at,
                error=error,
            )

    def _release(self, held: Snapshot, deadline: float, *, read_first: bool = False) -> None:
        """Give the lease back after a handled failure, so that a retry need not wait for it.
        ``held`` is the newest version this run wrote; with ``read_first``, the lease is taken
        off whatever is stored now, if it is still this run's."""
        try:
            if read_first:
                held = self.vault.read_refresh(deadline)
                if not decisions.holds(held.secret.lease, self.owner):
                    return
            self.vault.write_refresh(replace(held.secret, lease=None), held.version_id, deadline)
        except Exception:  # noqa: BLE001 -- best effort: the lease expires on its own
            logger.warning("could not release the rotation lease; it expires by itself")

    # --- results --------------------------------------------------------------------------

    def _skip(self, reason: str, published: ServiceTokenDocument | None) -> RotationResult:
        logger.info("rotation skipped", extra={"reason": reason})
        return decisions.skipped(reason, published)

    def _rotated(
        self, reason: str, published: ServiceTokenDocument, refreshed: bool
    ) -> RotationResult:
        logger.info(
            "service token published",
            extra={"reason": reason, "expires_at": to_iso(published.expires_at)},
        )
        return decisions.rotated(reason, self.credential, self.published, refreshed=refreshed)
