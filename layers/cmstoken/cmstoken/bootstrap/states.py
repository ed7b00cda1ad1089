"""The device authorization's stages, the events that move it, and the pure transitions.

One authorization goes through these stages (``Stage``): ``start`` makes it *pending*; the
poll's answers keep it pending or end it (*expired*, *denied*, *failed*), or approve it. An
operator's start replaces a pending authorization a link started: that one is *superseded*, and
its link's poll stops without polling its code again. An
approval is *refused* (another identity, or nothing to verify it with over an active
credential), or stored: as the *credential* when none is active, else as the *candidate* next
to the active one. A candidate's service token is exchanged and verified first; only then is it
promoted to the credential, and a refusal *drops* it. A credential's service token is then
published (*authorized*).

``TRANSITIONS`` is the table: for each (stage, event), the next stage and the ``Action`` (what
the shell writes to the refresh credential document). A pair not in the table cannot happen:
``step`` refuses it. The functions below read a document's stage and compute the document each
write leaves; the shell applies them to the newest document it reads (``CredentialVault``
merges), and re-applies them when another writer came first.

Nothing here reads the clock, the store or the upstream, or logs: the times come in as ``now``
and ``deadline``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import NamedTuple

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    CandidateCredential,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
)
from cmstoken.bootstrap.identity import identity_refusal
from cmstoken.core.errors import (
    AccessDeniedError,
    CmsTokenError,
    ExchangeFailedError,
    ExpiredTokenError,
    StoreError,
    TerminalError,
    TransientError,
    may_send_again,
)

# The exchange, verification and publication of a new authorization start only with this much
# of the invocation left; with less, the credential is stored and the next poll finishes.
FINISH_MIN_SECONDS = 15.0
# A stored raw access token is exchanged only while it has this much life left.
RAW_TOKEN_MIN_SECONDS = 60.0


class Stage(StrEnum):
    """Where one device authorization stands (the last seven end it)."""

    NONE = "none"  # nothing pending, nothing approved to finish
    PENDING = "pending"  # the device code waits for the user's approval
    CANDIDATE = "candidate"  # approved over an active credential; not verified yet
    CREDENTIAL = "credential"  # approved (or promoted) as the credential; token not published
    AUTHORIZED = "authorized"  # the credential's service token is published
    EXPIRED = "expired"  # the code expired unapproved
    DENIED = "denied"  # the user refused
    FAILED = "failed"  # the identity provider refused the code otherwise
    REFUSED = "refused"  # the approval was refused before being stored; tokens discarded
    DROPPED = "dropped"  # the candidate was removed: both secrets as before ``start``
    SUPERSEDED = "superseded"  # an operator's start replaced it, or a poll finished the candidate


class Event(StrEnum):
    """What happened to an authorization: an action, an upstream answer, a write's outcome."""

    START = "start"  # a start, before it asks for a device code
    TAKE_OVER = "take_over"  # an operator's start over a live authorization a link started
    POLL = "poll"  # a poll, when there is nothing to poll or finish
    STILL_PENDING = "still_pending"  # authorization_pending / slow_down until the poll stopped
    POLL_FAILED = "poll_failed"  # the poll's transient failures outlived their retries
    ANSWER_LOST = "answer_lost"  # a poll the provider may have answered with the tokens
    EXPIRED = "expired"  # expired_token, or no poll left before the code expires
    DENIED = "denied"  # access_denied
    CODE_REFUSED = "code_refused"  # another terminal answer to the poll
    APPROVED = "approved"  # tokens, and no active credential
    APPROVED_OVER_ACTIVE = "approved_over_active"  # tokens, over an active credential
    IDENTITY_MISMATCH = "identity_mismatch"  # tokens of another identity, or of none readable
    UNVERIFIABLE = "unverifiable"  # no usable access token to verify them over an active one
    DEFERRED = "deferred"  # too little of the invocation left to exchange and verify
    STALE = "stale"  # the candidate's access token expired before it was finished
    VERIFIED = "verified"  # the service exchanged and accepted the new token
    SERVICE_REFUSED = "service_refused"  # the service refused the exchange or verification
    SERVICE_UNAVAILABLE = "service_unavailable"  # transient failures outlived their retries
    STORE_FAILED = "store_failed"  # the promotion could not be written
    SUPERSEDED = "superseded"  # the code or candidate polled or finished is no longer stored
    NOTHING_TO_EXCHANGE = "nothing_to_exchange"  # no usable access token came with it
    PUBLISHED = "published"  # the service token is written where consumers read it
    PUBLISH_FAILED = "publish_failed"  # the exchange, verification or write failed
    ALREADY_PUBLISHED = "already_published"  # the rotator (or a poll) published it meanwhile


