"""Issue 36: every caller at once, for a week (``simulation.week``): the hourly schedule, a flood
of members' refresh requests through the queue, whoever holds the alarm messages pressing every
link they carry, and the operator re-authorizing at a chosen moment, on Lambda's, SQS's and
Secrets Manager's documented semantics and a provider without a reuse interval. The outcomes:
the service token never expires, the credential is never lost, the operator's re-authorization
succeeds, and no alarm reports a failure that did not happen.

``SIMULATION_BOUNDS=verify`` (``make verify``) runs the seven days across the warning window
with the operator at several moments; the default (``make test``, ``make explore``) runs two and
a half days from six hours before the warning, with the operator at the worst moment and while
an authorization a link started is pending (its background poll polling it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest

from cmstoken.core.errors import RotationError
from cmstoken.core.triggers import RotationRequest
from simulation import week as week_module
from simulation.exploration import SCHEDULED
from simulation.secretsmanager import DAY
from simulation.week import (
    THROTTLE_BACKOFF_MAX,
    Engine,
    EngineClock,
    Span,
    Week,
    false_alarms,
    limits,
    link_pending_moment,
    worst_moment,
)
from support import DEEPER

PROFILE = "verify" if DEEPER else "explore"  # said in each run's figures
HOUR = 3600.0


def _warning_starts(span: Span) -> float:
    """Seconds into ``span`` when the family reaches the template's warning age."""
    return limits().warning - span.age


SPANS = {
    "explore": Span(age=limits().warning - 6 * HOUR, length=2.5 * DAY),
    "verify": Span(),
}
SPAN = SPANS[PROFILE]
# When the operator starts re-authorizing (seconds into the span; a function of the span: read
# from the span without the operator), inside the warning window (before it, no link is ever
# sent). "a link's pending": while an authorization a link started is pending and its
# background poll polls it (the operator's start replaces it); with no member's refresh request
# (``QUIET``), as the version budget refuses every link's poll while the members' forced
# refreshes spend what outside callers may write.
VERIFY_MOMENTS: dict[str, float | Callable[[Span], float]] = {
    "warning + 1 h": _warning_starts(SPAN) + HOUR,
    "warning + 1 day": _warning_starts(SPAN) + DAY,
    "day 6": 6 * DAY,
    "worst": worst_moment,
    "a link's pending": link_pending_moment,
}
MOMENTS = (
    VERIFY_MOMENTS if DEEPER else {"worst": worst_moment, "a link's pending": link_pending_moment}
)
QUIET = {"a link's pending"}


# --- the engine and Lambda's semantics ----------------------------------------------------------


def test_actors_due_together_take_turns_call_by_call_and_sleepers_wake_in_time_order() -> None:
    clock = EngineClock(0.0)
    engine = Engine(clock)
    clock.engine = engine
    order: list[str] = []

    def calls(name: str) -> None:
        for n in range(3):
            engine.intercept("secretsmanager", "Get", partial(order.append, f"{name}{n}"))

    def sleeper(name: str, seconds: float) -> None:
        clock.sleep(seconds)
        order.append(f"{name}@{clock.now():.0f}")

    engine.spawn("a", lambda: calls("a"))
    engine.spawn("b", lambda: calls("b"))
    engine.spawn("late", lambda: sleeper("late", 10))
    engine.spawn("early", lambda: sleeper("early", 5))
    engine.at(7, lambda: order.append("event@7"))
    engine.run(20)
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2", "early@5", "event@7", "late@10"]
    assert clock.now() == 20


def test_an_actor_left_parked_is_ended_by_close_without_its_outcome() -> None:
    clock = EngineClock(0.0)
    engine = Engine(clock)
    clock.engine = engine
    outcomes: list[Any] = []
    engine.spawn("sleeper", lambda: clock.sleep(100), lambda result, error: outcomes.append(1))
    engine.run(10)
    engine.close()
    assert outcomes == []


@dataclass
class Stubbed:
    """A week whose rotator runs fail (``RotationError``) while ``failing[0]``; ``runs``: when
    each started."""

    week: Week
    runs: list[float]
    failing: list[bool]


@pytest.fixture
def stub_week(monkeypatch: pytest.MonkeyPatch) -> Stubbed:
    stubbed = Stubbed(Week(None), [], [True])
    week = stubbed.week
    week.clock.engine = week.engine

    class Stub:
        def run(self, request: RotationRequest, *, deadline: float) -> Any:
            stubbed.runs.append(week.clock.now())
            if stubbed.failing[0]:
                raise RotationError("the run fails")
            return SimpleNamespace(outcome="skipped")

    monkeypatch.setattr(week.world, "rotator", lambda owner: Stub())
    monkeypatch.setattr(week_module, "record_run", lambda *args: None)
    return stubbed


