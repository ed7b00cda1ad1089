"""The consumer helper's errors: ``ConsumerError``, its reason codes, and the errors about the
published document that more than one part of the helper raises."""

from __future__ import annotations

from cmstoken.aws.documents import STATUS_ACTIVE, ServiceTokenDocument
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import CmsTokenError

# ConsumerError.reason values.
NOT_BOOTSTRAPPED = "not_bootstrapped"
SECRET_NOT_FOUND = "secret_not_found"  # noqa: S105 (a reason code, not a password)
ACCESS_DENIED = "access_denied"
CANNOT_DECRYPT = "cannot_decrypt"
UNREADABLE = "unreadable"
UNAVAILABLE = "unavailable"
EXPIRED = "expired"
REAUTHORIZATION_REQUIRED = "reauthorization_required"
REQUEST_FAILED = "request_failed"
REFRESH_DEBOUNCED = "refresh_debounced"
REFRESH_TIMEOUT = "refresh_timeout"
STILL_REFUSED = "still_refused"

BOOTSTRAP_HINT = "run the bootstrap (cmstoken-admin --stack NAME bootstrap)"
ROTATOR_HINT = (
    "check the rotator (its log group /cmstoken/STACK/rotator and its RotationFailingAlarm and "
    "AuthorizationRequiredAlarm alarms), or force a rotation (cmstoken-admin --stack NAME rotate)"
)


class ConsumerError(CmsTokenError):
    """No usable service token. ``reason`` is one of this module's reason constants
    (``not_bootstrapped``, ``secret_not_found``, ``access_denied``, ``cannot_decrypt``,
    ``unreadable``, ``unavailable``, ``expired``, ``reauthorization_required``,
    ``request_failed``, ``refresh_debounced``, ``refresh_timeout``, ``still_refused``);
    ``retry_at`` (epoch seconds) is when a refresh request can work again, for the last
    three."""

    def __init__(self, message: str, *, reason: str, retry_at: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_at = retry_at


def require_active(document: ServiceTokenDocument) -> None:
    """A refresh request cannot help once the refresh credential needs reauthorization."""
    if document.credential_status != STATUS_ACTIVE:
        raise reauthorization_required(document)


def reauthorization_required(document: ServiceTokenDocument) -> ConsumerError:
    return ConsumerError(
        "the stack's refresh credential needs reauthorization, so no new service token can "
        f"be made (the published one expires at {to_iso(document.expires_at)}); a person must "
        f"{BOOTSTRAP_HINT}",
        reason=REAUTHORIZATION_REQUIRED,
    )


def expired(document: ServiceTokenDocument) -> ConsumerError:
    if document.credential_status != STATUS_ACTIVE:
        return reauthorization_required(document)
    return ConsumerError(
        f"the published service token expired at {to_iso(document.expires_at)} and no fresher "
        f"one has been published; {ROTATOR_HINT}",
        reason=EXPIRED,
    )


def not_bootstrapped(secret_id: str) -> ConsumerError:
    return ConsumerError(
        f"the service token secret {secret_id!r} exists but has no value: the stack is not "
        f"bootstrapped yet: {BOOTSTRAP_HINT}",
        reason=NOT_BOOTSTRAPPED,
    )
