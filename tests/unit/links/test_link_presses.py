"""Presses of one link's button (issue 36, finding 3): however many arrive at once, one
authorization is started, one start is counted in the hour and one background poll is queued;
a press while another may still be running counts nothing and says when to press again; a
spent link's saved form starts nothing (finding 5)."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from cmstoken.aws.link_state import link_key
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import FunctionUnavailableError
from cmstoken.links import tokens
from cmstoken.links.refusals import Refusal
from cmstoken.links.web import PRESS_SECONDS, Request, handle
from template_model import source
from unit.links.links_world import (
    AUTHORIZED_AT,
    DOMAIN,
    KEY_TEXT,
    NOW,
    STACK,
    USER_CODE,
    World,
    world,
)

__all__ = ["world"]  # the fixture

PRESSES = 7  # one more than the template's starts an hour
EXPECTED = tokens.Expected(STACK.name, STACK.account, STACK.region, AUTHORIZED_AT)
ORIGIN = {"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin"}
STARTING = "being started"


def claims_of(link: str) -> tokens.Claims:
    claims = tokens.check(link, KEY_TEXT.encode(), EXPECTED, NOW)
    assert isinstance(claims, tokens.Claims)
    return claims


def button(link: str) -> Request:
    """The POST of the link's form, as its page sends it (a saved form sends it again)."""
    proof = tokens.form_proof(KEY_TEXT.encode(), claims_of(link))
    return Request("POST", f"/l/{link}", DOMAIN, ORIGIN, f"proof={proof}".encode())


