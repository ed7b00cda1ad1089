"""A flood of refresh requests against the rotator's wiring as the template declares it
(issue 29, item 5; issue 36, item 4), on a timeline of EventBridge's, SQS's and Lambda's
documented behaviour, where moto cannot run it (tests/integration/test_refresh_flood.py runs
what it can):

- EventBridge puts each request in the queue with SendMessage, which a FIFO queue takes 300
  times a second ("By default, FIFO queues support 300 transactions per second, per API action
  for SendMessage, ReceiveMessage, and DeleteMessage. Requests over 300 TPS get the
  ThrottlingException error", SQS Developer Guide, "Troubleshoot FIFO throttling issues"). A
  throttled delivery is retried "with an exponential back off and jitter" (EventBridge User
  Guide, "How EventBridge retries delivering events") up to the target's MaximumRetryAttempts,
  then goes to the target's dead letter queue. The model retries 1 s, then 2 s, 4 s ... later,
  all of a second's retries in one second: no jitter, the most dead letters;
- the queue's content-based deduplication accepts a body sent in the last 5 minutes without
  delivering it (SQS Developer Guide, "Exactly-once processing in Amazon SQS");
- one message group: its messages are received in order, one batch (up to BatchSize) at a time,
  and none while a batch is in flight. A received message is invisible for the visibility
  timeout; a run that fails leaves it, and it comes back after the timeout. "When the
  ReceiveCount for a message exceeds the maxReceiveCount for a queue, Amazon SQS moves the
  message to the dead-letter queue" (SQS Developer Guide, "Using dead-letter queues"); a
  message older than the retention period is deleted, with no record;
- reserved concurrency 1: one rotator run at a time. The event source mapping retries a batch
  it cannot invoke: "The extra time allows Lambda to retry if your function is throttled while
  processing a previous batch" (Lambda Developer Guide, "Creating and configuring an Amazon SQS
  event source mapping"), until the visibility timeout passes and the batch comes back (a
  receive counted). The model retries every second, the mapping's most eager: the worst case
  for the scheduled run, which it competes with. A run that ends after its batch's visibility
  timeout deletes nothing: the messages came back;
- the schedule's invocation is asynchronous. Throttled, "Lambda returns the event to the queue
  and attempts to run the function again for up to 6 hours by default. The retry interval
  increases exponentially from 1 second after the first attempt to a maximum of 5 minutes"
  (Lambda Developer Guide, "How Lambda handles errors and retries with asynchronous
  invocation"); a run that fails is retried "two more times, with a one-minute wait between the
  first two attempts, and two minutes between the second and third attempts" (same page);
- a run lasts ``run_seconds`` (the rotator's timeout at worst); a forced run that succeeds
  refreshes (two versions of the refresh credential secret: the claim and the store) unless the
  last refresh was within the debounce.

``wiring`` reads all of these settings from the template."""

from __future__ import annotations

import heapq
import json
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cmstoken.core.triggers import RotationRequest

RUN_SECONDS = 2.0
DEDUPLICATION_SECONDS = 300
VERSIONS_PER_REFRESH = 2
FIFO_SENDS_PER_SECOND = 300
ASYNC_BACKOFF_CAP = 300.0  # "to a maximum of 5 minutes"
ASYNC_ERROR_RETRIES = (60.0, 120.0)  # "a one-minute wait ... two minutes"
MAPPING_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class Wiring:
    """How refresh requests reach the rotator: the queue's settings, the rules' retries and
    dead letter queue, the mapping's batch size, and the rotator's timeout and reservation."""

    visibility_timeout: float
    retention: float
    max_receive_count: int | None  # None: no redrive policy
    failed_to: str | None  # the redrive policy's dead letter queue
    undelivered_to: str  # the rules' dead letter queue
    retry_attempts: int  # the rules' MaximumRetryAttempts
    batch_size: int
    function_timeout: float
    reserved_concurrency: int