class Action(StrEnum):
    """What the shell writes to the refresh credential document on a transition."""

    NOTHING = "nothing"  # no write
    STORE_PENDING = "store_pending"  # the new pending authorization; any candidate dropped
    KEEP_SCHEDULE = "keep_schedule"  # the poll schedule, when the next poll needs it
    FORGET_PENDING = "forget_pending"  # remove the pending authorization (only that one)
    STORE_CREDENTIAL = "store_credential"  # the approval becomes the credential
    STORE_CANDIDATE = "store_candidate"  # the approval waits next to the active credential
    PROMOTE = "promote"  # the verified candidate becomes the credential
    DROP_CANDIDATE = "drop_candidate"  # remove the candidate (only that one)


class Transition(NamedTuple):
    """One row of the table."""

    stage: Stage
    event: Event
    next: Stage
    action: Action


_S, _E, _A = Stage, Event, Action
TRANSITIONS: tuple[Transition, ...] = tuple(
    Transition(*row)
    for row in (
        (_S.NONE, _E.START, _S.PENDING, _A.STORE_PENDING),
        (_S.CANDIDATE, _E.START, _S.PENDING, _A.STORE_PENDING),
        (_S.PENDING, _E.START, _S.PENDING, _A.NOTHING),
        (_S.PENDING, _E.TAKE_OVER, _S.PENDING, _A.STORE_PENDING),
        (_S.PENDING, _E.SUPERSEDED, _S.SUPERSEDED, _A.NOTHING),
        (_S.NONE, _E.POLL, _S.NONE, _A.NOTHING),
        (_S.PENDING, _E.STILL_PENDING, _S.PENDING, _A.KEEP_SCHEDULE),
        (_S.PENDING, _E.POLL_FAILED, _S.PENDING, _A.KEEP_SCHEDULE),
        (_S.PENDING, _E.ANSWER_LOST, _S.PENDING, _A.KEEP_SCHEDULE),
        (_S.PENDING, _E.EXPIRED, _S.EXPIRED, _A.FORGET_PENDING),
        (_S.PENDING, _E.DENIED, _S.DENIED, _A.FORGET_PENDING),
        (_S.PENDING, _E.CODE_REFUSED, _S.FAILED, _A.FORGET_PENDING),
        (_S.PENDING, _E.IDENTITY_MISMATCH, _S.REFUSED, _A.FORGET_PENDING),
        (_S.PENDING, _E.UNVERIFIABLE, _S.REFUSED, _A.FORGET_PENDING),
        (_S.PENDING, _E.APPROVED, _S.CREDENTIAL, _A.STORE_CREDENTIAL),
        (_S.PENDING, _E.APPROVED_OVER_ACTIVE, _S.CANDIDATE, _A.STORE_CANDIDATE),
        (_S.CANDIDATE, _E.DEFERRED, _S.CANDIDATE, _A.NOTHING),
        (_S.CANDIDATE, _E.STALE, _S.DROPPED, _A.DROP_CANDIDATE),
        (_S.CANDIDATE, _E.VERIFIED, _S.CREDENTIAL, _A.PROMOTE),
        (_S.CANDIDATE, _E.SERVICE_REFUSED, _S.DROPPED, _A.DROP_CANDIDATE),
        (_S.CANDIDATE, _E.SERVICE_UNAVAILABLE, _S.CANDIDATE, _A.NOTHING),
        (_S.CANDIDATE, _E.STORE_FAILED, _S.CANDIDATE, _A.NOTHING),
        (_S.CANDIDATE, _E.SUPERSEDED, _S.SUPERSEDED, _A.NOTHING),
        (_S.CREDENTIAL, _E.NOTHING_TO_EXCHANGE, _S.CREDENTIAL, _A.NOTHING),
        (_S.CREDENTIAL, _E.DEFERRED, _S.CREDENTIAL, _A.NOTHING),
        (_S.CREDENTIAL, _E.PUBLISHED, _S.AUTHORIZED, _A.NOTHING),
        (_S.CREDENTIAL, _E.PUBLISH_FAILED, _S.CREDENTIAL, _A.NOTHING),
        (_S.CREDENTIAL, _E.ALREADY_PUBLISHED, _S.AUTHORIZED, _A.NOTHING),
    )
)
_TABLE = {(row.stage, row.event): row for row in TRANSITIONS}


class UnknownTransitionError(ValueError):
    """An event that cannot happen in a stage (a bug of the shell)."""


