"""The lines of ``cmstoken-admin status`` about the rotator's runs: the last one, from its
outcome metrics (``cloudwatch:GetMetricData``), and the next one, from its schedule
(``scheduler:GetSchedule``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from cmstoken.cli.admin.errors import Call, explain
from cmstoken.cli.admin.stack import DeployedStack
from cmstoken.cli.admin.status_lines import Line, command, relative, setting, unreadable
from cmstoken.core.clock import parse_iso, to_iso

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
_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")


def last_run(stack: DeployedStack, cloudwatch: Any, now: float) -> Line:
    """The latest minute in which the rotator reported an outcome, and the last good one."""
    from botocore.exceptions import BotoCoreError, ClientError

    namespace = stack.outputs.get("MetricsNamespace", f"CmsToken/{stack.name}")
    try:
        minutes = _outcomes_by_minute(cloudwatch, namespace, now)
    except (BotoCoreError, ClientError) as exc:
        call = Call("cloudwatch:GetMetricData", namespace, stack.where)
        return unreadable("last_run", explain(exc, call))
    interval = setting(stack, "RotationIntervalMinutes") * 60
    log_group = f"/cmstoken/{stack.name}/rotator"
    if not minutes:
        return _none_reported(stack, now, interval, log_group)
    at = max(minutes)
    outcome = next(name for name in OUTCOMES.values() if name in minutes[at])
    good = [minute for minute, names in minutes.items() if set(names) & set(GOOD_OUTCOMES)]
    data: dict[str, Any] = {
        "at": to_iso(at),
        "outcome": outcome,
        "last_good_at": to_iso(max(good)) if good else None,
    }
    text = f"{outcome} at {to_iso(at)} ({relative(at - now)})"
    if outcome not in GOOD_OUTCOMES and good:
        text += f"; last good run {to_iso(max(good))}"
    problems = []
    if outcome == "failed":
        problems.append(
            f"the last rotator run failed: read {log_group}, then `{command(stack)} rotate`"
        )
    if now - at > 2 * interval + REPORTING_DELAY_SECONDS:
        problems.append(
            f"no rotator run for {relative(at - now, ago=False)} (it runs every "
            f"{interval / 60:.0f} min): check the schedule {stack.name}-rotator and "
            f"{log_group}"
        )
    return Line("last_run", text, data, problems)


def _none_reported(stack: DeployedStack, now: float, interval: float, log_group: str) -> Line:
    """No outcome in 24 hours: a problem unless the stack is younger than its first run."""
    created = stack.created_at
    young = created is not None and now - created < interval + REPORTING_DELAY_SECONDS
    problems = (
        []
        if young
        else [
            f"no rotator run reported in 24 h: check the schedule {stack.name}-rotator"
            f" and {log_group}, then `{command(stack)} rotate`"
        ]
    )
    return Line("last_run", "none reported in 24 h", {"at": None, "outcome": None}, problems)


def next_run(stack: DeployedStack, scheduler: Any, last_run_at: str | None, now: float) -> Line:
    """When the schedule runs the rotator next (about: rate schedules count from their
    start), and whether it is enabled."""
    from botocore.exceptions import BotoCoreError, ClientError

    name = f"{stack.name}-rotator"
    interval = setting(stack, "RotationIntervalMinutes") * 60
    try:
        schedule = scheduler.get_schedule(Name=name)
    except (BotoCoreError, ClientError) as exc:
        arn = f"arn:aws:scheduler:{stack.region}:{stack.account or '*'}:schedule/default/{name}"
        failure = explain(exc, Call("scheduler:GetSchedule", arn, stack.where))
        line = unreadable("next_run", failure)
        if "not found" in failure.short:
            line.problems = [f"the schedule {name} does not exist: deploy the stack again"]
        if last_run_at is not None:
            guess = parse_iso(last_run_at) + interval
            line.text += f"; about {to_iso(guess)} (the last run + {interval / 60:.0f} min)"
            line.data["at"] = to_iso(guess)
        return line
    expression = str(schedule.get("ScheduleExpression", ""))
    state = str(schedule.get("State", ""))
    data: dict[str, Any] = {"schedule": name, "expression": expression, "state": state}
    text = f"{expression}, {state.lower() or 'state unknown'}"
    due = _due(expression, schedule, now) if state == "ENABLED" else None
    if due is not None:
        data["at"] = to_iso(due)
        text = f"about {to_iso(due)} ({relative(due - now)}); {text}"
    problems = []
    if state != "ENABLED":
        # Deploying the same template again changes nothing: CloudFormation updates only what
        # the template changes, and the schedule's state is not in it.
        problems.append(
            f"the schedule {name} is {state.lower() or 'not enabled'}: nothing runs the "
            "rotator, and deploying the stack again does not enable it; enable it with aws "
            "scheduler update-schedule (its own settings, State ENABLED), then run "
            f"`{command(stack)} rotate`"
        )
    return Line("next_run", text, data, problems)


def _due(expression: str, schedule: Any, now: float) -> float | None:
    """When a rate schedule next runs, counted from its start (``None``: not a rate)."""
    rate = _RATE.fullmatch(expression)
    if not rate:
        return None
    every = int(rate.group(1)) * {"m": 60, "h": 3600, "d": 86400}[rate.group(2)[0]]
    start = [schedule.get(k) for k in ("StartDate", "LastModificationDate", "CreationDate")]
    anchor = next((s.timestamp() for s in start if isinstance(s, datetime)), now)
    return anchor + max(0, -(-(now - anchor) // every)) * every


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
