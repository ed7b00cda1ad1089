"""A stack's life on a simulated clock, as its alarms see it.

The real handlers run against moto and the emulator; what they print in the embedded metric
format is collected with the simulated time of the invocation, as CloudWatch would store it; the
template's alarms, resolved for the stack's parameters, are then replayed over those datapoints
by the model of CloudWatch's alarm evaluation in ``cloudwatch_alarms``. Invocations follow what
Lambda and EventBridge Scheduler do: one scheduled run per interval, and a run that raises is
tried twice more, one and then two minutes later ("Asynchronous invocation", AWS Lambda
Developer Guide: "If the function returns an error, by default Lambda attempts to run it two more
times, with a one-minute wait between the first two attempts, and two minutes between the second
and third attempts").
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from cloudwatch_alarms import AlarmSpec, Transition, evaluate
from composite_alarms import evaluate_composite
from harness import Stack, approve_pending
from template_model import Resolver, of_type, parameter_values, transformed

RETRY_DELAYS = (60.0, 120.0)  # Lambda's waits before the second and third attempts
STATES_IN_ALARM = "ALARM"


@dataclass
class Timeline:
    """Drives one stack through time and keeps every datapoint its functions emitted."""

    stack: Stack
    capsys: pytest.CaptureFixture[str]
    interval_minutes: int = 60
    phase: float = 20.0
    datapoints: dict[str, list[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    outcomes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Start ``phase`` seconds past a minute: CloudWatch's periods end on minute boundaries,
        # so where the runs fall between them is chosen, not left to the wall clock.
        self.stack.emulator.advance((self.phase - self.stack.clock.now()) % 60)
        self.start = self.stack.clock.now()
        self.capsys.readouterr()  # drop whatever the set-up printed

    @property
    def now(self) -> float:
        return self.stack.clock.now()

    @property
    def interval(self) -> float:
        return self.interval_minutes * 60.0

    # --- invocations ---------------------------------------------------------------------------

    def invoke(self, function: str, event: Any) -> tuple[Any, BaseException | None]:
        """One invocation; its metrics are stored at the time it started."""
        started = self.now
        try:
            result, error = self.stack.invoke(function, event), None
        except Exception as exc:  # a failed invocation is an outcome here
            result, error = None, exc
        self._collect(self.capsys.readouterr().out, started)
        return result, error

    def rotator_run(self, event: Any = None) -> str:
        """An asynchronous invocation with Lambda's retries; the outcome of its last attempt."""
        for delay in (*RETRY_DELAYS, None):
            result, error = self.invoke("rotator", {} if event is None else event)
            if error is None:
                self.outcomes.append(result["outcome"])
                return str(result["outcome"])
            if delay is not None:
                self.stack.emulator.advance(delay)
        self.outcomes.append(f"error:{type(error).__name__}")
        return self.outcomes[-1]

    def scheduled(self, duration: float, *, skip: Iterable[int] = ()) -> None:
        """The schedule's runs for ``duration`` seconds from now (runs numbered from 0 in
        ``skip`` do not happen, as when the scheduler misses one)."""
        skipped = set(skip)
        ticks = round(duration / self.interval)
        first = self.now
        for tick in range(ticks):
            at = first + tick * self.interval
            self._advance_to(at)
            if tick not in skipped:
                self.rotator_run()
        self._advance_to(first + ticks * self.interval)

    def pause(self, duration: float) -> None:
        """Time passes and nothing runs (a disabled schedule, a function that cannot start)."""
        self._advance_to(self.now + duration)

    def bootstrap(self) -> None:
        """An operator's bootstrap: start, approve in the browser, poll until authorized."""
        result, error = self.invoke("bootstrap", {"action": "start"})
        assert error is None, error
        assert result["status"] == "pending", result
        approve_pending(self.stack)
        result, error = self.invoke("bootstrap", {"action": "poll", "max_wait_seconds": 30})
        assert error is None, error
        assert result["status"] == "authorized", result

    def _advance_to(self, at: float) -> None:
        if at > self.now:
            self.stack.emulator.advance(at - self.now)

    def _collect(self, output: str, at: float) -> None:
        service = os.environ["POWERTOOLS_SERVICE_NAME"]
        for line in output.splitlines():
            line = line.strip()
            if not line.startswith("{") or '"_aws"' not in line:
                continue
            document = json.loads(line)
            for directive in document["_aws"]["CloudWatchMetrics"]:
                # The alarms select the metric by its one dimension, service.
                assert directive["Dimensions"] == [["service"]], directive
                assert document["service"] == service
                assert directive["Namespace"] == os.environ["POWERTOOLS_METRICS_NAMESPACE"]
                for metric in directive["Metrics"]:
                    values = document[metric["Name"]]
                    for value in values if isinstance(values, list) else [values]:
                        self.datapoints[metric["Name"]].append((at, float(value)))

    # --- the alarms ------------------------------------------------------------------------------

    def alarms(self, **parameters: Any) -> dict[str, list[Transition]]:
        """Each alarm the template creates for these parameters (the rotation interval
        included), metric and composite, replayed over everything emitted so far: its state
        changes, in order, by logical id."""
        return replay(
            self.datapoints,
            start=self.start,
            end=self.now,
            RotationIntervalMinutes=self.interval_minutes,
            **parameters,
        )


def replay(
    datapoints: dict[str, list[tuple[float, float]]],
    *,
    start: float,
    end: float,
    **parameters: Any,
) -> dict[str, list[Transition]]:
    """Each alarm the template creates for ``parameters`` (the defaults otherwise), metric and
    composite, replayed from ``start`` to ``end`` over ``datapoints`` (by metric name: time,
    value): its state changes, in order, by logical id."""
    resolver = Resolver(parameter_values(**parameters))
    resources = transformed()["Resources"]
    changes: dict[str, list[Transition]] = {}
    for name, resource in of_type(resources, "AWS::CloudWatch::Alarm").items():
        if resolver.present(resource):
            properties = resolver.resolve(resource["Properties"])
            spec = AlarmSpec.from_properties(name, properties)
            points = datapoints.get(properties["MetricName"], [])
            changes[name] = evaluate(spec, points, start=start, end=end)
    children = {f"<{name}>": transitions for name, transitions in changes.items()}
    for name, resource in of_type(resources, "AWS::CloudWatch::CompositeAlarm").items():
        if resolver.present(resource):
            rule = resolver.resolve(resource["Properties"])["AlarmRule"]
            changes[name] = evaluate_composite(rule, children, start=start)
    return changes


def alarmed(changes: dict[str, list[Transition]]) -> dict[str, int]:
    """How many times each alarm went into ALARM (alarms that never did are left out)."""
    counts = {
        name: sum(1 for change in transitions if change.new == STATES_IN_ALARM)
        for name, transitions in changes.items()
    }
    return {name: count for name, count in counts.items() if count}


def final_states(changes: dict[str, list[Transition]]) -> dict[str, str]:
    """Each alarm's state at the end (INSUFFICIENT_DATA when it never changed)."""
    return {
        name: transitions[-1].new if transitions else "INSUFFICIENT_DATA"
        for name, transitions in changes.items()
    }


def describe(changes: dict[str, list[Transition]], start: float) -> str:
    """A readable account of the state changes, for assertion messages."""
    lines = []
    for name, transitions in changes.items():
        for change in transitions:
            hours = (change.at - start) / 3600
            lines.append(f"{hours:8.2f} h  {name}: {change.old} -> {change.new}")
    return "\n".join(sorted(lines)) or "(no state changes)"
