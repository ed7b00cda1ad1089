"""``cmstoken-admin status``: whether the stack is healthy, in one report.

Each line comes from one source, read with one permission:

======================  =====================================  ================================
line                    source                                 permission
======================  =====================================  ================================
stack, version          the stack's outputs and parameters     cloudformation:DescribeStacks
credential, token       the bootstrap function's ``status``    lambda:InvokeFunction
last run                the rotator's outcome metrics          cloudwatch:GetMetricData
next run                the schedule ``STACK-rotator``         scheduler:GetSchedule
alarms                  the stack's alarms (``STACK-*``)       cloudwatch:DescribeAlarms
======================  =====================================  ================================

A line whose source cannot be read says so ("not readable (cloudwatch:DescribeAlarms denied)")
instead of failing the command; the stack cannot then be shown healthy, so the verdict is
"needs attention" (exit 1) and names what to grant. Only metadata is read and printed: never a
token, a device code or a user code.

This module puts the report together and prints it; the lines come from
``status_credential`` (the bootstrap function), ``status_rotator`` (the last and
next run), ``status_alarms`` and ``version_line`` (here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from cmstoken import __version__
from cmstoken.cli.admin.invokers import Invoker
from cmstoken.cli.admin.stack import DeployedStack, StackFunctions
from cmstoken.cli.admin.status_alarms import alarms
from cmstoken.cli.admin.status_credential import credential_lines
from cmstoken.cli.admin.status_lines import Line
from cmstoken.cli.admin.status_rotator import last_run, next_run
from cmstoken.cli.console import EXIT_FAILURE, EXIT_OK, shown


@dataclass
class StatusSources:
    """Where ``status`` reads what the functions do not report: the stack's description and
    CloudWatch and EventBridge Scheduler clients in its account and region."""

    stack: DeployedStack
    cloudwatch: Any
    scheduler: Any


def status(
    invoker: Invoker,
    functions: StackFunctions,
    *,
    out: TextIO,
    sources: StatusSources | None = None,
    as_json: bool = False,
    now: Callable[[], float] | None = None,
) -> int:
    """Print the stack's health (text, or one JSON object); 0 when healthy, 1 otherwise.
    Without ``sources`` (a local stack) only what the bootstrap function reports is checked."""
    at = (now or time.time)()
    lines = credential_lines(invoker, functions, sources.stack if sources else None, at)
    if sources is not None:
        last = last_run(sources.stack, sources.cloudwatch, at)
        lines += [last, next_run(sources.stack, sources.scheduler, last.data.get("at"), at)]
        lines += [alarms(sources.stack, sources.cloudwatch), version_line(sources.stack)]
    problems = [problem for line in lines for problem in line.problems]
    verdict = "healthy" if not problems else "needs attention"
    stack = sources.stack if sources else None
    if as_json:
        out.write(json.dumps(_document(lines, verdict, problems, stack), indent=2) + "\n")
    else:
        out.write(_text(lines, verdict, problems, stack))
    return EXIT_OK if not problems else EXIT_FAILURE


def _document(
    lines: list[Line], verdict: str, problems: list[str], stack: DeployedStack | None
) -> dict[str, Any]:
    """The report as ``--json`` prints it."""
    document: dict[str, Any] = {"verdict": verdict, "healthy": not problems}
    if stack is not None:
        document.update(stack=stack.name, region=stack.region, account=stack.account)
    document.update({line.name: line.data for line in lines})
    document["problems"] = problems
    return document


def _text(lines: list[Line], verdict: str, problems: list[str], stack: DeployedStack | None) -> str:
    """The report as a table of names and texts, made printable, ending in the verdict."""
    rows = [(line.name.replace("_", " "), line.text) for line in lines]
    if stack is not None:
        rows.insert(0, ("stack", f"{stack.name} ({stack.where})"))
    rows.append(("verdict", verdict + (": " + "; ".join(problems) if problems else "")))
    width = max(len(name) for name, _ in rows)
    return "".join(f"{name:<{width}}  {shown(text)}\n" for name, text in rows)


def version_line(stack: DeployedStack) -> Line:
    """The release the stack runs (its ``Version`` output) against this command's."""
    deployed = stack.outputs.get("Version")
    matches = deployed == __version__
    data = {"stack": deployed, "cmstoken_admin": __version__, "matches": matches}
    text = f"stack {deployed or 'unknown'}, cmstoken-admin {__version__}"
    if matches:
        return Line("version", text, data)
    problem = (
        f"the stack runs {deployed}, this cmstoken-admin is {__version__}: deploy this "
        f"release, or use cmstoken-admin {deployed}"
        if deployed
        else "the stack has no Version output (an older release): deploy this release"
    )
    return Line("version", text, data, [problem])
