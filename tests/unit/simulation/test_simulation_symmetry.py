"""Issue 38: interchangeable actors (``simulation.symmetry``). The search keeps one of two states
that are one renamed (two scheduled runs, or the two deliveries of one forced request, swapped),
which is sound only when the scenario really is symmetric: every state reached has its
renaming reached too, with the same futures renamed. These tests check that claim on the
unpruned search (sleep sets only, which reach every state), show it fail where the harness
tells the names apart (separate jitter streams), pin the renaming of texts, and check that the
counts are the same in every process. ``test_simulation_state_pruning.py`` and
``test_simulation_reduction.py`` check the outcome: the pruned search, which merges renamed
states, meets the same states, final states and violations as the search that merges none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from simulation.exploration import (
    DUPLICATE_FORCED,
    FORCED,
    ON_LAMBDA,
    SCHEDULED,
    SCHEDULED_AND_DUPLICATE_FORCED,
    TWO_ROTATORS,
    Bounds,
    Harness,
    Report,
    Scenario,
    explore,
)
from simulation.symmetry import Symmetry
from support import DEEPER

CRASH = Bounds(crashes=1, lost=0, stale=0)
# a lost answer or a busy one: the caller backs off, its sleep drawn from its jitter stream
LOST = Bounds(crashes=0, lost=1, stale=0)
BUSY = Bounds(crashes=0, lost=0, stale=0, busy=1)
CASES: list[tuple[Scenario, Bounds]] = [
    (TWO_ROTATORS, CRASH),
    (TWO_ROTATORS, LOST),
    (DUPLICATE_FORCED, CRASH),
]
if DEEPER:  # 7 and 10 s more
    CASES += [
        (SCHEDULED_AND_DUPLICATE_FORCED, Bounds(crashes=0, lost=0, stale=0)),
        (TWO_ROTATORS, BUSY),
    ]


def reached(
    scenario: Scenario, bounds: Bounds, monkeypatch: pytest.MonkeyPatch
) -> tuple[Report, dict[int, tuple[tuple[int, ...], bool]]]:
    """Every schedule, unpruned (the sleep sets alone reach every state:
    ``test_simulation_reduction.py``) and every recovery run: each state reached (its
    fingerprint with the names as they are), its fingerprints under every renaming, and
    whether a retry was chosen between two invocations nothing told apart before it."""
    states: dict[int, tuple[tuple[int, ...], bool]] = {}
    record = Harness._record_state

    def noting(harness: Harness) -> object:
        prints = harness.fingerprints()
        states[prints[0]] = prints, harness.tied
        return record(harness)

    monkeypatch.setattr(Harness, "_record_state", noting)
    report = explore(scenario, bounds, prune=False, stop_at_first=False, recall=False)
    return report, states


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("scenario", "bounds"), CASES, ids=[f"{s.name}-{b.label()}" for s, b in CASES]
)
def test_every_state_reached_has_its_renaming_reached(
    scenario: Scenario,
    bounds: Bounds,
    monkeypatch: pytest.MonkeyPatch,
    say: Callable[[str], None],
) -> None:
    report, states = reached(scenario, bounds, monkeypatch)
    # a state whose renaming is not reached follows a retry that Lambda may take in either
    # order, chosen at a state that is its own renaming: the other order reaches the same
    # states renamed, the same for the search
    unmatched = [tied for prints, tied in states.values() if not set(prints) <= set(states)]
    say(
        f"[symmetry] {report.line()}: {len(states)} states with the names as they are, "
        f"{len(unmatched)} of them after a retry chosen at a state that is its own renaming"
    )
    assert report.counterexample is None
    assert all(len(prints) == 2 for prints, _ in states.values())
    assert all(unmatched)
    assert len(unmatched) < len(states) / 100
    # the renaming is no identity: most states differ from their renaming
    assert sum(prints[0] != prints[1] for prints, _ in states.values()) > len(states) / 2
    # and the search keeps one of each pair: the canonical states are about half
    assert len(report.states) < 0.6 * len(states)


def test_separate_jitter_streams_break_the_symmetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberate break: each actor draws its own jitter (its own name's stream), so two
    renamed states back off differently; the check above finds states whose renaming is never
    reached."""
    monkeypatch.setattr(Symmetry, "stream", lambda self, name: name)
    _, states = reached(TWO_ROTATORS, LOST, monkeypatch)
    unmatched = [tied for prints, tied in states.values() if not set(prints) <= set(states)]
    assert not all(unmatched)


def test_the_interchangeable_actors_are_those_with_one_request() -> None:
    assert Symmetry.of(TWO_ROTATORS.actors) is not None
    three = Symmetry.of(SCHEDULED_AND_DUPLICATE_FORCED.actors)
    assert three is not None
    assert three.pair == ("delivery", "redelivery")
    assert Symmetry.of(ON_LAMBDA[0].actors) is None
    assert Symmetry.of((("a", SCHEDULED), ("b", FORCED))) is None
    with pytest.raises(ValueError, match="only a pair"):
        Symmetry.of((("a", SCHEDULED), ("b", SCHEDULED), ("c", SCHEDULED)))


def test_a_renaming_swaps_whole_names_and_keeps_a_retry_s_number() -> None:
    symmetry = Symmetry("first", "second")
    swap = symmetry.swap
    assert swap("first#2 reads: lease second until t+150s") == (
        "second#2 reads: lease first until t+150s"
    )
    # a word that only contains a name, or a name inside an identifier, is no name
    assert (
        swap("firstly cmstoken:first-version seconds") == "firstly cmstoken:first-version seconds"
    )
    assert symmetry.stream("second#3") == "first#3"
    assert symmetry.stream("recovery") == "recovery"
    assert symmetry.least(["second ends: skipped", "first ends: rotated"]) == (
        "first ends: rotated; second ends: skipped"
    )


COUNT = """
import sys
from simulation.exploration import TWO_ROTATORS, Bounds, explore
report = explore(TWO_ROTATORS, Bounds(crashes=1, lost=0, stale=0))
print(report.schedules, report.pruned, report.revisits, report.steps, len(report.states))
"""


def test_the_counts_are_the_same_in_every_process() -> None:
    """Which renaming stands for a state is decided by texts, never by a fingerprint: Python's
    hashes of strings differ from process to process (``PYTHONHASHSEED``), and an order taken
    from them made the steps differ from run to run (1014, 1020, 1023 for this search)."""
    tests = Path(__file__).resolve().parents[2]
    counts = {
        subprocess.run(
            [sys.executable, "-c", COUNT],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(tests)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(4)
    }
    assert len(counts) == 1, counts
