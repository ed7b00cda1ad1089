"""Every row of the device authorization's transition table, without I/O: from a document in
the row's stage, the event (as the shell's classifiers name what it met) takes that row, and
the write leaves exactly the expected document; every other (stage, event) pair is refused."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import pytest

from cmstoken.aws.documents import (
    STATUS_REAUTHORIZATION_REQUIRED,
    CandidateCredential,
    RawAccessToken,
    RefreshSecret,
)
from cmstoken.bootstrap import results
from cmstoken.bootstrap.states import (
    TRANSITIONS,
    Approval,
    Event,
    Stage,
    Transition,
    UnknownTransitionError,
    approve,
    begin,
    candidate_event,
    credential_event,
    drop,
    poll_event,
    poll_stage,
    promote,
    replace_pending,
    start_event,
    start_stage,
    step,
    verification_event,
)
from cmstoken.core.errors import (
    AccessDeniedError,
    CmsTokenError,
    ExchangeFailedError,
    ExpiredTokenError,
    InvalidGrantError,
    ServerError,
    StoreUnavailableError,
    TokenRefusedError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
    VerificationFailedError,
)
from cmstoken.core.refresh_backoff import Failures
from unit.bootstrap.bootstrap_model import (
    DOCUMENTS,
    MALLORY,
    NOW,
    apply,
    approval,
    candidate,
    credential,
    new_credential,
    pending,
    raw,
    rescheduled,
)

# What a case yields: the transition taken, the document written (None: no write), and the
# document expected.
Outcome = tuple[Transition, RefreshSecret | None, RefreshSecret | None]
NEWER = pending("device-2", expires_at=NOW + 900)
LINK = "0123456789abcdef" * 2  # a link's tag


def started(stage: Stage) -> Outcome:
    document = DOCUMENTS[stage]
    taken = step(start_stage(document, NOW), start_event(document, NOW, None))
    expected = None if stage is Stage.PENDING else replace(document, pending=NEWER, candidate=None)
    return taken, apply(taken, document, started=NEWER), expected


def taken_over() -> Outcome:
    """An operator's start over a live authorization a link started: the operator's replaces
    it (and any candidate)."""
    document = replace(DOCUMENTS[Stage.PENDING], pending=replace(pending(), link=LINK))
    taken = step(start_stage(document, NOW), start_event(document, NOW, None))
    expected = replace(document, pending=NEWER, candidate=None)
    return taken, apply(taken, document, started=NEWER), expected


def polled(event: Event | CmsTokenError, *, kept: bool) -> Outcome:
    document = DOCUMENTS[Stage.PENDING]
    code = document.pending
    assert code is not None
    taken = step(Stage.PENDING, event if isinstance(event, Event) else poll_event(event))
    expected = replace(document, pending=rescheduled(code) if kept else None)
    return taken, apply(taken, document, polled=code), expected


def approved(document: RefreshSecret, tokens: Approval, expected: RefreshSecret) -> Outcome:
    move = approve(document, tokens)
    return move.transition, move.document, expected


def finished(
    event: Event | CmsTokenError, *, dropped: bool, unfinished: CandidateCredential | None = None
) -> Outcome:
    unfinished = unfinished or candidate()
    document = replace(DOCUMENTS[Stage.CANDIDATE], candidate=unfinished)
    if isinstance(event, CmsTokenError):
        event = verification_event(event)
    taken = step(Stage.CANDIDATE, event)
    expected = replace(document, candidate=None) if dropped else None
    return taken, apply(taken, document, finished=unfinished), expected


def too_late(unfinished: CandidateCredential, deadline: float) -> Event:
    event = candidate_event(unfinished, NOW, deadline, just_approved=False)
    assert event is not None
    return event


def publishing(event: Event) -> Outcome:
    return step(Stage.CREDENTIAL, event), None, None  # the published secret is not this one


def unpublishable(token: RawAccessToken | None, deadline: float) -> Event:
    event = credential_event(token, NOW, deadline)
    assert event is not None
    return event


PENDING_ONLY = RefreshSecret(pending=pending())
ACTIVE_AND_PENDING = DOCUMENTS[Stage.PENDING]
REFUSED_CREDENTIAL = RefreshSecret(
    credential=credential(status=STATUS_REAUTHORIZATION_REQUIRED), pending=pending()
)
VERIFIED = candidate()
EXPIRING = replace(candidate(), raw_access_token=raw(NOW + 30))

CASES: dict[tuple[Stage, Event], Callable[[], Outcome]] = {
    (Stage.NONE, Event.START): lambda: started(Stage.NONE),
    (Stage.CANDIDATE, Event.START): lambda: started(Stage.CANDIDATE),
    (Stage.PENDING, Event.START): lambda: started(Stage.PENDING),
    (Stage.PENDING, Event.TAKE_OVER): taken_over,
    (Stage.PENDING, Event.SUPERSEDED): lambda: (
        step(Stage.PENDING, Event.SUPERSEDED),
        None,  # a link's poll that sees its code replaced writes nothing
        None,
    ),
    (Stage.NONE, Event.POLL): lambda: (
        step(poll_stage(DOCUMENTS[Stage.NONE], NOW), Event.POLL),
        None,
        None,
    ),
    (Stage.PENDING, Event.STILL_PENDING): lambda: polled(Event.STILL_PENDING, kept=True),
    (Stage.PENDING, Event.POLL_FAILED): lambda: polled(
        ServerError("503", endpoint="device_token", status=503), kept=True
    ),
    (Stage.PENDING, Event.ANSWER_LOST): lambda: polled(
        UpstreamTimeoutError("no answer", endpoint="device_token", outcome_unknown=True), kept=True
    ),
    (Stage.PENDING, Event.EXPIRED): lambda: polled(
        ExpiredTokenError("expired", endpoint="device_token", code="expired_token"), kept=False
    ),
    (Stage.PENDING, Event.DENIED): lambda: polled(
        AccessDeniedError("denied", endpoint="device_token", code="access_denied"), kept=False
    ),
    (Stage.PENDING, Event.CODE_REFUSED): lambda: polled(
        InvalidGrantError("spent", endpoint="device_token", code="invalid_grant"), kept=False
    ),
    (Stage.PENDING, Event.IDENTITY_MISMATCH): lambda: approved(
        ACTIVE_AND_PENDING,
        approval(pending(), subject=MALLORY),
        replace(ACTIVE_AND_PENDING, pending=None),
    ),
    (Stage.PENDING, Event.UNVERIFIABLE): lambda: approved(
        ACTIVE_AND_PENDING,
        approval(pending(), with_access_token=False),
        replace(ACTIVE_AND_PENDING, pending=None),
    ),
    (Stage.PENDING, Event.APPROVED): lambda: approved(
        REFUSED_CREDENTIAL,
        approval(pending()),
        RefreshSecret(credential=new_credential(), raw_access_token=raw()),
    ),
    (Stage.PENDING, Event.APPROVED_OVER_ACTIVE): lambda: approved(
        ACTIVE_AND_PENDING,
        approval(pending()),
        replace(ACTIVE_AND_PENDING, pending=None, candidate=candidate()),
    ),
    (Stage.CANDIDATE, Event.DEFERRED): lambda: finished(
        too_late(candidate(), NOW + 10), dropped=False
    ),
    (Stage.CANDIDATE, Event.STALE): lambda: finished(
        too_late(EXPIRING, NOW + 60), dropped=True, unfinished=EXPIRING
    ),
    (Stage.CANDIDATE, Event.VERIFIED): lambda: (
        *promote(DOCUMENTS[Stage.CANDIDATE], VERIFIED)[:2],
        RefreshSecret(credential=VERIFIED.credential, raw_access_token=VERIFIED.raw_access_token),
    ),
    (Stage.CANDIDATE, Event.SERVICE_REFUSED): lambda: finished(
        ExchangeFailedError("failed to get token", endpoint="exchange", status=500), dropped=True
    ),
    (Stage.CANDIDATE, Event.SERVICE_UNAVAILABLE): lambda: finished(
        UpstreamConnectionError("refused", endpoint="projects"), dropped=False
    ),
    (Stage.CANDIDATE, Event.STORE_FAILED): lambda: finished(
        StoreUnavailableError("throttled"), dropped=False
    ),
    (Stage.CANDIDATE, Event.SUPERSEDED): lambda: (
        *promote(DOCUMENTS[Stage.CANDIDATE], candidate("rt-replaced"))[:2],
        None,
    ),
    (Stage.CREDENTIAL, Event.NOTHING_TO_EXCHANGE): lambda: publishing(
        unpublishable(None, NOW + 60)
    ),
    (Stage.CREDENTIAL, Event.DEFERRED): lambda: publishing(unpublishable(raw(), NOW + 10)),
    (Stage.CREDENTIAL, Event.PUBLISHED): lambda: publishing(Event.PUBLISHED),
    (Stage.CREDENTIAL, Event.PUBLISH_FAILED): lambda: publishing(Event.PUBLISH_FAILED),
    (Stage.CREDENTIAL, Event.ALREADY_PUBLISHED): lambda: publishing(Event.ALREADY_PUBLISHED),
}


def test_every_transition_has_a_case() -> None:
    assert set(CASES) == {(row.stage, row.event) for row in TRANSITIONS}
    assert len(TRANSITIONS) == len(CASES), "one row per (stage, event)"


@pytest.mark.parametrize("row", TRANSITIONS, ids=lambda row: f"{row.stage}-{row.event}")
def test_each_transition_takes_its_row_and_writes_the_expected_document(row: Transition) -> None:
    taken, written, expected = CASES[row.stage, row.event]()
    assert taken == row
    assert written == expected


# The events that end an authorization, and how; the others keep it where it is or move it on.
ENDS = {
    Event.EXPIRED: Stage.EXPIRED,
    Event.DENIED: Stage.DENIED,
    Event.CODE_REFUSED: Stage.FAILED,
    Event.IDENTITY_MISMATCH: Stage.REFUSED,
    Event.UNVERIFIABLE: Stage.REFUSED,
    Event.STALE: Stage.DROPPED,
    Event.SERVICE_REFUSED: Stage.DROPPED,
    Event.SUPERSEDED: Stage.SUPERSEDED,
    Event.PUBLISHED: Stage.AUTHORIZED,
    Event.ALREADY_PUBLISHED: Stage.AUTHORIZED,
}
MOVES_ON = {
    Event.START: Stage.PENDING,
    Event.TAKE_OVER: Stage.PENDING,
    Event.APPROVED: Stage.CREDENTIAL,
    Event.APPROVED_OVER_ACTIVE: Stage.CANDIDATE,
    Event.VERIFIED: Stage.CREDENTIAL,
}


@pytest.mark.parametrize("row", TRANSITIONS, ids=lambda row: f"{row.stage}-{row.event}")
def test_where_each_event_leads(row: Transition) -> None:
    assert row.next is ENDS.get(row.event, MOVES_ON.get(row.event, row.stage))


REFUSED_PAIRS = [
    (stage, event)
    for stage, event in itertools.product(Stage, Event)
    if (stage, event) not in {(row.stage, row.event) for row in TRANSITIONS}
]


@pytest.mark.parametrize("pair", REFUSED_PAIRS, ids=lambda pair: f"{pair[0]}-{pair[1]}")
def test_every_other_pair_is_refused(pair: tuple[Stage, Event]) -> None:
    with pytest.raises(UnknownTransitionError):
        step(*pair)


@pytest.mark.parametrize(
    "stage", [Stage.AUTHORIZED, Stage.EXPIRED, Stage.DENIED, Stage.FAILED, Stage.REFUSED]
)
def test_an_ended_authorization_takes_no_event(stage: Stage) -> None:
    assert not [row for row in TRANSITIONS if row.stage is stage]


def test_the_stage_a_start_meets() -> None:
    assert start_stage(DOCUMENTS[Stage.NONE], NOW) is Stage.NONE
    assert start_stage(DOCUMENTS[Stage.PENDING], NOW) is Stage.PENDING
    assert start_stage(DOCUMENTS[Stage.CANDIDATE], NOW) is Stage.CANDIDATE
    expired = RefreshSecret(credential=credential(), pending=pending(expires_at=NOW))
    assert start_stage(expired, NOW) is Stage.NONE, "an expired code is replaced"
    both = replace(DOCUMENTS[Stage.CANDIDATE], pending=pending())
    assert start_stage(both, NOW) is Stage.PENDING, "a live code is kept, candidate or not"


def test_the_stage_a_poll_works_on() -> None:
    for stage, document in DOCUMENTS.items():
        assert poll_stage(document, NOW) is stage
    both = replace(DOCUMENTS[Stage.CANDIDATE], pending=pending())
    assert poll_stage(both, NOW) is Stage.CANDIDATE, "the approval is finished first"
    expired = RefreshSecret(credential=credential(), pending=pending(expires_at=NOW))
    assert poll_stage(expired, NOW) is Stage.PENDING, "its poll says it expired"


@pytest.mark.parametrize(
    "document",
    [
        RefreshSecret(credential=new_credential()),
        RefreshSecret(credential=credential(), raw_access_token=raw()),
        RefreshSecret(credential=new_credential(), raw_access_token=raw(NOW + 59)),
        RefreshSecret(
            credential=replace(new_credential(), status=STATUS_REAUTHORIZATION_REQUIRED),
            raw_access_token=raw(),
        ),
    ],
    ids=["no access token", "refreshed since", "access token about to expire", "not active"],
)
def test_a_credential_awaits_publication_only_fresh_active_and_exchangeable(
    document: RefreshSecret,
) -> None:
    assert poll_stage(document, NOW) is Stage.NONE


def test_a_candidate_just_approved_is_tried_whatever_its_stated_lifetime() -> None:
    sloppy = replace(candidate(), raw_access_token=raw(NOW))
    assert candidate_event(sloppy, NOW, NOW + 60, just_approved=True) is None
    assert candidate_event(sloppy, NOW, NOW + 60, just_approved=False) is Event.STALE


@pytest.mark.parametrize(
    "error",
    [
        ExchangeFailedError("failed", endpoint="exchange", status=500),
        TokenRefusedError("401", endpoint="projects", status=401),
        VerificationFailedError("refused"),
    ],
)
def test_the_services_refusals_drop_the_candidate(error: CmsTokenError) -> None:
    assert step(Stage.CANDIDATE, verification_event(error)).next is Stage.DROPPED


def test_the_writes_for_a_replaced_code_or_candidate_write_nothing() -> None:
    newer = replace(DOCUMENTS[Stage.PENDING], pending=NEWER)
    for document in (newer, DOCUMENTS[Stage.NONE]):
        assert replace_pending(document, pending(), None) is None
        assert replace_pending(document, pending(), rescheduled(pending())) is None
    replaced = replace(DOCUMENTS[Stage.CANDIDATE], candidate=candidate("rt-replaced"))
    for document in (replaced, DOCUMENTS[Stage.NONE]):
        assert drop(document, candidate()) is None
        assert promote(document, candidate()).document is None


def test_a_start_never_overwrites_a_live_code_another_start_stored_meanwhile() -> None:
    """Two starts at once (two links pressed together): the second to write finds the first's
    code, which a person may already be reading, and keeps it; an expired one is replaced,
    and so is a candidate."""
    mine = pending("device-3", expires_at=NOW + 900)
    assert begin(replace(DOCUMENTS[Stage.PENDING], pending=NEWER), mine, NOW) is None
    expired = replace(DOCUMENTS[Stage.PENDING], pending=pending(expires_at=NOW))
    assert begin(expired, mine, NOW) == replace(expired, pending=mine)
    started = begin(DOCUMENTS[Stage.CANDIDATE], mine, NOW)
    assert started == replace(DOCUMENTS[Stage.CANDIDATE], pending=mine, candidate=None)


def test_only_an_operators_start_takes_over_and_only_a_links_authorization() -> None:
    """An operator's start replaces a live authorization a link started; a link's start never
    replaces a live one, nor an operator's start an operator's (both return it)."""
    links = replace(DOCUMENTS[Stage.PENDING], pending=replace(pending(), link=LINK))
    operators = DOCUMENTS[Stage.PENDING]
    assert start_event(links, NOW, None) is Event.TAKE_OVER
    assert start_event(links, NOW, "f" * 32) is Event.START
    assert start_event(operators, NOW, None) is Event.START
    assert start_event(operators, NOW, LINK) is Event.START
    mine, theirs = replace(NEWER, link=None), replace(NEWER, link="f" * 32)
    assert begin(links, mine, NOW) == replace(links, pending=mine)
    assert begin(links, theirs, NOW) is None
    assert begin(operators, mine, NOW) is None
    assert begin(operators, theirs, NOW) is None


def test_a_refused_approval_of_a_replaced_code_writes_nothing_and_keeps_the_newer_one() -> None:
    document = replace(ACTIVE_AND_PENDING, pending=NEWER)
    move = approve(document, approval(pending(), subject=MALLORY))
    assert move.transition.next is Stage.REFUSED
    assert move.document is None
    assert move.reason is not None
    assert MALLORY[:12] in move.reason


def test_an_approval_of_a_replaced_code_is_stored_next_to_the_newer_one() -> None:
    document = replace(ACTIVE_AND_PENDING, pending=NEWER)
    move = approve(document, approval(pending()))
    assert move.transition.next is Stage.CANDIDATE
    assert move.document == replace(document, candidate=candidate())


def test_a_first_approval_becomes_the_credential_whoever_approved() -> None:
    move = approve(PENDING_ONLY, approval(pending(), subject=MALLORY))
    assert move.transition.event is Event.APPROVED
    expected = RefreshSecret(credential=new_credential(subject=MALLORY), raw_access_token=raw())
    assert move.document == expected


def test_a_promotion_clears_the_replaced_credentials_lease_and_failed_refreshes() -> None:
    """The rotator's streak of failed refreshes is about the credential a promotion replaces:
    the new one's first refresh is not delayed by it (``core.refresh_backoff``)."""
    streak = Failures(count=5, last_at=NOW - 60, retry_at=NOW + 13_740)
    document = replace(DOCUMENTS[Stage.CANDIDATE], failures=streak)
    assert document.candidate is not None
    move = promote(document, document.candidate)
    assert move.transition.event is Event.VERIFIED
    assert move.document is not None
    assert (move.document.failures, move.document.lease) == (None, None)


