"""A rotator run interleaved with a bootstrap poll that gets approved, explored exhaustively on
the simulation's models (issue 10): the real ``Rotator`` and ``Bootstrapper`` on threads, one
scheduling point per call on Secrets Manager, the identity provider or the service.

Cases: the first bootstrap (both secrets empty, the rotator due because nothing is published);
a re-authorization over an active credential (the rotator due, the approved authorization kept
as the candidate until its service token is verified, then promoted); the same after the
provider revoked the active credential (the rotator meets ``invalid_grant`` and marks it, so the
approval is stored as the candidate or, once marked, as the credential); and a ``start`` (the
pending authorization's own write) interleaved with a rotation.

I5 (``simulation.i5``), checked at every step that changes the refresh credential document: a
pending authorization and a rotation never erase each other's fields. Checked at the end of
every schedule: I1 (no refresh token presented again after the provider acted on it), exactly
one credential (active, usable, no candidate or pending authorization left), and the published
service token accepted. A bootstrap whose writes replace the whole document with the one it
read (instead of merging into the newest) must be caught.

``make test`` enumerates the first bootstrap; ``make verify`` the re-authorization and the
revoked credential's case too (which ``make test`` explores with a crash, reduced:
``test_simulation_bootstrap_faults.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from cmstoken.aws import vault as credentials
from cmstoken.aws.documents import STATUS_ACTIVE, RefreshSecret
from cmstoken.core.triggers import RotationRequest
from simulation.exploration import counted
from simulation.i5 import judge
from simulation.scheduler import Scheduler, current_actor, explore
from simulation.world import HOUR, REFRESH_SECRET, World
from support import DEEPER

SCHEDULED = RotationRequest(forced=False, source="schedule")
LIMIT = 20_000
ROTATOR, BOOTSTRAP = "rotator", "bootstrap"


@dataclass
class I5Checker:
    """An interceptor in front of the scheduler: every call that changes the refresh credential
    document is judged by who made it (the actor's thread), its document before and after."""

    world: World
    scheduler: Scheduler
    every_call: bool = False
    violations: list[str] = field(default_factory=list)
    writes: Counter[str] = field(default_factory=Counter)

    def __call__(self, service: str, operation: str, act: Callable[[], Any]) -> Any:
        if service == "upstream" and not self.every_call:
            return act()  # not a scheduling point (see interleave)
        if operation == "ListSecretVersionIds":
            return counted(act())  # not a scheduling point either (see counted)
        return self.scheduler(service, operation, lambda: self._judged(act))

    def _judged(self, act: Callable[[], Any]) -> Any:
        before = self.world.secretsmanager.current_text(REFRESH_SECRET)
        answer = act()
        after = self.world.secretsmanager.current_text(REFRESH_SECRET)
        if after != before and after is not None:
            writer = _writer()
            self.writes[writer] += 1
            old = RefreshSecret() if before is None else RefreshSecret.from_json(before)
            problem = self._judge(writer, old, RefreshSecret.from_json(after))
            if problem is not None:
                self.violations.append(f"I5 ({writer}): {problem}")
        return answer

    def _judge(self, writer: str, old: RefreshSecret, new: RefreshSecret) -> str | None:
        return judge(self.world, writer != ROTATOR, old, new)  # setup: the bootstrap's start


def _writer() -> str:
    """The actor running now (``setup``: the test's own calls)."""
    actor = current_actor()
    return "setup" if actor is None else actor.name


@dataclass
class Run:
    world: World
    scheduler: Scheduler
    checker: I5Checker

    def store_order(self) -> tuple[tuple[str, str], ...]:
        """The order of the Secrets Manager calls, by actor."""
        return tuple(step for step in self.scheduler.trace if step[1].startswith("secretsmanager"))

    def outcomes(self) -> tuple[str, ...]:
        described = []
        for actor in self.scheduler.actors:
            if actor.error is not None:
                described.append(type(actor.error).__name__)
            elif actor.name == ROTATOR:
                described.append(actor.result.outcome)
            else:
                described.append(actor.result["status"])
        return tuple(described)

    def violations(self) -> list[str]:
        found = list(self.checker.violations)
        found += [f"I1: {token} presented again" for token in self.world.replayed_refresh_tokens()]
        document = self.world.refresh_document()
        credential = document.credential
        if credential is None or credential.status != STATUS_ACTIVE:
            found.append("no active credential")
        elif not self.world.identity.usable(credential.refresh_token):
            found.append("the stored refresh token is not usable")
        if document.candidate is not None:
            found.append("a candidate is left next to the credential")
        if document.pending is not None:
            found.append("the approved authorization is still pending")
        if not self.world.upstream.service.valid(self.world.service_document().token):
            found.append("the published service token is not accepted")
        return found


def interleave(choose: Callable[[int], int], case: str, *, every_call: bool = False) -> Run:
    """A rotator run (the service token due) and a bootstrap poll of an approved authorization,
    interleaved as ``choose`` decides.

    The scheduling points are the Secrets Manager calls; with ``every_call`` the upstream calls
    too. Leaving those out loses no behaviour (a partial-order reduction): each upstream call
    touches what only its caller uses (the rotator's refresh family, the bootstrap's device
    code) or what commutes (exchanging a token, listing projects with one), and neither actor
    moves the clock, so running it together with its caller's next Secrets Manager call gives
    every order of the shared state's operations once. ``test_the_reduction_loses_no_order``
    checks that on the first case."""
    scheduler = Scheduler(choose)
    holder: list[I5Checker] = []
    world = World(interceptor=lambda s, o, a: holder[0](s, o, a))
    checker = I5Checker(world, scheduler, every_call=every_call)
    holder.append(checker)
    if case == "first":
        world.create_secrets()
    else:
        world.seed()
        world.clock.advance(19 * HOUR)  # the service token is due
    if case == "revoked":  # the provider revoked the active credential's family
        world.identity.tokens[world.newest_refresh_token()].family.revoked = True
    started = world.bootstrap("start")
    world.identity.approve(started["user_code"])
    world.clock.advance(5)  # the first poll's time has come
    began = world.clock.now()
    deadline = began + 120
    scheduler.spawn(ROTATOR, partial(world.rotator(ROTATOR).run, SCHEDULED, deadline=deadline))
    scheduler.spawn(BOOTSTRAP, partial(world.bootstrap, "poll", seconds=60))
    scheduler.run()
    assert world.clock.now() == began  # nobody slept: the reduction's premise
    return Run(world, scheduler, checker)


CASES = {
    "first": {
        ("NotBootstrappedError", "authorized"),
        ("rotated", "authorized"),
        ("skipped", "authorized"),
    },
    "reauthorization": {("rotated", "authorized"), ("skipped", "authorized")},
    # The rotator meets invalid_grant: it marks the credential (ReauthorizationRequiredError;
    # merged into whatever the bootstrap wrote meanwhile), or finds the new authorization
    # installed meanwhile (a race: it starts over, then rotates or skips).
    "revoked": {
        ("ReauthorizationRequiredError", "authorized"),
        ("rotated", "authorized"),
        ("skipped", "authorized"),
    },
}


@pytest.mark.parametrize(
    "case", sorted(CASES) if DEEPER else sorted(set(CASES) - {"reauthorization", "revoked"})
)
def test_every_interleaving_of_a_rotation_and_an_approved_poll_keeps_the_guarantees(
    case: str, say: Callable[[str], None]
) -> None:
    outcomes: Counter[tuple[str, ...]] = Counter()
    writes: Counter[str] = Counter()
    bad: list[tuple[list[tuple[str, str]], list[str]]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        run = interleave(choose, case)
        outcomes[run.outcomes()] += 1
        writes.update(run.checker.writes)
        credential = run.world.refresh_document().credential
        published = run.world.service_document()
        problems = run.violations()
        # The published token and its metadata describe the credential in use: a token of the
        # replaced credential, or its marking, published meanwhile is replaced by the new one.
        if credential is not None and published.authorized_at != credential.authorized_at:
            problems.append("the published token comes from the replaced credential")
        if published.credential_status != STATUS_ACTIVE:
            problems.append("the published document says the new credential is refused")
        if problems:
            bad.append((run.scheduler.trace, problems))

    schedules = explore(run_one, limit=LIMIT)
    say(
        f"[simulation] rotator and approved bootstrap poll ({case}): {schedules} schedules "
        f"explored; outcomes {dict(outcomes)}; refresh document writes {dict(writes)}"
    )
    assert bad[:3] == []
    assert set(outcomes) <= CASES[case]
    assert (writes[ROTATOR] == 0) == (case == "first")  # the first case: nothing to rotate


def test_every_interleaving_of_a_rotation_and_a_start_keeps_the_guarantees(
    say: Callable[[str], None],
) -> None:
    """The pending authorization's own write: a ``start`` over an active credential interleaved
    with a rotation (then, alone, the approval and a poll that finishes it)."""
    outcomes: Counter[tuple[str, ...]] = Counter()
    bad: list[list[str]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        scheduler = Scheduler(choose)
        holder: list[I5Checker] = []
        world = World(interceptor=lambda s, o, a: holder[0](s, o, a))
        holder.append(I5Checker(world, scheduler))
        world.seed()
        world.clock.advance(19 * HOUR)
        deadline = world.clock.now() + 120
        scheduler.spawn(ROTATOR, partial(world.rotator(ROTATOR).run, SCHEDULED, deadline=deadline))
        scheduler.spawn(BOOTSTRAP, partial(world.bootstrap, "start"))
        scheduler.run()
        run = Run(world, scheduler, holder[0])
        world.identity.approve(world.pending_user_code())
        world.clock.advance(5)
        finished = world.bootstrap("poll")["status"]
        outcomes[(*run.outcomes(), finished)] += 1
        problems = run.violations()
        if problems:
            bad.append(problems)

    schedules = explore(run_one, limit=LIMIT)
    say(
        f"[simulation] rotator and bootstrap start (reauthorization): {schedules} schedules "
        f"explored; outcomes (rotator, start, poll after) {dict(outcomes)}"
    )
    assert bad[:3] == []
    assert set(outcomes) <= {
        ("rotated", "pending", "authorized"),
        ("skipped", "pending", "authorized"),
    }


def test_the_reduction_loses_no_order(say: Callable[[str], None]) -> None:
    """Every call a scheduling point, on the first case: the orders of the Secrets Manager
    calls met are exactly those the reduced exploration meets, with the same outcomes."""
    full: set[tuple[Any, ...]] = set()
    reduced: set[tuple[Any, ...]] = set()

    def run_full(choose: Callable[[int], int]) -> None:
        run = interleave(choose, "first", every_call=True)
        assert run.violations() == []
        full.add((run.store_order(), run.outcomes()))

    def run_reduced(choose: Callable[[int], int]) -> None:
        run = interleave(choose, "first")
        reduced.add((run.store_order(), run.outcomes()))

    every = explore(run_full, limit=LIMIT)
    fewer = explore(run_reduced, limit=LIMIT)
    say(
        f"[simulation] first bootstrap, every call a scheduling point: {every} schedules, "
        f"{len(full)} orders of the Secrets Manager calls; reduced: {fewer} schedules"
    )
    assert full == reduced
    assert fewer == len(reduced) < every


def test_the_exploration_catches_a_bootstrap_that_replaces_the_whole_document() -> None:
    class FoundError(Exception):
        pass

    runs: list[list[str]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        runs.append(interleave(choose, "reauthorization").violations())
        if runs[-1]:
            raise FoundError

    with replacing_bootstrap_writes(), pytest.raises(FoundError):
        explore(run_one, limit=LIMIT)
    # Found early in the enumeration (schedule 9 of the depth-first order): the bootstrap
    # stores its candidate into the document it read, over the rotator's claim, erasing it.
    assert len(runs) <= 20
    assert any(problem.startswith("I5 (bootstrap)") for problem in runs[-1]), runs[-1]


@contextmanager
def replacing_bootstrap_writes() -> Iterator[None]:
    """The broken variant: the bootstrap's updates of the refresh credential document write
    ``change(document read)`` over whatever is stored now, instead of merging into the newest
    version (the rotator's writes are left as they are)."""
    original = credentials.CredentialVault.update_refresh

    def update_refresh(
        self: Any, snapshot: Any, change: Any, deadline: float, *, checked: Any = None
    ) -> Any:
        if _writer() != BOOTSTRAP:
            return original(self, snapshot, change, deadline, checked=checked)
        updated = change(snapshot.secret)
        if updated is None:
            return None
        current = self.read_refresh(deadline)
        return self.write_refresh(updated, current.version_id, deadline)

    credentials.CredentialVault.update_refresh = update_refresh  # type: ignore[method-assign]
    try:
        yield
    finally:
        credentials.CredentialVault.update_refresh = original  # type: ignore[method-assign]