def wiring(resources: Mapping[str, Any], reserved_concurrency: int = 1) -> Wiring:
    """The wiring the (transformed) template declares; refresh requests must coalesce (one FIFO
    queue with content-based deduplication, one body for every request, read by the rotator's
    event source mapping), or this fails."""
    rules = [r for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    targets = [
        t
        for r in rules
        if "Service Token Refresh Requested" in json.dumps(r["Properties"].get("EventPattern"))
        for t in r["Properties"]["Targets"]
    ]
    assert targets, "no rule takes refresh requests"
    (name,) = {_name(t["Arn"]) for t in targets}
    queue = resources[name]["Properties"]
    (mapping,) = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and _name(r["Properties"]["EventSourceArn"]) == name
        and r["Properties"]["FunctionName"] == {"Ref": "RotatorFunction"}
    ]
    # One body for every request (content-based deduplication compares bodies), and one that
    # the rotator takes as a refresh request.
    bodies = {t.get("InputTransformer", {}).get("InputTemplate") for t in targets}
    coalesced = (
        queue.get("FifoQueue") is True
        and queue.get("ContentBasedDeduplication") is True
        and len(bodies) == 1
        and None not in bodies
        and RotationRequest.from_event(json.loads(str(bodies.pop()))).forced
    )
    assert coalesced, f"refresh requests go to {name}, which does not coalesce them"
    (undelivered,) = {_name(t["DeadLetterConfig"]["Arn"]) for t in targets}
    (retries,) = {t["RetryPolicy"]["MaximumRetryAttempts"] for t in targets}
    redrive = queue.get("RedrivePolicy")
    return Wiring(
        visibility_timeout=float(queue["VisibilityTimeout"]),
        retention=float(queue["MessageRetentionPeriod"]),
        max_receive_count=redrive["maxReceiveCount"] if redrive else None,
        failed_to=_name(redrive["deadLetterTargetArn"]) if redrive else None,
        undelivered_to=undelivered,
        retry_attempts=retries,
        batch_size=mapping["BatchSize"],
        function_timeout=float(resources["RotatorFunction"]["Properties"]["Timeout"]),
        reserved_concurrency=reserved_concurrency,
    )


def _name(arn: Any) -> str:
    return str(arn["Fn::GetAtt"][0]) if isinstance(arn, dict) else str(arn)


def burst(requests: int, at: int = 0) -> Counter[int]:
    """``requests`` requests in one second."""
    return Counter({at: requests})


def flood(per_second: int, hours: float, start: int = 0) -> Counter[int]:
    """``per_second`` requests every second for ``hours`` from ``start``."""
    return Counter(dict.fromkeys(range(start, start + int(hours * 3600)), per_second))


@dataclass
class Outcome:
    """What the timeline did: each scheduled invocation's delay to its first run, the runs
    requests caused, the refresh credential versions written, and where the requests went
    (``dead_letters``: per queue; ``expired``: deleted at retention with no record)."""

    schedule_delays: list[float] = field(default_factory=list)
    request_runs: int = 0
    versions: int = 0
    messages: int = 0
    dead_letters: Counter[str] = field(default_factory=Counter)
    expired: int = 0
    throttled_receives: int = 0
    oldest_dead_letter: float = 0.0  # the age of the oldest message moved to its dead letters


def deliveries(wiring: Wiring, requests: Mapping[int, int], outcome: Outcome) -> list[float]:
    """EventBridge's SendMessage calls, 300 a second, throttled ones retried; the times the
    queue accepted a message (the others were duplicates). Undelivered requests are counted in
    ``outcome.dead_letters`` under the rules' dead letter queue."""
    pending = {second: [count] + [0] * wiring.retry_attempts for second, count in requests.items()}
    seconds = list(pending)  # the seconds with requests to send, in order
    heapq.heapify(seconds)
    accepted: list[float] = []
    while seconds:
        second = heapq.heappop(seconds)
        counts = pending.pop(second)  # requests per attempt
        capacity = FIFO_SENDS_PER_SECOND
        for attempt in reversed(range(len(counts))):  # retries first
            sent = min(counts[attempt], capacity)
            capacity -= sent
            if sent and (not accepted or second - accepted[-1] >= DEDUPLICATION_SECONDS):
                accepted.append(float(second))
            left = counts[attempt] - sent
            if left and attempt < wiring.retry_attempts:
                later = second + 2**attempt
                if later not in pending:
                    pending[later] = [0] * len(counts)
                    heapq.heappush(seconds, later)
                pending[later][attempt + 1] += left
            elif left:
                outcome.dead_letters[wiring.undelivered_to] += left
    return accepted


@dataclass
class _Message:
    sent: float
    receives: int = 0


@dataclass
class _Batch:
    messages: list[_Message]
    received: float
    ran: bool = False


