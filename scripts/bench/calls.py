"""AWS and upstream calls per run against moto's server and the emulator: the stack bootstrapped
through the operator command's code, then a scheduled no-op check and a due rotation, and the
links function's reminders and a link's page, counted (botocore ``before-call`` events; the
emulator's counts) against their budgets."""

from __future__ import annotations

import io
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from local_stack import (
    BOOTSTRAP,
    ROTATOR,
    ApprovingInvoker,
    EmulatorTime,
    configure_environment,
    create_secrets,
    local_servers,
)

from .links import LINKS, LinksSite, links_site
from .probe import is_link_page
from .report import Report

NOOP_AWS_CALLS = 1
# Read the published token and the credential; count the credential's versions (the version
# budget); claim, store the rotation, publish; announce it. The count is the one call more than
# the reads and writes: no answer to a read carries the versions' dates, and a tally kept in
# the document would miss the versions written by anything but this stack's code (a person, an
# older release), which the quota counts all the same (docs/how-rotation-works.md, "The version
# budget").
ROTATION_AWS_CALLS = {
    "GetSecretValue": 2,
    "ListSecretVersionIds": 1,
    "PutSecretValue": 3,
    "EventBridge:PutEvents": 1,
}
ROTATION_UPSTREAM_CALLS = {"refresh": 1, "exchange": 1, "projects": 1}
HOURS_FORWARD = 19
# The links function, each run in a fresh container (as a daily reminder and a link's page
# nearly always are). A link's page (GET): the signing key, the stack's status (the bootstrap),
# whether the link was used.
PAGE_AWS_CALLS = {"GetSecretValue": 1, "Lambda:Invoke": 1, "DynamoDB:GetItem": 1}
# A reminder that sends (never bootstrapped; a refused or an aging credential make the same
# calls): the function's own URL (for the link), the stack's status, the day's claim and its
# record as sent, the signing key, the notice.
REMINDER_AWS_CALLS = {
    "Lambda:GetFunctionUrlConfig": 1,
    "Lambda:Invoke": 1,
    "DynamoDB:UpdateItem": 2,
    "GetSecretValue": 1,
    "SNS:Publish": 1,
}
# The daily reminder of a healthy stack: its URL (looked up before the status says that no link
# is needed), then the stack's status (nothing needed).
IDLE_REMINDER_AWS_CALLS = {"Lambda:Invoke": 1}  # its own URL is looked up only for a link
# The outcomes the links runs must have: the link's page shown, the reminder sent, nothing.
PAGE = "200: the link's page"
REMINDER_SENT = "not_bootstrapped: sent"
NOTHING_NEEDED = "nothing needed"
# The bootstrap's status, behind each of the links' Invoke (its own calls, not the links').
STATUS_AWS_CALLS = {"GetSecretValue": 2}


class AwsCalls:
    """Counts boto3 API calls (not HTTP attempts) by operation, from ``before-call`` events:
    in ``calls`` those made on the thread that created the counter, in ``elsewhere`` those
    made on other threads (the local Lambda API runs the bootstrap on its own threads)."""

    UNIQUE_ID = "cmstoken-bench-aws-calls"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.elsewhere: Counter[str] = Counter()
        self.thread = threading.get_ident()
        self.lock = threading.Lock()

    def attach(self, events: Any) -> None:
        """Hook an event emitter (a session's, inherited by its later clients, or a client's).
        The unique id makes a second attach to an emitter that inherited the hook a no-op."""
        events.register("before-call", self, unique_id=self.UNIQUE_ID)

    def clear(self) -> None:
        with self.lock:
            self.calls.clear()
            self.elsewhere.clear()

    def __call__(self, model: Any, **_: Any) -> None:
        service = model.service_model.service_id
        name = model.name if service == "Secrets Manager" else f"{service}:{model.name}"
        with self.lock:
            counted = self.calls if threading.get_ident() == self.thread else self.elsewhere
            counted[name] += 1


@dataclass(frozen=True)
class Run:
    outcome: str
    aws: Counter[str]
    upstream: Counter[str]
    behind: Counter[str] = field(default_factory=Counter)  # on other threads: the bootstrap's


@dataclass(frozen=True)
class Runs:
    noop: Run
    rotation: Run
    reminder: Run  # a reminder that sends (never bootstrapped)
    page: Run  # a link's page (GET), bootstrapped
    idle_reminder: Run  # a reminder with nothing needed, bootstrapped


def measure_calls(report: Report, after_bootstrap: Callable[[Any, str, LinksSite], None]) -> None:
    """``after_bootstrap(emulator, aws_endpoint, links)`` runs once the stack is bootstrapped
    and ``links.page`` is a link's page, before the counted runs of the rotator (the
    emulator's clock has not moved yet)."""
    with local_servers() as (emulator, aws_endpoint):
        configure_environment(emulator, aws_endpoint)
        runs = run_stack(emulator, lambda links: after_bootstrap(emulator, aws_endpoint, links))
    report_calls(report, runs)


