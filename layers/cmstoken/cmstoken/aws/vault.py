"""The two secret documents as the functions see them: typed reads, and writes that name the
version they replace, retried on Secrets Manager throttling until shortly before a deadline."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from cmstoken.aws.documents import RefreshSecret, ServiceTokenDocument
from cmstoken.aws.secrets import SecretStore
from cmstoken.core.clock import Clock
from cmstoken.core.errors import (
    DocumentError,
    StoreUnavailableError,
    VersionConflictError,
    VersionQuotaError,
)
from cmstoken.core.retry import RetryPolicy, call_with_retries
from cmstoken.core.settings import Settings

if TYPE_CHECKING:
    from cmstoken.core.version_budget import Writer

logger = logging.getLogger(__name__)

# A type variable, not PEP 695's `[T]`: the consumer wheel carries this module to Python 3.11.
T = TypeVar("T")

STORE_RETRY = RetryPolicy(attempts=6, base_delay=0.5, max_delay=4.0)
# How often one ``update_refresh`` re-reads and merges after another writer came first.
MAX_MERGES = 5
# Secrets Manager retries stop this long before the caller's deadline.
STORE_DEADLINE_MARGIN = 1.0
# The code of the StoreUnavailableError of a call not started because it could outlast the
# deadline: no answer of AWS, so a report names the failure before it instead.
INSUFFICIENT_TIME = "InsufficientTime"


@dataclass(frozen=True)
class Check:
    """A write counted against the version budget: who caused it, and what it is (for the
    refusal's words)."""

    writer: Writer
    what: str


@dataclass(frozen=True)
class Snapshot:
    """The refresh credential document as read (or written), with its version."""

    secret: RefreshSecret
    version_id: str | None


class CredentialVault:
    """Reads and writes the refresh credential and the published service token documents.

    ``published`` is the service token document last read or written (``None`` when the
    secret is empty or unreadable).
    """

    def __init__(
        self, settings: Settings, store: SecretStore, clock: Clock, *, whole_calls: bool = False
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        # With whole_calls, no call starts that could outlast its deadline (the rotator, whose
        # writes after a refresh must end inside the invocation); otherwise only retries are
        # held to that (a bootstrap poll's last writes come close to its deadline).
        self.whole_calls = whole_calls
        self.published: ServiceTokenDocument | None = None
        self._published_version: str | None = None

    def read_refresh(self, deadline: float) -> Snapshot:
        """The refresh credential document (empty when the secret has no value yet)."""
        value = self._call(lambda: self.store.read(self.settings.refresh_secret_id), deadline)
        if value.text is None:
            return Snapshot(secret=RefreshSecret(), version_id=None)
        return Snapshot(secret=RefreshSecret.from_json(value.text), version_id=value.version_id)

    def write_refresh(
        self, secret: RefreshSecret, replacing: str | None, deadline: float
    ) -> Snapshot:
        """Write ``secret`` as the version replacing ``replacing``; ``VersionConflictError`` when
        another writer replaced it first."""
        text = secret.to_json()
        version = self._call(
            lambda: self.store.write(self.settings.refresh_secret_id, text, replacing=replacing),
            deadline,
        )
        return Snapshot(secret=secret, version_id=version)

    def update_refresh(
        self,
        snapshot: Snapshot,
        change: Callable[[RefreshSecret], RefreshSecret | None],
        deadline: float,
        *,
        checked: Check | None = None,
    ) -> Snapshot | None:
        """Write ``change(document)``; when another writer came first, re-read and apply
        ``change`` to the newer document, at most ``MAX_MERGES`` times (then
        ``VersionConflictError``). ``change`` returning ``None`` abandons the update (and so does
        this method). ``checked``: the write's version budget, counted (``room``) before each
        attempt (a version written since the caller's count by anything that does not name
        the version it replaces, a person's ``put-secret-value``, is no conflict); ``None`` for
        a write that follows a spend: never refused, every other action keeps room for it."""
        for merge in range(MAX_MERGES + 1):
            if merge:
                logger.info("refresh credential changed by another writer; merging")
                snapshot = self.read_refresh(deadline)
            updated = change(snapshot.secret)
            if updated is None:
                return None
            if checked is not None:
                self.room(checked, 1, deadline)
            try:
                return self.write_refresh(updated, snapshot.version_id, deadline)
            except VersionConflictError:
                if merge == MAX_MERGES:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def refresh_versions(self, deadline: float) -> list[tuple[float, bool]]:
        """Every version of the refresh credential secret: created when, and staged or not."""
        secret_id = self.settings.refresh_secret_id
        return self._call(lambda: self.store.versions(secret_id), deadline)

    def room(self, checked: Check, writes: int, deadline: float) -> None:
        """``VersionQuotaError`` unless ``checked``, an action that may write ``writes``
        versions of the refresh credential, fits its caller's version budget now. Counted
        after the document it will replace was read: any other write since then makes that
        write a conflict, so the count holds at the write."""
        from cmstoken.core import version_budget  # a writer's only: not a status's cold start

        found = version_budget.refusal(
            self.refresh_versions(deadline), self.clock.now(), checked.writer, writes, checked.what
        )
        if found is not None:
            reason, frees_at = found
            logger.warning("not started", extra={"reason": reason})
            raise VersionQuotaError(reason, frees_at=frees_at)

    def read_published(self, deadline: float) -> ServiceTokenDocument | None:
        """The published service token document; ``None`` when empty or unreadable."""
        value = self._call(lambda: self.store.read(self.settings.service_token_secret_id), deadline)
        self._published_version = value.version_id
        self.published = None
        if value.text is not None:
            try:
                self.published = ServiceTokenDocument.from_json(value.text)
            except DocumentError as exc:
                logger.warning("published service token is unreadable", extra={"error": str(exc)})
        return self.published

    def write_published(
        self, document: ServiceTokenDocument, deadline: float, *, newer_wins: bool = False
    ) -> bool:
        """Publish ``document`` over the version last read; ``False`` when another writer
        published first and theirs is kept (it is verified too).

        With ``newer_wins``, theirs is kept only when it comes from the same authorization as
        ``document``, or a newer one: a token from an older authorization (a rotation of the
        credential a re-authorization replaced, or its marking) is replaced, so that the
        published token and its metadata describe the credential in use. A writer that had
        read nothing published (the secret was empty, or an eventually consistent read said so)
        reads it first, and with ``newer_wins`` keeps a token it finds there from a newer
        authorization: it was published meanwhile, and writing over it would undo that."""
        if self._published_version is None and self.published is None:
            theirs = self.read_published(deadline)
            if newer_wins and _newer_authorization(theirs, document):
                logger.warning("a service token from a newer authorization is published; kept it")
                return False
        text = document.to_json()
        for attempt in range(MAX_MERGES + 1):
            try:
                self._published_version = self._call(
                    lambda: self.store.write(
                        self.settings.service_token_secret_id,
                        text,
                        replacing=self._published_version,
                    ),
                    deadline,
                )
            except VersionConflictError:
                if not newer_wins or document.authorized_at is None or attempt == MAX_MERGES:
                    break
                theirs = self.read_published(deadline)
                if theirs is not None and not theirs.older_authorization_than(
                    document.authorized_at
                ):
                    break
                logger.info("replacing a service token published from an older authorization")
                continue
            self.published = document
            return True
        logger.warning("another writer published a service token at the same time; kept it")
        return False

    def _call(self, operation: Callable[[], T], deadline: float) -> T:
        attempt = self.store.timeouts.attempt_limit
        ends_by = deadline - STORE_DEADLINE_MARGIN
        if self.whole_calls and self.clock.now() + attempt > ends_by:
            raise StoreUnavailableError(
                f"not calling Secrets Manager: too little time left before the deadline (a call "
                f"may take {attempt:.0f} s)",
                code=INSUFFICIENT_TIME,
            )
        return call_with_retries(
            operation,
            retry_on=(StoreUnavailableError,),
            policy=STORE_RETRY,
            clock=self.clock,
            deadline=ends_by,
            description="secrets manager",
            attempt_seconds=attempt,
        )


def _newer_authorization(theirs: ServiceTokenDocument | None, ours: ServiceTokenDocument) -> bool:
    """Whether ``theirs`` comes from an authorization newer than the one ``ours`` comes from."""
    made = ours.authorized_at
    if theirs is None or made is None:
        return False
    return not theirs.older_authorization_than(made) and not theirs.from_authorization(made)
