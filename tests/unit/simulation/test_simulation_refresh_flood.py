"""Issue 29, item 5, and issue 36, item 4: a flood of refresh requests on the wiring the template
declares (``simulation.refresh_flood``: EventBridge's, SQS's and Lambda's documented behaviour
where moto cannot run it). The requests cause a bounded number of rotator runs, whatever their
number; the scheduled run waits behind one of them at most, for as long as Lambda's back-off on
a throttled asynchronous invocation gives; what EventBridge cannot deliver lands in a queue of
its own, never in RotationDeadLetterQueue; a request the rotator keeps failing on leaves a
record. BEFORE is the queue as it was (visibility 150 s, 10 minutes' retention, no redrive, the
rules' dead letters in RotationDeadLetterQueue), on the same model."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from itertools import accumulate, count

import pytest

from simulation.refresh_flood import (
    RUN_SECONDS,
    Outcome,
    Wiring,
    burst,
    flood,
    simulate,
    wiring,
)
from template_model import source, transformed

BURST = 10_000
HOUR = 3600
# Floods whose message arrives as the schedule's invocation does (30 s into the hour): at 29 s
# a request's run began 1 s before it (the worst for a 2 s run: the invocation waits for the
# second left, then its back-off); at 0 s, 30 s before it (for a 120 s run the wait is the same
# as from 1 s before: 127 s); at 124 s the runs of the queue as it was (150 s apart) keep in step
# with the capped back-off.
STARTS = (0, 29, 124)


def template_wiring() -> Wiring:
    reserved = source()["Parameters"]["RotatorReservedConcurrency"]["Default"]
    return wiring(transformed()["Resources"], reserved_concurrency=int(reserved))


def before() -> Wiring:
    return dataclasses.replace(
        template_wiring(),
        visibility_timeout=150,
        retention=600,
        max_receive_count=None,
        failed_to=None,
        undelivered_to="RotationDeadLetterQueue",
    )


def throttled_delay(run_seconds: float) -> float:
    """How long an asynchronous invocation that meets a run just started waits for it: "The
    retry interval increases exponentially from 1 second after the first attempt to a maximum of
    5 minutes" (Lambda Developer Guide, "How Lambda handles errors and retries with asynchronous
    invocation"): retries 1, 3, 7, 15 ... s after the first attempt, the first one after the
    run."""
    intervals = (min(2.0**n, 300.0) for n in count())
    return next(t for t in accumulate(intervals) if t >= run_seconds)


def worst(
    wiring: Wiring,
    requests: Callable[[int], dict[int, int]],
    *,
    run_seconds: float,
    failing: bool = False,
) -> Outcome:
    """The timeline, of those starting at STARTS, whose scheduled run waited longest."""
    outcomes = [
        simulate(wiring, requests(start), hours=24, run_seconds=run_seconds, failing=failing)
        for start in STARTS
    ]
    return max(outcomes, key=lambda o: max(o.schedule_delays))


def test_the_template_coalesces_refresh_requests_as_aws_advises() -> None:
    assert template_wiring() == Wiring(
        visibility_timeout=720,
        retention=345600,
        max_receive_count=5,
        failed_to="FailedRefreshRequestQueue",
        undelivered_to="UndeliveredRefreshRequestQueue",
        retry_attempts=2,
        batch_size=10,
        function_timeout=120,
        reserved_concurrency=1,
    )


def test_throttled_delay_is_the_back_off_lambda_documents() -> None:
    assert [throttled_delay(s) for s in (0.5, 1, 2, 120, 600)] == [1, 1, 3, 127, 811]


@pytest.mark.parametrize("run_seconds", [RUN_SECONDS, 120.0], ids=["a 2 s run", "a 120 s run"])
def test_a_burst_of_ten_thousand_requests_is_one_run_and_its_rest_a_record_of_its_own(
    run_seconds: float, say: Callable[[str], None]
) -> None:
    """A FIFO queue takes 300 SendMessage a second ("By default, FIFO queues support 300
    transactions per second, per API action", SQS Developer Guide, "Troubleshoot FIFO throttling
    issues"); EventBridge's two retries a second and two seconds later take 300 each, and the
    other 9,100 requests go to the rules' dead letter queue: UndeliveredRefreshRequestQueue, no
    alarm on it. The one message is one run; the scheduled run waits for it at most."""
    outcome = worst(
        template_wiring(), lambda start: burst(BURST, at=start), run_seconds=run_seconds
    )
    assert outcome.request_runs == 1
    assert outcome.dead_letters == {"UndeliveredRefreshRequestQueue": BURST - 3 * 300}
    assert max(outcome.schedule_delays) == throttled_delay(run_seconds - 1)  # STARTS
    assert len(outcome.schedule_delays) == 24
    # Control: the queue before, whose rules' dead letters went to the rotation failures' queue.
    old = worst(before(), lambda start: burst(BURST, at=start), run_seconds=run_seconds)
    assert old.dead_letters == {"RotationDeadLetterQueue": BURST - 3 * 300}
    say(
        f"[flood] {BURST} requests in a burst, runs of {run_seconds:.0f} s: "
        f"{outcome.request_runs} rotator run, {dict(outcome.dead_letters)} undelivered (before: "
        f"{dict(old.dead_letters)}), scheduled run delayed {max(outcome.schedule_delays):.0f} s "
        "at most"
    )


@pytest.mark.parametrize("per_second", [1, 35])
@pytest.mark.parametrize("run_seconds", [RUN_SECONDS, 120.0], ids=["2 s runs", "120 s runs"])
def test_a_day_long_flood_costs_a_run_per_five_minutes_and_delays_the_schedule_one_run(
    per_second: int, run_seconds: float, say: Callable[[str], None]
) -> None:
    """One message in five minutes (the deduplication interval), so one run; two runs of
    requests are five minutes apart, and the scheduled run waits behind one at most: the back-off
    of a throttled asynchronous invocation past a run, 1 s past a 2 s run, 127 s past one that
    uses the rotator's whole 120 s."""
    outcome = worst(
        template_wiring(), lambda start: flood(per_second, 24, start), run_seconds=run_seconds
    )
    assert outcome.request_runs <= 24 * 12 + 1
    assert outcome.versions <= outcome.request_runs * 2
    assert max(outcome.schedule_delays) == throttled_delay(run_seconds - 1)  # STARTS
    assert (outcome.dead_letters, outcome.expired, outcome.throttled_receives) == ({}, 0, 0)
    say(
        f"[flood] {per_second} request(s) a second for a day, runs of {run_seconds:.0f} s: "
        f"{outcome.request_runs} rotator runs, scheduled runs delayed "
        f"{max(outcome.schedule_delays):.0f} s at most, {outcome.versions} refresh credential "
        "versions written at a 600 s debounce"
    )


def test_a_request_the_rotator_keeps_failing_on_leaves_a_record(
    say: Callable[[str], None],
) -> None:
    """Every run fails, each taking the rotator's whole 120 s, under a day-long flood. A
    message comes back after each failed run's visibility timeout and, "When the ReceiveCount for
    a message exceeds the maxReceiveCount for a queue, Amazon SQS moves the message to the
    dead-letter queue" (SQS Developer Guide, "Using dead-letter queues"): every message ends in
    FailedRefreshRequestQueue, none expires (the longest wait, behind the group's earlier
    messages, stays far inside the retention), and the scheduled run still waits behind one run
    at most: two runs of requests are a visibility timeout apart."""
    flooding = lambda start: flood(35, 24, start)  # noqa: E731
    outcome = worst(template_wiring(), flooding, run_seconds=120, failing=True)
    assert outcome.dead_letters == {"FailedRefreshRequestQueue": outcome.messages}
    assert outcome.expired == 0
    assert outcome.oldest_dead_letter < template_wiring().retention / 10
    assert max(outcome.schedule_delays) == throttled_delay(120)
    # Control: before, each message expired after 10 minutes with no record, and runs 150 s
    # apart (the visibility timeout) kept the rotator busy whenever the capped back-off
    # retried: the scheduled run waited for the flood to end.
    old = worst(before(), flooding, run_seconds=120, failing=True)
    assert (old.dead_letters, old.expired) == ({}, old.messages)
    assert max(old.schedule_delays) > 20 * HOUR
    say(
        f"[flood] a day's flood, every run failing: {outcome.messages} messages, "
        f"{outcome.dead_letters['FailedRefreshRequestQueue']} moved to the failed requests' queue "
        f"(the oldest {outcome.oldest_dead_letter / HOUR:.1f} h old), scheduled run delayed "
        f"{max(outcome.schedule_delays):.0f} s at most (before: {old.expired} expired with no "
        f"record, scheduled run delayed {max(old.schedule_delays) / HOUR:.1f} h)"
    )


@pytest.mark.parametrize("visibility", [720.0, 120.0], ids=["the template's", "the timeout"])
def test_with_six_times_the_timeout_a_request_is_not_run_again_for_being_late(
    visibility: float,
) -> None:
    """Lambda Operator Guide, "Understanding SQS retries": "Set the queue's visibility timeout
    to at least six times the function timeout value. This allows the function time to process
    each batch of records if the function execution is throttled while processing a previous
    batch." A request arrives while the schedule's run holds the rotator for 120 s. With the
    timeout alone (the least Lambda accepts), its run starts late and ends after the message
    came back: every run succeeds, none deletes it, and after 5 receives it is recorded as a
    failure. With 720 s: one run, deleted."""
    advised = dataclasses.replace(template_wiring(), visibility_timeout=visibility)
    outcome = simulate(advised, burst(1, at=31), hours=1, run_seconds=120)
    if visibility >= 6 * advised.function_timeout:
        assert (outcome.request_runs, outcome.dead_letters) == (1, {})
    else:
        assert outcome.request_runs == 5
        assert outcome.dead_letters == {"FailedRefreshRequestQueue": 1}


def test_a_batch_throttled_for_its_whole_visibility_timeout_comes_back_and_counts_a_receive() -> (
    None
):
    """The model's side of "a message whose invocation is throttled is retried until its
    visibility timeout passes": a visibility timeout shorter than the run that holds the
    rotator (Lambda refuses one below the function's timeout) wastes receives."""
    short = dataclasses.replace(template_wiring(), visibility_timeout=60)
    outcome = simulate(short, burst(1, at=31), hours=1, run_seconds=120)
    assert outcome.throttled_receives == 3
    assert outcome.request_runs == 5 - outcome.throttled_receives
    assert outcome.dead_letters == {"FailedRefreshRequestQueue": 1}
