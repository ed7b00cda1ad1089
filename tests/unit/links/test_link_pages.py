"""The links' pages (no sockets): ``GET`` shows and changes nothing, the button's ``POST``
starts one authorization and uses the link, and every refusal (forged, tampered, revoked,
expired, void, replayed, cross-site, not our form, other paths, methods and sizes, too many
starts, the stack unreachable) answers its own page and changes nothing."""

from __future__ import annotations

import html
import logging
import re
from typing import Any

import pytest

from cmstoken.aws.link_state import link_key
from cmstoken.core.errors import FunctionUnavailableError
from cmstoken.links import tokens
from cmstoken.links.app import LinksApp
from cmstoken.links.pages import HEADERS
from cmstoken.links.portal import POLLS_PER_HOUR
from cmstoken.links.refusals import Refusal
from cmstoken.links.web import Request, handle
from unit.links.links_world import (
    AUTHORIZED_AT,
    DOMAIN,
    KEY_TEXT,
    NOW,
    STACK,
    USER_CODE,
    World,
    get,
    post,
    tamper,
    world,
)

__all__ = ["world"]  # the fixture

PROOF = re.compile(r'name="proof" value="([^"]+)"')
EXPECTED = tokens.Expected(
    stack=STACK.name, account=STACK.account, region=STACK.region, binding=AUTHORIZED_AT
)


def proof_of(answer: dict[str, Any]) -> str:
    found = PROOF.search(answer["body"])
    assert found is not None, answer["body"]
    return found[1]


def press(world: World, link: str, now: int = NOW, **headers: str) -> dict[str, Any]:
    """Open the link, then press its button as a browser would."""
    page = handle(get(f"/l/{link}"), world.portal, now)
    origin = {"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin", **headers}
    return handle(post(f"/l/{link}", f"proof={proof_of(page)}", **origin), world.portal, now)


def test_opening_a_link_shows_the_stack_and_a_button_and_changes_nothing(world: World) -> None:
    link = world.link()
    for method in ("GET", "HEAD", "GET"):
        answer = handle(Request(method, f"/l/{link}", DOMAIN), world.portal, NOW)
        assert answer["statusCode"] == 200
        assert answer["headers"] == HEADERS
        body = answer["body"]
        for shown in (STACK.name, STACK.account, STACK.region, "2026-11-25T", "<form"):
            assert shown in body
    assert world.bootstrap.calls == ["status"] * 3  # nothing started
    assert world.bootstrap.sent == []
    assert world.table_items() == []
    assert link not in body


def test_the_button_starts_one_authorization_shows_its_code_and_uses_the_link(
    world: World,
) -> None:
    link = world.link()
    answer = press(world, link)
    assert answer["statusCode"] == 200
    assert USER_CODE in answer["body"]
    assert 'href="https://idp.example/activate?user_code=WDJB-MJHT"' in answer["body"]
    assert world.bootstrap.authorizations == 1
    assert world.bootstrap.pending_link == world.tag(link)  # the bootstrap knows which link
    poll = {"action": "poll", "link": world.tag(link)}
    assert world.bootstrap.sent == [poll]  # polls in the background what this link started
    used = [item for item in world.table_items() if item.startswith("link#")]
    assert len(used) == 1
    # pressed again while the authorization is pending: the same one, nothing new started,
    # and no other poll queued (one is polling it)
    again = press(world, link)
    assert USER_CODE in again["body"]
    assert world.bootstrap.authorizations == 1
    assert world.bootstrap.sent == [poll]
    # once it is no longer pending, the used link is refused
    world.bootstrap.now = NOW + 1000
    refused = handle(get(f"/l/{link}"), world.portal, NOW + 1000)
    assert refused["statusCode"] == 403
    assert Refusal.REPLAYED.title in refused["body"]


