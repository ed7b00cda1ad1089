"""A stack wired to the models: the real ``Rotator`` and ``Bootstrapper`` on in-memory Secrets
Manager and upstream, as ``cmstoken.runtime`` builds them (no EventBridge notifier)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.aws.secrets import SecretStore
from cmstoken.bootstrap import Bootstrapper, BootstrapRequest
from cmstoken.bootstrap.identity import token_subject
from cmstoken.core.refresh_backoff import Failures
from cmstoken.core.retry import RetryPolicy
from cmstoken.core.settings import Settings
from cmstoken.rotation.rotator import Rotator
from cmstoken.upstream.models import RawTokens
from cmstoken.upstream.service import ServiceClient
from simulation.interception import Interceptor, direct
from simulation.secretsmanager import SecretsManagerModel
from simulation.upstream import (
    BASE_URL,
    CLIENT_ID,
    ISSUER_URL,
    IdentityProviderModel,
    SimulatedUpstream,
)
from support import replayed_refresh_tokens

REFRESH_SECRET = "cmstoken/refresh-credential"
SERVICE_SECRET = "cmstoken/service-token"
START = 1_795_000_000.0
HOUR = 3600


class SimClock:
    """Simulated time: it moves only when something sleeps on it or a test advances it."""

    def __init__(self, start: float = START) -> None:
        self.current = start

    def now(self) -> float:
        return self.current

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.current += seconds

    def advance(self, seconds: float) -> None:
        self.current += seconds


@dataclass
class World:
    """Secrets Manager, the identity provider and the service as models, one clock, and the
    settings of a stack. ``interceptor`` sees every call any model answers."""

    interceptor: Interceptor = direct
    reuse_interval: float = 0
    # The template's RotatorReservedConcurrency: 1, Lambda runs one rotator at a time (the
    # scenarios of one invocation and its retries); 0, invocations may overlap.
    reserved_concurrency: int = 0
    stale_reads: int = 0
    choose: Callable[[int], int] | None = None  # which value a stale read answers
    clock: SimClock = field(default_factory=SimClock)

    def __post_init__(self) -> None:
        self.secretsmanager = SecretsManagerModel(
            stale_reads=self.stale_reads,
            choose=self.choose,
            interceptor=self.interceptor,
            clock=self.clock.now,
        )
        self.identity = IdentityProviderModel(self.clock, reuse_interval=self.reuse_interval)
        self.upstream = SimulatedUpstream(self.identity, interceptor=self.interceptor)
        self.settings = Settings(
            service_base_url=BASE_URL,
            refresh_secret_id=REFRESH_SECRET,
            service_token_secret_id=SERVICE_SECRET,
            rotator_reserved_concurrency=self.reserved_concurrency,
        )
        self.store = SecretStore(cast(Any, self.secretsmanager))
        self.service = ServiceClient(BASE_URL, transport=self.upstream, clock=self.clock)

    def create_secrets(self) -> None:
        """Both secrets, empty, as the template creates them (not through the interceptor)."""
        interceptor, self.secretsmanager.interceptor = self.secretsmanager.interceptor, direct
        try:
            for name in (REFRESH_SECRET, SERVICE_SECRET):
                self.secretsmanager.create_secret(Name=name)
        finally:
            self.secretsmanager.interceptor = interceptor

    def seed(self) -> None:
        """The state a successful bootstrap leaves: an authorized credential (recording the
        provider's user as its identity) and a verified service token (written without passing
        the interceptor)."""
        self.create_secrets()
        interceptor, self.secretsmanager.interceptor = self.secretsmanager.interceptor, direct
        try:
            tokens = self.identity.authorize()
            now = self.clock.now()
            subject = token_subject(
                RawTokens.parse(tokens, received_at=now, endpoint="device_token"),
                ISSUER_URL,
                CLIENT_ID,
            )
            credential = RefreshCredential(
                refresh_token=tokens["refresh_token"],
                client_id=CLIENT_ID,
                issuer_url=ISSUER_URL.rstrip("/"),
                status=STATUS_ACTIVE,
                authorized_at=now,
                refreshed_at=now,
                reauthorize_by=self.settings.reauthorize_by(now),
                subject_sha256=subject,
            )
            self.store.write(
                REFRESH_SECRET, RefreshSecret(credential=credential).to_json(), replacing=None
            )
            service_token = self.upstream.service.exchange(tokens["access_token"])
            assert service_token is not None
            document = ServiceTokenDocument(
                token=service_token,
                expires_at=now + self.upstream.service.service_token_lifetime,
                api_url=self.service.api_url,
                issued_at=now,
                refreshed_at=now,
                reauthorize_by=credential.reauthorize_by,
                min_refresh_interval_seconds=self.settings.min_refresh_interval_seconds,
            )
            self.store.write(SERVICE_SECRET, document.to_json(), replacing=None)
        finally:
            self.secretsmanager.interceptor = interceptor

    def record_streak(self, count: int) -> None:
        """A streak of ``count`` failed refresh attempts (``core.refresh_backoff``) that ended
        just now, whose next attempt may start now (written without the interceptor)."""
        interceptor, self.secretsmanager.interceptor = self.secretsmanager.interceptor, direct
        try:
            stored = self.store.read(REFRESH_SECRET)
            assert stored.text is not None
            now = self.clock.now()
            failures = Failures(count=count, last_at=now, retry_at=now)
            document = replace(RefreshSecret.from_json(stored.text), failures=failures)
            self.store.write(REFRESH_SECRET, document.to_json(), replacing=stored.version_id)
        finally:
            self.secretsmanager.interceptor = interceptor

    def rotator(self, owner: str) -> Rotator:
        """A rotator invocation named ``owner``, with retries that never wait on real time."""
        return Rotator(
            self.settings,
            store=self.store,
            service=self.service,
            clock=self.clock,
            owner=owner,
            upstream_retry=RetryPolicy(attempts=2, base_delay=0.5, max_delay=1.0),
        )

    def bootstrapper(self) -> Bootstrapper:
        """A bootstrap invocation, built as ``cmstoken.runtime.bootstrapper()`` builds it."""
        return Bootstrapper(self.settings, store=self.store, service=self.service, clock=self.clock)

    def bootstrap(
        self, action: str, *, seconds: float = 60, via_links: bool = False, **fields: Any
    ) -> dict[str, Any]:
        """One bootstrap invocation of ``{"action": action, **fields}`` with ``seconds`` left
        (``via_links``: through the links' alias), as the bootstrap function runs it; its
        result."""
        request = BootstrapRequest.from_event({"action": action, **fields}, via_links=via_links)
        return self.bootstrapper().handle(request, deadline=self.clock.now() + seconds)

    def pending_user_code(self) -> str:
        """The user code of the pending authorization stored in the refresh secret."""
        pending = self.refresh_document().pending
        assert pending is not None
        return pending.user_code

    def refresh_document(self) -> RefreshSecret:
        text = self.secretsmanager.current_text(REFRESH_SECRET)
        assert text is not None
        return _refresh_document(text)

    def service_document(self) -> ServiceTokenDocument:
        text = self.secretsmanager.current_text(SERVICE_SECRET)
        assert text is not None
        return _service_document(text)

    def newest_refresh_token(self) -> str:
        credential = self.refresh_document().credential
        assert credential is not None
        return credential.refresh_token

    def replayed_refresh_tokens(self) -> list[str | None]:
        """The violations of invariant I1 in this world (``support.replayed_refresh_tokens``)."""
        return replayed_refresh_tokens(self.upstream.log, self.reuse_interval)


# The checkers read the documents after every step, and the explorations meet the same few
# texts again and again: each is parsed once (the documents are frozen dataclasses).
@functools.lru_cache(maxsize=4096)
def _refresh_document(text: str) -> RefreshSecret:
    return RefreshSecret.from_json(text)


@functools.lru_cache(maxsize=4096)
def _service_document(text: str) -> ServiceTokenDocument:
    return ServiceTokenDocument.from_json(text)