def step(stage: Stage, event: Event) -> Transition:
    """The transition ``event`` takes from ``stage``; ``UnknownTransitionError`` when none."""
    try:
        return _TABLE[stage, event]
    except KeyError:
        raise UnknownTransitionError(f"no transition from {stage} on {event}") from None


# --- the stage a stored document is in ---------------------------------------------------------


def start_stage(document: RefreshSecret, now: float) -> Stage:
    """What a start meets: a live pending authorization (kept), else a candidate (the new
    authorization replaces it), else nothing (an expired pending one is replaced too)."""
    pending = document.pending
    if pending is not None and pending.expires_at > now:
        return Stage.PENDING
    return Stage.NONE if document.candidate is None else Stage.CANDIDATE


def start_event(document: RefreshSecret, now: float, link: str | None) -> Event:
    """What a start is (``link``: the tag of the link asking, ``None``: an operator): an
    operator's over a live authorization a link started takes it over (``takes_over``)."""
    pending = document.pending
    if pending is None or start_stage(document, now) is not Stage.PENDING:
        return Event.START
    return Event.TAKE_OVER if takes_over(link, pending) else Event.START


def takes_over(link: str | None, pending: PendingAuthorization) -> bool:
    """Whether a start by ``link`` replaces the live ``pending``: an operator's start replaces
    a link's (whose background poll would otherwise poll the code the operator approves, and
    the two answer each other's ``slow_down``); any other start keeps what is pending."""
    return link is None and pending.link is not None


def poll_stage(document: RefreshSecret, now: float) -> Stage:
    """What a poll works on: a candidate to finish, else the pending authorization, else a new
    credential whose service token may still need publishing (``awaits_publication``)."""
    if document.candidate is not None:
        return Stage.CANDIDATE
    if document.pending is not None:
        return Stage.PENDING
    return Stage.CREDENTIAL if awaits_publication(document, now) else Stage.NONE


def awaits_publication(document: RefreshSecret, now: float) -> bool:
    """Whether the credential is an active, never refreshed authorization whose stored access
    token can still be exchanged (unless its token was published meanwhile, which only the
    published document tells)."""
    credential, raw = document.credential, document.raw_access_token
    return (
        credential is not None
        and raw is not None
        and credential.status == STATUS_ACTIVE
        and int(credential.refreshed_at) == int(credential.authorized_at)
        and raw.expires_at - now >= RAW_TOKEN_MIN_SECONDS
    )


# --- events from what the shell met ------------------------------------------------------------


def poll_event(error: CmsTokenError) -> Event:
    """The event of a poll that ended in ``error``."""
    if isinstance(error, ExpiredTokenError):
        return Event.EXPIRED
    if isinstance(error, AccessDeniedError):
        return Event.DENIED
    if isinstance(error, TerminalError):
        return Event.CODE_REFUSED
    return Event.POLL_FAILED if may_send_again(error) else Event.ANSWER_LOST


def candidate_event(
    candidate: CandidateCredential, now: float, deadline: float, *, just_approved: bool
) -> Event | None:
    """Why a candidate cannot be finished now (``None``: it can). Right after the approval the
    exchange is tried whatever lifetime the answer stated (a sloppy one may say 0 s): only the
    service's refusal drops the approval then."""
    if not just_approved and candidate.raw_access_token.expires_at - now < RAW_TOKEN_MIN_SECONDS:
        return Event.STALE
    return Event.DEFERRED if deadline - now < FINISH_MIN_SECONDS else None


def credential_event(raw: RawAccessToken | None, now: float, deadline: float) -> Event | None:
    """Why a new credential's service token cannot be published now (``None``: it can)."""
    if raw is None:
        return Event.NOTHING_TO_EXCHANGE
    return Event.DEFERRED if deadline - now < FINISH_MIN_SECONDS else None


def verification_event(error: CmsTokenError) -> Event:
    """The event of a candidate's exchange, verification or promotion that ended in ``error``:
    a refusal is the service's documented exchange failure, a 401/403 of the verification, or
    another answer saying the request is wrong; a transient failure (5xx, 429, timeout,
    connection) is none."""
    if isinstance(error, StoreError):
        return Event.STORE_FAILED
    if isinstance(error, ExchangeFailedError) or not isinstance(error, TransientError):
        return Event.SERVICE_REFUSED
    return Event.SERVICE_UNAVAILABLE


# --- the documents the writes leave ------------------------------------------------------------


