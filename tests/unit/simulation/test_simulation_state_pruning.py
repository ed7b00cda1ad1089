"""Issue 38: pruning a schedule at a state explored before (``simulation.search``, state caching
with sleep sets) loses nothing: with and without it, the search finds the same violations and
ends in the same final states (fingerprints after the recovery, with the actors' outcomes), on
bounds small enough for both; a deliberate break is found by both. Nor does taking a recovery
from its record when it ran before from the same state but the actors' histories
(``Harness.recover_once``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cmstoken.rotation.rotator import Rotator
from simulation import bootstrap_exploration, links_exploration, quota_exploration
from simulation.exploration import (
    ON_LAMBDA,
    SCHEDULED_AND_DUPLICATE_FORCED,
    TWO_ROTATORS,
    Bounds,
    Report,
    Scenario,
    explore,
)

CLEAN = Bounds(crashes=0, lost=0, stale=0)
# Small enough for both searches (seconds each); the one invocation on Lambda is left out: its
# search is a tree (one actor, its choices only faults), where no state is met twice.
CASES: list[tuple[Scenario, Bounds]] = [
    (TWO_ROTATORS, Bounds(crashes=1, lost=0, stale=0)),
    (TWO_ROTATORS, Bounds(crashes=0, lost=0, stale=0, slow=1)),
    (SCHEDULED_AND_DUPLICATE_FORCED, CLEAN),
]


def both(scenario: Scenario, bounds: Bounds, say: Callable[[str], None]) -> tuple[Report, Report]:
    """The search without and with pruning, every schedule (no stop at a violation)."""
    full = explore(scenario, bounds, prune=False, stop_at_first=False)
    pruned = explore(scenario, bounds, stop_at_first=False)
    for name, report in (("without pruning", full), ("with pruning", pruned)):
        say(f"[pruning] {name}: {report.line()}")
    return full, pruned


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("scenario", "bounds"), CASES, ids=[f"{s.name}-{b.label()}" for s, b in CASES]
)
def test_pruning_keeps_the_violations_and_the_final_states(
    scenario: Scenario, bounds: Bounds, say: Callable[[str], None]
) -> None:
    full, pruned = both(scenario, bounds, say)
    assert full.revisits == 0
    assert pruned.revisits > 0  # the pruning was exercised
    assert pruned.steps < full.steps
    assert pruned.violations == full.violations == set()
    assert pruned.finals == full.finals
    assert pruned.states == full.states


def test_a_skipped_claim_is_found_with_and_without_pruning(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    """The break of ``test_simulation_broken_variants.py``: the rotator refreshes without its
    lease; both searches find the same violations (step numbers left out)."""
    monkeypatch.setattr(Rotator, "_claim", lambda self, snapshot, deadline, credential: snapshot)
    full, pruned = both(TWO_ROTATORS, CLEAN, say)
    assert full.counterexample is not None
    assert pruned.counterexample is not None
    say(f"[pruning] violations: {sorted(pruned.violations)}")
    assert {v.partition(":")[0] for v in pruned.violations} == {"I1"}
    assert pruned.violations == full.violations
    assert pruned.finals == full.finals


def test_pruning_keeps_the_states_of_the_links_and_the_bootstrap(
    say: Callable[[str], None],
) -> None:
    """The links' harness (its press ids and nonces drawn from the harness's seeded ``random``:
    with ``secrets`` one state had other fingerprints from run to run) and the bootstrap's
    (with its persistent sets) with and without pruning."""
    crash = Bounds(crashes=1, lost=0, stale=0)
    pairs = [
        tuple(
            links_exploration.explore("outcome and reminder", True, crash, prune=prune)
            for prune in (False, True)
        ),
        tuple(
            bootstrap_exploration.explore("first", crash, upstream_first=True, prune=prune)
            for prune in (False, True)
        ),
    ]
    for full, pruned in pairs:
        say(f"[pruning] without: {full.line()}\n[pruning] with: {pruned.line()}")
        assert full.counterexample is None, full.counterexample
        assert pruned.counterexample is None, pruned.counterexample
        assert pruned.revisits > 0
        assert pruned.steps < full.steps
        assert pruned.finals == full.finals
        assert pruned.states == full.states


CRASH = Bounds(crashes=1, lost=0, stale=0)
QUOTA_EDGE = next(s for s in quota_exploration.SCENARIOS if s.label() == "forced-link-outside")
# Each harness that takes a recovery from its record: the rotators, the bootstrap, the quota.
RECALLED: dict[str, Callable[[bool], Report]] = {
    "two rotators, a crash": lambda recall: explore(
        TWO_ROTATORS, CRASH, stop_at_first=False, recall=recall
    ),
    "one invocation on Lambda, a crash and a lost answer": lambda recall: explore(
        ON_LAMBDA[0],
        Bounds(crashes=1, lost=1, stale=0, lost_kinds=("lost", "gateway")),
        stop_at_first=False,
        recall=recall,
    ),
    "the first bootstrap, a crash": lambda recall: bootstrap_exploration.explore(
        "first", CRASH, upstream_first=True, recall=recall
    ),
    "a forced refresh and a link's poll at the outside edge": lambda recall: (
        quota_exploration.explore(QUOTA_EDGE, Bounds(crashes=0, lost=0, stale=0), recall=recall)
    ),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", list(RECALLED))
def test_a_recovery_taken_from_its_record_keeps_every_state_final_state_and_outcome(
    case: str, say: Callable[[str], None]
) -> None:
    """The recovery runs once per state it starts from (the actors done: their histories left
    out); every other schedule that ends there takes its record. The same schedules, states,
    final states, outcomes and violations as running each recovery, in fewer steps."""
    run, recalled = RECALLED[case](False), RECALLED[case](True)
    say(f"[recall] each recovery run: {run.line()}\n[recall] recalled: {recalled.line()}")
    assert (recalled.schedules, recalled.pruned) == (run.schedules, run.pruned)
    assert recalled.states == run.states
    assert recalled.finals == run.finals
    assert recalled.outcomes == run.outcomes
    assert recalled.violations == run.violations == set()
    assert recalled.steps < run.steps
