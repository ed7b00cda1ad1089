"""Publishing a service token: exchange the raw access token, verify the service token with a
project listing, and only then write it where consumers read it."""

from __future__ import annotations

from collections.abc import Callable

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    RawAccessToken,
    RefreshCredential,
    ServiceTokenDocument,
)
from cmstoken.aws.notifications import Notifier
from cmstoken.aws.vault import CredentialVault
from cmstoken.core.clock import Clock
from cmstoken.core.errors import (
    CmsTokenError,
    TokenRefusedError,
    TransientError,
    VerificationFailedError,
)
from cmstoken.core.retry import RetryPolicy, call_with_retries
from cmstoken.upstream.service import ServiceClient

# The shortest time limit an upstream call gets when its deadline is near.
MIN_READ_TIMEOUT = 0.5


class Publisher:
    """Turns a raw access token into a published, verified service token."""

    def __init__(
        self,
        service: ServiceClient,
        vault: CredentialVault,
        clock: Clock,
        *,
        verify: bool,
        retry: RetryPolicy | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.service = service
        self.vault = vault
        self.clock = clock
        self.verify = verify
        self.retry = retry or RetryPolicy()
        self.notifier = notifier

    def upstream[T](
        self,
        operation: Callable[[float], T],
        deadline: float,
        what: str,
        *,
        retryable: Callable[[BaseException], bool] | None = None,
    ) -> T:
        """Run an upstream call (given the time it may take in all) with bounded retries of
        transient errors that ``retryable`` (when given) approves, none of them running past
        ``deadline``."""
        return call_with_retries(
            lambda: operation(max(MIN_READ_TIMEOUT, deadline - self.clock.now())),
            retry_on=(TransientError,),
            policy=self.retry,
            clock=self.clock,
            deadline=deadline,
            description=what,
            retryable=retryable,
        )

    def publish(
        self,
        credential: RefreshCredential,
        raw: RawAccessToken,
        deadline: float,
        reason: str,
        *,
        before_write: Callable[[], None] | None = None,
    ) -> ServiceTokenDocument:
        """Exchange, verify (unless disabled), publish, announce (``Service Token Rotated``).
        ``VerificationFailedError`` when the service refuses the new token: what was published
        before stays. ``before_write`` runs once the token is verified, before it is
        published (the bootstrap promotes a new credential there). A token another writer
        published meanwhile is kept unless it comes from an older authorization."""
        token = self.upstream(
            lambda timeout: self.service.exchange(
                raw.token, fallback_expires_at=raw.expires_at, time_limit=timeout
            ),
            deadline,
            "exchange",
        )
        if self.verify:
            try:
                self.upstream(
                    lambda timeout: self.service.list_projects(token.token, time_limit=timeout),
                    deadline,
                    "verify",
                )
            except TokenRefusedError as exc:
                raise self._refused(exc, deadline) from exc
        if before_write is not None:
            before_write()
        document = ServiceTokenDocument(
            token=token.token,
            expires_at=token.expires_at,
            api_url=self.service.api_url,
            issued_at=self.clock.now(),
            refreshed_at=credential.refreshed_at,
            authorized_at=credential.authorized_at,
            reauthorize_by=credential.reauthorize_by,
            credential_status=STATUS_ACTIVE,
            min_refresh_interval_seconds=self.vault.settings.min_refresh_interval_seconds,
        )
        written = self.vault.write_published(document, deadline, newer_wins=True)
        if written and self.notifier is not None:
            self.notifier.rotated(
                secret_id=self.vault.settings.service_token_secret_id,
                expires_at=document.expires_at,
                refreshed_at=credential.refreshed_at,
                reason=reason,
            )
        return document

    def _refused(self, error: TokenRefusedError, deadline: float) -> VerificationFailedError:
        """The error of a new token the service refused, saying what consumers keep: the token
        published before, or none (a first authorization). Only what was published is read
        (when this run has not read it yet); a read that fails leaves that out."""
        published = self.vault.published
        if published is None:
            try:
                published = self.vault.read_published(deadline)
            except CmsTokenError:
                return VerificationFailedError(
                    f"the service refused the new service token ({error})"
                )
        kept = (
            "no service token is published"
            if published is None
            else "the previous token stays published"
        )
        return VerificationFailedError(
            f"the service refused the new service token ({error}); {kept}"
        )
