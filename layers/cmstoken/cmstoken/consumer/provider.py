"""Consumer helper: read the published service token in any AWS workload, and use it with
``requests``.

``ServiceTokenProvider`` reads the service token secret (``GetSecretValue``) and caches the
document until its token is about to expire; when Secrets Manager cannot be read then, the cached
token is served (with back-off between reads) until it expires. ``ServiceTokenAuth`` sets the
bearer header of ``requests`` calls:

- on 401 (``refused``) the secret is re-read; a different token there is used at once;
  otherwise the helper asks the rotator for a new one with a ``Service Token Refresh
  Requested`` event on the default bus and waits for it. Every thread refused with the same
  token shares that one request and that one wait, and gets its outcome when it ends. When the
  rotator would skip the request (the stack refreshed within its
  ``MIN_REFRESH_INTERVAL_SECONDS``, which the published document carries), the helper says so
  at once instead of asking and waiting;
- on 403 (``replacement``) the secret is re-read and the call retried only when the token
  there changed: a 403 also means "this token may not do that", and no refresh changes that.

``new_resource`` asks for a rotated token right after the workload created a resource it will
use (the API's rule), with the same debounce. The call is retried once.

Secrets Manager answers ``ResourceNotFoundException`` both for a secret that does not exist
where the client asked (a mistyped ARN, another region or account) and for the empty secret of
a stack that is not bootstrapped yet; on that answer (never on the hot path) the helper asks
``DescribeSecret`` (the stack's ConsumerPolicy grants it), which tells the two apart:
``secret_not_found`` names the secret, region and account asked, ``not_bootstrapped`` is the
existing secret with no value. A refresh request that EventBridge refuses (``FailedEntryCount``
in a successful answer) is a ``request_failed`` error naming the entry's error.

boto3 is imported on first use only, in a session of the provider's own; messages and logs carry
fingerprints, never a token.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from requests.auth import AuthBase

from cmstoken.aws import clients
from cmstoken.aws.documents import STATUS_ACTIVE, ServiceTokenDocument
from cmstoken.core.clock import Clock, SystemClock, to_iso
from cmstoken.core.errors import (
    CmsTokenError,
    ConfigurationError,
    DocumentError,
    StoreError,
    StoreUnavailableError,
)
from cmstoken.core.redaction import fingerprint, printable
from cmstoken.core.triggers import REFRESH_REQUESTED

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_secretsmanager import SecretsManagerClient
    from requests import PreparedRequest, Response

    from cmstoken.aws.secrets import SecretStore

logger = logging.getLogger(__name__)

# ConsumerError.reason values.
NOT_BOOTSTRAPPED = "not_bootstrapped"
SECRET_NOT_FOUND = "secret_not_found"  # noqa: S105 (a reason code, not a password)
UNREADABLE = "unreadable"
UNAVAILABLE = "unavailable"
EXPIRED = "expired"
REAUTHORIZATION_REQUIRED = "reauthorization_required"
REQUEST_FAILED = "request_failed"
REFRESH_DEBOUNCED = "refresh_debounced"
REFRESH_TIMEOUT = "refresh_timeout"
STILL_REFUSED = "still_refused"

# A token read inside its last ``min_validity_seconds`` is re-read at most this often.
NEAR_EXPIRY_RECHECK_SECONDS = 5.0
# When a read fails while the cached token is still valid, the cached token is served and the
# next read waits 1, 2, 4... seconds (at most this long), never past the token's expiry.
READ_RETRY_BASE_SECONDS = 1.0
READ_RETRY_MAX_SECONDS = 30.0
# A 403 re-reads the secret at most this often.
FORBIDDEN_RECHECK_SECONDS = 5.0
# The rotator's MIN_REFRESH_INTERVAL_SECONDS (SPEC default) when the published document does not
# carry it (written by an older stack).
DEFAULT_MIN_REFRESH_INTERVAL_SECONDS = 600
_BOOTSTRAP_HINT = "run the bootstrap (cmstoken-admin --stack NAME bootstrap)"
_ROTATOR_HINT = (
    "check the rotator (its log group /cmstoken/STACK/rotator and its RotationFailingAlarm and "
    "AuthorizationRequiredAlarm alarms), or force a rotation (cmstoken-admin --stack NAME rotate)"
)
# PutEvents entry errors that EventBridge documents as retryable (PutEventsResultEntry).
_RETRYABLE_ENTRY_CODES = frozenset({"InternalFailure", "ThrottlingException"})
# Whole-call PutEvents errors that a later request may not meet.
_TRANSIENT_REQUEST_CODES = frozenset(
    {"InternalException", "InternalFailure", "ThrottlingException", "ServiceUnavailable"}
)
# PutEvents errors (of the call or of the entry) that a permission fixes.
_PERMISSION_CODES = frozenset(
    {
        "AccessDeniedException",
        "NotAuthorizedForSourceException",
        "NotAuthorizedForDetailTypeException",
    }
)
# Provider text kept in a message: at most this many characters.
_AWS_TEXT_LIMIT = 200
# new_resource keeps the current token (with a warning) after these outcomes.
_NO_ROTATION = frozenset({REFRESH_DEBOUNCED, REFRESH_TIMEOUT, STILL_REFUSED})


class ConsumerError(CmsTokenError):
    """No usable service token. ``reason`` is one of this module's reason constants
    (``not_bootstrapped``, ``secret_not_found``, ``unreadable``, ``unavailable``, ``expired``,
    ``reauthorization_required``, ``request_failed``, ``refresh_debounced``,
    ``refresh_timeout``, ``still_refused``); ``retry_at`` (epoch seconds) is when a refresh
    request can work again, for the last three."""

    def __init__(self, message: str, *, reason: str, retry_at: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_at = retry_at


@dataclass(frozen=True)
class _Entry:
    """The cached document: served until ``fresh_until``; ``read_at`` is the last successful
    read, ``failures`` the failed reads since then."""

    document: ServiceTokenDocument
    fresh_until: float
    read_at: float
    failures: int = 0


class _Wait:
    """One wait for a token other than a refused one, shared by every thread refused with it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.document: ServiceTokenDocument | None = None
        self.error: BaseException | None = None

    def outcome(self) -> ServiceTokenDocument:
        """The wait's document, or its error raised in the calling thread."""
        error = self.error
        if isinstance(error, ConsumerError):
            raise ConsumerError(
                str(error), reason=error.reason, retry_at=error.retry_at
            ) from error.__cause__
        if error is not None:
            raise error
        assert self.document is not None
        return self.document


