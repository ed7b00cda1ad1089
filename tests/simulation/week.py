"""Every caller at once, for a week (issue 36): the real ``Rotator``, ``Bootstrapper`` and links
application on the models of Secrets Manager (its version quota), DynamoDB, SNS and the
identity provider (no refresh-token reuse interval), for seven simulated days of a refresh
family's warning window, while every outside caller acts at the worst rates the stack allows.

The stack's settings are read from ``template.yaml`` (its parameters' defaults, the functions'
timeouts and retries, the queue's timeouts, the links' start limit), never copied here.

Time: ``Engine`` runs callbacks and actors (product code on threads, one running at a time) on
one simulated clock, skipping idle time. An actor parks at every model call (which takes
``LATENCY`` of simulated time) and at every ``clock.sleep``, and is resumed when its time
comes; actors due at the same instant take turns (round robin), so concurrent presses
interleave call by call, and a bootstrap's writes land while a rotator run is in flight.

Lambda, as documented (AWS Lambda Developer Guide):

- "Asynchronous invocation": a function error is retried twice, "with a one-minute wait between
  the first two attempts, and two minutes between the second and third attempts" (the
  template's ``MaximumRetryAttempts``), only while it fails; then the on-failure destination
  (``RotationDeadLetterQueue``) gets the event. A throttled event (reserved concurrency 1: a run
  in flight) "returns ... to the queue and attempts to run the function again ... with
  exponentially increasing intervals up to 5 minutes", until ``MaximumEventAgeInSeconds``.
- "Using Lambda with Amazon SQS": the FIFO queue's content-based deduplication accepts a body
  sent in the last 5 minutes without delivering it; a message whose invocation is throttled or
  fails stays invisible until its visibility timeout ends and is then received again, until
  the redrive policy moves it to its dead letter queue (past ``maxReceiveCount`` receives) or
  its retention period ends; the event source mapping processes each message "at least once"
  (here: every delivered message once more).

Callers, all at once:

- members' refresh requests (none when ``members`` is False), as fast as EventBridge and the
  queue take them (the queue's every deduplication window gets one, sent just before a
  scheduled run, so that the forced run holds the rotator when the schedule's invocation
  arrives); the refused consumer fleet's requests are among them (the queue already takes one a
  window: more requests add no runs);
- duplicate deliveries: every scheduled invocation and every message delivered twice;
- whoever holds the alarm topic's messages (``Attacker``), spending the links' start limit as
  fast as it lets them: every link that came since the last press, all at once, a second after
  the last authorization they started ended (or when a refusal's ``Retry-After`` ends; with
  none new, the newest link still unspent), a reminder's link ``PRESSES`` times at once, every
  other once; every other authorization a link starts approved at once by a foreign identity,
  the rest left to expire (no account at the identity provider needed);
- the links' daily reminder and the reminder the aging alarm's ``ALARM`` sends;
- the hourly schedule's rotator runs;
- the operator, at a chosen moment: ``start``, approve as the stack's identity, ``poll`` until
  the poll ends (a person tries again, ``OPERATOR_ATTEMPTS`` times in all, a minute apart).

Simplifications (kinder than AWS, or equal): a background poll that raises is reported at once
(Lambda would retry it); the aging alarm's reminder comes an evaluation period after the family
crosses the warning age; notices reach the attacker at once; the models keep their own
simplifications (no rate limit at the identity provider, DynamoDB reads always consistent).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from cmstoken.bootstrap import BootstrapRequest
from cmstoken.core.clock import parse_iso
from cmstoken.core.errors import CmsTokenError, CredentialLostError
from cmstoken.core.triggers import QUEUED, RotationRequest
from cmstoken.links.events import Outcome
from cmstoken.observability import metrics, record_authorized, record_run
from simulation.exploration import SCHEDULED
from simulation.links_world import NEEDS, LambdaModel, new_links_world, notices, user_code_of
from simulation.refresh_flood import DEDUPLICATION_SECONDS, wiring
from simulation.secretsmanager import DAY
from simulation.upstream import SLOW_DOWN_STEP, SUBJECT
from simulation.world import REFRESH_SECRET, SERVICE_SECRET, SimClock, World

WEEK = 7 * DAY
AUTHORIZED_BEFORE = 22 * DAY  # the family's age when the week starts
PRESSES = 7  # concurrent presses of one link (the default)
FOREIGN = "auth0|someone-else"
OPERATOR_ATTEMPTS = 3
OPERATOR_APPROVES_AFTER = 30.0  # seconds from the start to the operator's approval
# The operator's moment "a link's pending": this long after a link's start whose code the
# attacker leaves to expire, while that link's background poll polls it.
LINK_PENDING_AFTER = 120.0
THROTTLE_BACKOFF_MAX = 300.0  # Lambda backs a throttled asynchronous event off up to 5 minutes
DUPLICATE_AFTER = 1.0  # a duplicate delivery's delay
REACTION = 1.0  # the attacker presses a second after a notice
ESM_THROTTLE_RETRY = 1.0  # the event source mapping tries a throttled batch again
# Simulated seconds a call takes (the request and its answer): the order of AWS's and an
# identity provider's latencies; what matters is that calls of concurrent actors interleave.
LATENCY = {"secretsmanager": 0.02, "dynamodb": 0.01, "sns": 0.03, "lambda": 0.05, "upstream": 0.3}
FORCED = RotationRequest(forced=True, source=QUEUED)


# --- the stack's settings, from template.yaml ---------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """What the template sets (its parameters' defaults) that the week depends on."""

    interval: float
    warning: int
    starts_per_hour: int
    rotator_timeout: float
    bootstrap_timeout: float
    async_retries: int
    max_event_age: float
    visibility_timeout: float
    retention: float
    max_receive_count: int | None  # None: no redrive policy
    failed_to: str | None  # the redrive policy's dead letter queue
    reminder_every: float
    expiry_alarm: float  # ExpiryAlarmThresholdSeconds


def _rate(expression: str) -> float:
    match = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", expression)
    assert match is not None, expression
    unit = {"minute": 60, "hour": 3600, "day": 86_400}[match[2].rstrip("s")]
    return int(match[1]) * unit


@cache
def limits() -> Limits:
    """The template's values for a stack deployed with the parameters' defaults."""
    from template_model import parameter_values, transformed

    resources = transformed()["Resources"]
    parameters = parameter_values()
    rotator = resources["RotatorFunction"]["Properties"]
    invoke = resources["RotatorFunctionEventInvokeConfig"]["Properties"]
    queue = wiring(resources)  # refresh requests coalesce in a FIFO queue, or this fails
    links = resources["LinksFunction"]["Properties"]["Environment"]["Variables"]
    reminder = resources["LinksFunctionReminder"]["Properties"]["ScheduleExpression"]
    return Limits(
        interval=int(parameters["RotationIntervalMinutes"]) * 60.0,
        warning=int(parameters["ReauthorizationWarningSeconds"]),
        starts_per_hour=int(links["LINKS_STARTS_PER_HOUR"]),
        rotator_timeout=float(rotator["Timeout"]),
        bootstrap_timeout=float(resources["BootstrapFunction"]["Properties"]["Timeout"]),
        async_retries=int(invoke["MaximumRetryAttempts"]),
        max_event_age=float(invoke["MaximumEventAgeInSeconds"]),
        visibility_timeout=queue.visibility_timeout,
        retention=queue.retention,
        max_receive_count=queue.max_receive_count,
        failed_to=queue.failed_to,
        reminder_every=_rate(str(reminder)),
        expiry_alarm=float(parameters["ExpiryAlarmThresholdSeconds"]),
    )


# --- the engine -----------------------------------------------------------------------------


class Cancelled(BaseException):
    """Ends an actor still parked when the simulation ends (product code catches
    ``Exception`` only)."""


@dataclass(eq=False)
class Task:
    name: str
    body: Callable[[], Any]
    done: Callable[[Any, BaseException | None], None] | None
    state: str = "new"  # new, parked, running, done
    cancelled: bool = False
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))


