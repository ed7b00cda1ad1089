"""A flood of refresh requests against the rotator's wiring as the template declares it
(issue 29, item 5), on a timeline of Lambda's and SQS's documented behaviour, where moto cannot
run it (tests/integration/test_refresh_flood.py runs what it can):

- reserved concurrency 1: one rotator run at a time; an invocation finding it busy is throttled;
- asynchronous invocations (the schedule's, and each request's when a rule targets the rotator)
  wait in the function's queue: "If the function doesn't have enough concurrency available to
  process all events, additional requests are throttled ... Lambda returns the event to the
  queue and attempts to run the function again for up to 6 hours" (Lambda Developer Guide,
  "Asynchronous invocation", error handling). The model serves that queue in order, which is
  kinder than Lambda (whose retries back off up to 5 minutes and may drop events): a delay it
  shows is a lower bound;
- an SQS FIFO queue with content-based deduplication accepts a message whose body was sent in
  the last 5 minutes without delivering it (SQS Developer Guide, "Exactly-once processing");
  its one message group is delivered one batch at a time, and the event source mapping retries
  a throttled batch (1 s here) until a run takes it;
- a run lasts ``RUN_SECONDS``; a forced run refreshes (two versions of the refresh credential
  secret: the claim and the store) unless the last refresh was within the debounce.

``wiring`` reads the template: the rules' targets, and the queue they target."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cmstoken.core.triggers import RotationRequest

RUN_SECONDS = 2.0
DEDUPLICATION_SECONDS = 300.0
VERSIONS_PER_REFRESH = 2


@dataclass(frozen=True)
class Wiring:
    """How refresh requests reach the rotator: straight (an asynchronous invocation each) or
    coalesced in a deduplicating FIFO queue its event source mapping reads."""

    coalesced: bool


def wiring(resources: Mapping[str, Any]) -> Wiring:
    """The wiring the (transformed) template's refresh rules declare."""
    rules = [r for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    targets = [
        t
        for r in rules
        if "Service Token Refresh Requested" in json.dumps(r["Properties"].get("EventPattern"))
        for t in r["Properties"]["Targets"]
    ]
    assert targets, "no rule takes refresh requests"
    names = {_target(t) for t in targets}
    if names == {"RotatorFunction"}:
        return Wiring(coalesced=False)
    (name,) = names
    queue = resources[name]["Properties"]
    mapped = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
        and _target({"Arn": r["Properties"]["EventSourceArn"]}) == name
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
        and len(mapped) == 1
        and RotationRequest.from_event(json.loads(str(bodies.pop()))).forced
    )
    assert coalesced, f"refresh requests go to {name}, which does not coalesce them"
    return Wiring(coalesced=True)


def _target(target: Mapping[str, Any]) -> str:
    arn = target["Arn"]
    return str(arn["Fn::GetAtt"][0]) if isinstance(arn, dict) else str(arn)


@dataclass
class Outcome:
    """What the timeline did: each scheduled run's delay, the runs requests caused, and the
    versions of the refresh credential secret written."""

    schedule_delays: list[float]
    request_runs: int
    versions: int


def simulate(
    wiring: Wiring,
    requests: Iterable[float],
    *,
    hours: float,
    interval_minutes: int = 60,
    debounce: float = 600.0,
) -> Outcome:
    """Requests at the given times (seconds), the schedule every ``interval_minutes`` (30 s
    into each), for ``hours``; one rotator run at a time, each free moment given to whatever
    has waited longest (the function's queue in order; the mapping's batch)."""
    end = hours * 3600
    schedule = [float(at) + 30 for at in range(0, int(end), interval_minutes * 60)]
    queued: list[tuple[float, str]] = [(at, "schedule") for at in schedule]  # asynchronous
    mapped: list[float] = []  # messages the queue delivers to the mapping
    last_sent = -DEDUPLICATION_SECONDS - 1
    for at in sorted(requests):
        if not wiring.coalesced:
            queued.append((at, "request"))
        elif at - last_sent >= DEDUPLICATION_SECONDS:  # else accepted, not delivered
            last_sent = at
            mapped.append(at)
    queued.sort()
    waiting: deque[tuple[float, str]] = deque(queued)
    messages: deque[float] = deque(mapped)
    now, refreshed_at = 0.0, -debounce - 1
    outcome = Outcome([], 0, 0)
    while waiting or messages:
        heads = [w for w in (waiting[0][0] if waiting else None, _head(messages)) if w is not None]
        now = max(now, min(heads))
        if now > end:
            break
        if waiting and waiting[0][0] <= now and (not messages or waiting[0][0] <= messages[0]):
            arrived, kind = waiting.popleft()
        else:
            arrived, kind = messages.popleft(), "request"
        if kind == "schedule":
            outcome.schedule_delays.append(now - arrived)
        else:
            outcome.request_runs += 1
            if now - refreshed_at >= debounce:
                refreshed_at = now
                outcome.versions += VERSIONS_PER_REFRESH
        now += RUN_SECONDS
    return outcome


def _head(messages: deque[float]) -> float | None:
    return messages[0] if messages else None
