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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from cmstoken import __version__
from cmstoken.cli.admin_aws import (
    EXIT_FAILED,
    EXIT_OK,
    AdminError,
    Call,
    DeployedStack,
    Invoker,
    StackFunctions,
    explain,
)
from cmstoken.core.clock import parse_iso, to_iso
from cmstoken.core.redaction import printable

# The rotator's outcome counters (exactly one is 1 per run), worst first: the outcome shown
# for a minute that holds several runs.
OUTCOMES = {
    "RotationFailed": "failed",
    "ReauthorizationRequired": "reauthorization required",
    "NotBootstrapped": "not bootstrapped",
    "RotationSucceeded": "rotated",
    "RotationSkipped": "skipped",
}
GOOD_OUTCOMES = ("rotated", "skipped")
LOOKBACK_SECONDS = 24 * 3600
# Metrics reach CloudWatch a minute or two after a run; the schedule runs within its minute.
REPORTING_DELAY_SECONDS = 300
DEFAULTS = {
    "RotationIntervalMinutes": 60.0,
    "ExpiryAlarmThresholdSeconds": 7200.0,
    "ReauthorizationWarningSeconds": 2160000.0,
}
_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")


@dataclass
class StatusSources:
    """Where ``status`` reads what the functions do not report: the stack's description and
    CloudWatch and EventBridge Scheduler clients in its account and region."""

    stack: DeployedStack
    cloudwatch: Any
    scheduler: Any


@dataclass
class Line:
    """One line of the report: its text, its data for ``--json``, and what needs attention."""

    name: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


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
    import time

    at = (now or time.time)()
    report = Report(sources.stack if sources else None, at)
    lines = report.credential(invoker, functions)
    if sources is not None:
        last = report.last_run(sources.cloudwatch)
        lines += [last, report.next_run(sources.scheduler, last.data.get("at"))]
        lines += [report.alarms(sources.cloudwatch), version_line(sources.stack)]
    problems = [problem for line in lines for problem in line.problems]
    verdict = "healthy" if not problems else "needs attention"
    if as_json:
        document: dict[str, Any] = {"verdict": verdict, "healthy": not problems}
        if sources is not None:
            where = sources.stack
            document.update(stack=where.name, region=where.region, account=where.account)
        document.update({line.name: line.data for line in lines})
        document["problems"] = problems
        out.write(json.dumps(document, indent=2) + "\n")
    else:
        rows = [(line.name.replace("_", " "), line.text) for line in lines]
        if sources is not None:
            rows.insert(0, ("stack", f"{sources.stack.name} ({sources.stack.where})"))
        rows.append(("verdict", verdict + (": " + "; ".join(problems) if problems else "")))
        width = max(len(name) for name, _ in rows)
        for name, text in rows:
            out.write(f"{name:<{width}}  {printable(text)}\n")
    return EXIT_OK if not problems else EXIT_FAILED