class Engine:
    """Callbacks and actors on one simulated clock (see the module docstring). Callbacks run
    on the engine's thread; an actor's ``done(result, error)`` runs on its thread after it
    ends, outside any model call."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._ready: list[tuple[float, int, Task]] = []
        self._seq = itertools.count()
        self._back = threading.Semaphore(0)  # the running actor parked or ended
        self._local = threading.local()
        self.observers: list[Callable[[], None]] = []
        self._until = float("inf")

    def at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._events, (max(when, self.clock.now()), next(self._seq), callback))

    def spawn(
        self,
        name: str,
        body: Callable[[], Any],
        done: Callable[[Any, BaseException | None], None] | None = None,
    ) -> Task:
        """An actor that starts now (after the callback or actor running has parked)."""
        task = Task(name, body, done)
        heapq.heappush(self._ready, (self.clock.now(), next(self._seq), task))
        return task

    def intercept(self, service: str, operation: str, act: Callable[[], Any]) -> Any:
        """The models' interceptor: the call takes ``LATENCY`` and acts at its end."""
        self.pause(LATENCY.get(service, 0.0))
        return act()

    def pause(self, seconds: float) -> None:
        """The calling actor waits ``seconds`` (others run meanwhile); outside an actor, the
        clock just moves."""
        task: Task | None = getattr(self._local, "task", None)
        wake = self.clock.now() + max(seconds, 0.0)
        if task is None or (wake < self._next() and wake <= self._until):
            self.clock.current = wake  # nothing else is due first
            return
        heapq.heappush(self._ready, (wake, next(self._seq), task))
        task.state = "parked"
        self._back.release()
        task.go.acquire()
        if task.cancelled:
            raise Cancelled

    def _next(self) -> float:
        event = self._events[0][0] if self._events else float("inf")
        ready = self._ready[0][0] if self._ready else float("inf")
        return min(event, ready)

    def run(self, until: float) -> None:
        """Everything due until ``until``, in time order; the clock then stands at ``until``."""
        self._until = until
        while self._next() <= until:
            event = self._events[0][0] if self._events else float("inf")
            if self._ready and self._ready[0][0] <= event:
                wake, _, task = heapq.heappop(self._ready)
                self.clock.current = max(self.clock.current, wake)
                self._resume(task)
            else:
                when, _, callback = heapq.heappop(self._events)
                self.clock.current = max(self.clock.current, when)
                callback()
            for observe in self.observers:
                observe()
        self.clock.current = max(self.clock.current, until)

    def close(self) -> None:
        """End every actor still parked (its ``done`` is not called)."""
        while self._ready:
            _, _, task = heapq.heappop(self._ready)
            if task.state == "parked":
                task.cancelled = True
                self._resume(task)

    def _resume(self, task: Task) -> None:
        """Run ``task`` until it parks or ends (one thread runs at a time)."""
        started, task.state = task.state == "new", "running"
        if started:
            threading.Thread(target=self._main, args=(task,), daemon=True).start()
        else:
            task.go.release()
        self._back.acquire()

    def _main(self, task: Task) -> None:
        self._local.task = task
        result: Any = None
        error: BaseException | None = None
        try:
            result = task.body()
        except Cancelled:
            pass
        except Exception as exc:  # an outcome, given to ``done``
            error = exc
        finally:
            self._local.task = None
            try:
                if task.done is not None and not task.cancelled:
                    task.done(result, error)
            finally:
                task.state = "done"
                self._back.release()