def at_once(world: World, request: Request, now: int = NOW) -> list[dict[str, Any]]:
    """``PRESSES`` posts of ``request`` released together, each on its own thread."""
    barrier, answers, lock = threading.Barrier(PRESSES), [], threading.Lock()

    def press() -> None:
        barrier.wait()
        answer = handle(request, world.portal, now)
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=press) for _ in range(PRESSES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_the_press_window_is_the_links_functions_timeout() -> None:
    assert source()["Resources"]["LinksFunction"]["Properties"]["Timeout"] == PRESS_SECONDS


@pytest.mark.parametrize("before", ["fresh", "its first press died"])
def test_seven_presses_at_once_count_one_start_and_queue_one_poll(
    world: World, before: str
) -> None:
    """A double click times seven, on a link never pressed or on one whose first press died
    before starting anything: exactly one start counted in the hour (the others leave the
    hour's starts to other links), one authorization, one poll queued. Each press shows the
    code, or says the authorization is being started and when to press again."""
    world.portal.starts_per_hour = 6
    world.one_at_a_time()
    world.bootstrap.delay = 0.2  # the device code request: the other presses arrive meanwhile
    link = world.link()
    if before == "its first press died":
        assert world.portal.use(claims_of(link), NOW - PRESS_SECONDS - 1) is not None
    answers = at_once(world, button(link))
    assert world.counted("start") == 1
    assert world.bootstrap.authorizations == 1
    assert world.bootstrap.sent == [{"action": "poll", "link": world.tag(link)}]
    assert world.counted("poll") == 1
    statuses = sorted(answer["statusCode"] for answer in answers)
    assert set(statuses) <= {200, 503}, statuses
    assert statuses[0] == 200  # the press that started it shows its code
    for answer in answers:
        assert link.split(".")[1] not in answer["body"]  # no page echoes the link
        if answer["statusCode"] == 200:
            assert USER_CODE in answer["body"]
        else:
            assert STARTING in answer["body"]
            assert int(answer["headers"]["Retry-After"]) <= PRESS_SECONDS + 1
    # another link is not refused for the hour
    later = NOW + 1000  # the authorization expired unapproved, in the same hour
    world.bootstrap.now = later
    other = world.link()
    assert USER_CODE in handle(button(other), world.portal, later)["body"]
    assert world.counted("start", later) == 2


def test_a_press_while_another_may_still_run_counts_nothing_and_says_until_when(
    world: World,
) -> None:
    """The use was recorded 10 s ago and nothing is started yet: that press may still be
    running (the function's timeout), so this one starts nothing, counts nothing, queues
    nothing, and says when to press again; after that time a press takes over."""
    link = world.link()
    assert world.portal.use(claims_of(link), NOW - 10) is not None
    answer = handle(button(link), world.portal, NOW)
    until = NOW - 10 + PRESS_SECONDS + 1
    assert answer["statusCode"] == 503
    assert answer["headers"]["Retry-After"] == str(until - NOW)
    assert to_iso(until) in answer["body"]
    assert (world.counted("start"), world.counted("poll")) == (0, 0)
    assert "start" not in world.bootstrap.calls
    assert world.bootstrap.sent == []
    assert USER_CODE in handle(button(link), world.portal, until)["body"]
    assert world.counted("start", until) == 1


def test_a_press_while_another_is_starting_shows_what_it_started_without_counting(
    world: World,
) -> None:
    """The other press's authorization is pending, its start not recorded yet: this press
    shows it and counts no start; of the two, one queues the poll."""
    link = world.link()
    assert world.portal.use(claims_of(link), NOW - 1) is not None
    world.bootstrap.pending_until, world.bootstrap.pending_link = NOW + 899, world.tag(link)
    answer = handle(button(link), world.portal, NOW)
    assert USER_CODE in answer["body"]
    assert world.counted("start") == 0
    assert world.bootstrap.authorizations == 0
    assert not world.portal.claim_follow(claims_of(link), NOW)  # the other press queues none


def test_presses_again_at_once_queue_one_poll(world: World) -> None:
    """The press that started the authorization died before queueing its poll: of the
    presses again at once, one queues it."""
    world.one_at_a_time()
    link = world.link()
    assert USER_CODE in handle(button(link), world.portal, NOW)["body"]
    world.clients["dynamodb"].update_item(  # as if that press had died before queueing it
        TableName="links",
        Key={"pk": {"S": link_key(claims_of(link).nonce)}},
        UpdateExpression="REMOVE followed_at",
    )
    world.bootstrap.sent.clear()
    answers = at_once(world, button(link), NOW + 60)
    assert all(USER_CODE in answer["body"] for answer in answers)
    assert world.bootstrap.sent == [{"action": "poll", "link": world.tag(link)}]
    assert world.counted("poll") == 2  # the first press's and this one
    assert (world.counted("start"), world.bootstrap.authorizations) == (1, 1)


def test_a_poll_whose_sending_failed_is_queued_by_the_next_press(world: World) -> None:
    """Queueing is claimed before it is sent, and the claim is given back when sending
    fails: a press again queues it."""
    link = world.link()
    sent = world.bootstrap.send

    def refuse(payload: dict[str, Any]) -> None:
        raise FunctionUnavailableError("cannot invoke bootstrap: TooManyRequestsException")

    world.bootstrap.send = refuse  # type: ignore[method-assign]
    assert handle(button(link), world.portal, NOW)["statusCode"] == 503
    world.bootstrap.send = sent  # type: ignore[method-assign]
    assert USER_CODE in handle(button(link), world.portal, NOW + 5)["body"]
    assert world.bootstrap.sent == [{"action": "poll", "link": world.tag(link)}]
    assert world.bootstrap.authorizations == 1


def test_a_spent_links_saved_form_starts_nothing(world: World) -> None:
    """Its authorization ended unapproved: the form saved from its page (or the browser's
    back button) posted again is refused as used, and nothing is started or counted."""
    link = world.link()
    saved = button(link)
    assert USER_CODE in handle(saved, world.portal, NOW)["body"]
    later = NOW + 1000
    world.bootstrap.now = later  # the code expired unapproved
    for request in (saved, saved):
        answer = handle(request, world.portal, later)
        assert answer["statusCode"] == 403
        assert Refusal.REPLAYED.title in answer["body"]
    assert world.bootstrap.authorizations == 1
    assert world.bootstrap.calls.count("start") == 1
    assert world.counted("start", later) == 1  # the first press's, in the same hour


def test_the_busy_page_says_until_when(world: World) -> None:
    world.portal.starts_per_hour = 1
    assert USER_CODE in handle(button(world.link()), world.portal, NOW)["body"]
    world.bootstrap.now = later = NOW + 1000
    link = world.link()
    answer = handle(button(link), world.portal, later)
    until = NOW - NOW % 3600 + 3600
    assert answer["statusCode"] == 429
    assert answer["headers"]["Retry-After"] == str(until - later)
    assert f"Try again after {to_iso(until)}" in answer["body"]
    assert re.search(r"cmstoken-admin --stack \S+ --region \S+ bootstrap", answer["body"])
    assert link_key(claims_of(link).nonce) not in world.table_items()  # the link stays usable


def test_a_link_recorded_as_started_without_its_use_is_spent(world: World) -> None:
    """A start recorded after the press's use was given back (an item with no use, as an
    earlier release wrote it): the link is spent, not a press in flight."""
    link = world.link()
    world.portal.table.link_started(claims_of(link).nonce, now=NOW - 5, expires_at=NOW + 3600)
    answer = handle(button(link), world.portal, NOW)
    assert answer["statusCode"] == 403
    assert Refusal.REPLAYED.title in answer["body"]
    assert "start" not in world.bootstrap.calls


@pytest.mark.parametrize("frees_at", [NOW + 4000, None], ids=["a-version-ages-out", "none-will"])
def test_a_start_the_version_budget_refuses_says_until_when_and_leaves_the_link_usable(
    world: World, frees_at: int | None
) -> None:
    """The bootstrap refused the link's start before any write: what outside callers may
    write of the refresh credential is spent. The page says until when (and the fallback);
    the link stays usable for then."""
    world.bootstrap.budget_spent, world.bootstrap.frees_at = True, frees_at
    link = world.link()
    answer = handle(button(link), world.portal, NOW)
    assert answer["statusCode"] == 429
    if frees_at is None:
        assert "try again later" in answer["body"]
        assert "Retry-After" not in answer["headers"]
    else:
        assert f"try again after {to_iso(frees_at)}" in answer["body"]
        assert answer["headers"]["Retry-After"] == str(frees_at - NOW)
    assert STACK.bootstrap_command in answer["body"]
    assert world.bootstrap.sent == []
    assert link_key(claims_of(link).nonce) not in world.table_items()
    world.bootstrap.budget_spent = False
    assert USER_CODE in handle(button(link), world.portal, NOW + 4000)["body"]
