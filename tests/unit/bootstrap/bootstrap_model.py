"""Refresh credential documents in each stage of a device authorization, and a driver that
applies a transition's action with the pure functions of ``cmstoken.bootstrap.states`` (as the
shell does, without the store): shared by the table's tests and the state machine."""

from __future__ import annotations

from dataclasses import replace

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    CandidateCredential,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
)
from cmstoken.bootstrap.states import (
    Action,
    Approval,
    Stage,
    Transition,
    begin,
    drop,
    replace_pending,
)

NOW = 1_795_000_000.0
DAY = 86_400.0
ISSUER = "https://login.example.com"
ALICE = "a" * 64  # identities are SHA-256 hex digests
MALLORY = "f" * 64


def credential(
    token: str = "rt-active",
    *,
    subject: str | None = ALICE,
    status: str = STATUS_ACTIVE,
    authorized_at: float = NOW - 10 * DAY,
    refreshed_at: float | None = None,
) -> RefreshCredential:
    """A refresh credential (by default refreshed a day ago, so not a fresh authorization)."""
    return RefreshCredential(
        refresh_token=token,
        client_id="client-abc",
        issuer_url=ISSUER,
        status=status,
        authorized_at=authorized_at,
        refreshed_at=NOW - DAY if refreshed_at is None else refreshed_at,
        reauthorize_by=None,
        subject_sha256=subject,
    )


def raw(expires_at: float = NOW + DAY) -> RawAccessToken:
    return RawAccessToken(token="raw-access-token", expires_at=expires_at)


def pending(code: str = "device-1", *, expires_at: float = NOW + 600) -> PendingAuthorization:
    return PendingAuthorization(
        device_code=code,
        user_code="HHHJ-MMSZ",
        verification_uri="https://login.example.com/activate",
        verification_uri_complete="https://login.example.com/activate?user_code=HHHJ-MMSZ",
        client_id="client-abc",
        issuer_url=ISSUER,
        free_trial=False,
        interval=5,
        started_at=expires_at - 900,
        expires_at=expires_at,
        next_poll_at=expires_at - 895,
    )


def new_credential(token: str = "rt-new", subject: str | None = ALICE) -> RefreshCredential:
    """The credential an approval makes: authorized and refreshed just now."""
    return credential(token, subject=subject, authorized_at=NOW, refreshed_at=NOW)


def candidate(token: str = "rt-new", subject: str | None = ALICE) -> CandidateCredential:
    return CandidateCredential(new_credential(token, subject), raw())


def approval(
    of: PendingAuthorization,
    *,
    token: str = "rt-new",
    subject: str | None = ALICE,
    with_access_token: bool = True,
    allow_new_identity: bool = False,
) -> Approval:
    return Approval(
        pending=of,
        credential=new_credential(token, subject),
        raw_access_token=raw() if with_access_token else None,
        allow_new_identity=allow_new_identity,
    )


# One document in each stage a stored document can be in.
DOCUMENTS: dict[Stage, RefreshSecret] = {
    Stage.NONE: RefreshSecret(credential=credential()),
    Stage.PENDING: RefreshSecret(credential=credential(), pending=pending()),
    Stage.CANDIDATE: RefreshSecret(credential=credential(), candidate=candidate()),
    Stage.CREDENTIAL: RefreshSecret(credential=new_credential(), raw_access_token=raw()),
}


def rescheduled(of: PendingAuthorization) -> PendingAuthorization:
    """``of`` after a ``slow_down``: a longer interval, the next poll later."""
    return replace(of, interval=of.interval + 5, next_poll_at=of.next_poll_at + 10)


def apply(
    transition: Transition,
    document: RefreshSecret,
    *,
    started: PendingAuthorization | None = None,
    polled: PendingAuthorization | None = None,
    finished: CandidateCredential | None = None,
    now: float = NOW,
) -> RefreshSecret | None:
    """The document the shell writes for ``transition`` at ``now`` (``None``: it writes
    nothing): ``started`` is what a start stores, ``polled`` what a poll polled, ``finished``
    the candidate a poll finishes. Approvals and promotions decide their transition themselves
    (``states.approve``, ``states.promote``)."""
    action = transition.action
    if action is Action.STORE_PENDING:
        assert started is not None
        return begin(document, started, now)
    if action in (Action.KEEP_SCHEDULE, Action.FORGET_PENDING):
        assert polled is not None
        replacement = rescheduled(polled) if action is Action.KEEP_SCHEDULE else None
        return replace_pending(document, polled, replacement)
    if action is Action.DROP_CANDIDATE:
        assert finished is not None
        return drop(document, finished)
    assert action is Action.NOTHING, action
    return None