def test_a_failing_asynchronous_invocation_is_tried_again_one_and_three_minutes_later(
    stub_week: Stubbed,
) -> None:
    """ "If the function returns an error, by default Lambda attempts to run it two more times,
    with a one-minute wait between the first two attempts, and two minutes between the second
    and third attempts" (Lambda Developer Guide, "Asynchronous invocation"); then the
    on-failure destination gets it."""
    week, runs = stub_week.week, stub_week.runs
    start = week.clock.now()
    week.rotator.invoke_async(SCHEDULED, "schedule", start)
    week.engine.run(start + HOUR)
    assert [round(t - start, 1) for t in runs] == [0, 60, 180]
    assert week.figures.dead_letters["schedule"] == 1


def test_a_throttled_asynchronous_invocation_backs_off_up_to_five_minutes(
    stub_week: Stubbed,
) -> None:
    """A run in flight (reserved concurrency 1) throttles the invocation, which Lambda tries
    again "with exponentially increasing intervals up to 5 minutes"."""
    week, runs = stub_week.week, stub_week.runs
    start = week.clock.now()
    week.rotator.running = 1
    week.engine.at(start + 1000, lambda: setattr(week.rotator, "running", 0))
    week.rotator.invoke_async(SCHEDULED, "schedule", start)
    week.engine.run(start + 1000 + THROTTLE_BACKOFF_MAX)
    assert runs, "never ran"
    assert 1000 < runs[0] - start <= 1000 + THROTTLE_BACKOFF_MAX
    assert week.figures.throttles >= 9


def test_a_queued_request_throttled_throughout_ends_in_the_redrive_or_its_retention(
    stub_week: Stubbed,
) -> None:
    """The queue's message comes back after each visibility timeout while the rotator is
    busy; past the redrive policy's receives it moves to its dead letter queue (without one,
    it is gone at the end of its retention)."""
    week, runs = stub_week.week, stub_week.runs
    queue = limits()
    if queue.max_receive_count is not None:
        ends = queue.max_receive_count * queue.visibility_timeout
    else:
        ends = queue.retention
    start = week.clock.now()
    week.rotator.running = 1
    week.queue.send()
    week.engine.run(start + ends - 1)
    assert (runs, dict(week.figures.dead_letters), week.figures.messages_lost) == ([], {}, 0)
    week.engine.run(start + ends + 1)
    assert runs == []
    if queue.max_receive_count is not None:
        assert dict(week.figures.dead_letters) == {str(queue.failed_to): 1}
    else:
        assert week.figures.messages_lost == 1


def test_a_queued_request_that_fails_comes_back_after_the_visibility_timeout_and_runs_twice(
    stub_week: Stubbed,
) -> None:
    """A failed run leaves the message, received again once its visibility timeout ends; a
    processed one is processed at least once (here: twice, a second later)."""
    week, runs = stub_week.week, stub_week.runs
    start = week.clock.now()
    week.queue.send()
    week.engine.at(start + 10, partial(stub_week.failing.__setitem__, 0, False))
    week.engine.run(start + limits().visibility_timeout + 10)
    assert [round(t - start, 1) for t in runs] == [
        0,
        limits().visibility_timeout,
        limits().visibility_timeout + 1,
    ]


# --- the week -----------------------------------------------------------------------------------


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(
    "moment", list(MOMENTS), ids=[m.replace(" ", "-").replace("'", "") for m in MOMENTS]
)
def test_every_caller_at_once_for_a_week_leaves_the_stack_working(
    moment: str, say: Callable[[str], None]
) -> None:
    chosen = MOMENTS[moment]
    at = chosen if isinstance(chosen, float) else chosen(SPAN)
    members = moment not in QUIET
    what = f"{PROFILE}, operator at {moment}: {at / DAY:.2f} d{'' if members else ', no member'}"
    figures = Week(at, what, span=SPAN, members=members).run()
    table = figures.table()
    print(table)
    say(f"[week] {table}")
    # The callers did act: links started authorizations, forced runs came.
    assert figures.link_starts > 0, table
    assert sum(figures.forced.values()) > 0 or not members, table
    assert figures.expired_at is None, table
    assert figures.least_validity > 0, table
    assert not figures.lost, table
    assert not figures.revoked, table
    assert figures.operator[-1] == "attempt 1: authorized", table
    assert figures.slow_downs == 0, table  # no device code polled by two pollers at once
    assert not false_alarms(figures), table
    if chosen is link_pending_moment:
        assert figures.operator[0] == "start 1 met a link's pending authorization", table
