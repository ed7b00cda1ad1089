"""Issue 21: the re-authorization links' shared state (the links' table, the alarm topic, the
background polls and the bootstrap's pending authorization), explored exhaustively
(``simulation.links_exploration``): two presses of one link, two links pressed together, two
reminders, a reminder racing an approved poll's outcome, two polls of one code; each with the
person approving or not, a crash before every call and (``make verify``) a busy answer at every
call; the links' invariants L1-L5 checked after every step and after the recovery.

``SIMULATION_BOUNDS=verify`` (``make verify``) explores deeper bounds; the default (``make
explore``, part of ``make test``) keeps to its time budget.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from simulation.exploration import Bounds
from simulation.links_exploration import PRESS_SCENARIOS, SCENARIOS, explore
from support import DEEPER

NONE = Bounds(crashes=0, lost=0, stale=0)
CRASH = Bounds(crashes=1, lost=0, stale=0)
CRASH_AND_BUSY = Bounds(crashes=1, lost=0, stale=0, busy=1)
# The presses and the polls make many calls (the bootstrap's status, start and poll): their
# schedules with a crash take minutes, so make explore explores them without faults.
DEEP = CRASH_AND_BUSY if DEEPER else CRASH
LONG = CRASH if DEEPER else NONE
LONG_SCENARIOS = (*PRESS_SCENARIOS, "two polls")
# The presses' scenarios with the person approving what the page showed or never; the polls'
# are approved in their setup, and the reminders' have nothing to approve.
CASES = [
    (name, approve, LONG if name in LONG_SCENARIOS else DEEP)
    for name in SCENARIOS
    for approve in ((False, True) if name in PRESS_SCENARIOS else (name != "two reminders",))
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("name", "approve", "bounds"),
    CASES,
    ids=[f"{n.replace(' ', '-')}-{'approves' if a else 'never'}-{b.label()}" for n, a, b in CASES],
)
def test_every_schedule_of_the_links_keeps_their_invariants(
    name: str, approve: bool, bounds: Bounds, say: Callable[[str], None]
) -> None:
    report = explore(name, approve, bounds)
    say(f"[exploration] {report.line()}")
    say(f"[exploration]   faults injected: {dict(report.faults)}")
    assert report.counterexample is None, report.counterexample
    assert report.schedules >= 5
    kinds = {kind for kind, n in (("crash", bounds.crashes), ("busy", bounds.busy)) if n}
    assert set(report.faults) == kinds  # every fault kind the bounds allow was injected
    ends = " | ".join(report.outcomes)
    if name in PRESS_SCENARIOS:
        assert "showing" in ends  # a started page was shown
    if approve and name != "two reminders":
        assert "outcome authorized: sent" in ends
