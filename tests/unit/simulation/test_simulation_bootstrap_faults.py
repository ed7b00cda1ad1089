"""Issue 10: the rotator meeting an approved bootstrap poll, explored exhaustively with faults
(``simulation.bootstrap_exploration``): a crash at every scheduling point, a lost answer at
every refresh, approved poll and exchange, a stale read at every read; I1-I5 checked after
every step, and after the operator's poll and a clean rotator, the approval installed (unless
its loss is documented) and the stack healthy, or a documented loss reported.

``SIMULATION_BOUNDS=verify`` (``make verify``) explores deeper bounds; the default (``make
explore``, part of ``make test``) keeps to its time budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from simulation.bootstrap_exploration import explore, run_schedule
from simulation.exploration import Bounds, independent
from simulation.search import SleepSetExplorer
from support import DEEPER

UPSTREAM = ("refresh", "device_token", "exchange")
EVERY_FAULT = Bounds(crashes=1, lost=1, stale=1, lost_endpoints=UPSTREAM)
CRASH = Bounds(crashes=1, lost=0, stale=0)
LOST = Bounds(crashes=0, lost=1, stale=0, lost_endpoints=UPSTREAM)
STALE = Bounds(crashes=0, lost=0, stale=1)
CASES: list[tuple[str, Bounds]] = [
    ("first", EVERY_FAULT),
    ("reauthorization", CRASH),
    ("revoked", CRASH),
]
if DEEPER:
    CASES = [
        ("first", Bounds(crashes=2, lost=1, stale=2, lost_endpoints=(*UPSTREAM, "projects"))),
        ("reauthorization", LOST),
        ("reauthorization", STALE),
        ("revoked", CRASH),
        ("revoked", LOST),
        ("revoked", STALE),
    ]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("case", "bounds"), CASES, ids=[f"{c}-{b.label()}" for c, b in CASES])
def test_every_schedule_of_a_rotation_and_an_approved_poll_keeps_the_invariants(
    case: str, bounds: Bounds, say: Callable[[str], None]
) -> None:
    report = explore(case, bounds, upstream_first=True)
    say(f"[exploration] {report.line()}")
    say(f"[exploration]   faults injected: {dict(report.faults)}")
    assert report.counterexample is None, report.counterexample
    assert report.schedules > 100
    faults = {
        f
        for f, n in (("crash", bounds.crashes), ("lost", bounds.lost), ("stale", bounds.stale))
        if n
    }
    assert set(report.faults) == faults  # every fault kind the bounds allow was injected
    ends = " | ".join(report.outcomes)
    assert "authorized" in ends
    assert "rotated" in ends


def final_states(case: str, bounds: Bounds, *, upstream_first: bool) -> set[tuple[Any, ...]]:
    """What every schedule ends in: both secrets' current values and the actors' outcomes."""
    explorer = SleepSetExplorer(independent)
    ends: set[tuple[Any, ...]] = set()
    decide: Callable[..., Any] = explorer.decide
    while True:
        harness = run_schedule(case, bounds, decide, upstream_first=upstream_first)
        assert harness.violation is None
        if not harness.abandoned:
            secrets = harness.world.secretsmanager
            ends.add(
                (
                    *(secrets.current_text(name) for name in sorted(secrets.secrets)),
                    tuple(s.text.split(": ", 1)[1] for s in harness.steps if s.action == "end"),
                )
            )
        if not explorer.advance():
            return ends


@pytest.mark.parametrize("bounds", [CRASH, LOST], ids=["crash", "lost"])
def test_taking_upstream_calls_first_loses_no_outcome(bounds: Bounds) -> None:
    """The reduction the exploration uses (an actor at an upstream call goes first) ends in
    exactly the states and outcomes that every interleaving ends in, on the first bootstrap."""
    assert final_states("first", bounds, upstream_first=True) == final_states(
        "first", bounds, upstream_first=False
    )