def begin(
    document: RefreshSecret, pending: PendingAuthorization, now: float
) -> RefreshSecret | None:
    """``STORE_PENDING``: the new pending authorization, and no candidate; ``None`` when a
    live one stands (another start stored it meanwhile: its code may already be on a person's
    screen, and only the stored one is polled), unless the new one takes it over
    (``takes_over``: an operator's over a link's)."""
    live = start_stage(document, now) is Stage.PENDING
    if live and start_event(document, now, pending.link) is not Event.TAKE_OVER:
        return None
    return replace(document, pending=pending, candidate=None)


def replace_pending(
    document: RefreshSecret,
    pending: PendingAuthorization,
    replacement: PendingAuthorization | None,
) -> RefreshSecret | None:
    """``KEEP_SCHEDULE`` (a rescheduled ``replacement``) and ``FORGET_PENDING`` (``None``):
    ``pending`` swapped; ``None`` when another start replaced it meanwhile."""
    current = document.pending
    if current is None or current.device_code != pending.device_code:
        return None
    return replace(document, pending=replacement)


@dataclass(frozen=True)
class Approval:
    """The tokens of an approved authorization, ready to store: the new credential (naming
    who approved), its access token (``None`` when the answer has no usable one), the pending
    authorization it ends, and whether it may switch the stack to another identity."""

    pending: PendingAuthorization
    credential: RefreshCredential
    raw_access_token: RawAccessToken | None
    allow_new_identity: bool


class Move(NamedTuple):
    """A transition taken on a document, the document it leaves (``None``: nothing to write)
    and, for an identity refusal, why."""

    transition: Transition
    document: RefreshSecret | None
    reason: str | None = None


def approve(document: RefreshSecret, approval: Approval) -> Move:
    """Store an approval (persist-first): refused when another identity approved, or when
    nothing could verify it before it replaces an active credential (the pending authorization
    is then forgotten and the tokens discarded); else the credential when none is active, or
    the candidate next to the active one. A newer pending authorization stays."""
    current = document.credential
    reason = identity_refusal(
        current, approval.credential.subject_sha256, allowed=approval.allow_new_identity
    )
    if reason is not None:
        event = Event.IDENTITY_MISMATCH
    elif current is None or current.status != STATUS_ACTIVE:
        event = Event.APPROVED
    elif approval.raw_access_token is None:
        event = Event.UNVERIFIABLE
    else:
        event = Event.APPROVED_OVER_ACTIVE
    transition = step(Stage.PENDING, event)
    ours = document.pending is not None and (
        document.pending.device_code == approval.pending.device_code
    )
    remaining = None if ours else document.pending
    if transition.action is Action.FORGET_PENDING:
        return Move(transition, replace(document, pending=None) if ours else None, reason)
    if transition.action is Action.STORE_CREDENTIAL:
        stored = install(document, approval.credential, approval.raw_access_token)
        return Move(transition, replace(stored, pending=remaining))
    assert approval.raw_access_token is not None  # APPROVED_OVER_ACTIVE has one
    candidate = CandidateCredential(approval.credential, approval.raw_access_token)
    return Move(transition, replace(document, candidate=candidate, pending=remaining))


def promote(document: RefreshSecret, candidate: CandidateCredential) -> Move:
    """``PROMOTE`` the verified candidate into the newest document (a rotation of the old
    credential meanwhile is replaced, never written back over); ``SUPERSEDED`` when the
    candidate is no longer the stored one."""
    if not same_candidate(document.candidate, candidate):
        return Move(step(Stage.CANDIDATE, Event.SUPERSEDED), None)
    promoted = install(document, candidate.credential, candidate.raw_access_token)
    return Move(step(Stage.CANDIDATE, Event.VERIFIED), promoted)


def install(
    document: RefreshSecret, credential: RefreshCredential, raw_access_token: RawAccessToken | None
) -> RefreshSecret:
    """``STORE_CREDENTIAL`` and ``PROMOTE``: ``credential`` (with its access token) becomes the
    active one; a candidate, the rotator's lease and its streak of failed refreshes, all about
    the credential it replaces, are cleared."""
    return replace(
        document,
        credential=credential,
        raw_access_token=raw_access_token,
        candidate=None,
        lease=None,
        failures=None,
    )


def drop(document: RefreshSecret, candidate: CandidateCredential) -> RefreshSecret | None:
    """``DROP_CANDIDATE``: remove the candidate (only this one), leaving everything else."""
    return (
        replace(document, candidate=None) if same_candidate(document.candidate, candidate) else None
    )


def same_candidate(stored: CandidateCredential | None, candidate: CandidateCredential) -> bool:
    """Whether ``stored`` is ``candidate`` (the same new refresh token)."""
    return (
        stored is not None and stored.credential.refresh_token == candidate.credential.refresh_token
    )