class Report:
    """The report's lines, each from one source; a source that cannot be read makes its line
    say so, with what to do."""

    def __init__(self, stack: DeployedStack | None, now: float) -> None:
        self.stack = stack
        self.now = now
        name = stack.name if stack else "NAME"
        self.command = f"cmstoken-admin --stack {name}"

    def _number(self, parameter: str) -> float:
        default = DEFAULTS[parameter]
        return self.stack.number(parameter, default) if self.stack else default

    def _call(self, action: str, resource: str) -> Call:
        assert self.stack is not None
        return Call(action, resource, self.stack.where)

    # --- the credential and the token (the bootstrap function) ---------------------------------

    def credential(self, invoker: Invoker, functions: StackFunctions) -> list[Line]:
        """The credential, its re-authorization date, a pending authorization (never its code)
        and the published token's expiry."""
        try:
            report = invoker.invoke(functions.bootstrap, {"action": "status"})
        except AdminError as exc:
            unread = {"readable": False, "error": exc.short}
            return [
                Line("credential", f"not readable ({exc.short})", unread, [str(exc)]),
                Line("service_token", "not readable (see credential)", dict(unread)),
            ]
        found = report.get("credential") or {}
        state = str(found.get("status"))
        lines = [self._credential_line(state, found)]
        pending = report.get("pending")
        if isinstance(pending, dict):
            until = str(pending.get("expires_at"))
            lines.append(
                Line(
                    "pending",
                    f"an authorization waits for approval until {until} (its code is shown "
                    f"only to whoever runs `{self.command} bootstrap`)",
                    {"expires_at": until},
                )
            )
        lines.append(self._token_line(found.get("service_token_expires_at"), state))
        return lines

    def _credential_line(self, state: str, found: Mapping[str, Any]) -> Line:
        data: dict[str, Any] = {
            key: found.get(key)
            for key in ("status", "authorized_at", "refreshed_at", "reauthorize_by")
        }
        problems = []
        text = state
        if state == "absent":
            text = "absent: the stack was never authorized"
            problems.append(f"not bootstrapped: run `{self.command} bootstrap`")
        elif state != "active":
            problems.append(
                f"authorization required (the identity provider refused the credential): run "
                f"`{self.command} bootstrap`"
            )
        if found.get("authorized_at"):
            text += f", authorized {found['authorized_at']}, refreshed {found.get('refreshed_at')}"
        reauthorize_by = _epoch(found.get("reauthorize_by"))
        authorized_at = _epoch(found.get("authorized_at"))
        if reauthorize_by is not None:
            days = (reauthorize_by - self.now) / 86400
            data["days_until_reauthorization"] = round(days, 1)
            text += f"; re-authorize by {found['reauthorize_by']} ({_days(days)})"
            warning = self._number("ReauthorizationWarningSeconds")
            aging = authorized_at is not None and 0 < warning <= self.now - authorized_at
            if state == "active" and (days <= 0 or aging):
                problems.append(
                    f"re-authorize by {found['reauthorize_by']} ({_days(days)}): run "
                    f"`{self.command} bootstrap`"
                )
        elif state == "active":
            text += "; no fixed re-authorization date"
        return Line("credential", text, data, problems)

    def _token_line(self, expires: Any, state: str) -> Line:
        expires_at = _epoch(expires)
        if expires_at is None:
            problems = [f"no service token is published: run `{self.command} rotate`"]
            return Line("service_token", "none published", {"expires_at": None}, problems)
        left = expires_at - self.now
        data = {"expires_at": expires, "seconds_left": round(left)}
        problems = []
        if left <= 0:
            problems.append(f"the service token expired at {expires}")
        elif left < self._number("ExpiryAlarmThresholdSeconds") and state == "active":
            problems.append(
                f"the service token expires {_relative(left)}: run `{self.command} rotate`"
            )
        text = f"expires {expires} ({_relative(left)})"
        return Line("service_token", text, data, problems)

    # --- the rotator's runs (CloudWatch metrics) -------------------------------------------------

    def last_run(self, cloudwatch: Any) -> Line:
        """The latest minute in which the rotator reported an outcome, and the last good one."""
        from botocore.exceptions import BotoCoreError, ClientError

        assert self.stack is not None
        namespace = self.stack.outputs.get("MetricsNamespace", f"CmsToken/{self.stack.name}")
        try:
            minutes = _outcomes_by_minute(cloudwatch, namespace, self.now)
        except (BotoCoreError, ClientError) as exc:
            failure = explain(exc, self._call("cloudwatch:GetMetricData", namespace))
            return _unreadable("last_run", failure)
        interval = self._number("RotationIntervalMinutes") * 60
        log_group = f"/cmstoken/{self.stack.name}/rotator"
        if not minutes:
            created = self.stack.created_at
            young = created is not None and self.now - created < interval + REPORTING_DELAY_SECONDS
            problems = (
                []
                if young
                else [
                    f"no rotator run reported in 24 h: check the schedule {self.stack.name}-rotator"
                    f" and {log_group}, then `{self.command} rotate`"
                ]
            )
            return Line(
                "last_run", "none reported in 24 h", {"at": None, "outcome": None}, problems
            )
        at = max(minutes)
        outcome = next(name for name in OUTCOMES.values() if name in minutes[at])
        good = [minute for minute, names in minutes.items() if set(names) & set(GOOD_OUTCOMES)]
        data: dict[str, Any] = {
            "at": to_iso(at),
            "outcome": outcome,
            "last_good_at": to_iso(max(good)) if good else None,
        }
        text = f"{outcome} at {to_iso(at)} ({_relative(at - self.now)})"
        if outcome not in GOOD_OUTCOMES and good:
            text += f"; last good run {to_iso(max(good))}"
        problems = []
        if outcome == "failed":
            problems.append(
                f"the last rotator run failed: read {log_group}, then `{self.command} rotate`"
            )
        if self.now - at > 2 * interval + REPORTING_DELAY_SECONDS:
            problems.append(
                f"no rotator run for {_relative(at - self.now, ago=False)} (it runs every "
                f"{interval / 60:.0f} min): check the schedule {self.stack.name}-rotator and "
                f"{log_group}"
            )
        return Line("last_run", text, data, problems)

    def next_run(self, scheduler: Any, last_run_at: str | None) -> Line:
        """When the schedule runs the rotator next (about: rate schedules count from their
        start), and whether it is enabled."""
        from botocore.exceptions import BotoCoreError, ClientError

        assert self.stack is not None
        name = f"{self.stack.name}-rotator"
        interval = self._number("RotationIntervalMinutes") * 60
        try:
            schedule = scheduler.get_schedule(Name=name)
        except (BotoCoreError, ClientError) as exc:
            arn = (
                f"arn:aws:scheduler:{self.stack.region}:{self.stack.account or '*'}:schedule/"
                f"default/{name}"
            )
            failure = explain(exc, Call("scheduler:GetSchedule", arn, self.stack.where))
            line = _unreadable("next_run", failure)
            if "not found" in failure.short:
                line.problems = [f"the schedule {name} does not exist: deploy the stack again"]
            if last_run_at is not None:
                guess = parse_iso(last_run_at) + interval
                line.text += f"; about {to_iso(guess)} (the last run + {interval / 60:.0f} min)"
                line.data["at"] = to_iso(guess)
            return line
        expression = str(schedule.get("ScheduleExpression", ""))
        state = str(schedule.get("State", ""))
        rate = _RATE.fullmatch(expression)
        data: dict[str, Any] = {"schedule": name, "expression": expression, "state": state}
        text = f"{expression}, {state.lower() or 'state unknown'}"
        if rate and state == "ENABLED":
            every = int(rate.group(1)) * {"m": 60, "h": 3600, "d": 86400}[rate.group(2)[0]]
            start = [schedule.get(k) for k in ("StartDate", "LastModificationDate", "CreationDate")]
            anchor = next((s.timestamp() for s in start if isinstance(s, datetime)), self.now)
            due = anchor + max(0, -(-(self.now - anchor) // every)) * every
            data["at"] = to_iso(due)
            text = f"about {to_iso(due)} ({_relative(due - self.now)}); {text}"
        problems = []
        if state != "ENABLED":
            problems.append(
                f"the schedule {name} is {state.lower() or 'not enabled'}: nothing runs the "
                "rotator; enable it (EventBridge Scheduler) or deploy the stack again"
            )
        return Line("next_run", text, data, problems)

    # --- alarms --------------------------------------------------------------------

    def alarms(self, cloudwatch: Any) -> Line:
        """The stack's alarms (named ``STACK-...``, in its namespace or notifying its topic)
        that are in ALARM; the heartbeat, which has no actions, is RotatorSilentAlarm's input."""
        from botocore.exceptions import BotoCoreError, ClientError

        assert self.stack is not None
        prefix = f"{self.stack.name}-"
        resource = f"arn:aws:cloudwatch:{self.stack.region}:{self.stack.account or '*'}:alarm:*"
        try:
            found = _describe_alarms(cloudwatch, prefix)
        except (BotoCoreError, ClientError) as exc:
            return _unreadable(
                "alarms", explain(exc, self._call("cloudwatch:DescribeAlarms", resource))
            )
        topic = self.stack.outputs.get("AlarmTopicArn")
        namespace = self.stack.outputs.get("MetricsNamespace", f"CmsToken/{self.stack.name}")
        ours = [
            alarm
            for alarm in found
            if alarm.get("Namespace") == namespace or topic in alarm.get("AlarmActions", [])
        ]
        incidents = [alarm for alarm in ours if alarm.get("AlarmActions")]
        firing = sorted(
            _short_alarm_name(alarm["AlarmName"], prefix)
            for alarm in incidents
            if alarm.get("StateValue") == "ALARM"
        )
        data = {"in_alarm": firing, "watched": len(incidents)}
        if not ours:
            problem = f"no alarm named {prefix}* found: deploy the stack again"
            return Line("alarms", f"none found named {prefix}*", data, [problem])
        if not firing:
            return Line("alarms", f"none in ALARM ({len(incidents)} watched)", data)
        problem = (
            f"in ALARM: {', '.join(firing)} (each alarm's description and the README's "
            "'Operate' table say what to do)"
        )
        return Line("alarms", f"in ALARM: {', '.join(firing)}", data, [problem])


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


def _unreadable(name: str, failure: AdminError) -> Line:
    return Line(
        name,
        f"not readable ({failure.short})",
        {"readable": False, "error": failure.short},
        [str(failure)],
    )


def _outcomes_by_minute(cloudwatch: Any, namespace: str, now: float) -> dict[float, list[str]]:
    """The rotator's outcomes in each minute of the last 24 hours that has any."""
    queries = [
        {
            "Id": f"m{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": namespace,
                    "MetricName": metric,
                    "Dimensions": [{"Name": "service", "Value": "cmstoken"}],
                },
                "Period": 60,
                "Stat": "Sum",
            },
        }
        for index, metric in enumerate(OUTCOMES)
    ]
    names = {f"m{index}": name for index, name in enumerate(OUTCOMES.values())}
    # Whole minutes: CloudWatch's periods start at the start time.
    end = datetime.fromtimestamp(now // 60 * 60, tz=UTC) + timedelta(minutes=1)
    request: dict[str, Any] = {
        "MetricDataQueries": queries,
        "StartTime": end - timedelta(seconds=LOOKBACK_SECONDS),
        "EndTime": end,
        "ScanBy": "TimestampDescending",
    }
    minutes: dict[float, list[str]] = {}
    while True:
        answer = cloudwatch.get_metric_data(**request)
        for result in answer.get("MetricDataResults", []):
            for stamp, value in zip(result["Timestamps"], result["Values"], strict=False):
                if value > 0:
                    minute = stamp.timestamp() // 60 * 60
                    minutes.setdefault(minute, []).append(names[result["Id"]])
        if not answer.get("NextToken"):
            return minutes
        request["NextToken"] = answer["NextToken"]


def _describe_alarms(cloudwatch: Any, prefix: str) -> list[dict[str, Any]]:
    alarms: list[dict[str, Any]] = []
    request: dict[str, Any] = {
        "AlarmNamePrefix": prefix,
        "AlarmTypes": ["MetricAlarm", "CompositeAlarm"],
    }
    while True:
        answer = cloudwatch.describe_alarms(**request)
        alarms += answer.get("MetricAlarms", []) + answer.get("CompositeAlarms", [])
        if not answer.get("NextToken"):
            return alarms
        request["NextToken"] = answer["NextToken"]


def _short_alarm_name(name: str, prefix: str) -> str:
    """``STACK-AuthorizationRequiredAlarm-1A2B3C`` (CloudFormation's naming) as its logical
    name, ``AuthorizationRequiredAlarm``; any other name as it is."""
    found = re.fullmatch(rf"{re.escape(prefix)}(\w+?)-[A-Za-z0-9]+", name)
    return found.group(1) if found else name


def _epoch(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_iso(value)
    except ValueError:
        return None


def _relative(seconds: float, *, ago: bool = True) -> str:
    """``in 3 h 12 min`` or ``7 min ago`` (``ago=False``: the bare length)."""
    span = abs(int(seconds))
    hours, minutes = divmod(span // 60, 60)
    length = f"{hours} h {minutes} min" if hours else f"{minutes} min"
    if hours >= 48:
        length = f"{span / 86400:.1f} days"
    if not ago:
        return length
    return f"{length} ago" if seconds < 0 else f"in {length}"


def _days(days: float) -> str:
    return f"in {days:.1f} days" if days >= 0 else f"{-days:.1f} days ago"
