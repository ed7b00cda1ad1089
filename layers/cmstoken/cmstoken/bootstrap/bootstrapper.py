"""The one-time device authorization, run inside AWS (SPEC section 3, bootstrap function).

``start`` asks for a device code and keeps the pending authorization in the refresh credential
secret, next to (never over) an active credential. ``poll`` polls until 2 s before the
invocation's deadline, resuming the schedule a previous invocation left, so the interval is
respected across invocations too; it stores that schedule only when the next invocation could
not otherwise keep to it (at most one write while nothing is approved).

On approval the new credential is stored at once (persist-first), and:

- with no active credential (a first bootstrap, or after the old one was refused), it becomes
  the credential right away; its service token is then exchanged, verified and published (or,
  when too little of the invocation is left, by the next poll or the rotator);
- over an active credential, it is kept as the *candidate*: the service token is exchanged and
  verified first, and only then is the candidate promoted (refresh credential first, then the
  published token). When the service refuses it, the candidate is dropped and both secrets are
  left as they were before ``start``. The rotator never uses a candidate and keeps it.

Identity: the credential records who authorized it (a SHA-256 of the issuer and the ``sub`` the
ID token, else the access token, names). An approval by another subject is refused unless the
operator allowed a new identity (``"allow_new_identity": true``). ``status`` reports metadata
only; no token, device code or user code is ever logged (the operator gets the user code in the
result of ``start``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    CandidateCredential,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
)
from cmstoken.aws.notifications import Notifier
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import CredentialVault, Snapshot
from cmstoken.bootstrap.identity import identity_refusal, short_identity, token_subject
from cmstoken.bootstrap.request import BootstrapRequest
from cmstoken.core.clock import Clock, optional_iso, to_iso
from cmstoken.core.errors import (
    AccessDeniedError,
    CmsTokenError,
    ExchangeFailedError,
    ExpiredTokenError,
    StoreError,
    TerminalError,
    TransientError,
    may_send_again,
)
from cmstoken.core.redaction import fingerprint
from cmstoken.core.settings import Settings
from cmstoken.rotation.publishing import Publisher
from cmstoken.upstream.service import ServiceClient

if TYPE_CHECKING:
    from cmstoken.upstream.device_flow import PollSchedule
    from cmstoken.upstream.models import TokenAnswer

logger = logging.getLogger(__name__)

# A poll stops this long before the invocation's deadline (SPEC: at most 2 s before it).
POLL_DEADLINE_MARGIN = 2.0
# The exchange, verification and publication of a new authorization start only with this much
# of the invocation left; with less, the credential is stored and the next poll finishes.
FINISH_MIN_SECONDS = 15.0
# Time kept back from the exchange and the verification for the writes that follow them.
WRITE_RESERVE_SECONDS = 3.0
# A stored raw access token is exchanged only while it has this much life left.
RAW_TOKEN_MIN_SECONDS = 60.0


class _SupersededError(CmsTokenError):
    """The candidate this invocation worked on was finished or replaced by another one."""


class Bootstrapper:
    """Runs the bootstrap actions for one stack."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: SecretStore,
        service: ServiceClient,
        clock: Clock,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.service = service
        self.clock = clock
        self.vault = CredentialVault(settings, store, clock)
        self.publisher = Publisher(
            service, self.vault, clock, verify=settings.verify_service_token, notifier=notifier
        )

    def handle(self, request: BootstrapRequest, *, deadline: float) -> dict[str, Any]:
        """Run one action and return its result document."""
        if request.action == "start":
            free_trial = (
                self.settings.free_trial if request.free_trial is None else request.free_trial
            )
            return self.start(
                free_trial=free_trial,
                deadline=deadline,
                allow_new_identity=request.allow_new_identity,
            )
        if request.action == "poll":
            stop_at = deadline - POLL_DEADLINE_MARGIN
            if request.max_wait_seconds is not None:
                stop_at = min(stop_at, self.clock.now() + request.max_wait_seconds)
            return self.poll(
                stop_at=stop_at,
                deadline=deadline,
                allow_new_identity=request.allow_new_identity,
            )
        return self.status(deadline=deadline)

    # --- start ------------------------------------------------------------------------------

    def start(
        self, *, free_trial: bool, deadline: float, allow_new_identity: bool = False
    ) -> dict[str, Any]:
        """Request a device code and keep it pending; an active credential stays untouched.
        A candidate left unfinished by an earlier authorization is dropped (this one replaces
        it)."""
        snapshot = self.vault.read_refresh(deadline)
        pending = snapshot.secret.pending
        if pending is not None and pending.expires_at > self.clock.now():
            return _pending_result(
                pending,
                "an authorization is already pending: approve it at the address shown, or "
                f"start again after it expires at {to_iso(pending.expires_at)}",
            )
        # The device flow is loaded by start and poll only (not by a status query's cold start).
        from cmstoken.upstream.device_flow import PollSchedule, start_device_authorization

        started = start_device_authorization(self.service, free_trial=free_trial)
        authorization = started.authorization
        schedule = PollSchedule.first(authorization)
        pending = PendingAuthorization(
            device_code=authorization.device_code,
            user_code=authorization.user_code,
            verification_uri=authorization.verification_uri,
            verification_uri_complete=authorization.verification_uri_complete,
            client_id=started.client_id,
            issuer_url=started.provider.issuer_url,
            free_trial=free_trial,
            interval=schedule.interval,
            started_at=authorization.received_at,
            expires_at=schedule.expires_at,
            next_poll_at=schedule.next_poll_at,
            allow_new_identity=allow_new_identity,
        )
        self.vault.update_refresh(
            snapshot,
            lambda document: replace(document, pending=pending, candidate=None),
            deadline,
        )
        # The user code is not logged: whoever reads the logs could approve it first.
        logger.info(
            "device authorization started",
            extra={"free_trial": free_trial, "allow_new_identity": allow_new_identity},
        )
        return _pending_result(
            pending,
            f"open {pending.verification_uri_complete} (or {pending.verification_uri} and enter "
            f"{pending.user_code}), approve, then poll",
        )

    # --- poll -------------------------------------------------------------------------------

    def poll(
        self, *, stop_at: float, deadline: float, allow_new_identity: bool = False
    ) -> dict[str, Any]:
        """Poll the pending authorization until it ends or ``stop_at``; finish an approved one
        that an earlier invocation stored but could not finish."""
        snapshot = self.vault.read_refresh(deadline)
        if snapshot.secret.candidate is not None:
            return self._finish(snapshot, snapshot.secret.candidate, deadline)
        pending = snapshot.secret.pending
        if pending is None:
            return self._publish_new_credential(snapshot.secret, deadline) or {
                "status": "none",
                "message": "nothing is pending: run start first",
            }
        from cmstoken.upstream.device_flow import DevicePoller, PollSchedule
        from cmstoken.upstream.identity import IdentityClient

        identity = IdentityClient(
            pending.issuer_url, transport=self.service.transport, clock=self.clock
        )
        schedule = PollSchedule(
            interval=pending.interval,
            next_poll_at=pending.next_poll_at,
            expires_at=pending.expires_at,
        )
        poller = DevicePoller(
            identity,
            client_id=pending.client_id,
            device_code=pending.device_code,
            schedule=schedule,
            clock=self.clock,
        )
        hard_stop = deadline - POLL_DEADLINE_MARGIN
        try:
            tokens = poller.run(stop_at=min(stop_at, hard_stop))
        except ExpiredTokenError:
            self._forget(snapshot, pending, deadline)
            return {
                "status": "expired",
                "message": "the code expired before it was approved: run start again",
            }
        except AccessDeniedError:
            self._forget(snapshot, pending, deadline)
            return {
                "status": "denied",
                "message": "the authorization was denied in the browser: run start again",
            }
        except TerminalError as exc:
            self._forget(snapshot, pending, deadline)
            return {"status": "failed", "message": f"{exc}; run start again"}
        except CmsTokenError as exc:
            self._settle(snapshot, pending, schedule, None, deadline)
            if not may_send_again(exc):
                return {
                    "status": "failed",
                    "message": f"{exc}; the identity provider may have answered with the tokens "
                    "and the answer was lost, so the poll was not sent again. Poll again: if "
                    "the code is then refused, the approval went with the lost answer (run "
                    "start again)",
                }
            return {
                "status": "failed",
                "message": f"{exc}; the pending authorization stays, poll again",
            }
        if tokens is None:
            self._settle(snapshot, pending, schedule, min(stop_at, hard_stop), deadline)
            return _pending_result(pending, "not approved yet: poll again")
        return self._approved(
            snapshot, pending, tokens, deadline, allow_new_identity or pending.allow_new_identity
        )

    def _approved(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        tokens: TokenAnswer,
        deadline: float,
        allow_new_identity: bool,
    ) -> dict[str, Any]:
        """Store the approved credential first: as the credential when none is active, else
        as the candidate; then finish (exchange, verify, promote, publish) if time allows."""
        now = tokens.received_at
        subject = token_subject(tokens, pending.issuer_url, pending.client_id)
        credential = RefreshCredential(
            refresh_token=tokens.refresh_token,
            client_id=pending.client_id,
            issuer_url=pending.issuer_url,
            status=STATUS_ACTIVE,
            authorized_at=now,
            refreshed_at=now,
            reauthorize_by=self.settings.reauthorize_by(now),
            free_trial=pending.free_trial,
            subject_sha256=subject,
        )
        # A sloppy answer (RFC 6749 5.1: no expires_in, no scope) is read leniently; its refresh
        # token is stored whatever else it lacks, its access token only when usable.
        access_token = tokens.usable_access_token
        raw = (
            None
            if access_token is None
            else RawAccessToken(
                token=access_token,
                expires_at=tokens.access_token_expires_at,
                expires_at_assumed=tokens.expiry_assumed,
            )
        )
        outcome: dict[str, str] = {}  # what the last attempt of the write decided

        def store(document: RefreshSecret) -> RefreshSecret | None:
            outcome.clear()
            ours = document.pending is not None and (
                document.pending.device_code == pending.device_code
            )
            remaining = None if ours else document.pending  # a newer start stays
            refusal = identity_refusal(document.credential, subject, allowed=allow_new_identity)
            if refusal is not None:
                outcome["refused"] = refusal
                outcome["advice"] = (
                    "If this stack should now use that identity, start again allowing it "
                    '("allow_new_identity": true; cmstoken-admin bootstrap --new-identity)'
                )
                return replace(document, pending=None) if ours else None
            current = document.credential
            if current is None or current.status != STATUS_ACTIVE:
                outcome["stored_as"] = "credential"
                return replace(
                    document,
                    credential=credential,
                    raw_access_token=raw,
                    pending=remaining,
                    candidate=None,
                    lease=None,
                )
            if raw is None:
                outcome["refused"] = (
                    "the identity provider's answer carries no usable access token "
                    f"({'; '.join(tokens.problems)}), so the new authorization cannot be verified "
                    "before it replaces the active credential"
                )
                outcome["advice"] = "Run start again"
                return replace(document, pending=None) if ours else None
            outcome["stored_as"] = "candidate"
            return replace(
                document, candidate=CandidateCredential(credential, raw), pending=remaining
            )

        try:
            stored = self.vault.update_refresh(snapshot, store, deadline)
        except StoreError:
            logger.critical(
                "the approved authorization could not be stored and is lost; run start again",
                extra={"identity": short_identity(subject)},
            )
            raise
        if "refused" in outcome:
            logger.warning("new authorization refused", extra={"identity": short_identity(subject)})
            return {
                "status": "failed",
                "message": f"{outcome['refused']}. Nothing was changed and the approved tokens "
                f"were discarded. {outcome['advice']}",
            }
        logger.info(
            "device authorization approved; credential stored",
            extra={
                "credential": fingerprint(credential.refresh_token),
                "identity": short_identity(subject),
                "as": outcome["stored_as"],
            },
        )
        if outcome["stored_as"] == "candidate":
            assert stored is not None  # a write that decided is a write that happened
            assert raw is not None  # a candidate is stored only with its access token
            return self._finish(
                stored, CandidateCredential(credential, raw), deadline, just_approved=True
            )
        if raw is None:
            return {
                "status": "failed",
                "message": "authorized and stored, but the identity provider's answer carries "
                f"no usable access token ({'; '.join(tokens.problems)}); the rotator refreshes "
                "the new credential and publishes its service token on its next run",
            }
        return self._publish(credential, raw, deadline)

    def _publish_new_credential(
        self, secret: RefreshSecret, deadline: float
    ) -> dict[str, Any] | None:
        """Publish the service token of a first authorization that an earlier poll stored but
        had no time to publish (unless the rotator did); ``None`` when there is none."""
        credential, raw = secret.credential, secret.raw_access_token
        if (
            credential is None
            or raw is None
            or credential.status != STATUS_ACTIVE
            or int(credential.refreshed_at) != int(credential.authorized_at)
            or raw.expires_at - self.clock.now() < RAW_TOKEN_MIN_SECONDS
        ):
            return None
        published = self.vault.read_published(deadline)
        if published is not None and published.from_authorization(credential.authorized_at):
            return None
        return self._publish(credential, raw, deadline)

    def _publish(
        self, credential: RefreshCredential, raw: RawAccessToken, deadline: float
    ) -> dict[str, Any]:
        """Exchange, verify and publish the service token of the active, new credential."""
        if deadline - self.clock.now() < FINISH_MIN_SECONDS:
            return _approved_result(
                "approved; the credential is stored. The next poll (or the rotator's next "
                "run) publishes the service token: poll again"
            )
        try:
            published = self.publisher.publish(
                credential, raw, deadline - WRITE_RESERVE_SECONDS, "bootstrap"
            )
        except CmsTokenError as exc:
            return {
                "status": "failed",
                "message": f"authorized and stored, but the service token was not published "
                f"({exc}); the rotator publishes it on its next run",
            }
        return _authorized_result(credential, published.expires_at)

    def _finish(
        self,
        snapshot: Snapshot,
        candidate: CandidateCredential,
        deadline: float,
        *,
        just_approved: bool = False,
    ) -> dict[str, Any]:
        """Exchange and verify the candidate's service token; only then promote the candidate
        (refresh credential first) and publish. A refusal drops the candidate: the active
        credential and the published token stay exactly as they were."""
        raw = candidate.raw_access_token
        now = self.clock.now()
        # Right after the approval the exchange is tried whatever lifetime the answer stated
        # (a sloppy one may say 0 s): only the service's refusal drops the approval then.
        if not just_approved and raw.expires_at - now < RAW_TOKEN_MIN_SECONDS:
            self._drop(snapshot, candidate, deadline)
            return {
                "status": "failed",
                "message": "the approved authorization was not finished before its access "
                "token expired; nothing was changed: run start again",
            }
        if deadline - now < FINISH_MIN_SECONDS:
            return _approved_result(
                "approved; the new credential is stored but not verified yet, and the current "
                "one stays in use: poll again to finish"
            )
        promoted: list[bool] = []

        def promote() -> None:
            self._promote(snapshot, candidate, deadline)
            promoted.append(True)

        upstream_deadline = deadline - WRITE_RESERVE_SECONDS
        try:
            published = self.publisher.publish(
                candidate.credential, raw, upstream_deadline, "bootstrap", before_write=promote
            )
        except _SupersededError:
            return {
                "status": "failed",
                "message": "another start or poll replaced or finished this authorization "
                "meanwhile; run status to see where the stack stands",
            }
        except StoreError as exc:
            if promoted:
                return {
                    "status": "failed",
                    "message": f"authorized and stored, but the service token was not "
                    f"published ({exc}); the rotator publishes it on its next run",
                }
            return {
                "status": "failed",
                "message": f"the new authorization could not be stored ({exc}); it is kept "
                "and the current credential stays in use: poll again to finish",
            }
        except CmsTokenError as exc:
            if not _refused(exc):
                # 5xx, 429, timeouts, connection errors: nothing says the service refused the
                # new authorization, so it is kept for the next poll.
                logger.warning(
                    "new authorization not verified yet; kept for the next poll",
                    extra={"error": str(exc)},
                )
                return {
                    "status": "failed",
                    "message": f"approved, but the service could not verify the new "
                    f"authorization ({exc}); it is kept and the current credential stays in "
                    "use: poll again to finish",
                }
            self._drop(snapshot, candidate, deadline)
            logger.warning(
                "new authorization refused by the service; the active credential stays",
                extra={
                    "error": str(exc),
                    "identity": short_identity(candidate.credential.subject_sha256),
                },
            )
            return {
                "status": "failed",
                "message": f"the service did not accept the new authorization ({exc}); the "
                "active credential and the published service token are unchanged. Run start "
                "again, approving with an account that may use the service",
            }
        return _authorized_result(candidate.credential, published.expires_at)

    def _promote(self, snapshot: Snapshot, candidate: CandidateCredential, deadline: float) -> None:
        """Make the verified candidate the credential, merged into the newest document (a
        rotation of the old credential meanwhile is replaced, never written back over)."""

        def change(document: RefreshSecret) -> RefreshSecret | None:
            if not _same(document.candidate, candidate):
                return None
            return replace(
                document,
                credential=candidate.credential,
                raw_access_token=candidate.raw_access_token,
                candidate=None,
                lease=None,
            )

        if self.vault.update_refresh(snapshot, change, deadline) is None:
            raise _SupersededError("the candidate was replaced meanwhile")
        logger.info(
            "new authorization verified and promoted",
            extra={"credential": fingerprint(candidate.credential.refresh_token)},
        )

    def _drop(self, snapshot: Snapshot, candidate: CandidateCredential, deadline: float) -> None:
        """Remove the candidate (only this one), leaving everything else as it is."""
        self.vault.update_refresh(
            snapshot,
            lambda document: (
                replace(document, candidate=None) if _same(document.candidate, candidate) else None
            ),
            deadline,
        )

    def _forget(self, snapshot: Snapshot, pending: PendingAuthorization, deadline: float) -> None:
        """Remove a finished pending authorization (only that one; a newer start stays)."""
        self._replace_pending(snapshot, pending, None, deadline)

    def _settle(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        schedule: PollSchedule,
        stop_at: float | None,
        deadline: float,
    ) -> None:
        """Make sure the next invocation keeps to the interval, writing only when it must.

        Nothing to do when the stored schedule already holds the next poll back far enough.
        Otherwise, when the next poll's time comes before this invocation must end (2 s before
        the deadline, and at most one interval past ``stop_at``, the caller's wish; ``None``:
        do not wait), wait for it: the next invocation starts later and may poll at once. Else
        store the schedule (one write).
        """
        if schedule.interval == pending.interval:
            if schedule.next_poll_at <= pending.next_poll_at:
                return
            if stop_at is not None and schedule.next_poll_at <= min(
                deadline - POLL_DEADLINE_MARGIN, stop_at + schedule.interval
            ):
                self.clock.sleep(schedule.next_poll_at - self.clock.now())
                return
        updated = replace(pending, interval=schedule.interval, next_poll_at=schedule.next_poll_at)
        self._replace_pending(snapshot, pending, updated, deadline)

    def _replace_pending(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        replacement: PendingAuthorization | None,
        deadline: float,
    ) -> None:
        """Swap ``pending`` for ``replacement`` unless another start replaced it meanwhile."""

        def change(document: RefreshSecret) -> RefreshSecret | None:
            current = document.pending
            if current is None or current.device_code != pending.device_code:
                return None
            return replace(document, pending=replacement)

        self.vault.update_refresh(snapshot, change, deadline)

    # --- status -----------------------------------------------------------------------------

    def status(self, *, deadline: float) -> dict[str, Any]:
        """The credential's state and any pending authorization: metadata only."""
        secret: RefreshSecret = self.vault.read_refresh(deadline).secret
        published = self.vault.read_published(deadline)
        credential = secret.credential
        pending = secret.pending
        return {
            "credential": {
                "status": credential.status if credential else "absent",
                "authorized_at": optional_iso(credential.authorized_at) if credential else None,
                "refreshed_at": optional_iso(credential.refreshed_at) if credential else None,
                "reauthorize_by": optional_iso(credential.reauthorize_by) if credential else None,
                "service_token_expires_at": optional_iso(published.expires_at)
                if published
                else None,
            },
            "pending": None
            if pending is None or pending.expires_at <= self.clock.now()
            else {
                "user_code": pending.user_code,
                "verification_uri_complete": pending.verification_uri_complete,
                "expires_at": to_iso(pending.expires_at),
            },
        }


