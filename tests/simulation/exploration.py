"""Bounded exhaustive exploration: every interleaving of a scenario's actors, with faults as
further choices, the invariants (``simulation.invariants``) checked after every step.

At every decision (all unfinished actors parked at a scheduling point: a model call, or a
``SimClock.sleep``), the options are each parked actor's next step, and, within the bounds of one
schedule, that step with a fault: the actor crashes there (before the call: a crash after a call
is the crash at the actor's next point, since between two points an actor only computes
locally), the identity provider acts and the answer is lost, or a read answers the previous
value (a stale read, k = 1). After all actors end, the recovery phase moves the clock past the
leases and into the next due period and runs a clean rotator; then the final check.

Reduction (sleep sets, Godefroid 1996): two steps of different actors are independent when they
touch different objects, or the same object only to read it (Secrets Manager reads, project
listings), and are not both faults drawn from the same budget; a crash only reads the clock (the
invocation ends then, and Lambda retries it a minute later). Such steps
commute (same state in either order), so of two schedules that differ only in the order of
independent steps one is explored: after exploring step ``t`` at a decision, ``t`` stays asleep
in the siblings' subtrees until a step dependent on it runs. With a correct independence
relation, sleep sets still visit every reachable state (Godefroid), and here they do:
``tests/unit/simulation/test_simulation_reduction.py`` checks that the reduced and the full
search visit the same set of state fingerprints (fault-free, and with a lost refresh answer,
whose retries sleep).

A step is an actor's call and its local computation up to its next scheduling point (or its
end). Two harness faults, not the independence relation, once made the reduced search miss
states (163 fingerprints against 167 fault-free, 397 against 500 with a lost answer):

- states were recorded inside steps, after each call and again at an actor's end. After
  "second refreshes" then "first reads the credential (and skips, ending)", the full search
  recorded "first has read, not yet ended, second has refreshed"; the reduced search runs the
  independent read first, and that point, inside first's last step, never follows the refresh
  there. States are now recorded only between steps (at a decision, when the actors are done,
  after each recovery step);
- the retry jitter was seeded by the number of steps of all actors, so "second reads the service
  token" and "first refreshes, the answer lost" (independent) did not commute: swapped, first's
  back-off came from another seed (0.27 s against 0.28 s) and the clock differed. The jitter is
  now seeded by the actor and its own step number (``simulation.scheduler.seed_jitter``): each
  actor has its own stream, as each invocation has its own process (two interchangeable actors,
  one stream: ``simulation.symmetry``). The product still draws from
  the global ``random``; the harness only reseeds it.

The fingerprint (``simulation.fingerprints``) holds the models' state, the clock, the faults
used, Lambda's invocations, each actor's own history (its steps and what they saw) and the
invariant checker's, nothing that orders the steps of different actors; two actors that run the
same request are interchangeable, and a state and its renaming have one fingerprint
(``simulation.symmetry``). The search (``simulation.search``) also prunes a schedule at a state
explored before, when every step it would take from there was taken from the earlier visit
(state caching with sleep sets).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from botocore.exceptions import ClientError

from cmstoken.aws.secrets import SecretStore
from cmstoken.core import version_budget
from cmstoken.core.triggers import RotationRequest
from cmstoken.rotation.decisions import LEASE_GRACE_SECONDS
from simulation.fingerprints import Fingerprints, Invocation, Recovery, Shared
from simulation.invariants import InvariantChecker, Step, Violation, unnumbered
from simulation.scheduler import Actor, Scheduler, SchedulingError, current_actor, seed_jitter
from simulation.search import SleepSetExplorer, State
from simulation.step_texts import describe
from simulation.symmetry import Symmetry
from simulation.world import HOUR, REFRESH_SECRET, SERVICE_SECRET, SimClock, World

DEADLINE_SECONDS = 120.0
# Slow answers (one budget, ``Bounds.slow``): the request is acted on at once and the clock
# moves while the caller waits. "slow": answered within the call's time limit (30 s), after
# 25 s; "stalled": answered after a lease's whole length (the deadline and the grace), longer
# than any call's limit, so the caller waits its whole limit and gives up, outcome unknown.
SLOW_SECONDS = {"slow": 25.0, "stalled": DEADLINE_SECONDS + LEASE_GRACE_SECONDS}


# Lambda's waits before its two retries of a failed asynchronous invocation ("a one-minute wait
# between the first two attempts, and two minutes between the second and third attempts":
# invocation-async-error-handling); a run that returns is not retried.
RETRY_WAITS = (60.0, 120.0)
# Lost answers (one budget, ``Bounds.lost``): "lost", the connection closed without an answer;
# "gateway", a gateway's 504 after the provider acted.
LOST_FAULTS = ("lost", "gateway")


def budget(fault: str) -> str:
    """The bound a fault is drawn from."""
    if fault in SLOW_SECONDS:
        return "slow"
    return "lost" if fault in LOST_FAULTS else fault


SECRET_NAMES = {REFRESH_SECRET: "credential", SERVICE_SECRET: "service-token"}


class SimulatedCrash(BaseException):
    """The process dies here (not an ``Exception``: nothing in the product may catch it)."""


class HarnessError(BaseException):
    """The harness itself failed (never caught by product code)."""


class Abandoned(BaseException):
    """The rest of this schedule is equivalent to one explored elsewhere: unwind."""


@dataclass(frozen=True)
class Bounds:
    crashes: int = 1
    lost: int = 1
    stale: int = 1
    lost_endpoints: tuple[str, ...] = ("refresh",)
    busy: int = 0  # calls refused as busy (Secrets Manager throttling, upstream 503)
    slow: int = 0  # upstream answers that take SLOW_SECONDS (time passes during the call)
    slow_endpoints: tuple[str, ...] = ("refresh", "exchange", "projects")
    lost_kinds: tuple[str, ...] = ("lost",)  # of LOST_FAULTS
    # Faults also in Lambda's retries (the one-invocation scenarios); elsewhere a retry runs
    # clean, which keeps the scenarios of several actors within their time.
    retry_faults: bool = False

    def label(self) -> str:
        """A short name of the bounds, for test ids."""
        gateway = "g" if "gateway" in self.lost_kinds else ""
        return f"c{self.crashes}l{self.lost}{gateway}s{self.stale}b{self.busy}w{self.slow}"

    limit: int = 200_000


@dataclass(frozen=True)
class Scenario:
    name: str
    actors: tuple[tuple[str, RotationRequest], ...]
    advance: float  # from the seeded state to the start
    max_refreshes: int
    reuse_interval: float = 0.0
    reserved_concurrency: int = 0  # 1: one invocation at a time (a single actor and its retries)
    streak: int = 0  # failed refresh attempts in a row recorded at the start, the next allowed


SCHEDULED = RotationRequest(forced=False, source="schedule")
FORCED = RotationRequest(forced=True, source="event")
TWO_ROTATORS = Scenario(
    "two rotators, token due", (("first", SCHEDULED), ("second", SCHEDULED)), 19 * HOUR, 1
)
DUPLICATE_FORCED = Scenario(
    "a forced request delivered twice, past the debounce",
    (("delivery", FORCED), ("redelivery", FORCED)),
    1 * HOUR,
    1,
)
SCHEDULED_AND_DUPLICATE_FORCED = Scenario(
    "a scheduled run and a forced request delivered twice, token due",
    (("scheduled", SCHEDULED), ("delivery", FORCED), ("redelivery", FORCED)),
    19 * HOUR,
    1,
)


def on_lambda(
    reuse_interval: float, request: RotationRequest = SCHEDULED, *, streak: int = 0
) -> Scenario:
    """One invocation with reserved concurrency 1 and Lambda's retries of it, at a tenant's
    refresh-token reuse interval (issue 28); ``streak``: after that many failed attempts in a
    row, so that the back-off already waits after the next failure (``core.refresh_backoff``)."""
    due = 1 * HOUR if request.forced else 19 * HOUR
    after = f", after {streak} failed attempts" if streak else ""
    return Scenario(
        f"one {request.source} invocation on Lambda, reuse interval {reuse_interval:.0f} s{after}",
        (("run", request),),
        due,
        1,
        reuse_interval=reuse_interval,
        reserved_concurrency=1,
        streak=streak,
    )


ON_LAMBDA = tuple(on_lambda(reuse) for reuse in (0.0, 30.0, 300.0))


# --- transitions and their independence ------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    """An actor's next step (its ``index``-th), with the fault chosen for it."""

    actor: str
    index: int
    action: str
    fault: str = ""

    def footprint(self) -> tuple[frozenset[str], frozenset[str]]:
        """(objects read, objects written)."""
        if self.fault == "crash":  # the invocation ends now: Lambda retries it after that
            return frozenset({"clock"}), frozenset()
        reads, writes = self._footprint()
        if self.fault in SLOW_SECONDS:  # time passes during the call
            return reads, writes | {"clock"}
        return reads, writes

    def _footprint(self) -> tuple[frozenset[str], frozenset[str]]:
        kind, _, target = self.action.partition(":")
        if kind == "clock.sleep":
            return frozenset(), frozenset({"clock"})
        if kind in ("secretsmanager.GetSecretValue", "secretsmanager.ListSecretVersionIds"):
            return frozenset({"clock", target}), frozenset()
        if kind.startswith("secretsmanager."):
            return frozenset({"clock"}), frozenset({target})
        if kind == "dynamodb.GetItem":  # the links' table: one object per item
            return frozenset({"clock", f"item:{target}"}), frozenset()
        if kind.startswith("dynamodb."):
            return frozenset({"clock"}), frozenset({f"item:{target}"})
        if kind == "sns.Publish":
            return frozenset({"clock"}), frozenset({"topic"})
        if kind == "lambda.Invoke":  # Lambda takes the request; the invocation's calls follow
            return frozenset({"clock"}), frozenset()
        if kind == "lambda.InvokeAsync":
            return frozenset({"clock"}), frozenset({"queue"})
        if kind == "upstream.exchange":
            return frozenset({"clock", "idp"}), frozenset({"service"})
        if kind == "upstream.projects":
            return frozenset({"clock", "service"}), frozenset()
        return frozenset({"clock"}), frozenset({"idp", "service"})