class EngineClock(SimClock):
    """The simulated clock, whose ``sleep`` parks the sleeping actor on the engine."""

    engine: Engine | None = None

    def sleep(self, seconds: float) -> None:
        if self.engine is None:
            super().sleep(seconds)
        else:
            self.engine.pause(seconds)


# --- the rotator function, its schedule and its queue ------------------------------------------


@dataclass
class Figures:
    """What the week did (see ``table``)."""

    moment: str
    peak_versions: int = 0
    peak_at: float = 0.0  # seconds into the span
    warning_peak: tuple[int, float] = (0, 0.0)  # the same, within the warning window
    least_validity: float = float("inf")
    expired_at: float | None = None  # seconds into the span
    forced: Counter[str] = field(default_factory=Counter)
    scheduled: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    link_starts: int = 0
    link_presses: Counter[int] = field(default_factory=Counter)
    notices: Counter[str] = field(default_factory=Counter)
    alarms: dict[str, int] = field(default_factory=dict)
    dead_letters: Counter[str] = field(default_factory=Counter)
    throttles: int = 0
    delays: dict[str, float] = field(
        default_factory=lambda: defaultdict(float)
    )  # longest first wait
    messages_lost: int = 0
    lost: list[str] = field(default_factory=list)
    revoked: bool = False
    reauthorized_at: float | None = None
    operator: list[str] = field(default_factory=list)
    # Seconds into the span when a link's start showed a code the attacker leaves to expire.
    left_pending: list[float] = field(default_factory=list)
    slow_downs: int = 0  # the identity provider's slow_down answers (two pollers of one code)
    first_failure: str | None = None

    def real_failures(self, expiry_alarm: float) -> bool:
        """A failure the alarms may report: a scheduled run that failed every attempt, a token
        closer to its expiry than ``expiry_alarm``, a credential lost or refused."""
        return bool(self.dead_letters["schedule"] or self.lost or self.revoked) or (
            self.least_validity < expiry_alarm
        )

    def table(self) -> str:
        forced = f"{self.forced['rotated']} rotated / {self.forced['skipped']} skipped"
        if self.forced["failed"]:
            forced += f" / {self.forced['failed']} failed"
        return "\n".join(
            [
                f"week ({self.moment}):",
                f"  versions in use at their peak:            {self.peak_versions} "
                f"(day {self.peak_at / DAY:.2f})",
                f"  service token's least remaining validity: {self.least_validity / 3600:.2f} h"
                + (
                    "" if self.expired_at is None else f" (expired day {self.expired_at / DAY:.2f})"
                ),
                f"  forced runs:                              {forced}",
                f"  scheduled runs:                           {dict(self.scheduled)}",
                f"  rotator errors:                           {dict(self.errors)}",
                f"  authorizations started by links:          {self.link_starts}",
                f"  link presses (page status: count):        {dict(self.link_presses)}",
                f"  notices sent:                             {dict(self.notices)}",
                f"  alarms fired:                             {self.alarms}",
                f"  dead letters (rotation failures):         {dict(self.dead_letters)}",
                f"  throttled invocations / messages expired: {self.throttles} / "
                f"{self.messages_lost}",
                f"  scheduled run's longest throttled wait:   {self.delays['schedule']:.2f} s",
                f"  credential lost / family revoked:         {self.lost or 'no'} / "
                f"{'yes' if self.revoked else 'no'}",
                f"  slow_down answers:                        {self.slow_downs}",
                f"  operator:                                 {'; '.join(self.operator)}",
                f"  first failure:                            {self.first_failure or 'none'}",
            ]
        )