class ServiceTokenProvider:
    """The published service token of one stack, read from ``secret_id`` (name or ARN).

    Thread-safe; make one per process and reuse it (in Lambda: at module level). Its AWS
    clients come from a boto3 session of its own, created once, on first use.

    ``min_refresh_interval_seconds`` is used only when the published document does not carry
    the stack's ``MIN_REFRESH_INTERVAL_SECONDS`` (stacks older than this helper).
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
        poll_interval_seconds: float = 5,
        min_refresh_interval_seconds: float = DEFAULT_MIN_REFRESH_INTERVAL_SECONDS,
        event_source: str = "cmstoken.consumer",
    ) -> None:
        if not secret_id:
            raise ConfigurationError("secret_id must name the service token secret")
        _require_non_negative(
            min_validity_seconds=min_validity_seconds,
            refresh_wait_seconds=refresh_wait_seconds,
            min_refresh_interval_seconds=min_refresh_interval_seconds,
        )
        if poll_interval_seconds <= 0:
            raise ConfigurationError("poll_interval_seconds must be positive")
        self.secret_id = secret_id
        self.clock: Clock = clock or SystemClock()
        self.min_validity_seconds = min_validity_seconds
        self.refresh_wait_seconds = refresh_wait_seconds
        self.poll_interval_seconds = poll_interval_seconds
        self.min_refresh_interval_seconds = min_refresh_interval_seconds
        self.event_source = event_source
        self._secrets_client = secrets_client
        self._events_client = events_client
        self._session: Any = None
        self._store: SecretStore | None = None
        self._entry: _Entry | None = None
        self._waits: dict[str, _Wait] = {}
        # (fingerprint of the token it was for, when) of the last refresh request sent.
        self._requested: tuple[str, float] | None = None
        self._lock = threading.Lock()  # the fields above
        self._read_lock = threading.Lock()  # one cache read at a time
        self._clients_lock = threading.Lock()  # the session and the clients

    # --- AWS clients, created once, on first use, from a session of the provider's own ----

    @property
    def secrets_client(self) -> SecretsManagerClient:
        """The Secrets Manager client (honours ``AWS_ENDPOINT_URL``)."""
        return self._secret_store().client

    @property
    def events_client(self) -> EventBridgeClient:
        """The EventBridge client (honours ``AWS_ENDPOINT_URL``)."""
        client = self._events_client
        if client is None:
            with self._clients_lock:
                if self._events_client is None:
                    self._events_client = self._new_client("events")
                client = self._events_client
        return client

    def _secret_store(self) -> SecretStore:
        store = self._store
        if store is None:
            with self._clients_lock:
                if self._store is None:
                    from cmstoken.aws.secrets import SecretStore

                    client = self._secrets_client or self._new_client("secretsmanager")
                    self._store = SecretStore(client)
                store = self._store
        return store

    def _new_client(self, service_name: str) -> Any:
        """A client from the provider's session (the caller holds ``_clients_lock``)."""
        if self._session is None:
            self._session = clients.session()
        return clients.client(service_name, session=self._session)

    # --- the token --------------------------------------------------------------------------

    def token(self) -> str:
        """The service token, from the cache while it has ``min_validity_seconds`` left."""
        return self.document().token

    @property
    def api_url(self) -> str:
        """The management API's address (``{base_url}/api``), for ``f"{api_url}/v3/projects"``."""
        return self.document().api_url

    def document(self) -> ServiceTokenDocument:
        """The published document, cached until ``expires_at - min_validity_seconds``.

        After that one thread re-reads the secret while the others keep the cached token; when
        the read fails the cached token is served until it expires (reads back off meanwhile).
        """
        entry = self._entry
        if entry is not None and self.clock.now() < entry.fresh_until:
            return entry.document
        if entry is not None and self.clock.now() < entry.document.expires_at:
            if not self._read_lock.acquire(blocking=False):
                return entry.document  # another thread is reading; this token still works
        else:
            self._read_lock.acquire()
        try:
            entry = self._entry
            if entry is not None and self.clock.now() < entry.fresh_until:
                return entry.document
            try:
                document = self._read()
            except ConsumerError as exc:
                if entry is None or self.clock.now() >= entry.document.expires_at:
                    raise
                return self._serve_cached(entry, exc)
            return self._remember(document)
        finally:
            self._read_lock.release()

    def refused(self, token: str) -> str:
        """A replacement for ``token``, which the service answered with 401.

        Re-reads the secret; a different token there is returned at once. Otherwise requests
        a refresh and waits up to ``refresh_wait_seconds`` for the rotated token: one request
        and one wait per token, shared by every thread refused with it. Raises
        ``ConsumerError`` when none comes, at once when none can come yet
        (``refresh_debounced``: the stack refreshed within its minimum interval;
        ``still_refused``: this token's refresh was already requested and none came).
        """
        entry = self._entry
        if (
            entry is not None
            and entry.document.token != token
            and self.clock.now() < entry.document.expires_at
        ):
            return entry.document.token  # another thread already replaced it
        return self._shared_wait(token, "refused", None).token

    def replacement(self, token: str) -> str | None:
        """For a 403: the published token when it is no longer ``token``, else ``None``.

        Re-reads the secret (at most every ``FORBIDDEN_RECHECK_SECONDS``) and never requests a
        refresh: a 403 can also mean that the token may not do what was asked.
        """
        entry = self._entry
        if (
            entry is not None
            and entry.document.token != token
            and self.clock.now() < entry.document.expires_at
        ):
            return entry.document.token
        with self._read_lock:
            entry = self._entry
            now = self.clock.now()
            if entry is not None and now < entry.document.expires_at:
                if entry.document.token != token:
                    return entry.document.token
                if now - entry.read_at < FORBIDDEN_RECHECK_SECONDS:
                    return None
            try:
                current = self._remember(self._read())
            except ConsumerError as exc:
                logger.warning(
                    "could not re-read the service token secret after a 403",
                    extra={"reason": exc.reason, "error": str(exc)},
                )
                return None
        if current.token == token:
            return None
        logger.info(
            "service token replaced by the published one after a 403",
            extra={"refused": fingerprint(token), "current": fingerprint(current.token)},
        )
        return current.token

    def new_resource(self) -> str:
        """Ask for a rotated token right after creating a resource to access (service-api.md 5,
        "Refreshing", rule 1): call it then, never on every call.

        Returns the rotated token, or, with a warning, the current one (still valid) when none
        comes within ``refresh_wait_seconds``, or none can come: at once when the stack
        refreshed within its minimum interval (the rotator would skip the request), when the
        current token's refresh was already requested, or when reauthorization is required
        (no request is sent then).
        """
        current = self._read()
        if current.credential_status != STATUS_ACTIVE:
            return self._remember(current).token
        try:
            return self._shared_wait(current.token, "new_resource", current).token
        except ConsumerError as exc:
            if exc.reason not in _NO_ROTATION:
                raise
            logger.warning(
                "no rotated service token for the new resource; using the current one: %s",
                exc,
                extra={"reason": exc.reason, "retry_at": _optional_iso(exc.retry_at)},
            )
        return self._remember(current).token

    # --- the shared wait --------------------------------------------------------------------

    def _shared_wait(
        self, token: str, reason: str, current: ServiceTokenDocument | None
    ) -> ServiceTokenDocument:
        """The outcome of the one wait for a token other than ``token``: this thread runs it
        when none is running, and joins the running one otherwise."""
        with self._lock:
            wait = self._waits.get(token)
            leading = wait is None
            if wait is None:
                wait = self._waits[token] = _Wait()
        if leading:
            try:
                wait.document = self._replace(token, reason, current)
            except BaseException as exc:
                wait.error = exc
                raise
            finally:
                with self._lock:
                    del self._waits[token]
                wait.done.set()
            return wait.document
        wait.done.wait()
        return wait.outcome()

    def _replace(
        self, token: str, reason: str, current: ServiceTokenDocument | None
    ) -> ServiceTokenDocument:
        """Re-read (unless ``current`` was just read), then request a refresh and wait."""
        if current is None:
            current = self._read()
        if current.token != token:
            logger.info(
                "refused service token replaced by the published one",
                extra={"refused": fingerprint(token), "current": fingerprint(current.token)},
            )
            return self._remember(current)
        _require_active(current)
        now = self.clock.now()
        interval = self._interval(current)
        if current.refreshed_at is not None and now < current.refreshed_at + interval:
            ready_at = current.refreshed_at + interval
            raise ConsumerError(
                f"the service refused the service token {fingerprint(token)}, and no refresh "
                f"can replace it before {to_iso(ready_at)}: the stack refreshed it at "
                f"{to_iso(current.refreshed_at)} and its rotator skips forced refreshes within "
                f"{interval:.0f} s of the last one (MIN_REFRESH_INTERVAL_SECONDS); not "
                "requesting one now (a resource created since the last refresh becomes "
                "accessible with the next one)",
                reason=REFRESH_DEBOUNCED,
                retry_at=ready_at,
            )
        with self._lock:
            requested = self._requested
        if requested is not None and requested[0] == fingerprint(token):
            ready_at = requested[1] + interval
            if now < ready_at:
                raise ConsumerError(
                    f"the service refused the service token {fingerprint(token)}; a refresh "
                    f"was requested for it at {to_iso(requested[1])} and no new token came; "
                    f"not asking again before {to_iso(ready_at)}; {_ROTATOR_HINT}",
                    reason=STILL_REFUSED,
                    retry_at=ready_at,
                )
        requested_at = self._request_refresh(current, reason)
        rotated = self._wait_for_other_than(token)
        if rotated is None:
            raise ConsumerError(
                f"the service refused the service token {fingerprint(token)} and no new "
                f"one was published within {self.refresh_wait_seconds:.0f} s of the "
                f"refresh request; {_ROTATOR_HINT}",
                reason=REFRESH_TIMEOUT,
                retry_at=requested_at + interval,
            )
        return rotated

    def _interval(self, document: ServiceTokenDocument) -> float:
        """The stack's minimum interval between forced refreshes."""
        if document.min_refresh_interval_seconds is not None:
            return float(document.min_refresh_interval_seconds)
        return self.min_refresh_interval_seconds

    # --- reading ----------------------------------------------------------------------------

    def _read(self) -> ServiceTokenDocument:
        """The secret's document, read now (no cache); ``ConsumerError`` when there is none."""
        try:
            value = self._secret_store().read(self.secret_id)
        except StoreError as exc:
            raise self._store_failure(exc) from exc
        text = value.text
        if text is None and value.version_id is None:
            raise self._not_found()  # GetSecretValue said ResourceNotFoundException
        if text is None or not text.strip():
            raise _not_bootstrapped(self.secret_id)
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

    def _not_found(self) -> ConsumerError:
        """Why GetSecretValue found nothing: ``DescribeSecret`` answers for the secret itself.
        An existing secret without a current value is the empty secret the stack created (not
        bootstrapped); no secret there is a configuration error. Called only on this path."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.secrets_client.describe_secret(SecretId=self.secret_id)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code") or "Unknown"
            if code == "ResourceNotFoundException":
                return ConsumerError(
                    f"the service token secret {self.secret_id!r} does not exist where it was "
                    f"asked for ({self._where()}): the secret id or the consumer's region is "
                    f"wrong{self._mismatch()}; use the stack's ServiceTokenSecretArn output, "
                    "from a client in the stack's region",
                    reason=SECRET_NOT_FOUND,
                )
            undecided = code
        except BotoCoreError as exc:
            undecided = type(exc).__name__
        else:
            return _not_bootstrapped(self.secret_id)
        return ConsumerError(
            f"Secrets Manager has no value for the service token secret {self.secret_id!r} "
            f"({self._where()}): either the stack is not bootstrapped yet ({_BOOTSTRAP_HINT}) "
            f"or no such secret exists there (the secret id or the consumer's region is "
            f"wrong{self._mismatch()}); DescribeSecret, which tells the two apart, failed "
            f"({undecided}): the stack's ConsumerPolicy grants it",
            reason=NOT_BOOTSTRAPPED,
        )

    def _store_failure(self, exc: StoreError) -> ConsumerError:
        if isinstance(exc, StoreUnavailableError):
            return ConsumerError(f"{exc}; retry later", reason=UNAVAILABLE)
        hint = (
            "the workload needs secretsmanager:GetSecretValue on the service token secret (the "
            "stack's ConsumerPolicy grants it)"
        )
        if exc.code == "AccessDeniedException":
            hint += (
                ", and the secret id must be the stack's ServiceTokenSecretArn output, asked in "
                "the stack's region (that policy allows no other secret)"
            )
        return ConsumerError(f"{exc} ({self._where()}); {hint}", reason=UNREADABLE)

    def _where(self) -> str:
        """The region and account the secret was asked for, for messages: the region from the
        client, the account from the ARN, else from the credentials when they carry it (no
        STS call)."""
        region = self.secrets_client.meta.region_name or "none configured"
        arn = _secret_arn(self.secret_id)
        if arn is not None:
            return f"region {region}, account {arn.account} (from the ARN)"
        account = self._credentials_account()
        if account is not None:
            return f"region {region}, account {account} (of the credentials)"
        return f"region {region}, the credentials' account"

    def _mismatch(self) -> str:
        """Where an ARN names another region or account than the client's, that difference."""
        arn = _secret_arn(self.secret_id)
        if arn is None:
            return ""
        region = self.secrets_client.meta.region_name
        if region and arn.region != region:
            return (
                f" (the ARN is in region {arn.region}, the client asks region {region}: run the "
                f"consumer in {arn.region}, e.g. AWS_REGION={arn.region})"
            )
        account = self._credentials_account()
        if account is not None and arn.account != account:
            return f" (the ARN is in account {arn.account}, the credentials in account {account})"
        return ""

    def _credentials_account(self) -> str | None:
        """The account id of the provider's session's credentials, when they carry one
        (``AWS_ACCOUNT_ID``, a profile's ``aws_account_id``, SSO or assumed-role credentials):
        already resolved, no call. ``None`` for an injected client or credentials without it."""
        from botocore.exceptions import BotoCoreError

        session = self._session
        if session is None:
            return None
        try:
            credentials = session.get_credentials()
            account = getattr(credentials, "account_id", None)
        except BotoCoreError:  # a diagnosis must never hide the error it explains
            return None
        return account if isinstance(account, str) and account else None

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
        with self._lock:
            self._entry = _Entry(document, fresh_until, now)
        return document

    def _serve_cached(self, entry: _Entry, error: ConsumerError) -> ServiceTokenDocument:
        """The cached document after a failed read (it is still valid): the next read backs
        off, never past its expiry."""
        failures = entry.failures + 1
        now = self.clock.now()
        delay = min(READ_RETRY_BASE_SECONDS * 2 ** (failures - 1), READ_RETRY_MAX_SECONDS)
        expires_at = entry.document.expires_at
        with self._lock:
            if self._entry is entry:
                self._entry = replace(
                    entry, fresh_until=min(now + delay, expires_at), failures=failures
                )
        logger.warning(
            "could not read the service token secret; using the cached token, valid until %s",
            to_iso(expires_at),
            extra={"reason": error.reason, "error": str(error), "retry_in_seconds": delay},
        )
        return entry.document

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

    def _request_refresh(self, current: ServiceTokenDocument, reason: str) -> float:
        """Send a refresh request for the current token; returns when it was sent."""
        now = self.clock.now()
        detail = {
            "reason": reason,
            "secret_id": self.secret_id,
            "token_fingerprint": fingerprint(current.token),
            "token_expires_at": to_iso(current.expires_at),
            "requested_at": to_iso(now),
        }
        event_id = self._put_event(detail)
        with self._lock:
            self._requested = (fingerprint(current.token), now)
        logger.info("service token refresh requested", extra={**detail, "event_id": event_id})
        return now

    def _put_event(self, detail: dict[str, str]) -> str:
        """Put one ``Service Token Refresh Requested`` event on the default bus; its event id.
        ``ConsumerError`` when the call fails or EventBridge refuses the entry."""
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
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            transient = code in _TRANSIENT_REQUEST_CODES or status >= 500
            raise self._request_failure(code, transient=transient) from exc
        except BotoCoreError as exc:  # no answer (connection, timeout)
            raise self._request_failure(type(exc).__name__, transient=True) from exc
        # PutEvents answers 200 when it refuses an entry: FailedEntryCount and the entry's
        # ErrorCode and ErrorMessage say so (PutEventsResultEntry).
        entries = answer.get("Entries") or [{}]
        result = entries[0]
        if answer.get("FailedEntryCount") or "ErrorCode" in result or "EventId" not in result:
            code = result.get("ErrorCode") or "no EventId in the answer"
            raise self._request_failure(
                code,
                result.get("ErrorMessage"),
                transient=code in _RETRYABLE_ENTRY_CODES,
            )
        return result["EventId"]

    def _request_failure(
        self, code: str | None, message: str | None = None, *, transient: bool
    ) -> ConsumerError:
        what = f"{code}: {_aws_text(message)}" if message else f"{code}"
        if transient:
            hint = "a retryable failure: EventBridge may take a later request"
        elif code in _PERMISSION_CODES:
            hint = (
                f"the workload needs events:PutEvents on the default bus for source "
                f"{self.event_source!r} (the stack's ConsumerRefreshRequestPolicy grants it for "
                f"'cmstoken.consumer')"
            )
        else:
            hint = "EventBridge refused the event; the rotator was not asked"
        return ConsumerError(
            f"could not request a service token refresh on the default event bus ({what}); {hint}",
            reason=REQUEST_FAILED,
        )