def counted(answer: dict[str, Any]) -> dict[str, Any]:
    """A writer's count of the credential's versions (the version budget of the rotator and
    the bootstrap), made without a scheduling point: its answer decides an action only near the
    outside callers' limit, which no scenario comes near (checked here), so where it falls among
    other steps changes nothing, and a fault there is one at the write that follows. The quota
    itself, with writers racing near it, is tested on its own
    (``tests/unit/simulation/test_simulation_version_quota.py``,
    ``tests/unit/simulation/test_simulation_version_race.py``) and explored by the scenarios
    that start near it, where each count is a scheduling point (``Harness.scheduled_counts``,
    ``simulation.quota_exploration``)."""
    room = version_budget.Writer.OUTSIDE.limit - version_budget.PER_REFRESH
    assert len(answer["Versions"]) < room, "a scenario came near the version quota"
    return answer


def independent(a: Transition, b: Transition) -> bool:
    if a.actor == b.actor or (a.fault and budget(a.fault) == budget(b.fault)):
        return False
    (reads_a, writes_a), (reads_b, writes_b) = a.footprint(), b.footprint()
    return not (writes_a & (reads_b | writes_b) or writes_b & reads_a)


# --- the harness: scheduler, faults, recording, invariants ----------------------------------


# The search's choice at a decision: the options and the state's fingerprint (a function, which
# also records the state: called when the search needs it, not in a replayed prefix).
Decide = Callable[[list[Transition], Callable[[], State[Transition]]], Transition | None]