class RotatorFunction:
    """The rotator function: reserved concurrency 1, asynchronous invocations with Lambda's
    retries and throttling back-off, and the refresh queue's event source mapping."""

    def __init__(self, week: Week) -> None:
        self.week = week
        self.running = 0

    def invoke_async(
        self,
        request: RotationRequest,
        kind: str,
        first: float,
        attempt: int = 0,
        throttled: int = 0,
    ) -> None:
        """An asynchronous invocation (the schedule's): throttled while a run is in flight,
        retried after a function error, dead-lettered when it runs out."""
        week, now = self.week, self.week.clock.now()
        if now - first > week.limits.max_event_age:
            week.figures.dead_letters[kind] += 1
            return
        if self.running:
            week.figures.throttles += 1
            delay = min(2.0**throttled, THROTTLE_BACKOFF_MAX)
            week.engine.at(
                now + delay, lambda: self.invoke_async(request, kind, first, attempt, throttled + 1)
            )
            return

        if attempt == 0:
            week.figures.delays[kind] = max(week.figures.delays[kind], now - first)

        def done(error: BaseException | None) -> None:
            if error is None:
                return
            if attempt < week.limits.async_retries:
                delay = 60.0 if attempt == 0 else 120.0
                week.engine.at(
                    week.clock.now() + delay,
                    lambda: self.invoke_async(request, kind, first, attempt + 1),
                )
            else:
                week.figures.dead_letters[kind] += 1
                week.failure(f"{kind} run failed every attempt")

        self.run(request, kind, done)

    def run(
        self, request: RotationRequest, kind: str, done: Callable[[BaseException | None], None]
    ) -> None:
        """One run now, its metrics recorded as the handler records them."""
        week = self.week
        self.running += 1
        started = week.clock.now()
        holder: dict[str, Any] = {}

        def body() -> Any:
            rotator = holder["rotator"] = week.world.rotator(f"{kind}-{next(week.serial)}")
            return rotator.run(request, deadline=started + week.limits.rotator_timeout)

        def ended(result: Any, error: BaseException | None) -> None:
            self.running -= 1
            outcome = None if result is None else str(result.outcome)
            record_run(outcome, error, holder.get("rotator"), week.clock)
            week.collect(started)
            tally = week.figures.forced if request.forced else week.figures.scheduled
            tally[outcome or "failed"] += 1
            if error is not None:
                week.figures.errors[type(error).__name__] += 1
                if isinstance(error, CredentialLostError):
                    week.figures.lost.append(week.when())
                    week.failure(f"CredentialLostError in a {kind} run")
                elif not request.forced:
                    week.failure(f"{type(error).__name__} in a {kind} run: {error}")
            done(error)

        week.engine.spawn(f"rotator-{kind}", body, ended)


