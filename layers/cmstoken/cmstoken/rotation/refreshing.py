"""The refresh under a claimed lease: the grant, storing its answer, giving the lease back.

A slow answer is waited for up to the call's whole limit: the token is not presented again
while an answer may still arrive. Once none can (the connection closed without one, a gateway's
502/504, the limit passed, a 2xx answer that could not be read), the same token is presented
again at once, once (``Refresher.send``): if the provider never acted it simply refreshes, if
it acted and the tenant allows a reuse interval it recovers the family inside that interval,
and if there is none the provider refuses it and the run reports the loss. Waiting would gain
nothing. The rotated refresh token exists nowhere else, so storing it is retried, whatever the
failure, until just before the deadline (if it still fails: a CRITICAL log, the
``CredentialLost`` metric, the lease released).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from cmstoken.aws.documents import RawAccessToken, RefreshCredential, RefreshSecret
from cmstoken.aws.vault import INSUFFICIENT_TIME, CredentialVault, Snapshot
from cmstoken.core import refresh_backoff
from cmstoken.core.clock import Clock
from cmstoken.core.errors import (
    CredentialLostError,
    CredentialRejectedError,
    TransientError,
    aws_error_code,
    may_send_again,
)
from cmstoken.core.redaction import fingerprint
from cmstoken.core.retry import RetryPolicy, call_with_retries
from cmstoken.rotation import decisions
from cmstoken.rotation.decisions import RefreshFailure
from cmstoken.rotation.publishing import Publisher

if TYPE_CHECKING:
    from cmstoken.upstream.identity import IdentityClient
    from cmstoken.upstream.models import TokenAnswer

logger = logging.getLogger(__name__)

# Storing a refresh's answer is retried, whatever the failure, until this long before the
# deadline; what is left is for the CRITICAL log, the metric and releasing the lease.
LOST_RESERVE_SECONDS = 2.0
AFTER_REFRESH_STORE_RETRY = RetryPolicy(attempts=1_000_000, base_delay=0.25, max_delay=2.0)


_REPLACED_DURING_THE_REFRESH = (
    "a new authorization replaced the credential during the refresh; the rotated token of the "
    "old one is dropped"
)


class RaceLostError(Exception):
    """Another writer changed the credential while this run worked: re-read and decide again."""


class Refresher:
    """Refreshes the credential for the invocation ``owner`` and stores the answer, through the
    rotator's publisher (its upstream retries) and vault. ``presented_again`` says whether this
    run presented its token a second time after an answer that could no longer arrive."""

    def __init__(
        self, publisher: Publisher, vault: CredentialVault, clock: Clock, *, owner: str
    ) -> None:
        self.publisher = publisher
        self.vault = vault
        self.clock = clock
        self.owner = owner
        self.presented_again = False

    @property
    def call_seconds(self) -> float:
        """The whole time limit of one refresh call."""
        return self.publisher.service.transport.timeouts.total

    def send(
        self, credential: RefreshCredential, claimed: Snapshot, answer_by: float, deadline: float
    ) -> TokenAnswer:
        """The identity provider's answer to the credential's refresh token, by ``answer_by``.

        Each presentation starts only with its whole time limit left before ``answer_by``, and
        requests the provider provably did not act on are retried with back-off while one more
        whole call would still fit after them. After an answer that can no longer arrive, the
        token is presented again at once, once (see the module docstring). After any failure
        the lease is given back: this run is over with the token, and the next (Lambda's retry
        of this failed run) must be free to present it at once. A refused credential
        (``CredentialRejectedError``) is the caller's."""
        from cmstoken.upstream.identity import IdentityClient  # only a refresh needs it

        identity = IdentityClient(
            credential.issuer_url, transport=self.publisher.service.transport, clock=self.clock
        )
        call = self.call_seconds
        self.presented_again = False
        try:
            try:
                return self._present(identity, credential, answer_by, room_after=call)
            except CredentialRejectedError:
                raise
            except Exception as exc:
                failure = decisions.refresh_failure(exc)
                if not failure.answer_lost or self.clock.now() + call > answer_by:
                    raise
                _log_lost(failure, exc, credential)
                self.presented_again = True
                return self._present(identity, credential, answer_by, room_after=0.0)
        except CredentialRejectedError:
            raise
        except Exception as exc:
            failure = decisions.refresh_failure(exc)
            _log_failure(failure, exc, credential, self.presented_again)
            self.release(claimed, deadline, exc, answer_lost=failure.answer_lost)
            raise

    def _present(
        self,
        identity: IdentityClient,
        credential: RefreshCredential,
        answer_by: float,
        *,
        room_after: float,
    ) -> TokenAnswer:
        """One presentation of the token: its whole time limit, retries (of requests not acted
        on) only while a whole call and ``room_after`` still fit before ``answer_by``."""
        return call_with_retries(
            lambda: identity.refresh(
                client_id=credential.client_id,
                refresh_token=credential.refresh_token,
                time_limit=answer_by - self.clock.now(),
            ),
            retry_on=(TransientError,),
            policy=self.publisher.retry,
            clock=self.clock,
            deadline=answer_by - room_after,
            description="refresh",
            retryable=may_send_again,
            attempt_seconds=self.call_seconds,
        )

    def store(
        self,
        claimed: Snapshot,
        previous: RefreshCredential,
        rotated: RefreshCredential,
        raw: RawAccessToken | None,
        deadline: float,
    ) -> Snapshot:
        """Store the rotated credential over the claim, merging with any writer that came
        between (a bootstrap's pending authorization, say) as long as the credential is ours
        (else ``RaceLostError``), and the attempt recorded as failed unless its token is
        published (which ends the streak): no write follows. The lease stays until it expires.
        Every failure is retried until ``LOST_RESERVE_SECONDS`` before the deadline; then:
        CRITICAL log, lease released, ``CredentialLostError``."""
        failures = self.streak_after(claimed.secret.failures, None)

        def merge(document: RefreshSecret) -> RefreshSecret | None:
            return decisions.merge_rotation(
                document,
                previous=previous,
                rotated=rotated,
                raw=raw,
                lease=claimed.secret.lease,
                failures=failures,
            )

        give_up_at = deadline - LOST_RESERVE_SECONDS
        # The last failure of an attempt that reached Secrets Manager (or failed locally): the
        # one to report, not the refusal to start a call too close to the deadline, which says
        # nothing about why the writes before it failed.
        refused: list[Exception] = []

        def attempt() -> Snapshot | None:
            try:
                return self.vault.update_refresh(claimed, merge, give_up_at)
            except Exception as exc:
                if aws_error_code(exc) != INSUFFICIENT_TIME:
                    refused[:] = [exc]
                raise

        try:
            stored = call_with_retries(
                attempt,
                retry_on=(Exception,),
                policy=AFTER_REFRESH_STORE_RETRY,
                clock=self.clock,
                deadline=give_up_at,
                description="store the rotated refresh token",
                attempt_seconds=self.vault.store.timeouts.attempt_limit,
            )
        except Exception as exc:
            lost = _lost(previous, rotated, refused[0] if refused else exc)
            # The stored token is the spent one: presenting it again within a reuse interval
            # is what recovers the family, as after an answer lost on the wire.
            self.release(claimed, deadline, lost, read_first=True, answer_lost=True)
            raise lost from exc
        if stored is None:
            logger.warning(_REPLACED_DURING_THE_REFRESH)
            raise RaceLostError
        return stored

    def streak_after(
        self,
        recorded: refresh_backoff.Failures | None,
        error: BaseException | None,
        *,
        answer_lost: bool = False,
    ) -> refresh_backoff.Failures:
        """The streak of failed attempts once this one failed (with ``error``; ``answer_lost``:
        the token may be spent with no answer stored), from the one ``recorded`` while it
        lasts (``core.refresh_backoff``)."""
        published = self.vault.published
        return refresh_backoff.failed(
            refresh_backoff.streak(recorded, published.issued_at if published else None),
            now=self.clock.now(),
            retry_after=getattr(error, "retry_after", None),
            expires_at=published.expires_at if published else None,
            answer_lost=answer_lost,
        )

    def release(
        self,
        held: Snapshot,
        deadline: float,
        error: BaseException,
        *,
        read_first: bool = False,
        answer_lost: bool = False,
    ) -> None:
        """Give the lease back after a handled failure (``error``), so that a retry need not
        wait for it, and record the failure in the streak of failed attempts, which spaces
        the next ones (``core.refresh_backoff``; ``answer_lost``: the stored token may be
        spent). ``held`` is the newest version this run wrote; with ``read_first``, the lease
        is taken off whatever is stored now, if it is still this run's."""
        try:
            if read_first:
                held = self.vault.read_refresh(deadline)
                if not decisions.holds(held.secret.lease, self.owner):
                    return
            streak = self.streak_after(held.secret.failures, error, answer_lost=answer_lost)
            released = replace(held.secret, lease=None, failures=streak)
            self.vault.write_refresh(released, held.version_id, deadline)
        except Exception:  # noqa: BLE001 -- best effort: the lease expires on its own
            logger.warning("could not release the rotation lease; it expires by itself")


