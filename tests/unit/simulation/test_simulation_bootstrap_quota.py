"""The bootstrap (an operator's poll, or a link's through the links alias) writing the refresh
credential while a rotation (scheduled, or forced) runs, near Secrets Manager's version quota,
explored (``simulation.quota_exploration``): each count of the versions a scheduling point, the
versions in use seeded where the writers' budgets decide. No interleaving puts a quota refusal
(``LimitExceededException``) between a spend and its store (I6), and I1-I5 hold; with a broken
budget (none at all, or none kept for the writes that follow a spend) it finds the refusal.

``SIMULATION_BOUNDS=verify`` (``make verify``) explores every scenario with a crash and a lost
answer, and the inside writers' edge with a stale read and with a busy call; the default (``make
explore``, part of ``make test``) explores the edges where the writers' order decides, without
faults, within its time budget.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cmstoken.core import version_budget
from simulation.exploration import Bounds
from simulation.quota_exploration import SCENARIOS, QuotaScenario, explore
from support import DEEPER

NONE = Bounds(crashes=0, lost=0, stale=0)
# Where both writers may just start.
EDGES = [s for s in SCENARIOS if s.level == "outside" or s.label() == "scheduled-operator-inside"]
# Where their order decides: an outside caller at its limit, or the inside writers at theirs (at
# the outside edge the schedule's refresh and an operator's poll both always fit).
DECIDING = [s for s in EDGES if s.label() != "scheduled-operator-outside"]
CASES: list[tuple[QuotaScenario, Bounds]] = [(s, NONE) for s in DECIDING]
if DEEPER:
    FAULTS = Bounds(crashes=1, lost=1, stale=0, lost_endpoints=("refresh", "device_token"))
    INSIDE = next(s for s in SCENARIOS if s.label() == "scheduled-operator-inside")
    CASES = [(s, FAULTS) for s in SCENARIOS] + [
        (INSIDE, Bounds(crashes=0, lost=0, stale=1)),
        (INSIDE, Bounds(crashes=0, lost=0, stale=0, busy=1)),
    ]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("scenario", "bounds"), CASES, ids=[f"{s.label()}-{b.label()}" for s, b in CASES]
)
def test_no_schedule_near_the_quota_refuses_a_store_after_a_spend(
    scenario: QuotaScenario, bounds: Bounds, say: Callable[[str], None]
) -> None:
    report = explore(scenario, bounds)
    say(f"[exploration] {report.line()}")
    say(f"[exploration]   outcomes: {dict(report.outcomes)}")
    assert report.counterexample is None, report.counterexample
    actors = [set(ends.split("; ")[:2]) for ends in report.outcomes]
    refused = [a for a in actors if any(_budget(end) for end in a)]
    if scenario in EDGES:
        assert {"rotated", "authorized"} in actors  # both wrote: their counts came first
    if scenario in DECIDING:  # and a writer refused by its budget: another wrote first
        assert refused
    elif scenario.level == "quota":  # every writer refused, before any write
        assert not any({"rotated", "authorized"} & a for a in actors)


def _budget(end: str) -> bool:
    return "version budget" in end or end == "VersionQuotaError"


def broken(label: str, what: str, say: Callable[[str], None]) -> str:
    """The violation the exploration of scenario ``label`` finds on a broken budget (``what``),
    its counterexample said."""
    scenario = next(s for s in SCENARIOS if s.label() == label)
    report = explore(scenario, NONE)
    assert report.counterexample is not None
    say(f"[exploration] broken budget ({what}): {report.line()}")
    for line in report.counterexample.splitlines():
        say(f"[exploration]   {line}")
    (violation,) = report.violations
    assert violation.startswith("I6: ")
    assert "refused by the version quota (LimitExceededException)" in violation
    return violation


def test_without_the_budget_a_refresh_one_short_of_the_quota_loses_its_store(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    """Control, the code before the budget: every action starts. One short of the quota, the
    rotator's claim takes the last version, and the store of its refresh's answer is refused:
    the rotated refresh token is lost."""
    monkeypatch.setattr(version_budget, "refusal", lambda *args: None)
    violation = broken("scheduled-operator-quota", "every action starts", say)
    assert "rotator's store of rt-3 (the successor of rt-1, spent)" in violation


def test_a_budget_that_keeps_no_room_for_the_writes_after_a_spend_loses_a_write(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    """Control: with nothing kept for the writes that follow a spend (``IN_FLIGHT`` 0: the
    schedule's refresh and an operator's poll may each fill the quota), the rotator's claim and
    store and the approval's storage leave no room for its promotion (the device code spent)."""
    monkeypatch.setattr(version_budget, "IN_FLIGHT", 0)
    violation = broken("scheduled-operator-inside", "IN_FLIGHT 0", say)
    assert violation.startswith("I6: bootstrap's write of the credential was refused")