class ServiceTokenAuth(AuthBase):
    """``requests`` authentication with the provider's token: sets ``Authorization: Bearer``.
    When the service answers 401, gets a new token (``provider.refused``) and retries the
    request once; on 403, retries once only when the published token changed
    (``provider.replacement``), and otherwise returns the 403 as it is. A request whose body is
    a stream is not retried."""

    def __init__(self, provider: ServiceTokenProvider) -> None:
        self.provider = provider

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.provider.token()}"
        request.hooks.setdefault("response", []).append(self._on_response)
        return request

    def _on_response(self, response: Response, **kwargs: Any) -> Response:
        """The response hook: one retry with a new token after 401, or after 403 when the
        token changed."""
        request = response.request
        sent = _bearer(request)
        if response.status_code not in (401, 403) or sent is None:
            return response
        if not isinstance(request.body, str | bytes | None):
            return response
        if response.status_code == 401:
            token = self.provider.refused(sent)
        else:
            replacement = self.provider.replacement(sent)
            if replacement is None:
                return response
            token = replacement
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


def _optional_iso(epoch: float | None) -> str | None:
    return None if epoch is None else to_iso(epoch)


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


def _not_bootstrapped(secret_id: str) -> ConsumerError:
    return ConsumerError(
        f"the service token secret {secret_id!r} exists but has no value: the stack is not "
        f"bootstrapped yet: {_BOOTSTRAP_HINT}",
        reason=NOT_BOOTSTRAPPED,
    )


@dataclass(frozen=True)
class _Arn:
    region: str
    account: str


def _secret_arn(secret_id: str) -> _Arn | None:
    """The region and account of a Secrets Manager ARN (``None`` for a name)."""
    parts = secret_id.split(":", 6)
    if len(parts) < 7 or parts[0] != "arn" or parts[2] != "secretsmanager":
        return None
    return _Arn(region=parts[3], account=parts[4])


def _aws_text(text: str) -> str:
    """An error text from AWS, printable and short."""
    text = printable(text)
    if len(text) > _AWS_TEXT_LIMIT:
        text = text[: _AWS_TEXT_LIMIT - 3] + "..."
    return text
