"""The reduction is sound: the sleep-set search (``simulation.exploration``) visits exactly the
states (by ``Harness.fingerprint``) the search without reduction visits, and so does the search
that also prunes at states explored before (``simulation.search``).

Sleep sets only skip orders of independent steps, so with a right independence relation they
lose no state (Godefroid 1996). Two things once made the reduced search miss states: a state
recorded inside a step (between an actor's last call and its end, which the same step runs), and
the retry jitter seeded by the number of steps of all actors (two commuting steps left an actor a
different back-off in either order). The lost answer case has retries, hence back-off sleeps.

``SIMULATION_BOUNDS=verify`` adds the lost answer, a crash and a stale read at bound 1 (the
full search of each takes half a minute to minutes; ``make test`` compares the fault-free case
here, and the pruned search with the unpruned one with a crash and with a slow answer in
``test_simulation_state_pruning.py``).
"""

from __future__ import annotations

import pytest

from simulation.exploration import DUPLICATE_FORCED, TWO_ROTATORS, Bounds, Scenario, explore
from support import DEEPER

FAULT_FREE = Bounds(crashes=0, lost=0, stale=0)
CASES: list[tuple[Scenario, Bounds]] = [(TWO_ROTATORS, FAULT_FREE)]
if DEEPER:
    CASES += [
        (TWO_ROTATORS, Bounds(crashes=0, lost=1, stale=0)),
        (DUPLICATE_FORCED, FAULT_FREE),
        (TWO_ROTATORS, Bounds(crashes=1, lost=0, stale=0)),
        (TWO_ROTATORS, Bounds(crashes=0, lost=0, stale=1)),
    ]


def _id(case: tuple[Scenario, Bounds]) -> str:
    scenario, bounds = case
    return f"{scenario.name}, crashes {bounds.crashes}, lost {bounds.lost}, stale {bounds.stale}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("scenario", "bounds"), CASES, ids=[_id(c) for c in CASES])
def test_the_reduced_search_visits_exactly_the_states_of_the_full_search(
    scenario: Scenario, bounds: Bounds
) -> None:
    reduced = explore(scenario, bounds, prune=False, stop_at_first=False)
    full = explore(scenario, bounds, reduce=False, prune=False, stop_at_first=False)
    assert reduced.counterexample is None, reduced.counterexample
    assert full.counterexample is None, full.counterexample
    # the reduction cuts schedules, and loses no state
    assert reduced.schedules + reduced.pruned < full.schedules
    assert full.pruned == 0
    only_reduced = len(reduced.states - full.states)
    only_full = len(full.states - reduced.states)
    assert only_reduced == 0
    assert only_full == 0, f"{only_full} of {len(full.states)} states only without the reduction"
    # and with the state caching on top (``simulation.search``), still every state
    assert explore(scenario, bounds, stop_at_first=False).states == full.states
