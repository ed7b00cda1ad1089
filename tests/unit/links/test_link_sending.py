"""Sending the links (no sockets): the notice of each need goes to the topic with a link that
works, on every run of the daily schedule but at most once in 22 hours for the same need of
the same credential, never while an authorization is pending or when nothing is needed; the
background poll's outcome is reported (with a fresh link when the need lasts, at most once a
day: test_link_chain), or polled again while pending. And the events that invoke the
function, read from the samples in events/."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from cmstoken.aws.documents import RefreshCredential
from cmstoken.bootstrap.identity import identity_refusal, short_identity
from cmstoken.bootstrap.results import ending
from cmstoken.bootstrap.states import Event, Stage, step
from cmstoken.core.errors import ConfigurationError, TopicError
from cmstoken.core.settings import LinksSettings
from cmstoken.links import tokens
from cmstoken.links.app import LinksApp
from cmstoken.links.events import Outcome, Remind, read_event
from cmstoken.links.notifying import DAY, REMINDER_EVERY, REMINDER_SLACK, Notices
from cmstoken.links.portal import POLLS_PER_HOUR
from cmstoken.links.stack_state import Need, StackState
from cmstoken.links.web import Request, handle
from support import load_event
from template_model import source
from unit.links.links_world import AUTHORIZED_AT, DOMAIN, KEY_TEXT, NOW, STACK, URL, World, world

__all__ = ["world"]  # the fixture

TAG = "ab" * 16  # a link's tag (links.tokens.tag)
WARNING = 25 * DAY  # the template's default: the world's credential is 25 days old


def notices(world: World) -> Notices:
    return Notices(world.portal, WARNING)


def link_of(message: dict[str, Any]) -> str:
    url = message["link"]
    assert url.startswith(URL + "l/")
    return str(url.removeprefix(URL + "l/"))


@pytest.mark.parametrize(
    ("status", "authorized_at", "kind"),
    [
        ("absent", None, "never-bootstrapped"),
        ("reauthorization_required", AUTHORIZED_AT, "credential-refused"),
        ("active", AUTHORIZED_AT, "warning-window"),
    ],
)
def test_each_need_is_sent_with_a_link_that_opens_its_page(
    world: World, status: str, authorized_at: int | None, kind: str
) -> None:
    world.bootstrap.status, world.bootstrap.authorized_at = status, authorized_at
    assert notices(world).remind(NOW).endswith("sent")
    (message,) = world.messages()
    assert message["kind"] == kind
    assert (message["stack"], message["account"], message["region"]) == (
        STACK.name,
        STACK.account,
        STACK.region,
    )
    link = link_of(message)
    claims = tokens.check(
        link,
        KEY_TEXT.encode(),
        tokens.Expected(STACK.name, STACK.account, STACK.region, authorized_at or 0),
        NOW,
    )
    assert isinstance(claims, tokens.Claims)
    assert claims.expires_at == NOW + DAY
    page = handle(Request("GET", f"/l/{link}", DOMAIN), world.portal, NOW)
    assert page["statusCode"] == 200


def test_a_need_is_sent_once_a_day_and_afresh_for_a_new_credential(world: World) -> None:
    world.bootstrap.status = "reauthorization_required"
    offsets = (0, 60, REMINDER_EVERY - 1, DAY)
    sent = [notices(world).remind(NOW + offset) for offset in offsets]
    assert [line.endswith("sent") for line in sent] == [True, False, False, True]
    world.bootstrap.authorized_at = AUTHORIZED_AT + 1  # another credential, refused too
    assert notices(world).remind(NOW + DAY + 1).endswith("sent")
    assert len(world.messages()) == 3


def test_the_daily_schedule_reminds_every_day_though_a_run_comes_early_or_the_last_late(
    world: World,
) -> None:
    """Scheduler's rate(1 day) runs are not exactly a day apart: a run 5 s early, or one on
    time after a run its retries delayed by their hour, still sends; a second run an hour
    after a send does not."""
    world.bootstrap.status = "reauthorization_required"
    assert notices(world).remind(NOW).endswith("sent")
    assert notices(world).remind(NOW + 3600).endswith("not again (already sent, or being sent)")
    day = NOW + DAY - 5
    assert notices(world).remind(day).endswith("sent")  # 5 s early
    assert notices(world).remind(day + DAY + 3630).endswith("sent")  # retried for an hour
    assert notices(world).remind(day + 2 * DAY).endswith("sent")  # the next run, on time
    assert len(world.messages()) == 4


def test_the_reminders_slack_covers_the_schedules_retries_and_is_well_under_a_day() -> None:
    schedule = source()["Resources"]["LinksFunction"]["Properties"]["Events"]["Reminder"]
    assert schedule["Properties"]["ScheduleExpression"] == "rate(1 day)"
    retried = int(schedule["Properties"]["RetryPolicy"]["MaximumEventAgeInSeconds"])
    lambda_retries = 60 + 120  # a failed asynchronous invocation, tried twice more
    assert retried + lambda_retries + 60 < REMINDER_SLACK <= DAY // 8
    assert REMINDER_EVERY == DAY - REMINDER_SLACK


def test_nothing_is_sent_when_nothing_is_needed_or_an_authorization_is_pending(
    world: World,
) -> None:
    world.bootstrap.authorized_at = NOW - DAY  # young: not in the warning window
    assert notices(world).remind(NOW) == "nothing needed"
    world.bootstrap.status = "absent"
    world.bootstrap.pending_until = NOW + 300
    assert notices(world).remind(NOW) == "an authorization is pending"
    assert world.messages() == []
    assert world.table_items() == []


@pytest.mark.parametrize(
    ("result", "kind", "has_link"),
    [
        ({"status": "authorized", "identity": "0123456789ab"}, "authorized", False),
        ({"status": "denied", "message": "denied"}, "denied", True),
        ({"status": "expired", "message": "expired"}, "expired", True),
        (
            {
                "status": "failed",
                "message": "the code was approved by a different identity (aaaaaaaaaaaa) than "
                "the one this stack is authorized as (bbbbbbbbbbbb). Nothing was changed.",
            },
            "identity-refused",
            True,
        ),
    ],
)
def test_the_background_polls_outcome_is_reported(
    world: World, result: dict[str, Any], kind: str, has_link: bool
) -> None:
    world.bootstrap.status = "reauthorization_required"  # the need lasts, except once authorized
    if kind == "authorized":
        world.bootstrap.status, world.bootstrap.authorized_at = "active", NOW - 60
    assert notices(world).outcome(result, NOW).endswith("sent")
    (message,) = world.messages()
    assert message["kind"] == kind
    assert ("link" in message) is has_link
    if kind == "identity-refused":
        assert (message["approvingFingerprint"], message["expectedFingerprint"]) == (
            "aaaaaaaaaaaa",
            "bbbbbbbbbbbb",
        )


def test_a_poll_that_ended_pending_polls_again_while_the_code_is_valid(world: World) -> None:
    world.bootstrap.pending_until, world.bootstrap.pending_link = NOW + 300, TAG
    done = notices(world).outcome({"status": "pending"}, NOW, TAG)
    assert done == "outcome pending: polling again"
    assert world.bootstrap.sent == [{"action": "poll", "link": TAG}]
    world.bootstrap.now = NOW + 301
    assert "not reported" in notices(world).outcome({"status": "pending"}, NOW + 301, TAG)
    assert world.bootstrap.sent == [{"action": "poll", "link": TAG}]
    assert world.messages() == []


@pytest.mark.parametrize("tag", [None, "cd" * 16], ids=["not-a-links-poll", "another-link"])
def test_a_poll_ends_polling_what_its_link_did_not_start(world: World, tag: str | None) -> None:
    """Only the link that started a pending authorization has it polled again: after an
    operator's poll (no link) or another link's, it is left to whoever started it."""
    world.bootstrap.pending_until, world.bootstrap.pending_link = NOW + 300, TAG
    assert "polling again" not in notices(world).outcome({"status": "pending"}, NOW, tag)
    if tag is None:  # nor anything else: only a link's poll is followed
        retry = {"status": "failed", "retry": True}
        assert "polling again" not in notices(world).outcome(retry, NOW, tag)
    assert world.bootstrap.sent == []


def test_the_sample_events_are_what_the_function_reads() -> None:
    page = read_event(load_event("links-page"))
    assert isinstance(page, Request)
    assert (page.method, page.path) == ("GET", "/l/v1.not-a-real-link.example")
    assert read_event(load_event("links-remind")) == Remind("schedule")
    alarm = read_event(load_event("links-alarm"))
    assert alarm == Remind("alarm cmstoken-prod-AuthorizationRequired is ALARM")
    outcome = read_event(load_event("links-poll-outcome"))
    assert isinstance(outcome, Outcome)
    assert outcome.result["status"] == "expired"
    assert outcome.error is None
    assert outcome.link == "7e995d73d6fd95e2c741bfec322047e8"  # the link whose poll it was


def test_a_failed_poll_is_an_outcome_with_its_error_type() -> None:
    record = load_event("links-poll-outcome")
    record["requestContext"]["condition"] = "RetriesExhausted"
    record["responseContext"]["functionError"] = "Unhandled"
    record["responsePayload"] = {"errorType": "StoreAccessError", "errorMessage": "detail"}
    assert read_event(record) == Outcome(
        None, error="StoreAccessError", link="7e995d73d6fd95e2c741bfec322047e8"
    )


@pytest.mark.parametrize("event", [[], "remind", {}, {"action": "start"}, {"source": "aws.ec2"}])
def test_any_other_event_is_refused_by_name(event: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"links' function|JSON object"):
        read_event(event)


def test_a_poll_lambda_gave_up_on_is_logged_and_reported_as_failed_with_a_new_link(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    world.bootstrap.status = "reauthorization_required"
    app = LinksApp(lambda url: world.portal, WARNING, lambda: NOW)
    with caplog.at_level(logging.INFO, logger="cmstoken"):
        assert app.handle(Outcome(None, error="Timeout")) == {"done": "outcome failed: sent"}
    (message,) = world.messages()
    assert message["kind"] == "failed"
    assert message["link"].startswith(URL + "l/")
    assert any(getattr(r, "error", None) == "Timeout" for r in caplog.records)


def test_the_settings_name_every_missing_variable_at_once() -> None:
    with pytest.raises(ConfigurationError) as raised:
        LinksSettings.from_environ({"LINKS_STARTS_PER_HOUR": "many"})
    for name in (
        "STACK_NAME",
        "LINKS_KEY_SECRET_ID",
        "LINKS_TABLE",
        "BOOTSTRAP_FUNCTION_NAME",
        "ALARM_TOPIC_ARN",
        "LINKS_STARTS_PER_HOUR must be a whole number",
    ):
        assert name in str(raised.value)
    settings = LinksSettings.from_environ(
        {
            "STACK_NAME": "s",
            "LINKS_KEY_SECRET_ID": "k",
            "LINKS_TABLE": "t",
            "BOOTSTRAP_FUNCTION_NAME": "b",
            "ALARM_TOPIC_ARN": "a",
            "REAUTHORIZATION_WARNING_SECONDS": "2160000",
        }
    )
    assert (settings.warning_seconds, settings.starts_per_hour) == (2_160_000, 6)


def test_a_notice_that_could_not_be_sent_is_sent_by_the_retry(world: World) -> None:
    """A failed publish gives the day's claim back, so Lambda's retry of the invocation sends
    the notice instead of finding it 'already sent'."""
    world.bootstrap.status = "absent"

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://sns")

    world.portal.topic.client.meta.events.register("before-call.sns.Publish", refuse)
    with pytest.raises(TopicError):
        notices(world).remind(NOW)
    world.portal.topic.client.meta.events.unregister("before-call.sns.Publish", refuse)
    assert notices(world).remind(NOW + 5) == "not_bootstrapped: sent"
    assert [m["kind"] for m in world.messages()] == ["never-bootstrapped"]


def test_the_bootstraps_own_words_for_another_identity_give_both_fingerprints(
    world: World,
) -> None:
    """The outcome of an approval by another identity is read from the bootstrap's result
    message: this holds the reading to the words the bootstrap really writes (its identity
    check and its result table), not to a copy of them."""
    expected, approving = "a" * 64, "b" * 64
    current = RefreshCredential(
        refresh_token="not-read",
        client_id="c",
        issuer_url="https://idp.example",
        status="active",
        authorized_at=NOW - DAY,
        refreshed_at=NOW - DAY,
        reauthorize_by=None,
        subject_sha256=expected,
    )
    reason = identity_refusal(current, approving, allowed=False)
    result = ending(step(Stage.PENDING, Event.IDENTITY_MISMATCH), reason=reason)
    assert result["status"] == "failed"
    world.bootstrap.status = "reauthorization_required"
    assert notices(world).outcome(result, NOW).endswith("sent")
    (message,) = world.messages()
    assert message["kind"] == "identity-refused"
    assert message["approvingFingerprint"] == short_identity(approving)
    assert message["expectedFingerprint"] == short_identity(expected)


def test_the_warning_is_the_familys_age_as_the_alarm_and_status_read_it() -> None:
    """``ReauthorizationWarningSeconds`` is the refresh family's age since its authorization
    (the template's description, RefreshFamilyAgingAlarm, `cmstoken-admin status`): with the
    defaults (25 days, a 30-day lifetime) a day-24 credential needs nothing, a day-25 one the
    warning; a reading as "time left before reauthorize_by" would warn from day 5."""
    default = int(source()["Parameters"]["ReauthorizationWarningSeconds"]["Default"])
    for age, need in ((5 * DAY, None), (24 * DAY, None), (25 * DAY, Need.EXPIRING)):
        state = StackState("active", NOW - age, NOW - age + 30 * DAY, NOW + 3600, None)
        assert state.need(now=NOW, warning_seconds=default) is need, age
    off = StackState("active", NOW - 29 * DAY, NOW + DAY, NOW + 3600, None)
    assert off.need(now=NOW, warning_seconds=0) is None


def test_an_authorization_is_reported_once_however_many_polls_end_on_it(world: World) -> None:
    """Polls of one code (a double click queues two; Lambda may deliver one twice) end on one
    credential: the first outcome reports it, the others find it reported."""
    world.bootstrap.status, world.bootstrap.authorized_at = "active", NOW - 60
    done = [
        notices(world).outcome({"status": "authorized", "identity": "0123456789ab"}, NOW),
        notices(world).outcome({"status": "authorized", "identity": "0123456789ab"}, NOW + 5),
        # a poll that lost the race: the code was consumed by the other, the stack works
        notices(world).outcome({"status": "failed", "message": "code refused"}, NOW + 9),
    ]
    assert done[0] == "outcome authorized: sent"
    assert all("not again" in line for line in done[1:])
    (message,) = world.messages()
    assert (message["kind"], message["identityFingerprint"]) == ("authorized", "0123456789ab")


def test_a_failure_another_poll_can_mend_is_polled_again_until_the_bound_then_reported(
    world: World,
) -> None:
    world.bootstrap.status = "reauthorization_required"
    kept = ending(step(Stage.CANDIDATE, Event.SERVICE_UNAVAILABLE), error="503")
    assert kept["retry"] is True
    for _ in range(POLLS_PER_HOUR):
        assert notices(world).outcome(kept, NOW, TAG) == "outcome failed: polling again"
    assert world.messages() == []
    assert notices(world).outcome(kept, NOW, TAG) == "outcome failed: sent"
    (message,) = world.messages()
    assert message["kind"] == "failed"
    assert link_of(message)
    assert world.bootstrap.sent == [{"action": "poll", "link": TAG}] * POLLS_PER_HOUR


def test_an_approval_left_to_the_next_poll_is_polled_again(world: World) -> None:
    """Approved and stored, not finished (the code is no longer pending): poll again."""
    world.bootstrap.status = "reauthorization_required"
    deferred = ending(step(Stage.CANDIDATE, Event.DEFERRED))
    assert (deferred["status"], deferred["approved"]) == ("pending", True)
    assert notices(world).outcome(deferred, NOW, TAG) == "outcome pending: polling again"
    assert world.bootstrap.sent == [{"action": "poll", "link": TAG}]


@pytest.mark.parametrize("status", ["reauthorization_required", "active"])
def test_a_links_authorization_an_operator_replaced_is_not_reported_nor_polled_again(
    world: World, status: str
) -> None:
    """An operator's start replaced what the link started: its background poll stops
    (superseded, or the operator's pending met first); nothing failed, so no notice and no new
    link, and no poll again (the operator polls their own)."""
    world.bootstrap.status = status
    world.bootstrap.pending_until, world.bootstrap.pending_link = NOW + 900, None
    superseded = ending(step(Stage.PENDING, Event.SUPERSEDED))
    assert superseded["status"] == "superseded"
    elsewhere = {"status": "pending_elsewhere", "expires_at": "2026-11-29T10:00:00Z"}
    for result in (superseded, elsewhere):
        assert notices(world).outcome(result, NOW, TAG).endswith("not reported")
    assert world.messages() == []
    assert world.bootstrap.sent == []
