"""The rotator's decisions, as pure functions of what a run has read (SPEC sections 3 and 4).

Whether a run is due or skipped (the debounce on ``refreshed_at`` included), whether a lease is
another run's, whether a stored raw access token is exchanged instead of refreshing, what a
failed refresh means for the lease, what a refresh's answer makes of the credential and of the
newest document, what a refused credential becomes, and the result a run returns. Nothing here
reads a clock (``now`` is passed), a store or the network, or logs: ``Rotator`` reads, applies
these and writes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    STATUS_REAUTHORIZATION_REQUIRED,
    Lease,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.core.clock import optional_iso
from cmstoken.core.errors import answered_2xx
from cmstoken.core.redaction import fingerprint
from cmstoken.core.refresh_backoff import Failures

if TYPE_CHECKING:
    from cmstoken.upstream.models import TokenAnswer

OUTCOME_ROTATED = "rotated"
OUTCOME_SKIPPED = "skipped"
OUTCOME_REAUTHORIZATION_REQUIRED = "reauthorization_required"

# Why a run goes on (the reason of its result, and of its refresh in the logs).
DUE_MISSING = "service token missing or unreadable"
DUE_MARKED = "credential marked for reauthorization"
DUE_EXPIRING = "service token expires within the refresh margin"
DUE_FORCED = "forced"
EXCHANGED_STORED = "exchanged the stored raw access token"
# Why a run ends without calling the identity provider.
SKIP_FRESH = "service token is fresh"
SKIP_DEBOUNCED = "forced refresh debounced (refreshed recently)"
SKIP_LEASE_HELD = "another rotation holds the lease"
RUN_BOOTSTRAP = "the refresh credential was refused; run the bootstrap again"

# A stored raw access token is exchanged only while it has at least this much life left.
RAW_TOKEN_MIN_SECONDS = 300.0
# A lease outlives its invocation's deadline by this much.
LEASE_GRACE_SECONDS = 30.0


@dataclass(frozen=True)
class RotationResult:
    """What a run did, with the metadata (never a secret) that metrics and callers need."""

    outcome: str
    reason: str
    service_token_expires_at: float | None = None
    refreshed_at: float | None = None
    authorized_at: float | None = None
    reauthorize_by: float | None = None
    refreshed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The function's JSON result."""
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "refreshed": self.refreshed,
            "service_token_expires_at": optional_iso(self.service_token_expires_at),
            "refreshed_at": optional_iso(self.refreshed_at),
            "reauthorize_by": optional_iso(self.reauthorize_by),
        }


@dataclass(frozen=True)
class Due:
    """Whether a run goes on to read the credential (``skipped`` false), and why."""

    reason: str
    skipped: bool = False


class RefreshFailure(enum.Enum):
    """What a failed refresh (other than a refused credential) means for the token sent."""

    SPENT = "spent"  # answered 2xx without a usable refresh token: the answer is lost
    UNKNOWN = "unknown"  # no answer can arrive any more: the provider may have acted on it
    NOT_ACTED_ON = "not acted on"  # a retry may send it again

    @property
    def answer_lost(self) -> bool:
        """Whether the provider may have rotated the token and its answer can no longer
        arrive: presenting the same token again at once is the only way to recover it."""
        return self is not RefreshFailure.NOT_ACTED_ON


class LeaseVerdict(enum.Enum):
    """What a run that read the credential does about its lease (``lease_verdict``)."""

    FREE = "free"  # no lease, this run's, lapsed, or its holder ended with nothing at risk
    TAKE_OVER = "take over"  # its holder ended and may have spent the stored token: present it
    HELD = "held"  # another run may be publishing a refresh it stored: skip
    AT_RISK = "at risk"  # another run may be refreshing the stored token: fail, Lambda retries


# --- is the run due -----------------------------------------------------------------------------


def debounced(refreshed_at: float | None, *, now: float, min_interval: float) -> bool:
    """Whether a forced run comes within ``min_interval`` of the last refresh (a bootstrap
    counts as one)."""
    return refreshed_at is not None and now - refreshed_at < min_interval


def due(
    published: ServiceTokenDocument | None,
    *,
    forced: bool,
    now: float,
    margin: float,
    min_interval: float,
) -> Due:
    """From the published document alone: due when it is missing or unreadable, marked for
    reauthorization, or expires within ``margin``; otherwise only a forced run goes on, unless
    it is debounced."""
    if published is None:
        return Due(DUE_MISSING)
    if published.credential_status != STATUS_ACTIVE:
        return Due(DUE_MARKED)
    if published.expires_at - now <= margin:
        return Due(DUE_EXPIRING)
    if not forced:
        return Due(SKIP_FRESH, skipped=True)
    if debounced(published.refreshed_at, now=now, min_interval=min_interval):
        return Due(SKIP_DEBOUNCED, skipped=True)
    return Due(DUE_FORCED)