def test_a_press_that_started_nothing_leaves_the_link_usable(world: World) -> None:
    link = world.link()
    world.bootstrap.refuse_start = True
    app = LinksApp(lambda url: world.portal, 0, lambda: NOW)
    page = handle(get(f"/l/{link}"), world.portal, NOW)
    origin = {"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin"}
    failed = app.handle(post(f"/l/{link}", f"proof={proof_of(page)}", **origin))
    assert failed["statusCode"] == 503
    assert not [item for item in world.table_items() if item.startswith("link#")]
    world.bootstrap.refuse_start = False
    assert USER_CODE in press(world, link)["body"]


def test_a_link_whose_first_press_died_before_starting_can_still_start(world: World) -> None:
    """The use is recorded, nothing was started (the function died in between): a press,
    now or later, starts the authorization, and then the link is spent."""
    link = world.link()
    claims = tokens.check(link, KEY_TEXT.encode(), EXPECTED, NOW)
    assert isinstance(claims, tokens.Claims)
    assert world.portal.use(claims, NOW - 3600) is not None
    assert USER_CODE in press(world, link)["body"]
    assert world.bootstrap.calls.count("start") == 1
    use = world.portal.used(claims)
    assert use is not None
    assert use.started_at == NOW
    world.bootstrap.now = NOW + 1000  # the authorization ended unapproved
    refused = handle(get(f"/l/{link}"), world.portal, NOW + 1000)
    assert Refusal.REPLAYED.title in refused["body"]


def test_a_press_again_queues_a_poll_only_when_none_was_queued(world: World) -> None:
    """A press that started the authorization but died before its poll was queued is made up
    by the next press of that link; once one is queued, presses queue none (a used link
    cannot spend the hour's polls)."""
    link = world.link()
    claims = tokens.check(link, KEY_TEXT.encode(), EXPECTED, NOW)
    assert isinstance(claims, tokens.Claims)
    world.bootstrap.refuse_start = True  # the start failed: the use is given back
    assert press(world, link)["statusCode"] == 503
    world.bootstrap.refuse_start = False
    started = press(world, link)
    assert world.bootstrap.sent == [{"action": "poll", "link": world.tag(link)}]
    assert USER_CODE in started["body"]
    world.clients["dynamodb"].update_item(  # as if the press had died before queueing it
        TableName="links",
        Key={"pk": {"S": link_key(claims.nonce)}},
        UpdateExpression="REMOVE followed_at",
    )
    world.bootstrap.sent.clear()
    for _ in range(POLLS_PER_HOUR + 3):
        assert USER_CODE in press(world, link)["body"]
    assert world.bootstrap.sent == [{"action": "poll", "link": world.tag(link)}]
    assert world.bootstrap.authorizations == 1


@pytest.mark.parametrize("started_by", ["operator", "another link"])
def test_a_link_neither_shows_nor_polls_an_authorization_it_did_not_start(
    world: World, started_by: str
) -> None:
    """An operator's authorization (``cmstoken-admin bootstrap --new-identity`` included) or
    another link's is pending: this link's page says only that one is pending and until
    when; its button shows no code, starts nothing, queues no poll, and the link stays
    usable for after."""
    other = world.link()
    world.bootstrap.pending_until = NOW + 600
    world.bootstrap.pending_link = None if started_by == "operator" else world.tag(other)
    link = world.link()
    page = handle(get(f"/l/{link}"), world.portal, NOW)
    proof = tokens.form_proof(KEY_TEXT.encode(), _claims(link))
    origin = {"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin"}
    pressed = handle(post(f"/l/{link}", f"proof={proof}", **origin), world.portal, NOW)
    for answer in (page, pressed):
        assert answer["statusCode"] == 409
        assert "Another authorization is pending" in answer["body"]
        assert "2026-11-24T06:10:00Z" in answer["body"]  # until when
        assert USER_CODE not in answer["body"]
        assert "activate" not in answer["body"]
        assert "<form" not in answer["body"]
    assert world.bootstrap.authorizations == 0
    assert world.bootstrap.sent == []
    assert world.table_items() == []  # the link stays usable
    world.bootstrap.now = NOW + 601  # after it ends, the link starts its own
    assert USER_CODE in press(world, link, NOW + 601)["body"]
    assert world.bootstrap.pending_link == world.tag(link)


