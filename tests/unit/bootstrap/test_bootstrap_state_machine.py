"""The transitions in any order, interleaved with the rotator's writes and the passing of time
(hypothesis' stateful testing, no I/O): an invocation reads the document, and other writers
may change it before its answer comes, as the shell's merge-on-conflict writes allow.

Checked throughout: the credential (and its raw access token) change only by the rotator, by
the approval of a first credential, or by the promotion of a verified candidate; a credential
approved over an active one is in use only once verified; an identity mismatch or a dropped
candidate leaves the credential as it was; an ended device code is forgotten (a newer one
stays); the document's stage is the one the table says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import count

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    STATUS_REAUTHORIZATION_REQUIRED,
    CandidateCredential,
    PendingAuthorization,
    RefreshSecret,
)
from cmstoken.bootstrap.states import (
    Action,
    Event,
    Stage,
    approve,
    poll_stage,
    promote,
    start_stage,
    step,
)
from unit.bootstrap.bootstrap_model import (
    ALICE,
    MALLORY,
    NOW,
    apply,
    approval,
    credential,
    pending,
)

POLL_ANSWERS = [
    Event.STILL_PENDING,
    Event.POLL_FAILED,
    Event.ANSWER_LOST,
    Event.EXPIRED,
    Event.DENIED,
    Event.CODE_REFUSED,
]
FINISH_FAILURES = [
    Event.DEFERRED,
    Event.STALE,
    Event.SERVICE_REFUSED,
    Event.SERVICE_UNAVAILABLE,
    Event.STORE_FAILED,
]


class DeviceAuthorizations(RuleBasedStateMachine):
    """One refresh credential document, bootstrapped as Alice, and what may happen to it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.document = RefreshSecret(credential=credential())
        self.numbers = count(1)
        # What the credential's owners (rotator, approval, promotion) left: the rest must not
        # change it.
        self.expected = (self.document.credential, self.document.raw_access_token)
        self.polled: PendingAuthorization | None = None  # the code a poll invocation read
        self.finishing: CandidateCredential | None = None  # the candidate one read
        self.over_active: set[str] = set()  # refresh tokens approved over an active one
        self.verified: set[str] = set()  # ... whose service token the service accepted

    # --- the bootstrap -------------------------------------------------------------------------

    @rule()
    def start(self) -> None:
        transition = step(start_stage(self.document, self.now), Event.START)
        number = next(self.numbers)
        new = pending(f"device-{number}", expires_at=self.now + 900)
        written = apply(transition, self.document, started=new, now=self.now)
        if transition.action is Action.STORE_PENDING:
            assert written is not None
            self.document = written
            assert start_stage(self.document, self.now) is transition.next
            assert poll_stage(self.document, self.now) is transition.next
        else:
            assert written is None
            assert self.document.pending is not None
            assert self.document.pending.expires_at > self.now

    @rule()
    def a_poll_reads_the_document(self) -> None:
        """A poll invocation starts: it finishes the candidate, or polls the pending code (one
        invocation of each kind in flight at a time)."""
        stage = poll_stage(self.document, self.now)
        if stage is Stage.CANDIDATE and self.finishing is None:
            self.finishing = self.document.candidate
        elif stage is Stage.PENDING and self.polled is None:
            self.polled = self.document.pending

    @precondition(lambda self: self.polled is not None)
    @rule(event=st.sampled_from(POLL_ANSWERS))
    def the_poll_is_answered(self, event: Event) -> None:
        polled, self.polled = self.polled, None
        assert polled is not None
        before = self.document
        transition = step(Stage.PENDING, event)
        written = apply(transition, before, polled=polled)
        if written is not None:
            self.document = written
        if transition.action is Action.FORGET_PENDING:
            self._forgotten(polled, before)
        elif _same_code(before.pending, polled):
            assert written is not None
            assert poll_stage(self.document, self.now) in (Stage.CANDIDATE, Stage.PENDING)
        else:
            assert written is None, "a newer start's schedule is its own"

    @precondition(lambda self: self.polled is not None)
    @rule(
        subject=st.sampled_from([ALICE, ALICE, MALLORY, None]),
        with_access_token=st.sampled_from([True, True, True, False]),
        allow_new_identity=st.booleans(),
    )
    def the_code_is_approved(
        self, subject: str | None, with_access_token: bool, allow_new_identity: bool
    ) -> None:
        polled, self.polled = self.polled, None
        assert polled is not None
        before = self.document
        token = f"rt-new-{next(self.numbers)}"
        tokens = approval(
            polled,
            token=token,
            subject=subject,
            with_access_token=with_access_token,
            allow_new_identity=allow_new_identity,
        )
        move = approve(before, tokens)
        if move.document is not None:
            self.document = move.document
        self._forgotten(polled, before)
        action = move.transition.action
        current = before.credential
        if current is not None and current.subject_sha256 not in (None, subject):
            assert allow_new_identity or move.transition.event is Event.IDENTITY_MISMATCH
        if action is Action.FORGET_PENDING:
            assert move.transition.next is Stage.REFUSED
            assert self.document.candidate == before.candidate
        elif action is Action.STORE_CREDENTIAL:
            assert before.credential is None or before.credential.status != STATUS_ACTIVE
            assert self.document.credential == tokens.credential
            self.expected = (tokens.credential, tokens.raw_access_token)
        else:
            assert action is Action.STORE_CANDIDATE
            assert current is not None
            assert current.status == STATUS_ACTIVE
            assert poll_stage(self.document, self.now) is Stage.CANDIDATE
            self.over_active.add(token)
        if move.transition.event is Event.IDENTITY_MISMATCH:
            assert not allow_new_identity
            assert current is not None
            assert subject != current.subject_sha256

    @precondition(lambda self: self.finishing is not None)
    @rule(event=st.sampled_from(FINISH_FAILURES))
    def finishing_fails(self, event: Event) -> None:
        finishing, self.finishing = self.finishing, None
        assert finishing is not None
        before = self.document
        transition = step(Stage.CANDIDATE, event)
        written = apply(transition, before, finished=finishing)
        if transition.action is Action.DROP_CANDIDATE and before.candidate == finishing:
            assert written == replace(before, candidate=None)
        else:
            assert written is None, "nothing else is written, and only this candidate dropped"
        if written is not None:
            self.document = written

    @precondition(lambda self: self.finishing is not None)
    @rule()
    def the_service_accepts_the_candidate(self) -> None:
        finishing, self.finishing = self.finishing, None
        assert finishing is not None
        self.verified.add(finishing.credential.refresh_token)
        still_stored = self.document.candidate == finishing
        move = promote(self.document, finishing)
        if move.document is None:
            assert move.transition.next is Stage.SUPERSEDED
            assert not still_stored
            return
        assert still_stored, "a candidate a start replaced is never promoted"
        assert move.transition.action is Action.PROMOTE
        self.document = move.document
        assert self.document.candidate is None
        self.expected = (finishing.credential, finishing.raw_access_token)
        assert poll_stage(self.document, self.now) is move.transition.next

    # --- the other writers, and time -----------------------------------------------------------

    @rule(refused=st.sampled_from([False, False, False, True]))
    def the_rotator_runs(self, refused: bool) -> None:
        """A rotation of the active credential (its raw access token exchanged), or, now and
        then, the identity provider's refusal of it."""
        current = self.document.credential
        if current is None or current.status != STATUS_ACTIVE:
            return
        if refused:
            rotated = replace(current, status=STATUS_REAUTHORIZATION_REQUIRED)
        else:
            token = f"rt-rotated-{next(self.numbers)}"
            rotated = replace(current, refresh_token=token, refreshed_at=self.now)
        self.document = replace(self.document, credential=rotated, raw_access_token=None)
        self.expected = (rotated, None)

    @rule(seconds=st.integers(min_value=1, max_value=300))
    def time_passes(self, seconds: int) -> None:
        self.now += seconds

    # --- what always holds ---------------------------------------------------------------------

    def _forgotten(self, code: PendingAuthorization, before: RefreshSecret) -> None:
        """An ended code is gone; a newer start stays."""
        if _same_code(before.pending, code):
            assert self.document.pending is None
        else:
            assert self.document.pending == before.pending

    @invariant()
    def the_credential_changes_only_by_its_owners(self) -> None:
        assert (self.document.credential, self.document.raw_access_token) == self.expected

    @invariant()
    def a_credential_approved_over_an_active_one_is_used_only_once_verified(self) -> None:
        current = self.document.credential
        assert current is not None, "a credential is never lost"
        if current.refresh_token in self.over_active:
            assert current.refresh_token in self.verified

    @invariant()
    def a_candidate_waits_next_to_another_credential(self) -> None:
        candidate = self.document.candidate
        if candidate is not None:
            assert self.document.credential is not None
            assert candidate.credential.refresh_token in self.over_active
            assert candidate.credential != self.document.credential


