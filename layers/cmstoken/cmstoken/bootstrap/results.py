"""What a bootstrap invocation returns (SPEC section 3): the result of the transition it ended
on, with the message the operator reads. Metadata only: never a token or device code."""

from __future__ import annotations

from typing import Any

from cmstoken.aws.documents import PendingAuthorization, RefreshCredential
from cmstoken.bootstrap.identity import short_identity
from cmstoken.bootstrap.states import Event, Stage, Transition
from cmstoken.core.clock import optional_iso, to_iso
from cmstoken.core.errors import CmsTokenError, VersionQuotaError

# "Approved and stored, but not finished in this invocation: poll again" (status pending).
_APPROVED = "approved"
_NOTHING_PENDING = ("none", "nothing is pending: run start first")
_NOT_PUBLISHED = (
    "failed",
    "authorized and stored, but the service token was not published ({error}); the rotator "
    "publishes it on its next run",
)
_DISCARDED = "Nothing was changed and the approved tokens were discarded."
# A new credential whose token the service refused: it stays the stack's credential (and its
# identity the stack's), but no run can publish a token of it while the service refuses the
# account, so the way out is another account, which the identity pinning lets in only when
# allowed.
REFUSED_CREDENTIAL = (
    "failed",
    "authorized and stored, but not published: {error}. The account that approved may not use "
    "the service, so the rotator's runs are refused too: start again allowing a new identity "
    '("allow_new_identity": true; cmstoken-admin bootstrap --new-identity), approving with an '
    "account that may use the service",
)

# The status and message (``str.format`` fields: ``error``, ``reason``, ``problems``) of the
# transitions an invocation ends on; the others (start, still pending, published) say more.
ENDINGS: dict[tuple[Stage, Event], tuple[str, str]] = {
    (Stage.NONE, Event.POLL): _NOTHING_PENDING,
    (Stage.PENDING, Event.SUPERSEDED): (
        "superseded",
        "the authorization was replaced (by an operator's start) or ended by another poll: its "
        "code is no longer polled, and nothing failed",
    ),
    (Stage.PENDING, Event.EXPIRED): (
        "expired",
        "the code expired before it was approved: run start again",
    ),
    (Stage.PENDING, Event.DENIED): (
        "denied",
        "the authorization was denied in the browser: run start again",
    ),
    (Stage.PENDING, Event.CODE_REFUSED): ("failed", "{error}; run start again"),
    (Stage.PENDING, Event.ANSWER_LOST): (
        "failed",
        "{error}; the identity provider may have answered with the tokens and the answer was "
        "lost, and this invocation got no answer to a poll sent again (it was lost too, or no "
        "time was left for it). Poll again: if the code is then refused, the approval went with "
        "the lost answer (run start again)",
    ),
    (Stage.PENDING, Event.POLL_FAILED): (
        "failed",
        "{error}; the pending authorization stays, poll again",
    ),
    (Stage.PENDING, Event.IDENTITY_MISMATCH): (
        "failed",
        "{reason}. " + _DISCARDED + " If this stack should now use that identity, start again "
        'allowing it ("allow_new_identity": true; cmstoken-admin bootstrap --new-identity)',
    ),
    (Stage.PENDING, Event.UNVERIFIABLE): (
        "failed",
        "the identity provider's answer carries no usable access token ({problems}), so the "
        "new authorization cannot be verified before it replaces the active credential. "
        + _DISCARDED
        + " Run start again",
    ),
    (Stage.CANDIDATE, Event.STALE): (
        "failed",
        "the approved authorization was not finished before its access token expired; nothing "
        "was changed: run start again",
    ),
    (Stage.CANDIDATE, Event.DEFERRED): (
        _APPROVED,
        "approved; the new credential is stored but not verified yet, and the current one "
        "stays in use: poll again to finish",
    ),
    (Stage.CANDIDATE, Event.SUPERSEDED): (
        "failed",
        "another start or poll replaced or finished this authorization meanwhile; run status "
        "to see where the stack stands",
    ),
    (Stage.CANDIDATE, Event.STORE_FAILED): (
        "failed",
        "the new authorization could not be stored ({error}); it is kept and the current "
        "credential stays in use: poll again to finish",
    ),
    (Stage.CANDIDATE, Event.SERVICE_UNAVAILABLE): (
        "failed",
        "approved, but the service could not verify the new authorization ({error}); it is "
        "kept and the current credential stays in use: poll again to finish",
    ),
    (Stage.CANDIDATE, Event.SERVICE_REFUSED): (
        "failed",
        "the service did not accept the new authorization ({error}); the active credential and "
        "the published service token are unchanged. Run start again, approving with an account "
        "that may use the service",
    ),
    (Stage.CREDENTIAL, Event.NOTHING_TO_EXCHANGE): (
        "failed",
        "authorized and stored, but the identity provider's answer carries no usable access "
        "token ({problems}); the rotator refreshes the new credential and publishes its service "
        "token on its next run",
    ),
    (Stage.CREDENTIAL, Event.DEFERRED): (
        _APPROVED,
        "approved; the credential is stored. The next poll (or the rotator's next run) "
        "publishes the service token: poll again",
    ),
    (Stage.CREDENTIAL, Event.PUBLISH_FAILED): _NOT_PUBLISHED,
    (Stage.CREDENTIAL, Event.ALREADY_PUBLISHED): _NOTHING_PENDING,
}