def test_a_used_link_meeting_another_authorization_is_refused_as_used(world: World) -> None:
    link = world.link()
    press(world, link)
    world.bootstrap.now = NOW + 1000  # its own ended; an operator's is pending now
    world.bootstrap.pending_until, world.bootstrap.pending_link = NOW + 1600, None
    for request in (get(f"/l/{link}"), post(f"/l/{link}", "proof=x")):
        answer = handle(request, world.portal, NOW + 1000)
        assert Refusal.REPLAYED.title in answer["body"]
        assert USER_CODE not in answer["body"]


def _claims(link: str) -> tokens.Claims:
    claims = tokens.check(link, KEY_TEXT.encode(), EXPECTED, NOW)
    assert isinstance(claims, tokens.Claims)
    return claims


@pytest.mark.parametrize(
    ("make", "refusal"),
    [
        (lambda w: "v1.not-a-link.at-all", Refusal.FORGED),
        (lambda w: tamper(w.link()), Refusal.TAMPERED),
        (lambda w: w.link(now=NOW - 86_401), Refusal.EXPIRED),
        (lambda w: w.link(binding=AUTHORIZED_AT - 1), Refusal.VOID_AUTHORIZED),
    ],
    ids=["forged", "tampered", "expired", "void-after-a-new-authorization"],
)
def test_a_link_that_cannot_be_used_is_refused_with_its_reason(
    world: World, make: Any, refusal: Refusal
) -> None:
    link = make(world)
    for request in (get(f"/l/{link}"), post(f"/l/{link}", "proof=x")):
        answer = handle(request, world.portal, NOW)
        assert answer["statusCode"] == 403
        assert refusal.title in answer["body"]
        assert "Nothing was changed" in answer["body"]
        # the stack is named only to a link it signed (test_link_strangers)
        named = refusal in (Refusal.EXPIRED, Refusal.VOID_AUTHORIZED)
        assert (f"cmstoken-admin --stack {STACK.name}" in answer["body"]) is named
    assert "start" not in world.bootstrap.calls
    assert world.table_items() == []


def test_a_rotated_key_voids_every_outstanding_link(world: World) -> None:
    link = world.link()
    assert handle(get(f"/l/{link}"), world.portal, NOW)["statusCode"] == 200
    world.clients["secretsmanager"].put_secret_value(
        SecretId=world.portal.key_secret_id, SecretString="N" * 64
    )
    answer = handle(get(f"/l/{link}"), world.portal, NOW)
    assert answer["statusCode"] == 403
    assert Refusal.VOID_KEY.title in answer["body"]


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
        {"origin": "https://evil.example"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
    ],
)
def test_a_cross_site_post_is_refused(world: World, headers: dict[str, str]) -> None:
    link = world.link()
    answer = press(world, link, NOW, **headers)
    assert answer["statusCode"] == 403
    assert "another site" in html.unescape(answer["body"])
    assert "start" not in world.bootstrap.calls
    assert world.table_items() == []


@pytest.mark.parametrize("body", ["", "proof=", "proof=abc", "proof=a&proof=b", "other=1"])
def test_a_post_without_the_pages_proof_is_refused(world: World, body: str) -> None:
    answer = handle(post(f"/l/{world.link()}", body), world.portal, NOW)
    assert answer["statusCode"] == 403
    assert "not the link's form" in html.unescape(answer["body"])
    assert "start" not in world.bootstrap.calls


def test_the_proof_of_one_link_does_not_work_for_another(world: World) -> None:
    first = world.link()
    page = handle(get(f"/l/{first}"), world.portal, NOW)
    other = world.link(now=NOW - 5)  # another link (another nonce would do the same)
    claims = tokens.check(other, KEY_TEXT.encode(), _expected(), NOW)
    assert isinstance(claims, tokens.Claims)
    answer = handle(post(f"/l/{other}", f"proof={proof_of(page)}x"), world.portal, NOW)
    assert answer["statusCode"] == 403


