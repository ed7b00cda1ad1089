"""The line of ``cmstoken-admin status`` about the stack's alarms in ALARM
(``cloudwatch:DescribeAlarms``)."""

from __future__ import annotations

import re
from typing import Any

from cmstoken.cli.admin.errors import Call, explain
from cmstoken.cli.admin.stack import DeployedStack
from cmstoken.cli.admin.status_lines import Line, unreadable


def alarms(stack: DeployedStack, cloudwatch: Any) -> Line:
    """The stack's alarms (named ``STACK-...``, in its namespace or notifying its topic)
    that are in ALARM; the heartbeat, which has no actions, is RotatorSilentAlarm's input."""
    from botocore.exceptions import BotoCoreError, ClientError

    prefix = f"{stack.name}-"
    resource = f"arn:aws:cloudwatch:{stack.region}:{stack.account or '*'}:alarm:*"
    try:
        found = _describe_alarms(cloudwatch, prefix)
    except (BotoCoreError, ClientError) as exc:
        call = Call("cloudwatch:DescribeAlarms", resource, stack.where)
        return unreadable("alarms", explain(exc, call))
    topic = stack.outputs.get("AlarmTopicArn")
    namespace = stack.outputs.get("MetricsNamespace", f"CmsToken/{stack.name}")
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


def _describe_alarms(cloudwatch: Any, prefix: str) -> list[dict[str, Any]]:
    collected: list[dict[str, Any]] = []
    request: dict[str, Any] = {
        "AlarmNamePrefix": prefix,
        "AlarmTypes": ["MetricAlarm", "CompositeAlarm"],
    }
    while True:
        answer = cloudwatch.describe_alarms(**request)
        collected += answer.get("MetricAlarms", []) + answer.get("CompositeAlarms", [])
        if not answer.get("NextToken"):
            return collected
        request["NextToken"] = answer["NextToken"]


def _short_alarm_name(name: str, prefix: str) -> str:
    """``STACK-AuthorizationRequiredAlarm-1A2B3C`` (CloudFormation's naming) as its logical
    name, ``AuthorizationRequiredAlarm``; any other name as it is."""
    found = re.fullmatch(rf"{re.escape(prefix)}(\w+?)-[A-Za-z0-9]+", name)
    return found.group(1) if found else name