def _log_lost(failure: RefreshFailure, error: BaseException, credential: RefreshCredential) -> None:
    """The WARNING of an answer that can no longer arrive, before the token goes again."""
    logger.warning(
        "no answer to the refresh can arrive any more (the identity provider may have rotated "
        "the token); presenting the same refresh token again at once",
        extra={
            "previous": fingerprint(credential.refresh_token),
            "error": type(error).__name__,
            "answered_2xx": failure is RefreshFailure.SPENT,
        },
    )


def _log_failure(
    failure: RefreshFailure,
    error: BaseException,
    credential: RefreshCredential,
    presented_again: bool,
) -> None:
    """The ERROR log of a refresh whose answer was lost (the run fails, so that Lambda's retry
    presents the token again), or the WARNING of one the provider did not act on."""
    details = {
        "previous": fingerprint(credential.refresh_token),
        "error": type(error).__name__,
        "presented_again": presented_again,
    }
    if failure.answer_lost:
        logger.error(
            "no answer to the refresh arrived; the identity provider may have rotated the "
            "token. The run fails so that Lambda's retry presents it again at once",
            extra=details,
        )
    else:
        logger.warning("the refresh failed before the identity provider acted", extra=details)


def _lost(
    previous: RefreshCredential, rotated: RefreshCredential, error: Exception
) -> CredentialLostError:
    """The CRITICAL log of a rotated refresh token that could not be stored, and the error;
    both name the last write's failure: its class and, when AWS answered, the AWS error code
    (``EncryptionFailure`` for a disabled KMS key, ``AccessDeniedException``...)."""
    code = aws_error_code(error)
    details: dict[str, object] = {
        "previous": fingerprint(previous.refresh_token),
        "lost": fingerprint(rotated.refresh_token),
        "error": type(error).__name__,
    }
    if code is not None:
        details["aws_error"] = code
    failure = type(error).__name__ if code is None else f"{type(error).__name__}: {code}"
    logger.critical(
        "the rotated refresh token could not be stored before the deadline and is "
        "lost; Lambda's retry presents the used one again: inside the provider's reuse "
        "interval that recovers the family, otherwise it reports reauthorization",
        extra=details,
    )
    return CredentialLostError(
        "the refresh succeeded but its rotated refresh token could not be stored "
        f"before the deadline ({failure}); it is lost: expect to run the bootstrap again"
    )
