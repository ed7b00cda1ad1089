"""The stack's alarms over simulated days: each incident raises its one alarm once, keeps it while
it lasts and clears it when it ends; a healthy stack raises none, at every allowed rotation
interval.

The datapoints are what the real handlers emit (embedded metric format) while they run against
moto and the emulator on a moving clock; the alarms are the template's, resolved for the stack's
parameters, and evaluated with CloudWatch's documented rules (``cloudwatch_alarms``,
``composite_alarms``). See ``alarm_timeline`` for how invocations and retries are simulated.
"""

from __future__ import annotations

from typing import Any

import pytest

from alarm_timeline import Timeline, alarmed, describe, final_states
from harness import Stack, refuse_rotation_writes
from template_model import source

pytestmark = pytest.mark.integration

HOUR = 3600.0
DAY = 24 * HOUR
INTERVALS = source()["Parameters"]["RotationIntervalMinutes"]["AllowedValues"]
ALL_CLEAR = {
    "AuthorizationRequiredAlarm": "OK",
    "CredentialLostAlarm": "OK",
    "ServiceTokenExpiringAlarm": "OK",
    "RotationFailingAlarm": "OK",
    "RotatorHeartbeatAlarm": "OK",
    "RotatorSilentAlarm": "OK",
    "RefreshFamilyAgingAlarm": "OK",
}


@pytest.fixture
def make_timeline(stack: Stack, capsys: pytest.CaptureFixture[str]) -> Any:
    """A timeline factory for a stack whose identity provider enforces the idle lifetime only
    (the absolute lifetime is switched on where a test is about it)."""
    stack.emulator.config.refresh_absolute_lifetime = 0

    def make(interval_minutes: int = 60, phase: float = 20.0) -> Timeline:
        return Timeline(stack, capsys, interval_minutes=interval_minutes, phase=phase)

    return make


def assert_alarmed(timeline: Timeline, expected: dict[str, int], **parameters: Any) -> Any:
    """The alarms that went to ALARM, and how often, are ``expected``. The heartbeat is left
    out: it notifies nobody, and it goes to ALARM at creation (see the last test); the
    composite RotatorSilentAlarm speaks for it."""
    changes = timeline.alarms(**parameters)
    found = {name: n for name, n in alarmed(changes).items() if name != "RotatorHeartbeatAlarm"}
    assert found == expected, describe(changes, timeline.start)
    return changes


@pytest.mark.parametrize("minutes", INTERVALS)
def test_a_healthy_stack_raises_no_alarm(make_timeline: Any, minutes: int) -> None:
    timeline = make_timeline(minutes)
    timeline.bootstrap()
    timeline.scheduled(2 * DAY)
    assert timeline.outcomes.count("rotated") >= 2  # refreshes happened, not just no-ops
    changes = assert_alarmed(timeline, {})
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


