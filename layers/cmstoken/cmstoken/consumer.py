"""Consumer helper: read the published service token in any AWS workload, and use it with
``requests``.

``ServiceTokenProvider`` reads the service token secret (``GetSecretValue``) and caches the
document until its token is about to expire. When the service refuses a token, ``refused``
re-reads the secret once; if the token there is the same, it asks the rotator for a new one
with a ``Service Token Refresh Requested`` event on the default bus (debounced) and waits for it.
``ServiceTokenAuth`` does all of that for a ``requests`` call and retries it once.

boto3 is imported on first use only, and messages and logs carry fingerprints, never a token.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from requests.auth import AuthBase

from . import aws
from .clock import Clock, SystemClock, to_iso
from .documents import STATUS_ACTIVE, ServiceTokenDocument
from .errors import (
    CmsTokenError,
    ConfigurationError,
    DocumentError,
    StoreError,
    StoreUnavailableError,
)
from .redaction import fingerprint
from .triggers import REFRESH_REQUESTED

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from requests import PreparedRequest, Response

    from .store import SecretStore

logger = logging.getLogger(__name__)

# ConsumerError.reason values.
NOT_BOOTSTRAPPED = "not_bootstrapped"
UNREADABLE = "unreadable"
UNAVAILABLE = "unavailable"
EXPIRED = "expired"
REAUTHORIZATION_REQUIRED = "reauthorization_required"
REQUEST_FAILED = "request_failed"
REFRESH_TIMEOUT = "refresh_timeout"
STILL_REFUSED = "still_refused"

# A token read inside its last ``min_validity_seconds`` is re-read at most this often.
NEAR_EXPIRY_RECHECK_SECONDS = 5.0
_REFUSED_STATUSES = frozenset({401, 403})
_BOOTSTRAP_HINT = "run the bootstrap (cmstoken-admin --stack NAME bootstrap)"
_ROTATOR_HINT = (
    "check the rotator (its RotationFailed and ReauthorizationRequired alarms and logs), or "
    "force a rotation (cmstoken-admin --stack NAME rotate)"
)


class ConsumerError(CmsTokenError):
    """No usable service token. ``reason`` is one of this module's reason constants
    (``not_bootstrapped``, ``unreadable``, ``unavailable``, ``expired``,
    ``reauthorization_required``, ``request_failed``, ``refresh_timeout``, ``still_refused``)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ServiceTokenProvider:
    """The published service token of one stack, read from ``secret_id`` (name or ARN).

    Thread-safe; make one per process and reuse it (in Lambda: at module level).
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
        request_debounce_seconds: float = 300,
        poll_interval_seconds: float = 5,
        event_source: str = "cmstoken.consumer",
    ) -> None:
        if not secret_id:
            raise ConfigurationError("secret_id must name the service token secret")
        _require_non_negative(
            min_validity_seconds=min_validity_seconds,
            refresh_wait_seconds=refresh_wait_seconds,
            request_debounce_seconds=request_debounce_seconds,
        )
        if poll_interval_seconds <= 0:
            raise ConfigurationError("poll_interval_seconds must be positive")
        self.secret_id = secret_id
        self.clock: Clock = clock or SystemClock()
        self.min_validity_seconds = min_validity_seconds
        self.refresh_wait_seconds = refresh_wait_seconds
        self.request_debounce_seconds = request_debounce_seconds
        self.poll_interval_seconds = poll_interval_seconds
        self.event_source = event_source
        self._secrets_client = secrets_client
        self._events_client = events_client
        self._store: SecretStore | None = None
        self._cached: ServiceTokenDocument | None = None
        self._cached_until = 0.0
        self._requested_at: float | None = None
        self._requested_for: str | None = None  # fingerprint of the token current at the request
        self._cache_lock = threading.RLock()
        self._refresh_lock = threading.Lock()

    # --- AWS clients, created on first use ------------------------------------------------

    @property
    def secrets_client(self) -> SecretsManagerClient:
        """The Secrets Manager client (honours ``AWS_ENDPOINT_URL``)."""
        return self._secret_store().client

    @property
    def events_client(self) -> EventBridgeClient:
        """The EventBridge client (honours ``AWS_ENDPOINT_URL``)."""
        if self._events_client is None:
            self._events_client = aws.client("events")
        return self._events_client

    def _secret_store(self) -> SecretStore:
        if self._store is None:
            from .store import SecretStore

            self._store = SecretStore(self._secrets_client)
        return self._store

    # --- the token --------------------------------------------------------------------------

    def token(self) -> str:
        """The service token, from the cache while it has ``min_validity_seconds`` left."""
        return self.document().token

    @property
    def api_url(self) -> str:
        """The management API's address (``{base_url}/api``), for ``f"{api_url}/v3/projects"``."""
        return self.document().api_url

    def document(self) -> ServiceTokenDocument:
        """The published document, cached until ``expires_at - min_validity_seconds``."""
        with self._cache_lock:
            cached = self._cached
            if cached is not None and self.clock.now() < self._cached_until:
                return cached
            return self._remember(self._read())

    def refused(self, token: str) -> str:
        """A replacement for ``token``, which the service answered with 401 or 403.

        Re-reads the secret; a different token there is returned at once. Otherwise requests
        a refresh (debounced) and waits up to ``refresh_wait_seconds`` for a rotated token.
        Raises ``ConsumerError`` when none comes.
        """
        with self._refresh_lock:
            current = self._read()
            if current.token != token:
                logger.info(
                    "refused service token replaced by the published one",
                    extra={"refused": fingerprint(token), "current": fingerprint(current.token)},
                )
                return self._remember(current).token
            _require_active(current)
            if not self._request_refresh(current, "refused") and not self._request_pending(token):
                raise ConsumerError(
                    f"the service refused the service token {fingerprint(token)}, which was "
                    f"published after this workload's last refresh request; not asking again "
                    f"within {self.request_debounce_seconds:.0f} s of it (a 403 can also mean "
                    f"that the token has no access to the resource); {_ROTATOR_HINT}",
                    reason=STILL_REFUSED,
                )
            rotated = self._wait_for_other_than(token)
            if rotated is None:
                raise ConsumerError(
                    f"the service refused the service token {fingerprint(token)} and no new "
                    f"one was published within {self.refresh_wait_seconds:.0f} s of the "
                    f"refresh request; {_ROTATOR_HINT}",
                    reason=REFRESH_TIMEOUT,
                )
            return rotated.token

    def new_resource(self) -> str:
        """Ask for a rotated token after creating a resource to access (service-api.md 5,
        "Refreshing", rule 1); debounced like ``refused``.

        Returns the rotated token, or the current one (still valid) when none comes within
        ``refresh_wait_seconds`` (the rotator skips forced refreshes within
        ``MIN_REFRESH_INTERVAL_SECONDS`` of the last one) or none can come (reauthorization
        required: no request is sent).
        """
        with self._refresh_lock:
            current = self._read()
            if current.credential_status == STATUS_ACTIVE and (
                self._request_refresh(current, "new_resource")
                or self._request_pending(current.token)
            ):
                rotated = self._wait_for_other_than(current.token)
                if rotated is not None:
                    return rotated.token
                logger.warning(
                    "no rotated service token after the refresh request; using the current one",
                    extra={"current": fingerprint(current.token)},
                )
            return self._remember(current).token

    # --- reading ----------------------------------------------------------------------------

    def _read(self) -> ServiceTokenDocument:
        """The secret's document, read now (no cache); ``ConsumerError`` when there is none."""
        try:
            text = self._secret_store().read(self.secret_id).text
        except StoreError as exc:
            raise _store_failure(exc) from exc
        if text is None or not text.strip():
            raise ConsumerError(
                f"the service token secret {self.secret_id!r} has no value (or does not exist): "
                f"the stack is not bootstrapped yet: {_BOOTSTRAP_HINT}",
                reason=NOT_BOOTSTRAPPED,
            )
        try:
            document = ServiceTokenDocument.from_json(text)
        except DocumentError as exc:
            raise ConsumerError(
                f"the service token secret {self.secret_id!r} cannot be used: {exc}",
                reason=UNREADABLE,
            ) from exc
        logger.debug(
            "service token secret read",
            extra={
                "token_fingerprint": fingerprint(document.token),
                "expires_at": to_iso(document.expires_at),
            },
        )
        return document

    def _remember(self, document: ServiceTokenDocument) -> ServiceTokenDocument:
        """Cache a usable document; ``ConsumerError`` when its token has expired."""
        now = self.clock.now()
        if now >= document.expires_at:
            raise _expired(document)
        fresh_until = document.expires_at - self.min_validity_seconds
        if now >= fresh_until:
            logger.warning(
                "the published service token expires soon and no fresher one is published",
                extra={"expires_at": to_iso(document.expires_at)},
            )
            fresh_until = min(now + NEAR_EXPIRY_RECHECK_SECONDS, document.expires_at)
        if document.credential_status != STATUS_ACTIVE:
            logger.warning(
                "the stack's refresh credential needs reauthorization: the service token works "
                "until it expires; %s",
                _BOOTSTRAP_HINT,
                extra={"expires_at": to_iso(document.expires_at)},
            )
        with self._cache_lock:
            self._cached, self._cached_until = document, fresh_until
        return document

    def _wait_for_other_than(self, token: str) -> ServiceTokenDocument | None:
        """Poll the secret until it holds a token other than ``token`` (usable, cached), or
        ``refresh_wait_seconds`` pass (``None``)."""
        started = self.clock.now()
        deadline = started + self.refresh_wait_seconds
        while (remaining := deadline - self.clock.now()) > 0:
            self.clock.sleep(min(self.poll_interval_seconds, remaining))
            current = self._read()
            if current.token != token:
                logger.info(
                    "rotated service token published",
                    extra={
                        "current": fingerprint(current.token),
                        "waited_seconds": round(self.clock.now() - started, 1),
                    },
                )
                return self._remember(current)
            _require_active(current)
        return None

    # --- refresh requests -------------------------------------------------------------------

    def _request_pending(self, token: str) -> bool:
        """True when the last refresh request was sent while ``token`` was published (so its
        answer is still to come), within the debounce interval."""
        return self._debounced() and self._requested_for == fingerprint(token)

    def _debounced(self) -> bool:
        requested_at = self._requested_at
        return (
            requested_at is not None
            and self.clock.now() - requested_at < self.request_debounce_seconds
        )

    def _request_refresh(self, current: ServiceTokenDocument, reason: str) -> bool:
        """Send a refresh request unless one was sent within the debounce interval; returns
        whether it was sent."""
        if self._debounced():
            logger.info(
                "refresh already requested recently; not requesting again",
                extra={"reason": reason, "requested_at": to_iso(self._requested_at or 0)},
            )
            return False
        now = self.clock.now()
        detail = {
            "reason": reason,
            "secret_id": self.secret_id,
            "token_fingerprint": fingerprint(current.token),
            "token_expires_at": to_iso(current.expires_at),
            "requested_at": to_iso(now),
        }
        event_id = self._put_event(detail)
        self._requested_at, self._requested_for = now, fingerprint(current.token)
        logger.info("service token refresh requested", extra={**detail, "event_id": event_id})
        return True

    def _put_event(self, detail: dict[str, str]) -> str | None:
        """Put one ``Service Token Refresh Requested`` event on the default bus."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.events_client.put_events(
                Entries=[
                    {
                        "Source": self.event_source,
                        "DetailType": REFRESH_REQUESTED,
                        "Detail": json.dumps(detail, sort_keys=True),
                    }
                ]
            )
        except (ClientError, BotoCoreError) as exc:
            code = (
                exc.response.get("Error", {}).get("Code")
                if isinstance(exc, ClientError)
                else type(exc).__name__
            )
            raise _request_failure(code) from exc
        result = answer["Entries"][0] if answer.get("Entries") else {}
        if answer.get("FailedEntryCount") or "ErrorCode" in result:
            raise _request_failure(result.get("ErrorCode"))
        return result.get("EventId")


class ServiceTokenAuth(AuthBase):
    """``requests`` authentication with the provider's token: sets ``Authorization: Bearer``
    and, when the service answers 401 or 403, gets a new token (``provider.refused``) and
    retries the request once. A request whose body is a stream is not retried."""

    def __init__(self, provider: ServiceTokenProvider) -> None:
        self.provider = provider

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.provider.token()}"
        request.hooks.setdefault("response", []).append(self._on_response)
        return request

    def _on_response(self, response: Response, **kwargs: Any) -> Response:
        """The response hook: one retry with a new token after 401 or 403."""
        request = response.request
        sent = _bearer(request)
        if response.status_code not in _REFUSED_STATUSES or sent is None:
            return response
        if not isinstance(request.body, str | bytes | None):
            return response
        token = self.provider.refused(sent)
        retry = request.copy()
        retry.hooks = {"response": []}  # the copy shares the original's hooks: never re-run them
        retry.headers["Authorization"] = f"Bearer {token}"
        logger.info(
            "service answered %s; retrying once with a new token",
            response.status_code,
            extra={"refused": fingerprint(sent), "current": fingerprint(token)},
        )
        _ = response.content  # read it, so that the connection goes back to the pool
        response.close()
        retried = response.connection.send(retry, **kwargs)
        retried.history.append(response)
        retried.request = retry
        return retried


def _bearer(request: PreparedRequest) -> str | None:
    value = request.headers.get("Authorization")
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not value or not value.startswith("Bearer "):
        return None
    return value.removeprefix("Bearer ")


def _require_non_negative(**values: float) -> None:
    for name, value in values.items():
        if value < 0:
            raise ConfigurationError(f"{name} must not be negative")


def _require_active(document: ServiceTokenDocument) -> None:
    """A refresh request cannot help once the refresh credential needs reauthorization."""
    if document.credential_status != STATUS_ACTIVE:
        raise _reauthorization_required(document)


def _reauthorization_required(document: ServiceTokenDocument) -> ConsumerError:
    return ConsumerError(
        "the stack's refresh credential needs reauthorization, so no new service token can "
        f"be made (the published one expires at {to_iso(document.expires_at)}); a person must "
        f"{_BOOTSTRAP_HINT}",
        reason=REAUTHORIZATION_REQUIRED,
    )


def _expired(document: ServiceTokenDocument) -> ConsumerError:
    if document.credential_status != STATUS_ACTIVE:
        return _reauthorization_required(document)
    return ConsumerError(
        f"the published service token expired at {to_iso(document.expires_at)} and no fresher "
        f"one has been published; {_ROTATOR_HINT}",
        reason=EXPIRED,
    )


def _store_failure(exc: StoreError) -> ConsumerError:
    if isinstance(exc, StoreUnavailableError):
        return ConsumerError(f"{exc}; retry later", reason=UNAVAILABLE)
    return ConsumerError(
        f"{exc}; the workload needs secretsmanager:GetSecretValue on the service token secret "
        "(the stack's ConsumerPolicy grants it)",
        reason=UNREADABLE,
    )


def _request_failure(code: str | None) -> ConsumerError:
    return ConsumerError(
        f"could not request a service token refresh on the default event bus ({code}); the "
        "workload needs events:PutEvents on it",
        reason=REQUEST_FAILED,
    )