def _refused(error: CmsTokenError) -> bool:
    """Whether the service refused a new authorization's token: its documented exchange
    failure, a 401/403 of the verification, or another answer saying the request is wrong.
    A transient failure (5xx, 429, timeout, connection) is no refusal."""
    return isinstance(error, ExchangeFailedError) or not isinstance(error, TransientError)


def _same(stored: CandidateCredential | None, candidate: CandidateCredential) -> bool:
    return (
        stored is not None and stored.credential.refresh_token == candidate.credential.refresh_token
    )


def _approved_result(message: str) -> dict[str, Any]:
    """Approved and stored, but not finished in this invocation: poll again."""
    return {"status": "pending", "approved": True, "message": message}


def _authorized_result(credential: RefreshCredential, expires_at: float) -> dict[str, Any]:
    return {
        "status": "authorized",
        "message": "authorized; the service token is published",
        "service_token_expires_at": to_iso(expires_at),
        "reauthorize_by": optional_iso(credential.reauthorize_by),
        "identity": short_identity(credential.subject_sha256),
    }


def _pending_result(pending: PendingAuthorization, message: str) -> dict[str, Any]:
    return {
        "status": "pending",
        "user_code": pending.user_code,
        "verification_uri": pending.verification_uri,
        "verification_uri_complete": pending.verification_uri_complete,
        "expires_at": to_iso(pending.expires_at),
        "message": message,
    }
