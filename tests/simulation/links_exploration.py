"""The re-authorization links' shared state, explored: the real links application
(``cmstoken.links.app.LinksApp``, ``AwsPortal`` and its DynamoDB, SNS and Lambda adapters)
and the real bootstrap, on the models of Secrets Manager, DynamoDB, SNS, Lambda's ``Invoke``
and the upstream, every call a scheduling point, with the harness of
``simulation.exploration`` (sleep sets, a crash before every call, a busy answer at every call).

Scenarios (a stack whose credential the identity provider refused, links sent for it):

- ``double click``: the button pressed twice at once on one link's page;
- ``two links``: the buttons of two links (two alerts, two people) pressed at once;
- ``two reminders``: the daily schedule and an alarm going off invoke the reminder together;
- ``outcome and reminder``: an approved authorization's background poll, whose outcome the
  links report, runs while the reminder runs;
- ``two polls``: two background polls of one approved code (a double click queues two, and
  Lambda may deliver an asynchronous invocation twice).

After the actors end, the recovery, as AWS and people go on: Lambda retries an asynchronous
invocation (a reminder, a poll and its outcome) that crashed or failed, a minute later; a
person whose press crashed or failed presses again; the person approves what the page showed
(``approve``), or never does and the code expires; the queued polls run and report; without
an approval, every link is pressed again (each with nothing pending); a day later the reminder
runs. ``LinksChecker`` checks, after every step and at the end:

- L1: a link stores at most one pending authorization, ever (a press that died between
  starting one and recording it may let its link start one more: documented);
- L2: nothing but the bootstrap's poll changes the credential (a start only adds a pending
  authorization), and nobody but the poll writes the service token;
- L3: every started page shows the user code the bootstrap keeps pending, so polls;
- L4: an authorization a person could see ends reported: an approval that replaced the
  credential as "authorized", at least once and more than once only after an invocation that
  sent it died or failed before recording it, and then nothing else (but a "failed" from a
  poll that the provider refused the code because another poll had just consumed it:
  documented); otherwise its ending;
- L5: a need lasting two days is notified both days, and at most once a day but for the same
  kind of failure after sending.

A crash ends the whole actor: the harness cannot end one process of an actor (the bootstrap
the links called) and let its caller go on, so a bootstrap that dies alone is explored as its
calls refused (busy).
"""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast
from unittest import mock

from cmstoken.aws.documents import STATUS_REAUTHORIZATION_REQUIRED
from cmstoken.core.errors import ReauthorizationRequiredError
from cmstoken.links import portal, tokens
from simulation.exploration import (
    DEADLINE_SECONDS,
    SCHEDULED,
    Bounds,
    Decide,
    Harness,
    Report,
    SimActor,
    search,
)
from simulation.invariants import Step, Violation
from simulation.links_world import (
    KEY_TEXT,
    NEEDS,
    LambdaModel,
    LinksWorld,
    expected,
    new_links_world,
    notices,
    user_code_of,
)
from simulation.scheduler import seed_jitter
from simulation.step_texts import error_code
from simulation.world import HOUR

RETRY_AFTER = 60.0  # Lambda retries a failed asynchronous invocation after about a minute
SCENARIOS = ("double click", "two links", "two reminders", "outcome and reminder", "two polls")
PRESS_SCENARIOS = ("double click", "two links")
ENDINGS = ("authorized", "denied", "expired", "identity-refused", "failed")
PRESSES = ("press-1", "press-2", "press-a", "press-b")
POLLER = "poll"


@dataclass(frozen=True)
class Scenario:
    name: str
    actors: tuple[str, ...]
    links: dict[str, int]  # a press actor: the serial of the link it presses