def report_calls(report: Report, runs: Runs) -> None:
    """The no-op check's calls (exact budgets), the due rotation's (at most), and the links
    function's (exact)."""
    noop, rotation = runs.noop, runs.rotation
    aws_total = sum(noop.aws.values())
    upstream_total = sum(noop.upstream.values())
    report.add(
        f"scheduled no-op check ({noop.outcome}): AWS calls",
        f"{aws_total} ({describe(noop.aws)})",
        f"= {NOOP_AWS_CALLS}",
        aws_total == NOOP_AWS_CALLS and noop.outcome == "skipped",
    )
    report.add(
        f"scheduled no-op check ({noop.outcome}): upstream calls",
        f"{upstream_total} ({describe(noop.upstream)})",
        "= 0",
        upstream_total == 0 and noop.outcome == "skipped",
    )
    for kind, counted, budget in (
        ("AWS", rotation.aws, ROTATION_AWS_CALLS),
        ("upstream", rotation.upstream, ROTATION_UPSTREAM_CALLS),
    ):
        within = all(count <= budget.get(name, 0) for name, count in counted.items())
        report.add(
            f"due rotation after +{HOURS_FORWARD} h ({rotation.outcome}): {kind} calls",
            f"{sum(counted.values())} ({describe(counted)})",
            "<= " + ", ".join(f"{name} {count}" for name, count in budget.items()),
            within and rotation.outcome == "rotated",
        )
    report_links_calls(report, runs)


def report_links_calls(report: Report, runs: Runs) -> None:
    """Each links run's own AWS calls and, behind each of its ``Invoke``, the bootstrap's
    status's (exact budgets), and no upstream call in any."""
    for what, run, budget, expected in (
        ("a link's page, GET", runs.page, PAGE_AWS_CALLS, PAGE),
        ("reminder, never bootstrapped", runs.reminder, REMINDER_AWS_CALLS, REMINDER_SENT),
        ("reminder, healthy stack", runs.idle_reminder, IDLE_REMINDER_AWS_CALLS, NOTHING_NEEDED),
    ):
        invokes = run.aws["Lambda:Invoke"]
        behind = Counter({name: count * invokes for name, count in STATUS_AWS_CALLS.items()})
        report.add(
            f"links: {what} ({run.outcome}): AWS calls",
            f"{sum(run.aws.values())} ({describe(run.aws)}); "
            f"the bootstrap's behind it: {describe(run.behind)}",
            f"= {describe(budget)}; behind it: {describe(behind)}",
            run.aws == Counter(budget) and run.behind == behind and run.outcome == expected,
        )
    upstream = sum(
        (run.upstream for run in (runs.reminder, runs.page, runs.idle_reminder)), Counter()
    )
    report.add(
        "links: the page and both reminders: upstream calls",
        f"{sum(upstream.values())} ({describe(upstream)})",
        "= 0",
        not upstream,
    )


def describe(calls: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(calls.items())) or "none"


def run_stack(emulator: Any, after_bootstrap: Callable[[LinksSite], None]) -> Runs:
    """Bootstrap the stack, with the links function beside it; count a reminder before the
    bootstrap, a link's page and a reminder after it, then a scheduled no-op check and a due
    rotation."""
    import boto3

    from cmstoken import runtime
    from cmstoken.cli.admin.bootstrap import bootstrap
    from cmstoken.cli.admin.stack import StackFunctions
    from cmstoken.links.stack_state import read_status

    counter = AwsCalls()
    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    # Every client the functions create through boto3's default session inherits the hook.
    counter.attach(boto3.DEFAULT_SESSION.events)
    # Its own session: setting up is not counted.
    create_secrets(boto3.session.Session().client("secretsmanager"))

    clock = EmulatorTime(emulator, real_waits=False)
    runtime.CLOCK = clock  # type: ignore[assignment]
    runtime.reset()
    counter.attach(runtime.store().client.meta.events)  # a no-op unless created elsewhere
    invoker = ApprovingInvoker(clock, lambda started: emulator.approve(started["user_code"]))
    functions = StackFunctions(bootstrap=BOOTSTRAP, rotator=ROTATOR)

    def counted(run: Callable[[], str]) -> Run:
        counter.clear()
        before = Counter(emulator.counts)
        outcome = run()
        upstream = Counter(emulator.counts)
        upstream.subtract(before)
        return Run(outcome, Counter(counter.calls), +upstream, Counter(counter.elsewhere))

    def links_run(links: LinksSite, event: dict[str, Any]) -> Callable[[], str]:
        def run() -> str:
            runtime.reset()  # a fresh container: no settings, clients or URL cached
            answer = links.local.invoker.invoke(LINKS, event)
            if "statusCode" in answer:
                return PAGE if is_link_page(answer) else f"status {answer['statusCode']}"
            return str(answer.get("done"))

        return run

    try:
        with links_site(invoker.local.handlers[BOOTSTRAP], clock.now) as links:
            reminder = counted(links_run(links, {"action": "remind"}))
            bootstrap(invoker, functions, free_trial=None, out=io.StringIO(), now=clock.now)
            binding = read_status(invoker.invoke(BOOTSTRAP, {"action": "status"})).binding
            links.page = links.page_event(links.link(binding, int(clock.now())))
            page = counted(links_run(links, links.page))
            idle_reminder = counted(links_run(links, {"action": "remind"}))
            after_bootstrap(links)

        def scheduled_run() -> str:
            return str(invoker.invoke(ROTATOR, {}).get("outcome"))

        noop = counted(scheduled_run)
        emulator.advance(HOURS_FORWARD * 3600)
        rotation = counted(scheduled_run)
    finally:
        runtime.reset()
    return Runs(noop, rotation, reminder, page, idle_reminder)