def _same_code(stored: PendingAuthorization | None, code: PendingAuthorization) -> bool:
    return stored is not None and stored.device_code == code.device_code


# Deterministic (the same examples every run) and fast: about a second.
DeviceAuthorizations.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, derandomize=True, database=None
)
test_device_authorizations = DeviceAuthorizations.TestCase


# Interleavings the examples above may miss, always run (with the same checks).
Step = Callable[[DeviceAuthorizations], object]
START: Step = DeviceAuthorizations.start
READ: Step = DeviceAuthorizations.a_poll_reads_the_document
ACCEPTED: Step = DeviceAuthorizations.the_service_accepts_the_candidate


def approved(machine: DeviceAuthorizations) -> None:
    machine.the_code_is_approved(subject=ALICE, with_access_token=True, allow_new_identity=False)


def answered(event: Event) -> Step:
    return lambda machine: machine.the_poll_is_answered(event=event)


def failed(event: Event) -> Step:
    return lambda machine: machine.finishing_fails(event=event)


def rotated(machine: DeviceAuthorizations) -> None:
    machine.the_rotator_runs(refused=False)


def expired(machine: DeviceAuthorizations) -> None:
    machine.time_passes(seconds=900)


INTERLEAVINGS: dict[str, list[Step]] = {
    "a start while a candidate is verified": [START, READ, approved, READ, START, ACCEPTED],
    "a start while a candidate is refused": [
        START,
        READ,
        approved,
        READ,
        START,
        failed(Event.SERVICE_REFUSED),
    ],
    "a rotation while a candidate is verified": [
        START,
        READ,
        approved,
        READ,
        rotated,
        ACCEPTED,
    ],
    "an approval after a newer start": [START, READ, expired, START, approved],
    "an expiry after a newer start": [START, READ, expired, START, answered(Event.EXPIRED)],
    "a slow down after a newer start": [
        START,
        READ,
        expired,
        START,
        answered(Event.STILL_PENDING),
    ],
}
INVARIANTS = [
    DeviceAuthorizations.the_credential_changes_only_by_its_owners,
    DeviceAuthorizations.a_credential_approved_over_an_active_one_is_used_only_once_verified,
    DeviceAuthorizations.a_candidate_waits_next_to_another_credential,
]


@pytest.mark.parametrize("steps", INTERLEAVINGS.values(), ids=INTERLEAVINGS.keys())
def test_interleaving(steps: list[Step]) -> None:
    machine = DeviceAuthorizations()
    for step_ in steps:
        step_(machine)
        for check in INVARIANTS:
            check(machine)
