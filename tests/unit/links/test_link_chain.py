"""No endless chain of links (issue 36, finding 1): an authorization a link started that ends
unapproved brings a new link at most once a day per credential; otherwise its notice says
that none comes, when the daily reminder brings one, and the fallback command. Whoever holds
one message, pressing every link it leads to and letting each code expire, gets a bounded
number of links and authorizations a day."""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from cmstoken.core.clock import to_iso
from cmstoken.core.errors import TopicError
from cmstoken.links import tokens
from cmstoken.links.app import LinksApp
from cmstoken.links.events import Outcome, Remind
from cmstoken.links.notifying import DAY, OUTCOME_LINK_EVERY, REMINDER_EVERY, Notices
from cmstoken.links.web import Request
from unit.links.links_world import (
    AUTHORIZED_AT,
    DOMAIN,
    KEY_TEXT,
    NOW,
    STACK,
    URL,
    USER_CODE,
    World,
    world,
)

__all__ = ["world"]  # the fixture

WARNING = 25 * DAY
EXPIRED = {"status": "expired", "message": "the code expired"}
PROOF = re.compile(r'name="proof" value="([^"]+)"')
# Links in any REMINDER_EVERY (a day less the reminder's slack) for one credential whose one
# need lasts: the reminder's and one ending's.
LINKS_A_DAY = 2


def link_of(message: dict[str, Any]) -> str | None:
    url = message.get("link")
    return None if url is None else str(url).removeprefix(URL + "l/")


def tag_of(link: str, now: int) -> str:
    found = tokens.addressed(link, STACK.name, STACK.account, STACK.region, now)
    assert isinstance(found, tokens.Addressed)
    return tokens.tag(found.claims)


class Clock:
    def __init__(self, world: World) -> None:
        self.world, self.now = world, NOW

    def at(self, now: int) -> None:
        self.now = self.world.bootstrap.now = now


def press(app: LinksApp, link: str) -> dict[str, Any]:
    """Open the link and press its button, as a browser does."""
    page = app.handle(Request("GET", f"/l/{link}", DOMAIN))
    found = PROOF.search(page["body"])
    assert found is not None, page["body"]
    origin = {"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin"}
    body = f"proof={found[1]}".encode()
    answer: dict[str, Any] = app.handle(Request("POST", f"/l/{link}", DOMAIN, origin, body))
    return answer


def test_an_unapproved_ending_brings_a_new_link_at_most_once_a_day_per_credential(
    world: World,
) -> None:
    world.bootstrap.status = "reauthorization_required"
    notices = Notices(world.portal, WARNING)
    assert notices.remind(NOW - 100).endswith("sent")  # the day's reminder, with its link
    world.messages()
    done = [notices.outcome(EXPIRED, NOW + offset) for offset in (0, 3600, OUTCOME_LINK_EVERY)]
    assert done == [
        "outcome expired: sent",
        "outcome expired: sent without a link (an ending brought one in the last day)",
        "outcome expired: sent",
    ]
    first, second, third = world.messages()
    assert link_of(first)
    assert link_of(third)
    assert link_of(second) is None
    assert second["kind"] == "expired"
    assert second["linkWithheld"] == "true"
    assert second["nextReminderAt"] == to_iso(NOW - 100 + DAY)  # the reminder's next day
    assert second["bootstrapCommand"] == STACK.bootstrap_command
    # a new credential (refused too): its endings start afresh
    world.bootstrap.authorized_at = AUTHORIZED_AT + 1
    assert notices.outcome(EXPIRED, NOW + 3700) == "outcome expired: sent"
    (fresh,) = world.messages()
    assert link_of(fresh)


def test_an_ending_whose_link_could_not_be_sent_brings_it_on_the_retry(world: World) -> None:
    """A failed publish gives the day's claim back: Lambda's retry of the outcome sends the
    ending with its link, not without."""
    world.bootstrap.status = "reauthorization_required"

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://sns")

    events = world.portal.topic.client.meta.events
    events.register("before-call.sns.Publish", refuse)
    with pytest.raises(TopicError):
        Notices(world.portal, WARNING).outcome(EXPIRED, NOW)
    events.unregister("before-call.sns.Publish", refuse)
    assert Notices(world.portal, WARNING).outcome(EXPIRED, NOW + 60) == "outcome expired: sent"
    (message,) = world.messages()
    assert link_of(message)


def test_whoever_holds_one_message_gets_no_endless_chain_of_links(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Three simulated reminder periods (``REMINDER_EVERY``, 22 hours) of the attack the
    issue reproduced: the holder of the alert presses every link it gets as soon as it gets
    it, and lets each code expire (no account at the identity provider needed); the reminder
    runs every ten minutes (the schedule and alarms, deduplicated by the stack). Each period
    brings the reminder's link and one ending's, each link starts one authorization, and the
    other endings say that no new link comes."""
    world.bootstrap.status = "reauthorization_required"
    world.portal.starts_per_hour = 6  # the template's
    clock = Clock(world)
    app = LinksApp(lambda url: world.portal, WARNING, lambda: clock.now)
    minted: Counter[int] = Counter()  # links sent, by period
    started: Counter[int] = Counter()  # authorizations started, by period
    withheld, inbox, seen = 0, list[str](), set[str]()
    with caplog.at_level(logging.DEBUG, logger="cmstoken"):
        while clock.now < NOW + 3 * REMINDER_EVERY:
            app.handle(Remind("schedule"))
            for message in world.messages():
                link = link_of(message)
                if link is None:
                    withheld += message.get("linkWithheld") == "true"
                else:
                    minted[(clock.now - NOW) // REMINDER_EVERY] += 1
                    inbox.append(link)
                    seen.add(link)
            if not inbox:
                clock.at(clock.now + 600)
                continue
            link, before = inbox.pop(), world.bootstrap.authorizations
            answer = press(app, link)
            assert USER_CODE in answer["body"], answer["body"]
            started[(clock.now - NOW) // REMINDER_EVERY] += world.bootstrap.authorizations - before
            clock.at((world.bootstrap.pending_until or 0) + 1)  # the code expired unapproved
            app.handle(Outcome(EXPIRED, link=tag_of(link, clock.now)))
    logged = "\n".join(str(vars(record)) for record in caplog.records)
    assert sorted(minted) == sorted(started) == [0, 1, 2]
    assert all(n <= LINKS_A_DAY for n in minted.values()), minted
    assert started == minted  # each link started one authorization, once
    assert withheld >= 3  # the endings past each period's bound said so
    for secret in (*(link.split(".")[1] for link in seen), USER_CODE, KEY_TEXT):
        assert secret not in logged
    assert "poll outcome" in logged  # the control: the log has the outcomes' records


def test_all_paths_together_send_at_most_three_links_a_day_per_credential(world: World) -> None:
    """The worst day docs/one-click.md counts: the credential ages into the warning window
    (a reminder), the identity provider then refuses it (a reminder of the new need), and
    endings arrive every hour with the reminders: 3 links, the rest without."""
    notices = Notices(world.portal, WARNING)  # the world's credential is 25 days old: aging
    links = 0
    for hour in range(24):
        now = NOW + hour * 3600
        world.bootstrap.now = now
        if hour == 5:
            world.bootstrap.status = "reauthorization_required"
        notices.remind(now)
        notices.outcome(EXPIRED, now + 60)
        links += sum(link_of(message) is not None for message in world.messages())
    assert links == 3
