"""AWS and upstream calls per run against moto's server and the emulator: the stack bootstrapped
through the operator command's code, then a scheduled no-op check and a due rotation, counted
(botocore ``before-call`` events; the emulator's counts) against their budgets."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
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

from .report import Report

NOOP_AWS_CALLS = 1
# Read the published token and the credential; claim, store the rotation, publish; announce it.
ROTATION_AWS_CALLS = {"GetSecretValue": 2, "PutSecretValue": 3, "EventBridge:PutEvents": 1}
ROTATION_UPSTREAM_CALLS = {"refresh": 1, "exchange": 1, "projects": 1}
HOURS_FORWARD = 19


class AwsCalls:
    """Counts boto3 API calls (not HTTP attempts) by operation, from ``before-call`` events."""

    UNIQUE_ID = "cmstoken-bench-aws-calls"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def attach(self, events: Any) -> None:
        """Hook an event emitter (a session's, inherited by its later clients, or a client's).
        The unique id makes a second attach to an emitter that inherited the hook a no-op."""
        events.register("before-call", self, unique_id=self.UNIQUE_ID)

    def __call__(self, model: Any, **_: Any) -> None:
        service = model.service_model.service_id
        self.calls[model.name if service == "Secrets Manager" else f"{service}:{model.name}"] += 1


@dataclass(frozen=True)
class Run:
    outcome: str
    aws: Counter[str]
    upstream: Counter[str]


def measure_calls(report: Report, after_bootstrap: Callable[[Any, str], None]) -> None:
    """``after_bootstrap(emulator, aws_endpoint)`` runs once the stack is bootstrapped, before
    the counted runs (the emulator's clock has not moved yet)."""
    with local_servers() as (emulator, aws_endpoint):
        configure_environment(emulator, aws_endpoint)
        noop, rotation = run_stack(emulator, lambda: after_bootstrap(emulator, aws_endpoint))
    report_calls(report, noop, rotation)


def report_calls(report: Report, noop: Run, rotation: Run) -> None:
    """The no-op check's calls (exact budgets) and the due rotation's (at most)."""
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


def describe(calls: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(calls.items())) or "none"


def run_stack(emulator: Any, after_bootstrap: Callable[[], None]) -> tuple[Run, Run]:
    """Bootstrap the stack, then count a scheduled no-op check and a due rotation."""
    import boto3

    from cmstoken import runtime
    from cmstoken.cli.admin.bootstrap import bootstrap
    from cmstoken.cli.admin.stack import StackFunctions

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
    try:
        bootstrap(invoker, functions, free_trial=None, out=io.StringIO(), now=clock.now)
        after_bootstrap()

        def scheduled_run() -> Run:
            counter.calls.clear()
            before = Counter(emulator.counts)
            result = invoker.invoke(ROTATOR, {})
            upstream = Counter(emulator.counts)
            upstream.subtract(before)
            return Run(str(result.get("outcome")), Counter(counter.calls), +upstream)

        noop = scheduled_run()
        emulator.advance(HOURS_FORWARD * 3600)
        rotation = scheduled_run()
    finally:
        runtime.reset()
    return noop, rotation