@pytest.mark.parametrize("minutes", [15, 60])
def test_a_missed_scheduled_run_raises_no_alarm(make_timeline: Any, minutes: int) -> None:
    timeline = make_timeline(minutes)
    timeline.bootstrap()
    per_day = round(DAY / timeline.interval)
    timeline.scheduled(2 * DAY, skip=[per_day // 2, per_day + 3])
    assert_alarmed(timeline, {})


@pytest.mark.parametrize("minutes", [5, 15, 60])
@pytest.mark.parametrize("phase", [0.0, 20.0, 59.0])
def test_a_failed_run_that_the_next_run_repairs_raises_no_alarm(
    make_timeline: Any, minutes: int, phase: float
) -> None:
    """All three attempts of one scheduled run fail; their datapoints span two periods."""
    timeline = make_timeline(minutes, phase)
    timeline.bootstrap()
    timeline.scheduled(18 * HOUR)  # the token is now within the refresh margin
    timeline.stack.emulator.inject("refresh", "status", times=1000, status=503)
    started = timeline.now
    assert timeline.rotator_run().startswith("error:")
    timeline.stack.emulator.clear_faults()
    timeline.pause(started + timeline.interval - timeline.now)
    timeline.scheduled(DAY)
    assert "rotated" in timeline.outcomes
    assert_alarmed(timeline, {})


def test_an_upstream_outage_raises_failing_then_expiring_once_and_clears_both(
    make_timeline: Any,
) -> None:
    timeline = make_timeline()
    timeline.bootstrap()
    timeline.scheduled(18 * HOUR)
    # Queued faults are objects, one a request: ten thousand outlast the outage (checked).
    timeline.stack.emulator.inject("refresh", "status", times=10_000, status=503)
    timeline.scheduled(5 * HOUR)  # the token has about one hour left
    assert timeline.stack.emulator.counts["refresh"] < 10_000  # every refresh met the outage
    timeline.stack.emulator.clear_faults()
    timeline.scheduled(DAY)
    changes = assert_alarmed(timeline, {"RotationFailingAlarm": 1, "ServiceTokenExpiringAlarm": 1})
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


def test_a_refused_credential_raises_authorization_required_once_until_bootstrapped(
    make_timeline: Any,
) -> None:
    timeline = make_timeline()
    timeline.bootstrap()
    timeline.scheduled(12 * HOUR)
    stack = timeline.stack
    stack.emulator.revoke_family(stack.newest_refresh_token())
    timeline.scheduled(2 * DAY)  # the token expires meanwhile: still one incident
    assert "reauthorization_required" in timeline.outcomes
    changes = assert_alarmed(timeline, {"AuthorizationRequiredAlarm": 1})
    assert final_states(changes)["AuthorizationRequiredAlarm"] == "ALARM"
    timeline.bootstrap()
    timeline.scheduled(DAY)
    changes = assert_alarmed(timeline, {"AuthorizationRequiredAlarm": 1})
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


def test_the_reauthorization_warning_fires_once_and_clears_with_the_new_authorization(
    make_timeline: Any,
) -> None:
    """The identity provider ends the family 30 days after the authorization; the warning comes
    at 25 days and stays, then the refusal is its own incident; a bootstrap clears both."""
    timeline = make_timeline()
    timeline.stack.emulator.config.refresh_absolute_lifetime = 30 * int(DAY)
    timeline.bootstrap()
    timeline.scheduled(26 * DAY)
    changes = assert_alarmed(timeline, {"RefreshFamilyAgingAlarm": 1})
    warned = next(c.at for c in changes["RefreshFamilyAgingAlarm"] if c.new == "ALARM")
    assert 25 * DAY <= warned - timeline.start <= 25 * DAY + 2 * HOUR
    timeline.scheduled(5 * DAY)
    assert "reauthorization_required" in timeline.outcomes
    assert_alarmed(timeline, {"RefreshFamilyAgingAlarm": 1, "AuthorizationRequiredAlarm": 1})
    timeline.bootstrap()
    timeline.scheduled(DAY)
    changes = assert_alarmed(
        timeline, {"RefreshFamilyAgingAlarm": 1, "AuthorizationRequiredAlarm": 1}
    )
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


def test_a_lost_credential_raises_its_alarm_then_authorization_required_until_bootstrapped(
    make_timeline: Any,
) -> None:
    """Secrets Manager refuses to store a refresh's answer for a whole invocation: the token is
    lost (one alarm); the retries find the used token refused (the next incident, its own
    alarm); a bootstrap ends both."""
    timeline = make_timeline()
    timeline.bootstrap()
    timeline.scheduled(18 * HOUR)  # the token is now within the refresh margin
    # The bootstrap stored a raw access token: let the claim through, refuse what follows.
    refusing = refuse_rotation_writes("KMSInvalidStateException", times=10**9, after=1)
    _, error = timeline.invoke("rotator", {})
    assert type(error).__name__ == "CredentialLostError"
    refusing["left"] = 0  # the key works again
    timeline.pause(60)  # Lambda's retries
    assert timeline.rotator_run() == "reauthorization_required"
    timeline.pause(timeline.interval - 3 * 60)
    timeline.scheduled(DAY)
    changes = assert_alarmed(timeline, {"CredentialLostAlarm": 1, "AuthorizationRequiredAlarm": 1})
    assert final_states(changes)["CredentialLostAlarm"] == "ALARM"
    timeline.bootstrap()
    timeline.scheduled(DAY)
    changes = assert_alarmed(timeline, {"CredentialLostAlarm": 1, "AuthorizationRequiredAlarm": 1})
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


@pytest.mark.parametrize("minutes", INTERVALS)
def test_a_new_stack_raises_one_clear_alarm_until_it_is_bootstrapped(
    make_timeline: Any, minutes: int
) -> None:
    timeline = make_timeline(minutes)
    timeline.scheduled(DAY)  # nobody has run the bootstrap: every run fails, and is retried
    assert set(timeline.outcomes) == {"error:NotBootstrappedError"}
    changes = assert_alarmed(timeline, {"AuthorizationRequiredAlarm": 1})
    timeline.bootstrap()
    timeline.scheduled(DAY)
    changes = assert_alarmed(timeline, {"AuthorizationRequiredAlarm": 1})
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


@pytest.mark.parametrize("minutes", [5, 30, 60])
def test_a_silent_rotator_raises_one_alarm_until_it_runs_again(
    make_timeline: Any, minutes: int
) -> None:
    timeline = make_timeline(minutes)
    timeline.bootstrap()
    timeline.scheduled(2 * HOUR)
    timeline.pause(8 * HOUR)  # the schedule was disabled; the token stays fresh meanwhile
    timeline.scheduled(DAY)
    changes = assert_alarmed(timeline, {"RotatorSilentAlarm": 1})
    last_run = timeline.start + 2 * HOUR - timeline.interval
    raised = next(c.at for c in changes["RotatorSilentAlarm"] if c.new == "ALARM")
    # Once the evaluation range (three periods) holds no run: within four intervals of the
    # last run, never after one or two missed runs.
    intervals = (raised - last_run) / timeline.interval
    assert 3 < intervals <= 4 + 1 / 60, describe(changes, timeline.start)
    assert final_states(changes) == ALL_CLEAR, describe(changes, timeline.start)


def test_the_heartbeat_alone_would_alarm_before_the_first_run(make_timeline: Any) -> None:
    """Why silence is a composite alarm: the heartbeat counts the time before the first
    scheduled run as missing, hence breaching, and the composite holds it back."""
    timeline = make_timeline()
    timeline.pause(50 * 60)  # deployed; the first scheduled run comes within the hour
    timeline.scheduled(DAY)
    changes = timeline.alarms()
    assert alarmed(changes).get("RotatorHeartbeatAlarm") == 1, describe(changes, timeline.start)
    assert "RotatorSilentAlarm" not in alarmed(changes)