# The failures after which the authorization is kept and another poll can finish it: their
# results say so with ``"retry": true``, for a program that polls on the operator's behalf.
RETRY: frozenset[tuple[Stage, Event]] = frozenset(
    {
        (Stage.PENDING, Event.ANSWER_LOST),
        (Stage.PENDING, Event.POLL_FAILED),
        (Stage.CANDIDATE, Event.STORE_FAILED),
        (Stage.CANDIDATE, Event.SERVICE_UNAVAILABLE),
    }
)


def ending(transition: Transition, **details: object) -> dict[str, Any]:
    """The result of an invocation that ends on ``transition`` (``details`` fill in its
    message). An approval left to the next poll reports ``pending`` with ``approved``; a
    failure another poll can mend has ``retry``."""
    key = transition.stage, transition.event
    status, message = ENDINGS[key]
    text = message.format(**details)
    if status == _APPROVED:
        return {"status": "pending", "approved": True, "message": text}
    return {"status": status, "message": text} | ({"retry": True} if key in RETRY else {})


def failed(error: CmsTokenError) -> dict[str, Any]:
    """The result of a start or poll that failed; one the version budget refused says when a
    version ages out (``retry_at``, when one will)."""
    result: dict[str, Any] = {"status": "failed", "message": str(error)}
    if isinstance(error, VersionQuotaError):
        result["reason"] = "version_budget"
        result["retry_at"] = optional_iso(error.frees_at)
    return result


def refused_credential(error: object) -> dict[str, Any]:
    """The result of a new credential (none was active) whose token the service refused."""
    status, message = REFUSED_CREDENTIAL
    return {"status": status, "message": message.format(error=error)}


def authorized(credential: RefreshCredential, expires_at: float) -> dict[str, Any]:
    """The new credential is in use and its service token published."""
    return {
        "status": "authorized",
        "message": "authorized; the service token is published",
        "service_token_expires_at": to_iso(expires_at),
        "reauthorize_by": optional_iso(credential.reauthorize_by),
        "identity": short_identity(credential.subject_sha256),
    }


def pending(authorization: PendingAuthorization, message: str) -> dict[str, Any]:
    """A pending authorization, with what the operator needs to approve it."""
    return {
        "status": "pending",
        "user_code": authorization.user_code,
        "verification_uri": authorization.verification_uri,
        "verification_uri_complete": authorization.verification_uri_complete,
        "expires_at": to_iso(authorization.expires_at),
        "message": message,
    }


def pending_status(authorization: PendingAuthorization, *, via_links: bool) -> dict[str, Any]:
    """A pending authorization as ``status`` shows it: with its user code to an operator; to
    the links, only the tag of the link that started it (``None``: an operator did)."""
    if via_links:
        return {"link": authorization.link, "expires_at": to_iso(authorization.expires_at)}
    return {
        "user_code": authorization.user_code,
        "verification_uri_complete": authorization.verification_uri_complete,
        "expires_at": to_iso(authorization.expires_at),
    }


def pending_elsewhere(authorization: PendingAuthorization) -> dict[str, Any]:
    """A link's start (or poll) that meets an authorization it did not start: nothing of it
    but that it is pending, and until when."""
    return {
        "status": "pending_elsewhere",
        "expires_at": to_iso(authorization.expires_at),
        "message": "another authorization is pending; a link shows and polls only its own",
    }


def polled_by_link(authorization: PendingAuthorization) -> dict[str, Any]:
    """An operator's poll that meets an authorization a link started: its link's poll polls
    it (two pollers of one code would answer each other's ``slow_down``), and an operator's
    start replaces it."""
    return {
        "status": "pending_elsewhere",
        "expires_at": to_iso(authorization.expires_at),
        "message": "the pending authorization was started by a link, whose own poll polls it: "
        "run start, and yours replaces it",
    }