@dataclass
class SimActor(Actor):
    pending: Transition | None = None
    fault: str = ""
    crashed: bool = False


class SchedClock(SimClock):
    """Simulated time whose ``sleep`` is a scheduling point."""

    def __init__(self, harness: Harness) -> None:
        super().__init__()
        self.harness = harness

    def sleep(self, seconds: float) -> None:
        self.harness("clock", "sleep", lambda: SimClock.sleep(self, seconds), seconds=seconds)


class Harness(Scheduler, Fingerprints):
    """Runs one schedule of a scenario (an ``Interceptor`` for the world's models)."""

    # Counts of the credential's versions are scheduling points (recorded by the subclass that
    # sets this: ``simulation.quota_exploration``), not ``counted``'s shortcut.
    scheduled_counts = False

    def __init__(self, decide: Decide, bounds: Bounds):
        super().__init__(lambda count: 0)
        self.decide = decide
        self.bounds = bounds
        self.used: Counter[str] = Counter()
        self.steps: list[Step] = []
        self.violation: Violation | None = None
        self.abandoned = False
        self.recovering = False
        self.states: set[int] | None = None
        self._stale = 0
        self._recovery_steps = 0
        self.invocations: dict[str, Invocation] = {}
        self.answers: dict[str, list[str]] = {}  # per actor: every call's answer, in order
        self.last_deadline = 0.0
        self.texts: dict[str, list[str]] = {}  # per actor: its steps' texts, in order
        self.rotator_body: Callable[[str, RotationRequest, float], Callable[[], Any]] | None = None
        self.world: World
        self.checker: InvariantChecker
        self.start_at = 0.0
        self.recalled: Recovery | None = None  # the recovery taken from a record, not run
        self._recording: list[Shared] | None = None  # a recovery's states, recorded
        # two interchangeable actors (``simulation.symmetry``): a state and its renaming have
        # one fingerprint (``simulation.fingerprints``)
        self.symmetry: Symmetry | None = None
        self.tied = False  # a retry chosen between two invocations nothing tells apart

    def new_world(self, **options: Any) -> World:
        """A world whose every call passes this harness: its scheduling clock, and a stale read
        chosen by the harness when the bounds allow one. ``options``: the world's others."""
        return World(
            interceptor=self,
            stale_reads=1 if self.bounds.stale else 0,
            choose=self.stale_pick,
            clock=SchedClock(self),
            **options,
        )

    def attach(self, world: World, checker: InvariantChecker) -> None:
        self.world, self.checker = world, checker
        checker.faults = self.used
        self.start_at = world.clock.now()

    def stale_pick(self, count: int) -> int:
        return min(self._stale, count - 1)

    # --- actors ---------------------------------------------------------------------------

    def spawn(
        self, name: str, body: Callable[[], Any], outcome: Callable[[Any], str] | None = None
    ) -> Actor:
        """An actor running ``body``; ``outcome`` names its result (default: a rotation's)."""

        def run_body() -> Any:
            try:
                result = body()
            except Abandoned:
                raise
            except BaseException as exc:
                self._end(name, type(exc).__name__, str(exc), failed=True)
                raise
            self._end(name, (outcome or _rotation_outcome)(result), "")
            return result

        actor = SimActor(name, run_body)
        if self.symmetry is not None:
            actor.stream = self.symmetry.stream(name)
        self.actors.append(actor)
        return actor

    def invoke(self, name: str, request: RotationRequest, *, attempt: int = 1) -> Actor:
        """A rotator invocation ``name`` of ``request`` (its ``attempt``-th by Lambda), with the
        invocation's whole time left."""
        assert self.rotator_body is not None
        deadline = self.world.clock.now() + DEADLINE_SECONDS
        self.last_deadline = deadline
        self.invocations[name] = Invocation(name, request, attempt)
        return self.spawn(name, self.rotator_body(name, request, deadline))

    def _lambda_retry(self) -> Actor | None:
        """Lambda's retry of the invocation that failed first and has not been retried (one
        minute after the first attempt failed, two after the second), as a new actor; the
        clock moves to it. ``None`` when no failed invocation is left to retry."""
        failed = [
            i
            for i in self.invocations.values()
            if i.failed and not i.retried and i.attempt <= len(RETRY_WAITS)
        ]
        if not failed:
            return None
        at = min(i.ended_at for i in failed)
        first = self._first_retried([i for i in failed if i.ended_at == at])
        first.retried = True
        clock = self.world.clock
        clock.advance(max(0.0, first.ended_at + RETRY_WAITS[first.attempt - 1] - clock.now()))
        base = first.name.partition("#")[0]
        name = f"{base}#{first.attempt + 1}"
        self._step(name, "invoke", f"t+{clock.now() - self.start_at:.1f}s Lambda retries {base}")
        return self.invoke(name, first.request, attempt=first.attempt + 1)

    def _first_retried(self, due: list[Invocation]) -> Invocation:
        """Of failed invocations Lambda retries at the same moment, the one retried first: in
        the scenario's order of actors, and of the two interchangeable ones, the one that,
        given the first actor's name, gives the state that orders first (``order_as``: the
        state decides, not a name). When both give the same, the state is its own renaming
        and nothing tells the two apart: the first actor's goes first, and the other order
        reaches the same states renamed (``tied``)."""
        symmetry = self.symmetry
        if symmetry is None or len(due) == 1:
            return due[0]
        names = [actor.name for actor in self.actors]

        def key(invocation: Invocation, *, whole: bool = False) -> tuple[Any, ...]:
            rename = symmetry.to_first(invocation.name)
            order = names.index(symmetry.stream(invocation.name).partition("#")[0])
            return (order, *self.order_as(rename, whole=whole))

        keys = {i.name: key(i) for i in due}
        first = min(due, key=lambda i: keys[i.name])
        alike = [i for i in due if keys[i.name] == keys[first.name]]
        if len(alike) > 1:  # the histories alike: the shared parts decide
            wholes = {i.name: key(i, whole=True) for i in alike}
            first = min(alike, key=lambda i: wholes[i.name])
            self.tied = self.tied or list(wholes.values()).count(wholes[first.name]) > 1
        return first

    def _end(self, name: str, outcome: str, message: str, *, failed: bool = False) -> None:
        invocation = self.invocations.get(name)
        if invocation is not None:
            invocation.failed, invocation.ended_at = failed, self.world.clock.now()
        if outcome == "SimulatedCrash":
            return
        text = f"{name} ends: {outcome}" + (f" ({message})" if message else "")
        self._step(name, "end", text, outcome=outcome.split(" ")[0])

    # --- the interceptor --------------------------------------------------------------------

    def __call__(
        self, service: str, operation: str, act: Callable[[], Any], *, seconds: float = 0.0
    ) -> Any:
        if operation == "ListSecretVersionIds" and not self.scheduled_counts:
            return counted(act())
        actor = cast(SimActor | None, current_actor())
        target = ""
        if service == "secretsmanager":
            target = SECRET_NAMES.get(self.world.secretsmanager.calls[-1][1], "?")
        action = f"{service}.{operation}" + (f":{target}" if target else "")
        if actor is None:
            if not self.recovering:
                return act()
            return self._perform("recovery", action, act, "", seconds)
        if actor.crashed:
            raise SimulatedCrash
        actor.pending = Transition(actor.name, len(actor.points), action)
        self.park(actor, action)
        actor.points.append(action)
        if actor.fault == "abandon":
            actor.crashed = True
            raise Abandoned
        if actor.fault == "crash":
            actor.crashed = True
            self._step(actor.name, "crash", f"{actor.name} CRASHES before {action}")
            self._end(actor.name, "SimulatedCrash", "", failed=True)
            raise SimulatedCrash
        return self._perform(actor.name, action, act, actor.fault, seconds)

    def _variants(self, actor: SimActor) -> list[Transition]:
        pending = actor.pending
        assert pending is not None
        options = [pending]
        bounds, used = self.bounds, self.used
        if "#" in actor.name and not bounds.retry_faults:
            return options
        if used["crash"] < bounds.crashes:
            options.append(replace(pending, fault="crash"))
        endpoint = pending.action.removeprefix("upstream.")
        if endpoint in bounds.lost_endpoints and used["lost"] < bounds.lost:
            options += [replace(pending, fault=fault) for fault in bounds.lost_kinds]
        if used["busy"] < bounds.busy and pending.action != "clock.sleep":
            options.append(replace(pending, fault="busy"))
        if endpoint in bounds.slow_endpoints and used["slow"] < bounds.slow:
            options += [replace(pending, fault=fault) for fault in SLOW_SECONDS]
        if (
            pending.action.startswith("secretsmanager.GetSecretValue")
            and used["stale"] < bounds.stale
        ):
            name = REFRESH_SECRET if pending.action.endswith(":credential") else SERVICE_SECRET
            if len(self.world.secretsmanager.secrets[name].history) > 1:
                options.append(replace(pending, fault="stale"))
        return options

    def run(self) -> None:
        for actor in self.actors:
            self._start(actor)
        while True:
            parked = [cast(SimActor, a) for a in self.actors if a.state == "parked"]
            if not parked:
                if not self.abandoned:
                    self._record_state()
                retry = None if self.abandoned or self.violation else self._lambda_retry()
                if retry is None:
                    return
                self._start(retry)
                continue
            options = [t for a in parked for t in self._variants(a)]
            chosen = None
            if self.violation is None:
                # the state is fingerprinted when the search asks (not in a replayed prefix)
                chosen = self.decide(options, self._record_state)
            elif not self.abandoned:
                self._record_state()
            if chosen is None:
                self.abandoned = True
                for actor in parked:
                    self._resume(actor, "abandon")
                continue
            if chosen.fault:
                self.used[budget(chosen.fault)] += 1
            self._resume(next(a for a in parked if a.name == chosen.actor), chosen.fault)

    def _resume(self, actor: SimActor, fault: str) -> None:
        actor.fault = fault
        self._switch_to(actor)

    # --- performing and recording a step ----------------------------------------------------

    def _perform(
        self, name: str, action: str, act: Callable[[], Any], fault: str, seconds: float
    ) -> Any:
        # The jitter the actor draws before its next scheduling point is seeded by the actor and
        # its own step number, not by the number of steps of all actors: with that, two
        # commuting steps left an actor a different back-off in either order.
        actor = next((a for a in self.actors if a.name == name), None)
        if actor is None:
            self._recovery_steps += 1
            seed_jitter(name, self._recovery_steps)
        else:
            seed_jitter(actor.stream or name, len(actor.points))
        world = self.world
        if fault == "lost":
            world.upstream.lose(action.removeprefix("upstream."))
        if fault == "gateway":
            world.upstream.lose(action.removeprefix("upstream."), "gateway")
        if fault == "busy" and action.startswith("upstream."):
            world.upstream.busy(action.removeprefix("upstream."))
        if fault in SLOW_SECONDS:
            world.upstream.slow(action.removeprefix("upstream."), SLOW_SECONDS[fault])
        self._stale = 1 if fault == "stale" else 0
        before = self._current(action)
        answer: Any = None
        error: Exception | None = None
        log_size = len(world.upstream.log)
        try:
            if fault == "busy" and not action.startswith("upstream."):
                raise _throttled(action)  # nothing happens; the caller is told to slow down
            answer = act()
        except Exception as exc:
            error = exc
        finally:
            self._stale = 0
        if actor is not None:
            self.answers.setdefault(name, []).append(_answered(answer, error))
        try:
            self._record(name, action, fault, seconds, answer, error, before, log_size)
        except Exception as exc:
            raise HarnessError(f"recording {action}: {exc!r}") from exc
        if error is not None:
            raise error
        return answer

    def _current(self, action: str) -> str | None:
        if not action.startswith("secretsmanager.GetSecretValue"):
            return None
        name = REFRESH_SECRET if action.endswith(":credential") else SERVICE_SECRET
        return self.world.secretsmanager.secrets[name].history[-1]

    def _step(self, actor: str, action: str, text: str, **facts: Any) -> Step:
        step = Step(len(self.steps) + 1, actor, action, text, at=self.world.clock.now(), **facts)
        self.steps.append(step)
        self.texts.setdefault(actor, []).append(text)
        if self.violation is None:
            self.violation = self.checker.after(step)
        if actor == "recovery":
            self._record_state()
        return step

    def _record_state(self) -> State[Transition]:
        """Note the state: only between transitions (at a decision, when the actors are done,
        after a recovery step), never inside one. A step runs its actor on to its next
        scheduling point, so its call and, say, the actor's end are one transition: the state
        between them is no state of the search, and recording it made a state reachable only
        in the orders where that transition comes last. Returns the state's fingerprint and
        the renaming of steps that gives it (``canonical``)."""
        if self._recording is not None:
            shared = self.shared()
            self._recording.append(shared)
            state, index = self.canonical(shared)
        else:
            state, index = self.canonical()
        if self.states is not None:
            self.states.add(state)
        if index == 0:
            return state, None
        assert self.symmetry is not None
        rename = self.symmetry.renames[index]
        return state, lambda t: replace(t, actor=rename(t.actor))

    def _record(
        self,
        name: str,
        action: str,
        fault: str,
        seconds: float,
        answer: Any,
        error: Exception | None,
        before: str | None,
        log_size: int,
    ) -> None:
        tag = {
            "stale": " [STALE READ]",
            "lost": " [ANSWER LOST: connection closed]",
            "gateway": " [ANSWER LOST: gateway's 504]",
            "busy": " [BUSY]",
            "slow": f" [SLOW: {SLOW_SECONDS['slow']:.0f} s]",
            "stalled": f" [STALLED: answer after {SLOW_SECONDS['stalled']:.0f} s]",
        }.get(fault, "")
        text, facts = describe(
            self.world,
            self.start_at,
            name,
            action,
            (fault, tag, seconds),
            answer,
            error,
            before,
            log_size,
        )
        self._step(name, action, text, **facts)

    def end_texts(self) -> list[str]:
        """The texts of the actors' ends and the recovery's, in order."""
        texts = [step.text for step in self.steps if step.action == "end"]
        return texts + list(self.recalled.ends) if self.recalled is not None else texts

    # --- a whole schedule -------------------------------------------------------------------

    def recover(self, deadline: float) -> None:
        """Past the leases and into the next due period, one clean rotator."""
        world = self.world
        target = deadline + LEASE_GRACE_SECONDS + 1
        if world.secretsmanager.current_text(SERVICE_SECRET) is not None:
            published = world.service_document()
            target = max(target, published.expires_at - world.settings.refresh_margin_seconds + 1)
        world.clock.advance(max(0.0, target - world.clock.now()))
        self.recovering = True
        try:
            result = world.rotator("recovery").run(
                SCHEDULED, deadline=world.clock.now() + DEADLINE_SECONDS
            )
            outcome = result.outcome + (" (refreshed)" if result.refreshed else "")
        except Exception as exc:
            outcome = f"{type(exc).__name__} ({exc})"
        finally:
            self.recovering = False
        self._step("recovery", "end", f"recovery ends: {outcome}", outcome=outcome.split(" ")[0])
        if self.violation is None:
            self.violation = self.checker.final(len(self.steps))

    def recover_once(self, deadline: float, recoveries: dict[int, Recovery] | None) -> None:
        """``recover``, or its record when it ran before from the same state but the actors'
        histories (``_shared``): the actors are done, and the recovery and the final check read
        nothing of them, so the same recovery follows. The record gives the states it passed
        (with these actors' histories) and the state it left, without running its steps again;
        a recovery that found a violation is not recorded (it runs again, for its trace).
        ``recoveries`` ``None``: no records, every recovery runs."""
        if recoveries is None:
            self.recover(deadline)
            return
        start = self._shared()
        known = recoveries.get(start)
        if known is not None:
            self.recalled = known
            if self.states is not None:
                self.states.update(self.canonical(shared)[0] for shared in known.states)
            return
        self._recording = []
        first = len(self.steps)
        self.recover(deadline)
        recorded, self._recording = self._recording, None
        if self.violation is None:
            ends = tuple(step.text for step in self.steps[first:] if step.action == "end")
            recoveries[start] = Recovery(tuple(recorded), self.shared(), ends)


