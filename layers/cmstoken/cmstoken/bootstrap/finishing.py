"""Finishing an approved authorization: its service token exchanged, verified and published.

A new credential (none was active) is published right away. A candidate (stored next to an
active credential) is promoted only once the service has accepted its token, refresh
credential first, then the published token; a refusal drops it, leaving both secrets as they
were before ``start``. With too little of the invocation left, the next poll (or, for a
credential, the rotator) finishes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cmstoken.aws.documents import (
    CandidateCredential,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
)
from cmstoken.aws.vault import CredentialVault, Snapshot
from cmstoken.bootstrap import results
from cmstoken.bootstrap.identity import short_identity
from cmstoken.bootstrap.states import (
    Action,
    Event,
    Stage,
    candidate_event,
    credential_event,
    drop,
    promote,
    step,
    verification_event,
)
from cmstoken.core.clock import Clock
from cmstoken.core.errors import CmsTokenError, StoreError, VerificationFailedError
from cmstoken.core.redaction import fingerprint
from cmstoken.rotation.publishing import Publisher

logger = logging.getLogger(__name__)

# Time kept back from the exchange and the verification for the writes that follow them.
WRITE_RESERVE_SECONDS = 3.0


class _SupersededError(CmsTokenError):
    """The candidate this invocation worked on was finished or replaced by another one."""


class Finisher:
    """Publishes the service token of a new credential, or verifies and promotes a candidate."""

    def __init__(self, vault: CredentialVault, publisher: Publisher, clock: Clock) -> None:
        self.vault = vault
        self.publisher = publisher
        self.clock = clock

    def resume(self, secret: RefreshSecret, deadline: float) -> dict[str, Any]:
        """Publish the service token of a first authorization that an earlier poll stored but
        had no time to publish, unless the rotator (or another poll) did."""
        credential, raw = secret.credential, secret.raw_access_token
        assert credential is not None  # the stage is CREDENTIAL: one is stored, with its token
        published = self.vault.read_published(deadline)
        if published is not None and published.from_authorization(credential.authorized_at):
            return results.ending(step(Stage.CREDENTIAL, Event.ALREADY_PUBLISHED))
        return self.publish(credential, raw, deadline)

    def publish(
        self,
        credential: RefreshCredential,
        raw: RawAccessToken | None,
        deadline: float,
        problems: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Exchange, verify and publish the service token of the active, new credential
        (``problems``: why the approval's answer carries no usable access token)."""
        event = credential_event(raw, self.clock.now(), deadline)
        if event is not None:
            return results.ending(step(Stage.CREDENTIAL, event), problems="; ".join(problems))
        assert raw is not None  # credential_event says NOTHING_TO_EXCHANGE otherwise
        try:
            published = self.publisher.publish(
                credential, raw, deadline - WRITE_RESERVE_SECONDS, "bootstrap"
            )
        except VerificationFailedError as exc:
            self._record_refusal(credential, exc, deadline)
            return results.refused_credential(exc)
        except CmsTokenError as exc:
            return results.ending(step(Stage.CREDENTIAL, Event.PUBLISH_FAILED), error=exc)
        return results.authorized(credential, published.expires_at)

    def _record_refusal(
        self, credential: RefreshCredential, error: VerificationFailedError, deadline: float
    ) -> None:
        """Note on the stored credential (if still this authorization) that the service refused
        its token, so that ``status`` can say so; a failure to write it is only logged."""
        refused_at = self.clock.now()

        def mark(document: RefreshSecret) -> RefreshSecret | None:
            stored = document.credential
            if stored is None or int(stored.authorized_at) != int(credential.authorized_at):
                return None  # replaced meanwhile: nothing to note
            return replace(document, credential=replace(stored, service_refused_at=refused_at))

        logger.warning(
            "new credential's service token refused by the service; not published",
            extra={"error": str(error), "identity": short_identity(credential.subject_sha256)},
        )
        try:
            self.vault.update_refresh(self.vault.read_refresh(deadline), mark, deadline)
        except CmsTokenError as exc:
            logger.warning(
                "could not record the service's refusal on the credential",
                extra={"error": str(exc)},
            )

    def finish(
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
        event = candidate_event(candidate, self.clock.now(), deadline, just_approved=just_approved)
        if event is not None:
            transition = step(Stage.CANDIDATE, event)
            if transition.action is Action.DROP_CANDIDATE:
                self._drop(snapshot, candidate, deadline)
            return results.ending(transition)
        promoted: list[bool] = []

        def verified() -> None:
            self._promote(snapshot, candidate, deadline)
            promoted.append(True)

        try:
            published = self.publisher.publish(
                candidate.credential,
                candidate.raw_access_token,
                deadline - WRITE_RESERVE_SECONDS,
                "bootstrap",
                before_write=verified,
            )
        except _SupersededError:
            return results.ending(step(Stage.CANDIDATE, Event.SUPERSEDED))
        except CmsTokenError as exc:
            if promoted and isinstance(exc, StoreError):
                return results.ending(step(Stage.CREDENTIAL, Event.PUBLISH_FAILED), error=exc)
            return self._not_verified(snapshot, candidate, exc, deadline)
        return results.authorized(candidate.credential, published.expires_at)

    def _not_verified(
        self,
        snapshot: Snapshot,
        candidate: CandidateCredential,
        error: CmsTokenError,
        deadline: float,
    ) -> dict[str, Any]:
        """A candidate whose exchange, verification or promotion failed: kept for the next
        poll unless the service refused it (then dropped)."""
        transition = step(Stage.CANDIDATE, verification_event(error))
        if transition.event is Event.SERVICE_UNAVAILABLE:
            # 5xx, 429, timeouts, connection errors: nothing says the service refused the new
            # authorization, so it is kept for the next poll.
            logger.warning(
                "new authorization not verified yet; kept for the next poll",
                extra={"error": str(error)},
            )
        elif transition.action is Action.DROP_CANDIDATE:
            self._drop(snapshot, candidate, deadline)
            logger.warning(
                "new authorization refused by the service; the active credential stays",
                extra={
                    "error": str(error),
                    "identity": short_identity(candidate.credential.subject_sha256),
                },
            )
        return results.ending(transition, error=error)

    def _promote(self, snapshot: Snapshot, candidate: CandidateCredential, deadline: float) -> None:
        """Make the verified candidate the credential, merged into the newest document."""
        written = self.vault.update_refresh(
            snapshot, lambda document: promote(document, candidate).document, deadline
        )
        if written is None:
            raise _SupersededError("the candidate was replaced meanwhile")
        logger.info(
            "new authorization verified and promoted",
            extra={"credential": fingerprint(candidate.credential.refresh_token)},
        )

    def _drop(self, snapshot: Snapshot, candidate: CandidateCredential, deadline: float) -> None:
        """Remove the candidate (only this one), leaving everything else as it is."""
        self.vault.update_refresh(snapshot, lambda document: drop(document, candidate), deadline)
