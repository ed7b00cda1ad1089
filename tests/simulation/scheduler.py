"""A deterministic scheduler: actors (real product code, each on its own greenlet) run one at a
time, and every call they make on a model is a scheduling point where the schedule picks who goes
next.

``Scheduler`` is an ``Interceptor``: pass it to the models (``World(interceptor=scheduler)``).
An actor that reaches a model call parks (switches back to the scheduler); when every unfinished
actor is parked, ``choose(n)`` picks one of the ``n`` parked actors (in the order they were
started), which performs its call and runs on to its next scheduling point or its end. Exactly
one actor runs product code at a time, so a run is a function of its choices. The actors are
greenlets, not threads: a switch is a function call, not two thread hand-offs, and nothing waits
on a timer, so a busy machine cannot make a schedule fail.

The retry jitter (``random``, drawn by the product between two scheduling points) is reseeded at
every step from the actor's name (or its ``stream``: two interchangeable actors draw from one,
``simulation.symmetry``) and its own step number (``seed_jitter``): each actor has its own
stream, as each invocation has its own process, and what an actor draws never depends on how
many draws the others made before it.

``explore`` enumerates every sequence of choices depth first (each run replays a prefix and
takes the first alternative after it), so it visits every interleaving of the actors'
scheduling points once, and checks that replaying a prefix meets the same choices (a run that
did not would make the enumeration meaningless).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from greenlet import getcurrent, greenlet


def seed_jitter(actor: str, step: int) -> None:
    """Seed the global ``random`` (which the retry jitter draws from) for ``actor``'s code after
    its ``step``-th scheduling point: a function of the actor's own history only."""
    random.seed(f"{actor}:{step}")


class SchedulingError(AssertionError):
    """The scheduler lost control (an actor never parked, or a replay diverged)."""


@dataclass
class Actor:
    name: str
    body: Callable[[], Any]
    state: str = "new"  # new, running, parked, done
    point: str = ""
    result: Any = None
    error: BaseException | None = None
    points: list[str] = field(default_factory=list)
    greenlet: greenlet | None = None
    stream: str = ""  # the jitter's stream (``seed_jitter``), when not the actor's name


class _ActorGreenlet(greenlet):
    """An actor's greenlet, which knows its actor."""

    actor: Actor


def current_actor() -> Actor | None:
    """The actor whose code runs now (``None``: the test's or the scheduler's own code)."""
    return getattr(getcurrent(), "actor", None)


class Scheduler:
    """Runs actors one scheduling point at a time (see the module docstring)."""

    def __init__(self, choose: Callable[[int], int]) -> None:
        self.choose = choose
        self.actors: list[Actor] = []
        self.trace: list[tuple[str, str]] = []
        self._hub: greenlet | None = None  # the scheduler's greenlet, which actors park into

    def spawn(self, name: str, body: Callable[[], Any]) -> Actor:
        actor = Actor(name, body)
        self.actors.append(actor)
        return actor

    # --- the interceptor ----------------------------------------------------------------------

    def __call__(self, service: str, operation: str, act: Callable[[], Any]) -> Any:
        actor = current_actor()
        if actor is None:
            return act()  # the test's own calls (seeding, inspection) are not scheduled
        self.park(actor, f"{service}.{operation}")
        actor.points.append(actor.point)
        seed_jitter(actor.name, len(actor.points))
        return act()

    def park(self, actor: Actor, point: str) -> None:
        """``actor`` (running now) parks at ``point`` until the scheduler resumes it."""
        if self._hub is None:
            raise SchedulingError(f"{actor.name} parked outside a run")
        actor.state, actor.point = "parked", point
        self._hub.switch()
        if actor.state != "running":
            raise SchedulingError(f"{actor.name} went on without being resumed")

    # --- running ------------------------------------------------------------------------------

    def run(self) -> None:
        """Start the actors one after another (each runs to its first scheduling point), then
        resume one parked actor at a time as ``choose`` decides, until all are done."""
        for actor in self.actors:
            self._start(actor)
        while True:
            parked = [a for a in self.actors if a.state == "parked"]
            if not parked:
                return
            index = self.choose(len(parked)) if len(parked) > 1 else 0
            chosen = parked[index]
            self.trace.append((chosen.name, chosen.point))
            self._switch_to(chosen)

    def _start(self, actor: Actor) -> None:
        def main() -> None:
            seed_jitter(actor.stream or actor.name, 0)
            try:
                actor.result = actor.body()
            except BaseException as exc:  # recorded, judged by the test
                actor.error = exc
            finally:
                actor.state = "done"

        runner = _ActorGreenlet(main)  # its parent, where it returns when it ends: this one
        runner.actor = actor
        actor.greenlet = runner
        self._switch_to(actor)

    def _switch_to(self, actor: Actor) -> None:
        """Run ``actor`` until it parks again or ends."""
        assert actor.greenlet is not None
        self._hub = getcurrent()
        actor.state = "running"
        actor.greenlet.switch()
        if actor.state == "running":
            raise SchedulingError(f"{actor.name} neither reached a scheduling point nor ended")


class Explorer:
    """Depth-first enumeration of choice sequences (see the module docstring)."""

    def __init__(self) -> None:
        self.prefix: list[int] = []
        self.trace: list[tuple[int, int]] = []

    def choose(self, count: int) -> int:
        position = len(self.trace)
        if position < len(self.prefix):
            choice = self.prefix[position]
            if choice >= count:
                raise SchedulingError("a replayed schedule met different choices")
        else:
            choice = 0
        self.trace.append((choice, count))
        return choice

    def advance(self) -> bool:
        """Move to the next unexplored choice sequence; ``False`` when none is left."""
        if len(self.trace) < len(self.prefix):
            raise SchedulingError("a replayed schedule ended before its prefix")
        while self.trace:
            choice, count = self.trace.pop()
            if choice + 1 < count:
                self.prefix = [c for c, _ in self.trace] + [choice + 1]
                self.trace = []
                return True
        return False


def explore(run_one: Callable[[Callable[[int], int]], None], *, limit: int) -> int:
    """Call ``run_one(choose)`` once per choice sequence, all of them; returns how many.
    ``SchedulingError`` when there are more than ``limit``."""
    explorer = Explorer()
    runs = 0
    while True:
        run_one(explorer.choose)
        runs += 1
        if not explorer.advance():
            return runs
        if runs >= limit:
            raise SchedulingError(f"more than {limit} schedules")
