"""The alarms a person is paged by agree everywhere they are listed: the template's alarms
with actions, the README's 'Operate' table, and the local stack's (`make demo KEEP=1`), whose
``cmstoken-admin status`` counts them as watched (it counted five against the README's six:
the composite RotatorSilentAlarm was missing; a metric alarm stands in for it there, as
moto implements no composite alarm).
The local stack's are the template's own, resolved (scripts/local_aws.py)."""

from __future__ import annotations

import re
from pathlib import Path

from local_aws import LocalAlarms
from template_model import of_type, source

ROOT = Path(__file__).resolve().parents[2]


def template_alarms_with_actions() -> set[str]:
    resources = source()["Resources"]
    alarms = {**of_type(resources, "AWS::CloudWatch::Alarm")}
    alarms.update(of_type(resources, "AWS::CloudWatch::CompositeAlarm"))
    return {name for name, alarm in alarms.items() if alarm["Properties"].get("AlarmActions")}


def readme_alarms() -> set[str]:
    return set(re.findall(r"^\| \[`(\w+Alarm)`\]", (ROOT / "README.md").read_text(), re.M))


def test_the_readme_lists_the_templates_alarms_with_actions() -> None:
    assert len(template_alarms_with_actions()) == 6
    assert readme_alarms() == template_alarms_with_actions()


def test_the_local_stack_watches_the_same_alarms() -> None:
    """The local stack's alarms are the template's (the composite one as a metric alarm)."""
    alarms = LocalAlarms("cmstoken-local", "CmsToken/cmstoken-local", 5)
    paging = {name for name, p in alarms.metric.items() if p.get("AlarmActions")}
    assert paging | set(alarms.composite) == template_alarms_with_actions()
    resources = source()["Resources"]
    assert {*alarms.metric, *alarms.composite} == set(
        of_type(resources, "AWS::CloudWatch::Alarm")
    ) | set(of_type(resources, "AWS::CloudWatch::CompositeAlarm"))
