"""A refresh credential the identity provider refused (``invalid_grant`` / ``invalid_client``):
marked ``reauthorization_required`` in the refresh secret, then in the published document, and
announced, so that later runs report it without calling the identity provider."""

from __future__ import annotations

import logging

from cmstoken.aws.documents import RefreshCredential
from cmstoken.aws.notifications import Notifier
from cmstoken.aws.vault import CredentialVault
from cmstoken.core.errors import CredentialRejectedError, ReauthorizationRequiredError
from cmstoken.core.redaction import fingerprint
from cmstoken.rotation import decisions

logger = logging.getLogger(__name__)

REQUIRED = (
    "reauthorization required: the identity provider refused the refresh credential; run the "
    "bootstrap again"
)


class Reauthorization:
    """Marks and reports a refused credential for the invocation ``owner``."""

    def __init__(self, vault: CredentialVault, notifier: Notifier | None, *, owner: str) -> None:
        self.vault = vault
        self.notifier = notifier
        self.owner = owner

    def mark(self, credential: RefreshCredential, deadline: float) -> RefreshCredential | None:
        """Mark ``credential`` refused in the newest document (a pending authorization or a
        candidate written meanwhile stays; this run's lease is given back); ``None`` when
        another writer rotated or replaced it meanwhile: a race, not a refusal."""
        written = self.vault.update_refresh(
            self.vault.read_refresh(deadline),
            lambda document: decisions.mark_refused(
                document, refused=credential.refresh_token, owner=self.owner
            ),
            deadline,
        )
        if written is None:
            return None
        marked = written.secret.credential
        assert marked is not None  # mark_refused wrote it
        return marked

    def refused(
        self,
        refused: RefreshCredential,
        marked: RefreshCredential,
        error: CredentialRejectedError,
        deadline: float,
        *,
        answer_lost: bool = False,
    ) -> ReauthorizationRequiredError:
        """Report the refusal of ``refused`` (now ``marked``): log it, mark the published
        document, announce it; returns the error the run raises. ``answer_lost``: the refusal
        answered the token presented again after the first answer was lost."""
        logger.error(
            REQUIRED,
            extra={
                "error": str(error),
                "credential": fingerprint(refused.refresh_token),
                "answer_lost": answer_lost,
            },
        )
        self._mark_published(marked, error.code or str(error.status), deadline)
        why = (
            "; the answer to its refresh was lost after the provider may have rotated it, and "
            "presenting it again was refused (the tenant allows no refresh-token reuse "
            "interval, or it had passed)"
            if answer_lost
            else ""
        )
        return ReauthorizationRequiredError(
            f"the identity provider refused the refresh credential ({error.code or error.status})"
            f"{why}; a person must authorize again: run the bootstrap"
        )

    def found(self, credential: RefreshCredential, deadline: float) -> None:
        """A run that read a credential an earlier run marked: log it, and finish the marking
        of the published copy when that run ended before it (announcement included)."""
        logger.error(REQUIRED, extra={"credential": fingerprint(credential.refresh_token)})
        if decisions.published_still_active(self.vault.published):
            self._mark_published(credential, "refused earlier", deadline)

    def _mark_published(self, credential: RefreshCredential, error: str, deadline: float) -> None:
        """Copy the credential's ``reauthorization_required`` into the published document
        (kept when another writer published meanwhile: a new authorization's token) and
        announce it."""
        published = self.vault.published
        if published is not None:
            self.vault.write_published(decisions.marked_published(published), deadline)
        if self.notifier is not None:
            self.notifier.reauthorization_required(
                secret_id=self.vault.settings.refresh_secret_id,
                authorized_at=credential.authorized_at,
                error=error,
            )