def _answered(answer: Any, error: Exception | None) -> str:
    """What a call gave its caller, for the fingerprint: the error, or the answer (with an
    HTTP answer's body). A step's text may not say it all: a DynamoDB item read says only that
    it was read, and the item may have changed since."""
    if error is not None:
        return repr(error)
    body = getattr(answer, "body", None)
    return repr(answer) if body is None else f"{answer!r} {body!r}"


def _rotation_outcome(result: Any) -> str:
    return str(result.outcome) + (" (refreshed)" if result.refreshed else "")


def _throttled(action: str) -> ClientError:
    operation = action.partition(".")[2].partition(":")[0]
    response: Any = {
        "Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    return ClientError(response, operation)


# --- exploring a scenario -------------------------------------------------------------------


@dataclass
class Report:
    scenario: str
    bounds: Bounds
    schedules: int = 0
    pruned: int = 0
    steps: int = 0
    states: set[int] = field(default_factory=set)
    seconds: float = 0.0
    revisits: int = 0  # of ``pruned``: at a state explored before
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    counterexample: str | None = None
    # the final states (fingerprints after the recovery) and each one's actors' outcomes
    finals: dict[int, str] = field(default_factory=dict)
    violations: set[str] = field(default_factory=set)  # "I2: message", step numbers left out

    def line(self) -> str:
        b = self.bounds
        return (
            f"{self.scenario} [crashes {b.crashes}, lost answers {b.lost} "
            f"({'/'.join(b.lost_endpoints)}), stale reads {b.stale} (k=1)"
            f"{f', busy {b.busy}' if b.busy else ''}"
            f"{f', slow answers {b.slow} ({"/".join(b.slow_endpoints)})' if b.slow else ''}]: "
            f"{self.schedules} schedules explored (+{self.pruned} cut as equivalent, "
            f"{self.revisits} of them at a state explored before), "
            f"{self.steps} steps, {len(self.states)} distinct states, {self.seconds:.1f} s"
        )


StoreFactory = Callable[[Any], SecretStore]


def run_schedule(
    scenario: Scenario,
    bounds: Bounds,
    decide: Decide,
    *,
    store: StoreFactory | None = None,
    states: set[int] | None = None,
    recoveries: dict[int, Recovery] | None = None,
    symmetry: bool = True,
) -> Harness:
    harness = Harness(decide, bounds)
    harness.states = states
    harness.symmetry = Symmetry.of(scenario.actors) if symmetry else None
    world = harness.new_world(
        reuse_interval=scenario.reuse_interval,
        reserved_concurrency=scenario.reserved_concurrency,
    )
    world.seed()
    if store is not None:
        world.store = store(cast(Any, world.secretsmanager))
    world.clock.advance(scenario.advance)
    if scenario.streak:
        world.record_streak(scenario.streak)
    checker = InvariantChecker(world, scenario.max_refreshes, scenario.reuse_interval)
    harness.attach(world, checker)
    checker.start()
    deadline = world.clock.now() + DEADLINE_SECONDS
    harness.rotator_body = lambda owner, request, until: partial(
        world.rotator(owner).run, request, deadline=until
    )
    for owner, request in scenario.actors:
        harness.invoke(owner, request)
    harness.run()
    deadline = max(deadline, harness.last_deadline)  # past the leases of Lambda's retries too
    if not harness.abandoned and harness.violation is None:
        harness.recover_once(deadline, recoveries)
    return harness


def explore(
    scenario: Scenario,
    bounds: Bounds,
    *,
    store: StoreFactory | None = None,
    reduce: bool = True,
    prune: bool = True,
    stop_at_first: bool = True,
    recall: bool = True,
    symmetry: bool = True,
) -> Report:
    """Every schedule of ``scenario`` within ``bounds``; stops at the first counterexample.
    ``reduce``: with sleep sets; ``prune``: with state caching (``simulation.search``);
    ``recall``: a recovery from a state met before taken from its record
    (``Harness.recover_once``); ``symmetry``: interchangeable actors' states met renamed
    count as met (``simulation.symmetry``)."""
    recoveries: dict[int, Recovery] | None = {} if recall else None
    setup = (
        f"the seeded stack, the clock moved {scenario.advance / HOUR:.0f} h; "
        f"{', '.join(f'{o} ({r.source})' for o, r in scenario.actors)} start"
    )
    return search(
        Report(scenario.name, bounds),
        lambda decide, states: run_schedule(
            scenario,
            bounds,
            decide,
            store=store,
            states=states,
            recoveries=recoveries,
            symmetry=symmetry,
        ),
        setup,
        reduce=reduce,
        prune=prune,
        stop_at_first=stop_at_first,
    )


def search(
    report: Report,
    run: Callable[[Decide, set[int]], Harness],
    setup: str,
    *,
    reduce: bool = True,
    prune: bool = True,
    stop_at_first: bool = True,
) -> Report:
    """Every schedule ``run(decide, states)`` can take within ``report.bounds``, counted into
    ``report``; a violation's trace (its step 0 says ``setup``) is its counterexample."""
    bounds = report.bounds
    explorer = SleepSetExplorer(independent, reduce=reduce, prune=prune)
    started = time.perf_counter()
    while True:
        harness = run(explorer.decide, report.states)
        report.steps += len(harness.steps)
        if harness.violation is not None:
            number = report.schedules + report.pruned + 1
            report.counterexample = trace(report.scenario, setup, harness, number)
            violation = harness.violation
            message = harness.least_renamed([unnumbered(violation.message)])
            report.violations.add(f"{violation.invariant}: {message}")
            report.schedules += 1
            if stop_at_first:
                break
        elif harness.abandoned:
            report.pruned += 1
        else:
            report.schedules += 1
            ends = [text.split(": ", 1)[1] for text in harness.end_texts()]
            report.outcomes["; ".join(e.split(" (")[0] for e in ends)] += 1
            report.faults.update(harness.used)
            report.finals[harness.fingerprint()] = harness.least_renamed(harness.end_texts())
        if not explorer.advance():
            break
        if report.schedules + report.pruned >= bounds.limit:
            raise SchedulingError(f"more than {bounds.limit} schedules")
    report.revisits = explorer.revisits
    report.seconds = time.perf_counter() - started
    return report


def trace(name: str, setup: str, harness: Harness, number: int) -> str:
    """The numbered steps of ``harness``'s schedule up to its violation."""
    violation = harness.violation
    assert violation is not None
    lines = [f"counterexample: {name}, schedule {number}", f"   0. setup: {setup}"]
    lines += [f"{s.number:4d}. {s.text}" for s in harness.steps[: violation.step]]
    lines.append(f"VIOLATION {violation.invariant} at step {violation.step}: {violation.message}")
    return "\n".join(lines)