SCENARIO = {
    "double click": Scenario("double click", ("press-1", "press-2"), {"press-1": 1, "press-2": 1}),
    "two links": Scenario("two links", ("press-a", "press-b"), {"press-a": 1, "press-b": 2}),
    "two reminders": Scenario("two reminders", ("remind-schedule", "remind-alarm"), {}),
    "outcome and reminder": Scenario("outcome and reminder", (POLLER, "remind-schedule"), {}),
    "two polls": Scenario("two polls", (POLLER, "poll-2"), {}),
}


class LinksHarness(Harness):
    """``Harness`` with the links' calls: DynamoDB items, the topic and Lambda's queue as the
    objects steps touch (``Transition`` footprints), their steps in the trace, and the links'
    state in the fingerprint."""

    links_world: LinksWorld
    checker: LinksChecker  # type: ignore[assignment]

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
        kind, _, target = action.partition(":")
        service = kind.partition(".")[0]
        if service not in ("dynamodb", "sns", "lambda"):
            super()._record(name, action, fault, seconds, answer, error, before, log_size)
            return
        when = f"t+{self.world.clock.now() - self.start_at:.1f}s"
        tag = " [BUSY]" if fault == "busy" else ""
        outcome = "ok" if error is None else f"REFUSED ({error_code(error)})"
        if service == "dynamodb":
            what = f"{kind.partition('.')[2]} {target[:14]}"
        elif service == "sns":
            what = f"publishes {self._last_notice() if error is None else 'a notice'}"
        else:
            what = "queues a poll" if target == "queue" else f"invokes the bootstrap's {target}"
        facts: dict[str, Any] = {"status": 200 if error is None else 400}
        self._step(name, action, f"{when} {name} {what}{tag}: {outcome}", **facts)

    def _last_notice(self) -> str:
        facts = notices(self.links_world.topic)[-1]
        return f"{facts['kind']}" + (" with a link" if "link" in facts else "")

    def _shared(self) -> int:
        """``Harness._shared`` and the links' state: the table's items, the notices published,
        the polls Lambda queued."""
        lw = self.links_world
        items = tuple(sorted(json.dumps(i, sort_keys=True) for i in lw.items().values()))
        published = tuple(p.message for p in lw.topic.published)
        queued = json.dumps(lw.functions.queued, sort_keys=True)
        return hash((super()._shared(), items, published, queued))

    # --- the recovery -------------------------------------------------------------------------

    def recover(self, deadline: float) -> None:
        """Retries, the person, the queued polls, then a day later the reminder."""
        lw, world = self.links_world, self.world
        self.checker.before_recovery(self)
        approved = self.checker.scenario.name in ("outcome and reminder", "two polls")
        self.recovering = True
        try:
            world.clock.advance(RETRY_AFTER)
            for actor in self.actors:
                self._retry(cast(SimActor, actor))
            if self.checker.approve and self.checker.stored_code is not None and not approved:
                world.identity.approve(self.checker.stored_code)
            else:
                self._expire_pending()
            for _ in range(10):
                if not lw.functions.queued:
                    break
                link = lw.functions.queued.pop(0)["link"]
                self.checker.polling = True
                self._run_recovery("poll", partial(self._queued_poll, link))
                self.checker.polling = False
            if not self.checker.approve:  # every link pressed again, nothing pending: each
                for name, serial in self.checker.scenario.links.items():  # starts at most once
                    self._expire_pending()
                    self.checker.pressing = serial
                    self._run_recovery(name, partial(lw.press, lw.link_of(serial)))
                    self.checker.pressing = None
            self.checker.day_one = len(lw.topic.published)
            world.clock.advance(86_400)
            self._run_recovery("remind", lambda: lw.remind("schedule"))
        finally:
            self.recovering = False
        if self.violation is None:
            self.violation = self.checker.final(len(self.steps))

    def _queued_poll(self, link: str) -> Any:
        return self.checker.report(self.links_world.poll_and_report("queued", link))

    def _expire_pending(self) -> None:
        """Time passes until the pending code, if any, has expired."""
        pending = self.world.refresh_document().pending
        if pending is not None:
            self.world.clock.advance(max(0.0, pending.expires_at - self.world.clock.now() + 1))

    def _retry(self, actor: SimActor) -> None:
        """Lambda retries a crashed or failed asynchronous invocation; a person presses again
        after an error page."""
        lw = self.links_world
        result = actor.result
        failed = actor.crashed or actor.error is not None
        if actor.name in self.checker.scenario.links:
            if failed or (isinstance(result, dict) and result.get("statusCode", 0) >= 500):
                serial = self.checker.scenario.links[actor.name]
                self.checker.pressing = serial
                answer = self._run_recovery(actor.name, lambda: lw.press(lw.link_of(serial)))
                self.checker.pressing = None
                self.checker.shown(actor.name, answer)
        elif actor.name.startswith(POLLER):
            if failed:
                self.checker.polling = True
                self._run_recovery(
                    actor.name, lambda: self.checker.report(lw.resume_poll(actor.name))
                )
                self.checker.polling = False
        elif failed:
            self._run_recovery(actor.name, lambda: lw.remind("retry"))

    def _run_recovery(self, name: str, body: Callable[[], Any]) -> Any:
        try:
            answer = body()
        except Exception as exc:
            self._step("recovery", "end", f"recovery: {name} ends: {type(exc).__name__}")
            return None
        self._step("recovery", "end", f"recovery: {name} ends: {_summary(answer)}")
        return answer