def simulate(
    wiring: Wiring,
    requests: Mapping[int, int],
    *,
    hours: float,
    interval_minutes: int = 60,
    debounce: float = 600.0,
    run_seconds: float = RUN_SECONDS,
    failing: bool = False,
) -> Outcome:
    """Requests (a count per second), the schedule every ``interval_minutes`` (30 s into each)
    for ``hours``; ``failing``: every run fails. The timeline goes on until every message has
    left the queue (deleted, moved to its dead letters, or expired)."""
    assert wiring.reserved_concurrency == 1, "the model runs one rotator at a time"
    assert run_seconds <= wiring.function_timeout
    outcome = Outcome()
    events: list[tuple[float, int, Callable[[float], None]]] = []
    order = iter(range(1 << 62))

    def at(when: float, action: Callable[[float], None]) -> None:
        heapq.heappush(events, (when, next(order), action))

    queue: deque[_Message] = deque()
    state: dict[str, Any] = {"busy_until": 0.0, "batch": None, "refreshed": -debounce - 1}

    def free(now: float) -> bool:
        return bool(now >= state["busy_until"])

    def run(now: float, forced: bool) -> float:
        state["busy_until"] = now + run_seconds
        if forced:
            outcome.request_runs += 1
            if not failing and now - state["refreshed"] >= debounce:
                state["refreshed"] = now
                outcome.versions += VERSIONS_PER_REFRESH
        return now + run_seconds

    # --- the schedule's asynchronous invocations
    def scheduled(arrived: float, retries: int) -> Callable[[float], None]:
        backoff = 1.0

        def attempt(now: float) -> None:
            nonlocal backoff
            if not free(now):
                at(now + backoff, attempt)
                backoff = min(2 * backoff, ASYNC_BACKOFF_CAP)
                return
            if retries == 0:
                outcome.schedule_delays.append(now - arrived)
            ended = run(now, forced=False)
            if failing and retries < len(ASYNC_ERROR_RETRIES):
                retry = ended + ASYNC_ERROR_RETRIES[retries]
                at(retry, scheduled(retry, retries + 1))

        return attempt

    end = hours * 3600
    for start in range(0, int(end), interval_minutes * 60):
        at(start + 30.0, scheduled(start + 30.0, 0))

    # --- the queue and the event source mapping
    def arrive(now: float) -> None:
        queue.append(_Message(sent=now))
        outcome.messages += 1
        poll(now)

    def poll(now: float) -> None:
        if state["batch"] is not None:
            return  # the group is blocked while a batch is in flight
        taken: list[_Message] = []
        while queue and len(taken) < wiring.batch_size:
            message = queue[0]
            if now - message.sent >= wiring.retention:
                queue.popleft()
                outcome.expired += 1
            elif wiring.max_receive_count is not None and (
                message.receives >= wiring.max_receive_count
            ):
                queue.popleft()
                outcome.dead_letters[str(wiring.failed_to)] += 1
                outcome.oldest_dead_letter = max(outcome.oldest_dead_letter, now - message.sent)
            else:
                message.receives += 1
                taken.append(queue.popleft())
        if not taken:
            return
        batch = _Batch(taken, received=now)
        state["batch"] = batch
        at(now + wiring.visibility_timeout, returned(batch))
        invoke(batch)(now)

    def invoke(batch: _Batch) -> Callable[[float], None]:
        def attempt(now: float) -> None:
            if state["batch"] is not batch:
                return  # it came back
            if not free(now):
                at(now + MAPPING_RETRY_SECONDS, attempt)
                return
            batch.ran = True
            ended = run(now, forced=True)
            if not failing and ended < batch.received + wiring.visibility_timeout:
                at(ended, delete)

        return attempt

    def delete(now: float) -> None:
        state["batch"] = None
        poll(now)

    def returned(batch: _Batch) -> Callable[[float], None]:
        def back(now: float) -> None:
            if state["batch"] is not batch:
                return  # deleted
            if not batch.ran:
                outcome.throttled_receives += 1
            state["batch"] = None
            queue.extendleft(reversed(batch.messages))
            poll(now)

        return back

    for sent in deliveries(wiring, requests, outcome):
        at(sent, arrive)
    while events:
        now, _, action = heapq.heappop(events)
        action(now)
    assert not queue
    assert state["batch"] is None
    return outcome