def skip_reason(
    credential: RefreshCredential,
    lease: LeaseVerdict,
    *,
    due_reason: str,
    now: float,
    min_interval: float,
) -> str | None:
    """Why a due run stops once it has read the active credential and judged its lease
    (``None``: it goes on): a lease another run holds over a refresh it stored, or a forced
    run debounced by the credential's own ``refreshed_at`` (the published copy may lag). A run
    that takes over a lease is never debounced: it presents a token that may be spent."""
    if lease is LeaseVerdict.HELD:
        return SKIP_LEASE_HELD
    if (
        lease is LeaseVerdict.FREE
        and due_reason == DUE_FORCED
        and debounced(credential.refreshed_at, now=now, min_interval=min_interval)
    ):
        return SKIP_DEBOUNCED
    return None


# --- the lease ----------------------------------------------------------------------------------


def holds(lease: Lease | None, owner: str) -> bool:
    """Whether ``lease`` is the invocation ``owner``'s."""
    return lease is not None and lease.owner == owner


def lease_verdict(
    lease: Lease | None,
    credential: RefreshCredential,
    *,
    owner: str,
    now: float,
    one_at_a_time: bool,
) -> LeaseVerdict:
    """What a run does about the lease it read with ``credential``.

    A lease of another invocation puts the stored refresh token at risk while it still holds
    the token the lease's holder presents (``presents``; unknown in an older lease): the holder
    may have spent it and not stored the answer. Whether the holder may still be running
    decides the rest. With reserved concurrency 1 (``one_at_a_time``) Lambda runs one rotator
    invocation at a time, so the holder has ended (a crash, a timeout, a failure that released
    nothing): a lease at risk is taken over at once, since presenting the token again is the
    only recovery and it works only inside the provider's reuse interval; Lambda's retry of the
    failed holder comes a minute later, and a run that skipped here would return success and
    leave the spent token to the next schedule, an hour on. Without that reservation the holder
    may still be refreshing, and presenting its token beside it would be a reuse: the run fails
    (``AT_RISK``), so that Lambda retries it after the holder has stored, released, or lapsed.
    A lease whose refresh is stored risks nothing: skipped while its holder may be publishing,
    ignored when the holder has ended. A lapsed lease is free."""
    if lease is None or holds(lease, owner) or lease.expires_at <= now:
        return LeaseVerdict.FREE
    at_risk = lease.presents is None or lease.presents == fingerprint(credential.refresh_token)
    if one_at_a_time:
        return LeaseVerdict.TAKE_OVER if at_risk else LeaseVerdict.FREE
    return LeaseVerdict.AT_RISK if at_risk else LeaseVerdict.HELD


def new_lease(owner: str, deadline: float, credential: RefreshCredential) -> Lease:
    """The lease a run claims to present ``credential``'s refresh token: it outlives the
    invocation's deadline by ``LEASE_GRACE_SECONDS``."""
    return Lease(
        owner=owner,
        expires_at=deadline + LEASE_GRACE_SECONDS,
        presents=fingerprint(credential.refresh_token),
    )


# --- exchange or refresh ------------------------------------------------------------------------


def exchange_stored(
    raw: RawAccessToken,
    credential: RefreshCredential,
    published: ServiceTokenDocument | None,
    *,
    now: float,
) -> bool:
    """Whether the stored raw access token is exchanged instead of refreshing: it comes from a
    refresh whose service token never reached the published document, and has at least
    ``RAW_TOKEN_MIN_SECONDS`` of life left."""
    if raw.expires_at - now < RAW_TOKEN_MIN_SECONDS:
        return False
    return (
        published is None
        or published.credential_status != STATUS_ACTIVE
        or int(published.issued_at) < int(credential.refreshed_at)
    )


def too_late_to_refresh(*, now: float, deadline: float, guard: float) -> bool:
    """Whether less than ``guard`` (the claim, the refresh's whole time limit twice, and the
    time to store its answer) is left before ``deadline``."""
    return deadline - now < guard


def too_late_refusal(*, now: float, deadline: float, guard: float) -> str | None:
    """Why no refresh may start now (``too_late_to_refresh``); ``None``: it may."""
    if not too_late_to_refresh(now=now, deadline=deadline, guard=guard):
        return None
    return (
        f"only {deadline - now:.0f} s left of the invocation; not starting a refresh (needs "
        f"{guard:.0f} s to wait for its answer and store it); retry later"
    )


def refresh_failure(error: BaseException) -> RefreshFailure:
    """What a failed refresh means: spent when the provider answered 2xx (its answer
    unreadable), unknown when no answer can arrive any more for a request it may have acted on
    (the connection closed without one, a gateway's 502/504, the time limit passed), otherwise
    not acted on."""
    if answered_2xx(error):
        return RefreshFailure.SPENT
    if getattr(error, "outcome_unknown", False):
        return RefreshFailure.UNKNOWN
    return RefreshFailure.NOT_ACTED_ON