def _summary(answer: Any) -> str:
    if isinstance(answer, dict) and "statusCode" in answer:
        code = user_code_of(answer)
        return f"page {answer['statusCode']}" + (f" showing {code}" if code else "")
    return str(answer.get("done") if isinstance(answer, dict) else answer)


@dataclass
class LinksChecker:
    """The links' invariants (see the module docstring), after every step and at the end."""

    lw: LinksWorld
    scenario: Scenario
    approve: bool  # the person approves what the page showed (else never)
    polling: bool = False  # a background poll runs in the recovery
    pressing: int | None = None  # the link a recovery press presses
    credential: tuple[Any, ...] | None = None
    starts: Counter[int] = field(default_factory=Counter)  # pending codes stored, by link
    pending_code: str | None = None
    unrecorded: dict[str, int] = field(default_factory=dict)  # press: link it started with
    restarts_allowed: Counter[int] = field(default_factory=Counter)
    shown_codes: dict[str, str] = field(default_factory=dict)
    stored_code: str | None = None
    published_by: Counter[str] = field(default_factory=Counter)
    duplicates_allowed: int = 0
    failed_after: set[str] = field(default_factory=set)
    outcomes: list[Any] = field(default_factory=list)
    approved_by: set[str] = field(default_factory=set)  # polls the provider gave the tokens
    consumed_race: bool = False
    shown_to_someone: bool = False  # a pending code was stored (a person may approve it)
    initial: tuple[Any, ...] | None = None
    day_one: int = 0  # notices published before the next day's reminder

    def start(self) -> None:
        self.credential = self.initial = self._credential()
        pending = self.lw.world.refresh_document().pending
        self.pending_code = None if pending is None else pending.device_code
        self.shown_to_someone = pending is not None

    def _credential(self) -> tuple[Any, ...] | None:
        credential = self.lw.world.refresh_document().credential
        if credential is None:
            return None
        return (credential.refresh_token, credential.status, credential.authorized_at)

    def after(self, step: Step) -> Violation | None:
        poller = step.actor.startswith(POLLER) or self.polling
        pending = self.lw.world.refresh_document().pending
        code = None if pending is None else pending.device_code
        if code is not None and code != self.pending_code:
            self.shown_to_someone = True
            serial = self.scenario.links.get(step.actor, self.pressing)
            if serial is not None:
                self.starts[serial] += 1
                self.unrecorded[step.actor] = serial
                if self.starts[serial] > 1 + self.restarts_allowed[serial]:
                    return Violation(
                        "L1", step.number, f"link {serial} started a second authorization"
                    )
        self.pending_code = code
        if step.action == "secretsmanager.PutSecretValue:service-token" and not poller:
            return Violation("L2", step.number, f"{step.actor} wrote the service token")
        current = self._credential()
        if current != self.credential:
            if not poller:
                return Violation("L2", step.number, f"{step.actor} changed the credential")
            self.credential = current
        if step.action == "upstream.device_token" and step.status == 200:
            self.approved_by.add(step.actor)
        elif step.action == "upstream.device_token" and self.approved_by - {step.actor}:
            # the code was refused to a poll because another consumed it: that poll may
            # report a failure next to the other's "authorized" (documented)
            self.consumed_race = True
        if step.action.startswith("sns.Publish") and step.status == 200:
            self.published_by[step.actor] += 1
        if step.action.startswith("dynamodb.UpdateItem:link#") and step.status == 200:
            self.unrecorded.pop(step.actor, None)  # the start is recorded with the link
        if step.action == "crash" and step.actor in self.unrecorded:
            # died between starting and recording it: the link may start once more, after
            # the authorization it started ends (documented)
            self.restarts_allowed[self.unrecorded.pop(step.actor)] += 1
        failed = step.action == "crash" or (
            step.action.startswith(("dynamodb.", "sns.")) and (step.status or 200) >= 400
        )
        if failed and self.published_by[step.actor] and step.actor not in self.failed_after:
            self.failed_after.add(step.actor)  # sent, then died or failed before recording it
            self.duplicates_allowed += 1
        return None

    def before_recovery(self, harness: LinksHarness) -> None:
        """Every started page shows the user code the bootstrap keeps pending (and polls)."""
        for actor in harness.actors:
            if actor.name in self.scenario.links:
                self.shown(actor.name, actor.result)
        pending = self.lw.world.refresh_document().pending
        live = pending is not None and pending.expires_at > self.lw.world.clock.now()
        self.stored_code = pending.user_code if live and pending is not None else None
        for name, code in self.shown_codes.items():
            if code != self.stored_code and harness.violation is None:
                harness.violation = Violation(
                    "L3",
                    len(harness.steps),
                    f"{name}'s page shows {code}, but the bootstrap polls "
                    f"{self.stored_code or 'nothing'}",
                )

    def shown(self, actor: str, answer: Any) -> None:
        code = user_code_of(answer)
        if code is not None:
            self.shown_codes[actor] = code

    def report(self, answer: Any) -> Any:
        self.outcomes.append(answer)
        return answer

    def final(self, number: int) -> Violation | None:
        facts = notices(self.lw.topic)
        kinds = Counter(f["kind"] for f in facts)
        needs = sum(kinds[k] for k in NEEDS)
        ends = {k: n for k, n in kinds.items() if k in ENDINGS}
        authorized = self._credential() != self.initial
        if authorized:
            if kinds["authorized"] < 1:
                return Violation("L4", number, "the approval's outcome was never reported")
            if kinds["authorized"] > 1 + self.duplicates_allowed:
                return Violation("L4", number, f"'authorized' reported {kinds['authorized']} times")
            told = set(ends) - {"authorized"} - ({"failed"} if self.consumed_race else set())
            if told:
                return Violation("L4", number, f"an authorized stack was also told {ends}")
        elif self.shown_to_someone and not ends:
            return Violation("L4", number, "an authorization ended and nobody was told")
        elif self.scenario.name == "two reminders" and needs < 2:
            # one on the day, one the day after: the need lasted
            return Violation("L5", number, f"the need was notified {needs} times in two days")
        day_one = sum(1 for f in facts[: self.day_one] if f["kind"] in NEEDS)
        if day_one > 1 + self.duplicates_allowed:
            return Violation("L5", number, f"the need was notified {day_one} times in one day")
        return None


