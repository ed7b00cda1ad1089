"""The project's exception types: one taxonomy that every caller can act on.

- ``TerminalError``: repeating the same request cannot succeed. ``CredentialRejectedError``
  (``invalid_grant``, ``invalid_client``) means a human must authorize again.
- ``TransientError``: the upstream may answer differently later (5xx, 429, timeouts, connection
  errors, garbled bodies); ``retry_after`` carries the upstream's own wait hint when it gave one.
- ``PollAgainError``: the device flow is still going (``authorization_pending``, ``slow_down``).

Messages never contain a token, a refresh token or a device code.
"""

from __future__ import annotations

from cmstoken.core.redaction import printable


class CmsTokenError(Exception):
    """Base class of every error this package raises."""


class ConfigurationError(CmsTokenError):
    """A setting or argument is invalid (bad URL, missing variable, out-of-range number)."""


class DocumentError(CmsTokenError):
    """A stored secret document is not one this version can read."""


class UpstreamError(CmsTokenError):
    """An upstream call failed.

    ``endpoint`` names the call (``refresh``, ``exchange``...), ``status`` is the HTTP status
    when a response arrived, and ``code`` the upstream's error code (``invalid_grant``...).
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        # Upstream text (an error description) goes to terminals and logs: no control codes.
        message = printable(message)
        super().__init__(message)
        self.message = message
        self.endpoint = endpoint
        self.status = status
        self.code = code


class TerminalError(UpstreamError):
    """Retrying the same request will not help."""


class CredentialRejectedError(TerminalError):
    """The refresh token or client is no longer accepted: a new device authorization is needed."""


class InvalidGrantError(CredentialRejectedError):
    """``invalid_grant``: unknown, expired, revoked or reused refresh token or device code."""


class InvalidClientError(CredentialRejectedError):
    """``invalid_client`` / ``unauthorized_client``: the client id is not accepted."""


class AccessDeniedError(TerminalError):
    """``access_denied``: the user cancelled, or the request is not allowed."""


class ExpiredTokenError(TerminalError):
    """``expired_token``: the device code expired before the user authorized it."""


class TokenRefusedError(TerminalError):
    """The service answered 401 or 403: the bearer token is not accepted."""


class RequestRejectedError(TerminalError):
    """Any other 4xx: the request itself is wrong (a bug or an upstream change)."""


class TransientError(UpstreamError):
    """The upstream may succeed later.

    ``retry_after`` is the upstream's wait hint in seconds (``Retry-After`` or
    ``X-RateLimit-Reset``), if any. ``outcome_unknown`` is True when the request may have been
    acted on although no usable answer arrived (read timeout, dropped connection, garbled body).
    """

    def __init__(
        self,
        message: str,
        *,
        endpoint: str,
        status: int | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message, endpoint=endpoint, status=status, code=code)
        self.retry_after = retry_after
        self.outcome_unknown = outcome_unknown


def may_send_again(error: BaseException) -> bool:
    """Whether the request that failed with ``error`` may be sent again as it was.

    Only when it was provably not acted on: it never left (no connection: refused,
    unresolvable, no TLS), or the upstream answered that it did not act (429, 5xx other than a
    gateway's). Not after a timeout, a dropped connection, a gateway error or a garbled body
    (``outcome_unknown``), nor after any 2xx answer: a refresh token or device code the
    upstream may have spent is never presented again while its answer could still come.
    """
    if answered_2xx(error):
        return False
    return isinstance(error, TransientError) and not error.outcome_unknown


def answered_2xx(error: BaseException) -> bool:
    """Whether the error came with a 2xx status: the upstream acted (a refresh token is spent,
    a device code consumed), whatever went wrong with the rest of its answer."""
    status = getattr(error, "status", None)
    return isinstance(status, int) and 200 <= status < 300


class ServerError(TransientError):
    """HTTP 5xx, or an OAuth ``server_error`` / ``temporarily_unavailable``."""


class ExchangeFailedError(ServerError):
    """The service's one documented exchange failure: HTTP 500 "failed to get ... token". It
    may be a passing fault, so it is retried like any 5xx; once the retries are spent it is
    the service's refusal of the raw access token (the only one a new authorization is
    dropped for)."""


class RateLimitedError(TransientError):
    """HTTP 429 (other than the device flow's ``slow_down``)."""


class UpstreamTimeoutError(TransientError):
    """No answer within the timeout."""


class UpstreamConnectionError(TransientError):
    """The connection failed or was dropped."""


class MalformedResponseError(TransientError):
    """A response arrived but is not what the API specifies (not JSON, fields missing, too big)."""


class PollAgainError(UpstreamError):
    """The device flow has not finished yet; keep polling."""


class AuthorizationPendingError(PollAgainError):
    """``authorization_pending``: the user has not authorized yet."""


class SlowDownError(PollAgainError):
    """``slow_down``: poll less often (the interval grows by 5 seconds)."""


class AwsCallError(CmsTokenError):
    """An AWS call failed. ``code`` is the AWS error code (botocore's exception name when no
    answer came), when there is one."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


def aws_error_code(error: BaseException) -> str | None:
    """The AWS error code ``error`` carries (``AwsCallError.code``: ``EncryptionFailure``,
    ``AccessDeniedException``, ``ThrottlingException``..., or botocore's exception name when no
    answer came), else ``None``. Logs name it next to the error's class, which alone does not
    say what AWS refused."""
    return error.code if isinstance(error, AwsCallError) else None


class StoreError(AwsCallError):
    """A Secrets Manager call failed."""


class StoreUnavailableError(StoreError):
    """Throttling, an AWS-side error, or no connection: the same call may succeed later."""


class StoreAccessError(StoreError):
    """The secret cannot be used: missing, access denied, key not usable, or being deleted."""


class StoreKeyError(StoreAccessError):
    """Secrets Manager cannot use the secret's KMS key for this caller: a ``KMS_KEY_CODES``
    error, an ``AccessDeniedException`` about KMS (its key policy refused the caller), or a
    secret of another account encrypted with the AWS managed key (which cannot be shared).
    The fix is the key or the key's policy, not a ``secretsmanager`` permission."""


# The AWS error codes of a KMS key that Secrets Manager cannot use for a secret (disabled,
# pending deletion, missing, or its key policy refusing the caller): ``StoreAccessError``s
# whose fix is the key, not a secretsmanager permission.
KMS_KEY_CODES = frozenset(
    {
        "DecryptionFailure",
        "EncryptionFailure",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSInvalidStateException",
        "KMSNotFoundException",
    }
)


class VersionConflictError(StoreError):
    """Another writer created the version this write would have created: re-read and decide."""


class EventBusError(AwsCallError):
    """An EventBridge ``PutEvents`` call failed, or EventBridge refused its entry; the message
    is the code, with EventBridge's text about a refused entry when it gave one."""


class EventBusUnavailableError(EventBusError):
    """Throttling, an AWS-side error, or no answer: a later request may be taken."""


class EventBusAccessError(EventBusError):
    """The caller may not put this event: a permission fixes it."""


class LinkStateError(AwsCallError):
    """A call to the re-authorization links' DynamoDB table failed."""


class LinkStateUnavailableError(LinkStateError):
    """Throttling, an AWS-side error, or no answer: the same call may succeed later."""


class LinkStateAccessError(LinkStateError):
    """The table cannot be used: missing, access denied, or the key not usable."""


class FunctionCallError(AwsCallError):
    """Invoking another function of the stack failed: the call was refused (missing, access
    denied) or could not be made."""


class FunctionUnavailableError(FunctionCallError):
    """Throttling, an AWS-side error, or no answer: the same call may succeed later."""


class FunctionFailedError(FunctionCallError):
    """The function ran and raised (``code`` is its error type), or its answer was not JSON."""


class TopicError(AwsCallError):
    """Publishing to the stack's SNS topic failed (``code`` is the AWS error code)."""


class RotationError(CmsTokenError):
    """The rotator could not finish; the message says why and what to do."""


class NotBootstrappedError(RotationError):
    """The refresh credential secret holds no credential: run the bootstrap."""


class ReauthorizationRequiredError(RotationError):
    """The identity provider refused the refresh credential: a person must authorize again."""


class VerificationFailedError(RotationError):
    """The new service token was refused by the project listing; whatever was published
    before stays (the message says whether a token was)."""


class LeaseHeldError(RotationError):
    """Another rotator invocation, which may still be running, holds the lease over the stored
    refresh token: this run fails so that Lambda retries it once that one has finished."""


class InsufficientTimeError(RotationError):
    """Too little of the invocation is left to refresh safely; the platform retries later."""


class RefreshBackoffError(RotationError):
    """Refresh attempts keep failing and the next may not start yet (``core.refresh_backoff``):
    the run fails without a write, so that its failure is seen and the platform retries."""


class CredentialLostError(RotationError):
    """A refresh succeeded but its rotated refresh token could not be stored before the
    invocation's deadline: the token is lost, and a person will likely have to authorize
    again."""


class VersionQuotaError(RotationError):
    """An action not started (a refresh, a bootstrap start or poll): its writes would pass
    what its caller may fill of Secrets Manager's quota for the refresh credential's versions
    (``core.version_budget``). ``frees_at``: when a version ages out (``None``: none will)."""

    def __init__(self, message: str, *, frees_at: float | None = None) -> None:
        super().__init__(message)
        self.frees_at = frees_at