def test_a_new_identity_is_stored_when_allowed() -> None:
    move = approve(
        ACTIVE_AND_PENDING, approval(pending(), subject=MALLORY, allow_new_identity=True)
    )
    assert move.transition.event is Event.APPROVED_OVER_ACTIVE


ENDS_ELSEWHERE = {
    # Results with more to say (results.pending, results.authorized), or no end at all: the
    # invocation goes on to the next stage's work.
    (Stage.NONE, Event.START),
    (Stage.CANDIDATE, Event.START),
    (Stage.PENDING, Event.START),
    (Stage.PENDING, Event.TAKE_OVER),
    (Stage.PENDING, Event.STILL_PENDING),
    (Stage.PENDING, Event.APPROVED),
    (Stage.PENDING, Event.APPROVED_OVER_ACTIVE),
    (Stage.CANDIDATE, Event.VERIFIED),
    (Stage.CREDENTIAL, Event.PUBLISHED),
}


def test_every_transition_an_invocation_ends_on_has_its_result() -> None:
    assert set(results.ENDINGS) == {(row.stage, row.event) for row in TRANSITIONS} - ENDS_ELSEWHERE


def test_an_approval_left_to_the_next_poll_reports_pending_and_approved() -> None:
    result = results.ending(step(Stage.CANDIDATE, Event.DEFERRED))
    assert result["status"] == "pending"
    assert result["approved"] is True


def test_a_failure_another_poll_can_mend_says_retry_and_no_other_result_does() -> None:
    """A program polling for the operator (the links' background poll) polls again exactly
    after the failures whose message says the authorization is kept: ``retry`` is that
    sentence as a field."""
    for (stage, event), (status, message) in results.ENDINGS.items():
        result = results.ending(step(stage, event), error="e", reason="r", problems="p")
        keeps = "poll again" in message.lower() and status == "failed"
        assert result.get("retry", False) is keeps, (stage, event)
    assert set(results.ENDINGS) >= results.RETRY