def _expected() -> tokens.Expected:
    return tokens.Expected(STACK.name, STACK.account, STACK.region, AUTHORIZED_AT)


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (get("/"), 404),
        (get("/favicon.ico"), 404),
        (get("/l/"), 404),
        (get("/l/a/b"), 404),
        (get("/l/" + "a" * 513), 404),
        (Request("PUT", "/l/x", DOMAIN), 405),
        (Request("DELETE", "/l/x", DOMAIN), 405),
        (Request("POST", "/l/x", DOMAIN, body=b"p" * 4097), 413),
    ],
)
def test_other_paths_methods_and_sizes_are_refused_before_anything_is_read(
    world: World, request_: Request, status: int
) -> None:
    answer = handle(request_, world.portal, NOW)
    assert answer["statusCode"] == status
    assert world.bootstrap.calls == []
    if status == 405:
        assert answer["headers"]["Allow"] == "GET, HEAD, POST"


def test_starts_beyond_the_hourly_limit_are_refused(world: World) -> None:
    for second in range(2):  # the world allows two an hour
        world.bootstrap.pending_until = None
        world.bootstrap.now = NOW + second
        assert USER_CODE in press(world, world.link(now=NOW + second), now=NOW + second)["body"]
    world.bootstrap.pending_until = None
    answer = press(world, world.link(now=NOW + 2), now=NOW + 2)
    assert answer["statusCode"] == 429
    assert int(answer["headers"]["Retry-After"]) == 3600 - (NOW + 2) % 3600
    assert world.bootstrap.calls.count("start") == 2


def test_an_unreachable_stack_is_a_503_page_and_its_kind_is_logged(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    link = world.link()
    world.bootstrap.down = True
    app = LinksApp(lambda url: world.portal, 0, lambda: NOW)
    with caplog.at_level(logging.INFO, logger="cmstoken"):
        answer = app.handle(get(f"/l/{link}"))
    assert answer["statusCode"] == 503
    assert answer["headers"]["Retry-After"] == "60"
    logged = records(caplog)
    assert FunctionUnavailableError.__name__ in logged
    assert link.split(".")[1] not in logged


def test_nothing_secret_reaches_the_log_or_a_refusal(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """The link (its path), the key and the user code never appear in the function's log; a
    refusal's page never echoes the link."""
    app = LinksApp(lambda url: world.portal, 0, lambda: NOW)
    link = world.link()
    with caplog.at_level(logging.DEBUG, logger="cmstoken"):
        page = app.handle(get(f"/l/{link}"))
        proof = proof_of(page)
        app.handle(post(f"/l/{link}", f"proof={proof}", origin=f"https://{DOMAIN}"))
        refused = app.handle(get(f"/l/{tamper(link)}"))
    logged = records(caplog)
    for secret in (link.split(".")[1], link.split(".")[2], KEY_TEXT, USER_CODE, proof):
        assert secret not in logged
    assert tamper(link).split(".")[2] not in refused["body"]
    assert "'status': 200" in logged  # the control: the log has the pages' records


def records(caplog: pytest.LogCaptureFixture) -> str:
    """Every record of the library's loggers with its extra fields, as the JSON log has them."""
    return "\n".join(str(vars(record)) for record in caplog.records)


@pytest.mark.parametrize(
    ("status", "said"),
    [
        ("active", "current credential keeps working"),
        ("reauthorization_required", "no working credential now"),
        ("absent", "no working credential now"),
    ],
)
def test_the_page_says_whether_the_stack_works_meanwhile(
    world: World, status: str, said: str
) -> None:
    world.bootstrap.status = status
    world.bootstrap.authorized_at = None if status == "absent" else AUTHORIZED_AT
    link = world.link(binding=0 if status == "absent" else AUTHORIZED_AT)
    answer = handle(get(f"/l/{link}"), world.portal, NOW)
    assert said in answer["body"]