@dataclass
class Message:
    sent: float
    received: float | None = None
    receives: int = 0


class RefreshQueue:
    """The refresh-request FIFO queue and its event source mapping (see the module
    docstring): one message group, so one message in flight at a time."""

    def __init__(self, week: Week) -> None:
        self.week = week
        self.messages: list[Message] = []
        self.last_accepted = -float("inf")
        self.in_flight = False

    def send(self) -> None:
        """A refresh request (the same body as every other)."""
        now = self.week.clock.now()
        if now - self.last_accepted < DEDUPLICATION_SECONDS:
            return  # accepted, not delivered
        self.last_accepted = now
        self.messages.append(Message(now))
        self.deliver()

    def deliver(self) -> None:
        week, now = self.week, self.week.clock.now()
        while self.messages and now - self.messages[0].sent >= week.limits.retention:
            self.messages.pop(0)
            week.figures.messages_lost += 1
        if self.in_flight or not self.messages:
            return
        message = self.messages[0]
        if message.received is not None and now < message.received + week.limits.visibility_timeout:
            week.engine.at(message.received + week.limits.visibility_timeout, self.deliver)
            return
        message.received, message.receives = now, message.receives + 1
        limit = week.limits.max_receive_count
        if limit is not None and message.receives > limit:  # the redrive policy
            self.messages.remove(message)
            week.figures.dead_letters[str(week.limits.failed_to)] += 1
            week.engine.at(now, self.deliver)
            return
        self.in_flight = True
        self.attempt(message, duplicate=True)

    def attempt(self, message: Message, *, duplicate: bool) -> None:
        """The mapping invokes the rotator with the message: throttled, tried again until the
        visibility timeout; done, deleted (and, at least once, delivered again)."""
        week, now = self.week, self.week.clock.now()
        assert message.received is not None
        if week.rotator.running:
            week.figures.throttles += 1
            if now + ESM_THROTTLE_RETRY < message.received + week.limits.visibility_timeout:
                week.engine.at(
                    now + ESM_THROTTLE_RETRY, lambda: self.attempt(message, duplicate=duplicate)
                )
            else:
                self.in_flight = False
                self.deliver()
            return

        def done(error: BaseException | None) -> None:
            if error is None and message in self.messages:
                self.messages.remove(message)
            if duplicate and error is None:
                week.engine.at(
                    week.clock.now() + DUPLICATE_AFTER,
                    lambda: self.attempt(message, duplicate=False),
                )
                return
            self.in_flight = False
            week.engine.at(week.clock.now(), self.deliver)

        week.rotator.run(FORCED, "forced", done)


# --- the links, their holder, the operator ----------------------------------------------------


class WeekLambda(LambdaModel):
    """Lambda's ``Invoke`` of the bootstrap for the links: a ``RequestResponse`` call runs it
    in the caller (``LambdaModel``); an ``Event`` (a background poll) is a new actor."""

    week: Week

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> Any:  # noqa: N803
        if InvocationType != "Event":
            return super().invoke(
                FunctionName=FunctionName, InvocationType=InvocationType, Payload=Payload
            )
        import json

        payload = json.loads(Payload)
        self.interceptor("lambda", "InvokeAsync:queue", lambda: None)
        self.week.engine.at(self.week.clock.now(), lambda: self.week.background_poll(payload))
        return {"StatusCode": 202}


@dataclass
class Held:
    token: str
    expires_at: float
    times: int  # presses at once