# --- one schedule, and the exploration ---------------------------------------------------------


def run_schedule(
    scenario: Scenario,
    approve: bool,
    bounds: Bounds,
    decide: Decide,
    *,
    states: set[int] | None = None,
) -> LinksHarness:
    """One schedule: the refused stack, the links sent, the actors, the recovery."""
    harness = LinksHarness(decide, bounds)
    harness.states = states
    harness.world = world = harness.new_world()  # the setup's calls pass it too (unscheduled)
    world.seed()
    world.clock.advance(19 * HOUR)  # the service token is due
    world.identity.tokens[world.newest_refresh_token()].family.revoked = True
    with contextlib.suppress(ReauthorizationRequiredError):  # marks the credential refused
        world.rotator("setup").run(SCHEDULED, deadline=world.clock.now() + DEADLINE_SECONDS)
    assert world.refresh_document().credential.status == STATUS_REAUTHORIZATION_REQUIRED  # type: ignore[union-attr]
    lw = new_links_world(world, harness, LambdaModel(world, harness))
    harness.links_world = lw
    lw.sent = {serial: lw.link(serial) for serial in set(scenario.links.values()) or {1}}
    if scenario.name in ("outcome and reminder", "two polls"):  # link 1 started it
        started = world.bootstrap("start", via_links=True, link=_tag(lw, 1))
        world.identity.approve(started["user_code"])
        world.clock.advance(5)
    checker = LinksChecker(lw, scenario, approve)
    harness.attach(world, cast(Any, checker))
    checker.start()
    for name in scenario.actors:
        harness.spawn(name, _actor_body(lw, scenario, name), _summary)
    with mock.patch.object(portal, "secrets", SeededSecrets):
        harness.run()
        if not harness.abandoned and harness.violation is None:
            seed_jitter("recovery", 0)
            harness.recover(world.clock.now() + DEADLINE_SECONDS)
    return harness


