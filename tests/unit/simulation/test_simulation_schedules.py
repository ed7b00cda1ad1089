"""Every interleaving of two rotator invocations (the reserved-concurrency-0 case), explored
exhaustively on the simulation's models: the real ``Rotator``, one scheduling point per call on
Secrets Manager, the identity provider or the service.

Checked in every schedule: I1 (no refresh token is presented again after the identity provider
acted on it, outside the reuse interval), the stored refresh token is the family's newest and
usable, and the published service token is accepted. A variant whose writes ignore the version
they replace (no ``ClientRequestToken`` conflict) must be caught: the harness bites.

The exhaustive enumeration (4850 schedules, every call a scheduling point, no reduction) runs
in ``make verify``; ``make test`` explores the same two rotators with faults, reduced
(``test_simulation_exploration.py``), and compares the reduced search with the full one
(``test_simulation_reduction.py``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import pytest

from cmstoken.aws.secrets import SecretStore
from cmstoken.core.triggers import RotationRequest
from simulation.scheduler import Explorer, Scheduler, SchedulingError, explore
from simulation.world import HOUR, World
from support import DEEPER

SCHEDULED = RotationRequest(forced=False, source="schedule")
LIMIT = 20_000


class BlindStore(SecretStore):
    """A broken store: every write gets a fresh version id, so a writer working from a stale
    read is never refused."""

    def write(self, secret_id: str, text: str, *, replacing: str | None) -> str:
        return super().write(secret_id, text, replacing=str(uuid.uuid4()))


def two_rotators(choose: Callable[[int], int], *, blind: bool = False) -> tuple[World, Scheduler]:
    scheduler = Scheduler(choose)
    world = World(interceptor=scheduler)
    world.seed()
    if blind:
        world.store = BlindStore(cast(Any, world.secretsmanager))
    world.clock.advance(19 * HOUR)  # the service token is due
    deadline = world.clock.now() + 120
    for owner in ("first", "second"):
        scheduler.spawn(owner, partial(world.rotator(owner).run, SCHEDULED, deadline=deadline))
    scheduler.run()
    return world, scheduler


def violations(world: World) -> list[str]:
    found = [f"I1: {token} presented again" for token in world.replayed_refresh_tokens()]
    newest = world.newest_refresh_token()
    if not world.identity.usable(newest):
        found.append("the stored refresh token is not usable")
    if not world.upstream.service.valid(world.service_document().token):
        found.append("the published service token is not accepted")
    return found


@pytest.mark.skipif(not DEEPER, reason="the exhaustive enumeration runs in make verify")
def test_every_interleaving_of_two_rotators_keeps_the_guarantees(
    say: Callable[[str], None],
) -> None:
    outcomes: Counter[tuple[str, ...]] = Counter()
    refreshes: Counter[int] = Counter()
    bad: list[tuple[list[tuple[str, str]], list[str]]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        world, scheduler = two_rotators(choose)
        outcomes[
            tuple(type(a.error).__name__ if a.error else a.result.outcome for a in scheduler.actors)
        ] += 1
        refreshes[sum(e.endpoint == "refresh" for e in world.upstream.log)] += 1
        problems = violations(world)
        if problems:
            bad.append((scheduler.trace, problems))

    schedules = explore(run_one, limit=LIMIT)
    say(
        f"[simulation] two rotators: {schedules} schedules explored; "
        f"outcomes {dict(outcomes)}; refreshes per schedule {dict(refreshes)}"
    )
    assert bad == []
    assert schedules > 1
    assert refreshes == Counter({1: schedules})  # one refresh per due period, whoever wins


def test_the_exploration_catches_writes_that_ignore_the_version_they_replace() -> None:
    class FoundError(Exception):
        pass

    runs: list[list[str]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        world, _ = two_rotators(choose, blind=True)
        runs.append(violations(world))
        if runs[-1]:
            raise FoundError

    with pytest.raises(FoundError):
        explore(run_one, limit=LIMIT)
    # Found early in the enumeration (schedule 28 of the depth-first order): both invocations
    # claim the same version, both refresh with the same token, and the second presentation
    # revokes the family.
    assert len(runs) <= 100
    assert any(problem.startswith("I1") for problem in runs[-1])
    assert "the stored refresh token is not usable" in runs[-1]


def test_a_schedule_is_a_function_of_its_choices() -> None:
    def run(choices: list[int]) -> list[tuple[str, str]]:
        pending = list(choices)
        _, scheduler = two_rotators(lambda count: pending.pop(0) % count if pending else 0)
        return scheduler.trace

    first = run([1, 0, 1, 1, 0, 1])
    assert run([1, 0, 1, 1, 0, 1]) == first
    assert run([0, 0, 0]) != first
    assert [name for name, _ in run([])][:2] == ["first", "first"]


def test_the_explorer_enumerates_every_choice_sequence_once() -> None:
    seen: list[tuple[int, ...]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        # a tree: 3 choices, then 2 more after choice 0, none after the others
        first = choose(3)
        second = choose(2) if first == 0 else None
        seen.append((first,) if second is None else (first, second))

    assert explore(run_one, limit=10) == 4
    assert seen == [(0, 0), (0, 1), (1,), (2,)]
    with pytest.raises(SchedulingError):
        explore(run_one, limit=3)
    explorer = Explorer()
    explorer.prefix = [2]
    with pytest.raises(SchedulingError):
        explorer.choose(2)  # a replay that meets fewer alternatives than before
