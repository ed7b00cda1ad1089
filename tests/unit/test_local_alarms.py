"""The local stack's alarms (scripts/local_aws.py) follow the metrics its functions emit: the
template's alarms, evaluated with the project's model, their states set in moto, where
`cmstoken-admin status` and `aws cloudwatch describe-alarms` read them (before, they stayed
as created while `status` said that authorization was required)."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from local_aws import LocalAlarms

NAMESPACE = "CmsToken/cmstoken-local"


@pytest.fixture
def alarms(aws_credentials: None) -> Iterator[LocalAlarms]:
    with mock_aws():
        local = LocalAlarms("cmstoken-local", NAMESPACE, 5)
        local.create("arn:aws:sns:us-east-1:123456789012:alarms")
        local.start = 1_800_000_000.0  # a minute boundary
        yield local


def states() -> dict[str, str]:
    found = boto3.client("cloudwatch").describe_alarms()["MetricAlarms"]
    return {a["AlarmName"].split("-")[2]: a["StateValue"] for a in found}


def test_created_as_cloudwatch_creates_an_alarm(alarms: LocalAlarms) -> None:
    assert set(states().values()) == {"INSUFFICIENT_DATA"}
    assert len(states()) == 7  # six that page, and the heartbeat


def test_a_run_that_needs_authorization_raises_the_alarm_and_a_bootstrap_clears_it(
    alarms: LocalAlarms,
) -> None:
    start = alarms.start
    alarms.record(NAMESPACE, "AuthorizationRequired", start + 20, 1.0)
    alarms.record(NAMESPACE, "RotationFailed", start + 20, 0.0)
    alarms.update(now=start + 330)
    assert states()["AuthorizationRequiredAlarm"] == "ALARM"
    assert states()["RotationFailingAlarm"] == "OK"
    alarms.record(NAMESPACE, "AuthorizationRequired", start + 340, 0.0)
    alarms.update(now=start + 700)
    assert states()["AuthorizationRequiredAlarm"] == "OK"


def test_other_namespaces_are_not_the_stacks(alarms: LocalAlarms) -> None:
    alarms.record("CmsToken/other", "AuthorizationRequired", alarms.start + 20, 1.0)
    alarms.update(now=alarms.start + 330)
    assert states()["AuthorizationRequiredAlarm"] == "INSUFFICIENT_DATA"