class Attacker:
    """Whoever holds the alarm topic's messages (see the module docstring), spending the
    stack's start limit as fast as it lets them: the links that came since the last press,
    all at once, a second after the last authorization they started ended (or when the limit
    lets them: ``Retry-After``); with none new, the newest link held."""

    def __init__(self, week: Week) -> None:
        self.week = week
        self.read = 0
        self.fresh: list[Held] = []  # came since the last press
        self.links: list[Held] = []  # held from before, unspent
        self.codes: set[str] = set()
        self.busy = False  # presses in flight, or an authorization they started pending
        self.retry_at: float | None = None

    def observe(self) -> None:
        """New notices: their links are held; an outcome ends what was pending."""
        published = self.week.links.topic.published
        if len(published) == self.read:
            return
        fresh = notices(self.week.links.topic)[self.read :]
        self.read = len(published)
        for facts in fresh:
            self.week.figures.notices[facts["kind"]] += 1
            if facts["kind"] not in NEEDS:
                self.busy = False
            if "link" in facts:
                token = facts["link"].split("/l/", 1)[1]
                times = self.week.presses if facts["kind"] in NEEDS else 1
                self.fresh.append(Held(token, parse_iso(facts["linkExpiresAt"]), times))
        self.week.engine.at(self.week.clock.now() + REACTION, self.press)

    def press(self) -> None:
        """The new links all at once, each ``times`` (a need's: ``presses``); else the newest
        held one, once."""
        now = self.week.clock.now()
        self.fresh = [h for h in self.fresh if h.expires_at > now]
        self.links = [h for h in self.links if h.expires_at > now]
        waiting = self.retry_at is not None and now < self.retry_at
        if self.busy or waiting or not (self.fresh or self.links):
            return
        group, self.fresh = self.fresh or [self.links.pop()], []
        self.busy, self.retry_at = True, None
        answers: dict[str, list[Any]] = {h.token: [] for h in group}
        expected = sum(h.times for h in group)
        for held in group:
            for _ in range(held.times):
                self.week.engine.spawn(
                    "press",
                    partial(self.week.links.press, held.token),
                    partial(self.shown, group, answers, expected, held),
                )

    def shown(
        self,
        group: list[Held],
        answers: dict[str, list[Any]],
        expected: int,
        held: Held,
        answer: Any,
        error: BaseException | None,
    ) -> None:
        """One press's page; after the group's last, what to do next: a link refused for a
        while is held again (pressed alone later), one that started or was refused for good
        is dropped."""
        answers[held.token].append(answer)
        status = answer.get("statusCode", 0) if isinstance(answer, dict) else 0
        self.week.figures.link_presses[status] += 1
        code = user_code_of(answer)
        if code is not None and code not in self.codes:
            self.codes.add(code)
            if len(self.codes) % 2:  # every other one: a foreign identity approves it
                self.week.world.identity.approve(code, FOREIGN)
            else:
                self.week.figures.left_pending.append(self.week.clock.now() - self.week.start)
        every = [a for pages in answers.values() for a in pages]
        if len(every) < expected:
            return
        for pressed in group:
            pages = answers[pressed.token]
            started = any(user_code_of(a) is not None for a in pages)
            if not started and {_status(a) for a in pages} & {429, 409, 503}:
                self.links.append(Held(pressed.token, pressed.expires_at, 1))
        if any(user_code_of(a) is not None for a in every):
            return  # busy until the outcome of what started is reported
        self.busy = False
        retry = [_retry_after(a) for a in every]
        wait = max((r for r in retry if r is not None), default=60.0)
        self.retry_at = self.week.clock.now() + wait
        self.week.engine.at(self.retry_at, self.press)


def _status(answer: Any) -> int:
    return int(answer.get("statusCode", 0)) if isinstance(answer, dict) else 0


def _retry_after(answer: Any) -> float | None:
    if not isinstance(answer, dict):
        return None
    value = answer.get("headers", {}).get("Retry-After")
    return None if value is None else float(value) + 1


@dataclass(frozen=True)
class Span:
    """The time simulated: from the family's ``age`` (seconds since its authorization) for
    ``length`` seconds."""

    age: float = AUTHORIZED_BEFORE
    length: float = WEEK


