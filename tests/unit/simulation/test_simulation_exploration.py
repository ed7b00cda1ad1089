"""Issue 10: bounded exhaustive exploration of the rotation, faults included, with the
invariants I1-I4 checked after every step (``simulation.exploration``,
``simulation.invariants``).

``SIMULATION_BOUNDS=verify`` (``make verify``) explores deeper bounds;
the default (``make explore``, part of ``make test``) stays within 90 s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from simulation.exploration import (
    DUPLICATE_FORCED,
    FORCED,
    ON_LAMBDA,
    SCHEDULED_AND_DUPLICATE_FORCED,
    TWO_ROTATORS,
    Bounds,
    Scenario,
    Transition,
    explore,
    independent,
    on_lambda,
)
from simulation.search import SleepSetExplorer
from support import DEEPER

EXPLORE = Bounds(crashes=1, lost=1, stale=1)
VERIFY = Bounds(crashes=2, lost=1, stale=2, lost_endpoints=("refresh", "exchange", "projects"))
# Busy services (Secrets Manager throttling, a 503 from the provider or the service): the call
# does nothing and the caller retries after a back-off.
BUSY = Bounds(crashes=0, lost=0, stale=0, busy=1)
BUSY_VERIFY = Bounds(crashes=1, lost=1, stale=0, busy=1)
# Three invocations at once: a scheduled run and both deliveries of a forced request.
CLEAN = Bounds(crashes=0, lost=0, stale=0)
THREE_VERIFY = Bounds(crashes=1, lost=0, stale=0)
# Slow answers: a refresh, exchange or listing answered a lease's length later (the clock moves
# during the call; the caller gives up at its time limit, the request acted on).
SLOW = Bounds(crashes=0, lost=0, stale=0, slow=1)
SLOW_VERIFY = Bounds(crashes=1, lost=1, stale=1, slow=1)
# One invocation on Lambda (reserved concurrency 1) and Lambda's retries of it, at reuse
# intervals 0, 30 s and 300 s (issue 28): a crash anywhere, a lost refresh answer (connection
# closed, a gateway's 504), a slow one or one after the call's whole limit.
LAMBDA = Bounds(
    crashes=1, lost=1, stale=0, slow=1, lost_kinds=("lost", "gateway"), retry_faults=True
)
LAMBDA_VERIFY = replace(LAMBDA, stale=1)
# Deeper (issue 38): two crashes with a lost and a slow answer, at each reuse interval.
LAMBDA_TWO_CRASHES = replace(LAMBDA, crashes=2)
CASES: list[tuple[Scenario, Bounds]] = [
    (TWO_ROTATORS, EXPLORE),
    (DUPLICATE_FORCED, EXPLORE),
    (TWO_ROTATORS, BUSY),
    (SCHEDULED_AND_DUPLICATE_FORCED, CLEAN),
    (TWO_ROTATORS, SLOW),
    (DUPLICATE_FORCED, SLOW),
    *((scenario, LAMBDA) for scenario in ON_LAMBDA),
    # A streak already waiting: the run's lost answer must still have Lambda's retries at once.
    (on_lambda(300.0, streak=3), LAMBDA),
]
if DEEPER:
    CASES = [
        (TWO_ROTATORS, VERIFY),
        (DUPLICATE_FORCED, VERIFY),
        (TWO_ROTATORS, BUSY_VERIFY),
        (SCHEDULED_AND_DUPLICATE_FORCED, THREE_VERIFY),
        (TWO_ROTATORS, SLOW_VERIFY),
        *((scenario, LAMBDA_VERIFY) for scenario in ON_LAMBDA),
        *((scenario, LAMBDA_TWO_CRASHES) for scenario in ON_LAMBDA),
        (on_lambda(300.0, FORCED), LAMBDA_VERIFY),
        (on_lambda(300.0, streak=3), LAMBDA_VERIFY),
    ]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("scenario", "bounds"), CASES, ids=[f"{s.name}-{b.label()}" for s, b in CASES]
)
def test_every_schedule_within_the_bounds_keeps_the_invariants(
    scenario: Scenario, bounds: Bounds, say: Callable[[str], None]
) -> None:
    report = explore(scenario, bounds)
    say(f"[exploration] {report.line()}")
    say(f"[exploration]   faults injected: {dict(report.faults)}")
    say(f"[exploration]   outcomes (actors; recovery): {dict(report.outcomes)}")
    assert report.counterexample is None, report.counterexample
    assert report.schedules > 40
    # every fault kind the bounds allow was injected somewhere, and (with crashes or lost
    # answers) some schedules lost the credential in the documented window and reported it
    bounded = {
        "crash": bounds.crashes,
        "lost": bounds.lost,
        "stale": bounds.stale,
        "busy": bounds.busy,
        "slow": bounds.slow,
    }
    assert set(report.faults) == {kind for kind, n in bounded.items() if n}
    if (bounds.crashes or bounds.lost or bounds.slow) and scenario.reuse_interval < 300:
        assert any("ReauthorizationRequiredError" in outcome for outcome in report.outcomes)
    assert any(outcome.endswith("rotated") for outcome in report.outcomes)
    if scenario.reserved_concurrency:
        # every fault the bounds allow failed some run, and Lambda retried it
        assert any(outcome.count(";") > 1 for outcome in report.outcomes)


def test_a_clean_schedule_is_checked_at_every_step_and_passes() -> None:
    report = explore(TWO_ROTATORS, Bounds(crashes=0, lost=0, stale=0), symmetry=False)
    assert report.counterexample is None
    assert report.schedules >= 2
    # one actor rotates; the other skips (a fresh token, or a lease over a stored refresh) or,
    # meeting the lease while the first may still be refreshing, fails, and Lambda's retry a
    # minute later finds the token fresh; the recovery rotates again
    assert set(report.outcomes) == {
        "rotated; skipped; rotated",
        "skipped; rotated; rotated",
        "LeaseHeldError; rotated; skipped; rotated",
    }
    # the two actors interchangeable, each outcome is met once, up to their names: the second
    # rotating is the first rotating, renamed
    renamed = explore(TWO_ROTATORS, Bounds(crashes=0, lost=0, stale=0))
    assert set(renamed.outcomes) == set(report.outcomes) - {"skipped; rotated; rotated"}


def test_independence_is_what_the_reduction_assumes() -> None:
    read = Transition("a", 0, "secretsmanager.GetSecretValue:credential")
    other_read = Transition("b", 0, "secretsmanager.GetSecretValue:credential")
    write = Transition("b", 0, "secretsmanager.PutSecretValue:credential")
    publish = Transition("b", 0, "secretsmanager.PutSecretValue:service-token")
    sleep = Transition("b", 0, "clock.sleep")
    refresh = Transition("b", 0, "upstream.refresh")
    assert independent(read, other_read)
    assert not independent(read, write)
    assert independent(read, publish)
    assert independent(read, refresh)
    assert not independent(read, sleep)  # every step reads the clock
    assert not independent(read, Transition("a", 1, "upstream.refresh"))  # same actor
    crash_a = Transition("a", 0, "upstream.refresh", "crash")
    assert independent(crash_a, write)  # a crash touches nothing
    assert not independent(crash_a, Transition("b", 0, "clock.sleep", "crash"))  # one budget
    assert not independent(read, Transition("b", 0, "upstream.refresh", "slow"))  # time passes


def test_sleep_sets_explore_one_order_of_independent_steps() -> None:
    explorer = SleepSetExplorer(independent)
    a = Transition("a", 0, "secretsmanager.GetSecretValue:credential")
    b = Transition("b", 0, "secretsmanager.GetSecretValue:service-token")
    runs = []
    while True:
        first = explorer.decide([a, b])
        assert first is not None
        second = explorer.decide([b] if first == a else [a])
        runs.append((first, second))
        if not explorer.advance():
            break
    # a then b; b then a is cut (a asleep): the two orders reach the same state
    assert runs == [(a, b), (b, None)]