# --- what a refresh's answer makes of the credential ------------------------------------------


def rotated_credential(credential: RefreshCredential, answer: TokenAnswer) -> RefreshCredential:
    """The credential with the answer's refresh token, refreshed when the answer came, active."""
    return replace(
        credential,
        refresh_token=answer.refresh_token,
        refreshed_at=answer.received_at,
        status=STATUS_ACTIVE,
    )


def usable_raw_token(answer: TokenAnswer) -> RawAccessToken | None:
    """The answer's access token, kept only when it is usable: otherwise the next run refreshes
    again (with the refresh token stored) instead of exchanging it."""
    if answer.access_token is None or answer.problems:
        return None
    return RawAccessToken(
        token=answer.access_token,
        expires_at=answer.access_token_expires_at,
        expires_at_assumed=answer.expiry_assumed,
    )


def _still(document: RefreshSecret, refresh_token: str) -> RefreshCredential | None:
    """The document's credential while it still holds ``refresh_token``; ``None`` once another
    writer rotated or replaced it (a new authorization)."""
    current = document.credential
    if current is None or current.refresh_token != refresh_token:
        return None
    return current


def merge_rotation(
    document: RefreshSecret,
    *,
    previous: RefreshCredential,
    rotated: RefreshCredential,
    raw: RawAccessToken | None,
    lease: Lease | None,
    failures: Failures | None = None,
) -> RefreshSecret | None:
    """``document`` (the newest, with any other writer's fields) holding the rotated
    credential, its raw access token, the claim's lease and ``failures``, the streak this
    attempt makes if its token is not published (a publication ends it); ``None`` when a new
    authorization replaced ``previous`` meanwhile."""
    if _still(document, previous.refresh_token) is None:
        return None
    return replace(
        document, credential=rotated, raw_access_token=raw, lease=lease, failures=failures
    )


# --- a refused credential -----------------------------------------------------------------------


def mark_refused(document: RefreshSecret, *, refused: str, owner: str) -> RefreshSecret | None:
    """``document`` with its credential marked ``reauthorization_required`` and ``owner``'s
    lease given back (a pending authorization or a candidate stays); ``None`` when the stored
    refresh token is no longer ``refused``: another writer rotated or replaced it, a race and
    not a refusal."""
    stored = _still(document, refused)
    if stored is None:
        return None
    return replace(
        document,
        credential=replace(stored, status=STATUS_REAUTHORIZATION_REQUIRED),
        lease=None if holds(document.lease, owner) else document.lease,
    )


def published_still_active(published: ServiceTokenDocument | None) -> bool:
    """Whether the published copy of a refused credential still says active: the run that
    marked the credential ended (a crash, a timeout) before marking the published copy."""
    return published is not None and published.credential_status == STATUS_ACTIVE


def marked_published(published: ServiceTokenDocument) -> ServiceTokenDocument:
    """The published document saying that authorization is required."""
    return replace(published, credential_status=STATUS_REAUTHORIZATION_REQUIRED)


# --- results ------------------------------------------------------------------------------------


def skipped(reason: str, published: ServiceTokenDocument | None) -> RotationResult:
    """A run that ended before refreshing, with the published document's metadata."""
    return RotationResult(
        outcome=OUTCOME_SKIPPED,
        reason=reason,
        service_token_expires_at=published.expires_at if published else None,
        refreshed_at=published.refreshed_at if published else None,
        reauthorize_by=published.reauthorize_by if published else None,
    )


def rotated(
    reason: str,
    credential: RefreshCredential | None,
    published: ServiceTokenDocument | None,
    *,
    refreshed: bool,
) -> RotationResult:
    """A run that published a service token (``refreshed``: after its own refresh)."""
    return _with_metadata(OUTCOME_ROTATED, reason, credential, published, refreshed=refreshed)


def reauthorization_required(
    credential: RefreshCredential, published: ServiceTokenDocument | None
) -> RotationResult:
    """A run that found the credential refused by an earlier one."""
    return _with_metadata(OUTCOME_REAUTHORIZATION_REQUIRED, RUN_BOOTSTRAP, credential, published)


def _with_metadata(
    outcome: str,
    reason: str,
    credential: RefreshCredential | None,
    published: ServiceTokenDocument | None,
    *,
    refreshed: bool = False,
) -> RotationResult:
    return RotationResult(
        outcome=outcome,
        reason=reason,
        refreshed=refreshed,
        service_token_expires_at=published.expires_at if published else None,
        refreshed_at=credential.refreshed_at if credential else None,
        authorized_at=credential.authorized_at if credential else None,
        reauthorize_by=credential.reauthorize_by if credential else None,
    )