class Week:
    """One week (see the module docstring); ``operator_at``: seconds into the week when the
    operator starts a re-authorization (``None``: never)."""

    def __init__(
        self,
        operator_at: float | None,
        moment: str = "",
        *,
        span: Span | None = None,
        presses: int = PRESSES,
        members: bool = True,
    ) -> None:
        self.span = span or Span()
        self.presses = presses
        self.members = members  # False: no member sends a refresh request
        self.limits = limits()
        self.clock = EngineClock(SimClock().now() - self.span.age)
        self.start = self.clock.now() + self.span.age  # the family was authorized at first
        self.engine = Engine(self.clock)
        self.world = World(
            interceptor=self.engine.intercept, reserved_concurrency=1, clock=self.clock
        )
        self.figures = Figures(moment)
        self.serial = itertools.count()
        self.points: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.rotator = RotatorFunction(self)
        self.queue = RefreshQueue(self)
        self.operator_at = operator_at
        self.versions_seen = 0
        self.service_seen = -1
        self.expires_at = 0.0

    # --- helpers ---------------------------------------------------------------------------

    def when(self) -> str:
        """Now, as the day of the span and the family's age."""
        into = self.clock.now() - self.start
        return f"day {into / DAY:.2f} (family {(into + self.span.age) / DAY:.2f} days old)"

    def failure(self, what: str) -> None:
        if self.figures.first_failure is None:
            self.figures.first_failure = f"{self.when()}: {what}"

    def collect(self, at: float) -> None:
        """The metrics the last invocation emitted, stored at its start."""
        for name, data in metrics.metric_set.items():
            for value in data["Value"]:
                self.points[name].append((at, float(value)))
        metrics.clear_metrics()

    def measure(self) -> None:
        """After every step: versions in use, the service token's remaining validity."""
        secrets = self.world.secretsmanager.secrets
        refresh, service = secrets[REFRESH_SECRET], secrets[SERVICE_SECRET]
        now = self.clock.now()
        if len(refresh.history) != self.versions_seen:
            self.versions_seen = len(refresh.history)
            in_use = sum(1 for v in refresh.versions.values() if v.stages or now - v.created < DAY)
            figures, into = self.figures, now - self.start
            if into >= 0 and in_use > figures.peak_versions:
                figures.peak_versions, figures.peak_at = in_use, into
            if into >= self.limits.warning - self.span.age and in_use > figures.warning_peak[0]:
                figures.warning_peak = (in_use, into)
        if len(service.history) != self.service_seen:
            self.service_seen = len(service.history)
            self.expires_at = self.world.service_document().expires_at
        if now >= self.start:
            left = self.expires_at - now
            self.figures.least_validity = min(self.figures.least_validity, left)
            if left <= 0 and self.figures.expired_at is None:
                self.figures.expired_at = now - self.start
                self.failure("the service token expired")

    def bootstrap(self, action: str, *, via_links: bool = False, **fields: Any) -> dict[str, Any]:
        """The bootstrap function's handler, on the models: a failure of start or poll is a
        result; an authorization's metrics are recorded."""
        started = self.clock.now()
        request = BootstrapRequest.from_event({"action": action, **fields}, via_links=via_links)
        bootstrapper = self.world.bootstrapper()
        try:
            result = bootstrapper.handle(request, deadline=started + self.limits.bootstrap_timeout)
        except CmsTokenError as exc:
            return {"status": "failed", "message": str(exc)}
        if result.get("status") == "authorized":
            record_authorized(bootstrapper.vault.published, self.clock)
            self.collect(started)
        return result

    def background_poll(self, payload: dict[str, Any]) -> None:
        """The bootstrap's poll of what a link started; its outcome to the links (the
        destination)."""
        link = payload.get("link")

        def body() -> Any:
            try:
                result = self.bootstrap("poll", via_links=True, link=link)
            except Exception as exc:  # the destination's failure record
                return self.links.app().handle(Outcome(None, error=type(exc).__name__, link=link))
            return self.links.app().handle(Outcome(result, link=link))

        self.engine.spawn("poll", body)

    # --- the callers -----------------------------------------------------------------------

    def schedule(self, at: float) -> None:
        """The schedule's run, from the week on delivered twice (at least once: the second
        a second later)."""
        self.rotator.invoke_async(SCHEDULED, "schedule", at)
        if at >= self.start:
            again = at + DUPLICATE_AFTER
            self.engine.at(again, lambda: self.rotator.invoke_async(SCHEDULED, "schedule", again))
        self.engine.at(at + self.limits.interval, lambda: self.schedule(at + self.limits.interval))

    def flood(self, at: float) -> None:
        """Members' requests, as fast as the queue takes them."""
        self.queue.send()
        every = DEDUPLICATION_SECONDS
        self.engine.at(at + every, lambda: self.flood(at + every))

    def remind(self, reason: str) -> None:
        self.engine.spawn("remind", lambda: self.links.remind(reason))

    def daily(self, at: float) -> None:
        self.remind("schedule")
        every = self.limits.reminder_every
        self.engine.at(at + every, lambda: self.daily(at + every))

    def operator(self) -> None:
        """The operator's re-authorization (see the module docstring)."""
        begun = self.clock.now()
        notes = self.figures.operator

        def body() -> None:
            for attempt in range(1, OPERATOR_ATTEMPTS + 1):
                met = self.world.refresh_document().pending
                if met is not None and met.link is not None and met.expires_at > self.clock.now():
                    notes.append(f"start {attempt} met a link's pending authorization")
                started = self.bootstrap("start")
                if started.get("status") != "pending":
                    said = str(started.get("message", ""))[:90]
                    notes.append(f"start {attempt}: {started.get('status')} ({said})")
                    self.clock.sleep(60)
                    continue
                self.clock.sleep(OPERATOR_APPROVES_AFTER)
                self.world.identity.approve(started["user_code"], SUBJECT)
                result: dict[str, Any] = {"status": "pending"}
                while result.get("status") == "pending":
                    result = self.bootstrap("poll")
                credential = self.world.refresh_document().credential
                if credential is not None and credential.authorized_at >= begun:
                    self.figures.reauthorized_at = credential.authorized_at
                    notes.append(f"attempt {attempt}: authorized")
                    return
                notes.append(f"attempt {attempt}: {result.get('status')}")
                self.clock.sleep(60)
            self.failure("the operator's re-authorization did not succeed")

        self.engine.spawn("operator", body)

    # --- the week --------------------------------------------------------------------------

    def run(self) -> Figures:
        world, limits_ = self.world, self.limits
        self.clock.engine = self.engine
        # The product's log lines (hundreds of thousands in a week) left out, as in fleet.py;
        # an error's or a critical one's kept.
        library = logging.getLogger("cmstoken")
        level = library.level
        library.setLevel(logging.ERROR)
        world.seed()
        functions = WeekLambda(world, self.engine.intercept)
        functions.week = self
        self.links = new_links_world(
            world,
            self.engine.intercept,
            functions,
            starts_per_hour=limits_.starts_per_hour,
            warning_seconds=limits_.warning,
        )
        self.attacker = Attacker(self)
        self.engine.observers += [self.measure, self.attacker.observe]
        authorized_at = self.clock.now()
        metrics.clear_metrics()
        # The weeks before: the schedule alone, from the authorization.
        self.schedule(authorized_at + 30)
        self.engine.run(self.start)
        # The week: every caller at once. The requests come just before each scheduled run, so
        # that a forced run holds the rotator when the schedule's invocation arrives.
        first_run = (
            authorized_at
            + 30
            + limits_.interval * math.ceil((self.start - authorized_at) / limits_.interval)
        )
        if self.members:
            self.flood(
                first_run
                - 0.01
                - DEDUPLICATION_SECONDS
                * math.floor((first_run - self.start) / DEDUPLICATION_SECONDS)
            )
        self.daily(self.start + 60)
        aging = authorized_at + limits_.warning + limits_.interval
        if self.start <= aging < self.start + self.span.length:
            self.engine.at(aging, lambda: self.remind("alarm RefreshFamilyAgingAlarm is ALARM"))
        if self.operator_at is not None:
            self.engine.at(self.start + self.operator_at, self.operator)
        try:
            self.engine.run(self.start + self.span.length)
        finally:
            self.engine.close()
            library.setLevel(level)
        self.finish()
        return self.figures

    def finish(self) -> None:
        figures, identity = self.figures, self.world.identity
        figures.link_starts = len(self.attacker.codes)
        figures.revoked = any(t.family.revoked for t in identity.tokens.values())
        figures.slow_downs = sum(
            (code.interval - identity.poll_interval) // SLOW_DOWN_STEP
            for code in identity.devices.values()
        )
        from alarm_timeline import alarmed, replay

        changes = replay(self.points, start=self.start, end=self.start + self.span.length)
        figures.alarms = alarmed(changes)


WARNING_ALARM = "RefreshFamilyAgingAlarm"


def false_alarms(figures: Figures) -> dict[str, int]:
    """Alarms that reported a failure that did not happen: any but the aging warning (whose
    condition, the family's age, holds all week) when nothing failed."""
    if figures.real_failures(limits().expiry_alarm):
        return {}
    return {name: n for name, n in figures.alarms.items() if name != WARNING_ALARM}


@cache
def without_operator(span: Span, *, members: bool = True) -> Figures:
    """``span`` without the operator (the moments are read from it)."""
    return Week(None, "no operator", span=span, members=members).run()


def worst_moment(span: Span) -> float:
    """Seconds into ``span`` when the callers have used most of what they can: when the
    versions in use first peak within the warning window (the links' attack), in the span
    without the operator."""
    return without_operator(span).warning_peak[1]


def link_pending_moment(span: Span) -> float:
    """Seconds into ``span`` when the first authorization a link started and the attacker
    left unapproved is pending (``LINK_PENDING_AFTER`` into it), its background poll polling,
    in the span without the members' requests (with them, the version budget refuses every
    link's poll: their forced refreshes spend what outside callers may write)."""
    return without_operator(span, members=False).left_pending[0] + LINK_PENDING_AFTER