class SeededSecrets:
    """``secrets`` for the links' code while explored: its press ids and link nonces drawn from
    ``random``, which the harness seeds by the actor and its own step number, so that they are a
    function of the actors' histories: a replayed prefix draws the same ones, and two schedules
    that reach one state hold the same (with ``secrets``, a state was met again only by chance,
    and the fingerprints of one state differed from run to run)."""

    @staticmethod
    def token_hex(nbytes: int) -> str:
        return random.randbytes(nbytes).hex()

    @staticmethod
    def token_bytes(nbytes: int) -> bytes:
        return random.randbytes(nbytes)


def _tag(lw: LinksWorld, serial: int) -> str:
    """The tag of the link with ``serial`` the stack sent."""
    now = int(lw.world.clock.now())
    claims = tokens.check(lw.sent[serial], KEY_TEXT.encode(), expected(lw.binding()), now)
    assert isinstance(claims, tokens.Claims)
    return tokens.tag(claims)


def _actor_body(lw: LinksWorld, scenario: Scenario, name: str) -> Callable[[], Any]:
    if name in scenario.links:
        link = lw.link_of(scenario.links[name])
        return lambda: lw.press(link)
    if name.startswith(POLLER):
        return lambda: lw.poll_and_report(name, _tag(lw, 1))
    return lambda: lw.remind(name.removeprefix("remind-"))


def explore(name: str, approve: bool, bounds: Bounds, *, prune: bool = True) -> Report:
    """Every schedule of scenario ``name`` within ``bounds``; stops at the first
    counterexample. ``prune``: at states explored before (``simulation.search``)."""
    scenario = SCENARIO[name]
    person = "approves" if approve else "never approves"
    return search(
        Report(f"links: {name} (the person {person})", bounds),
        lambda decide, states: run_schedule(scenario, approve, bounds, decide, states=states),
        f"a refused credential, links sent; {', '.join(scenario.actors)} start",
        prune=prune,
    )
