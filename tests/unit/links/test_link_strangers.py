"""The links' URL is public: whoever reaches it costs the stack no more than the link they hold
proves (issue 29, items 1 and 2). A request that is not a link addressed to this stack reads
nothing; one whose signature fails reads the signing key only; the stack's state (the
bootstrap's ``status``, which reads both secrets) is read only for a link this stack signed.
Until the signature holds, no page (the refusals, the 503) names the stack, its account or its
Region. Every AWS operation is counted as botocore sends it (moto in-process)."""

from __future__ import annotations

import html
from collections.abc import Callable

import pytest

from cmstoken.links import tokens
from cmstoken.links.refusals import Refusal
from cmstoken.links.stack import Stack
from cmstoken.links.web import Request, handle
from unit.links.links_world import (
    AUTHORIZED_AT,
    DOMAIN,
    KEY_TEXT,
    NOW,
    STACK,
    World,
    tamper,
    world,
)

__all__ = ["world"]  # the fixture

OTHER_KEY = b"N" * 64


def signed(stack: Stack, key: bytes = KEY_TEXT.encode(), now: int = NOW) -> str:
    token, _ = tokens.new_link(
        stack, binding=AUTHORIZED_AT, key=key, now=now, nonce=b"\x07" * tokens.NONCE_BYTES
    )
    return token


# Links that are not addressed to this stack: refused before anything is read.
NOT_ADDRESSED: dict[str, Callable[[World], str]] = {
    "one character": lambda w: "x",
    "512 characters": lambda w: "v" * 512,
    "malformed": lambda w: "v1.not-a-link.at-all",
    "another stack's": lambda w: signed(Stack("other-stack", STACK.account, STACK.region)),
    "another account's": lambda w: signed(Stack(STACK.name, "210987654321", STACK.region)),
    "another Region's": lambda w: signed(Stack(STACK.name, STACK.account, "us-east-1")),
    "dated an hour ahead": lambda w: signed(STACK, now=NOW + 3600),
}
# Links addressed to this stack whose signature fails: the signing key is read, nothing else.
UNSIGNED: dict[str, tuple[Callable[[World], str], Refusal]] = {
    "tampered": (lambda w: tamper(w.link()), Refusal.TAMPERED),
    "signed with another key": (lambda w: signed(STACK, key=OTHER_KEY), Refusal.VOID_KEY),
}
PRESS = {"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin"}


def requests(link: str) -> list[Request]:
    path = f"/l/{link}"
    return [
        Request("GET", path, DOMAIN),
        Request("HEAD", path, DOMAIN),
        Request("POST", path, DOMAIN, PRESS, b"proof=" + b"A" * 43),
    ]


def assert_says_not_where(body: str) -> None:
    text = html.unescape(body)
    for where in (STACK.name, STACK.account, STACK.region):
        assert where not in text
    assert "cmstoken-admin --stack <stack name> bootstrap" in text  # the fallback, unnamed


@pytest.mark.parametrize("make", NOT_ADDRESSED.values(), ids=NOT_ADDRESSED)
def test_a_request_that_is_not_a_link_of_this_stack_reads_nothing(
    world: World, make: Callable[[World], str]
) -> None:
    for request in requests(make(world)):
        answer = handle(request, world.portal, NOW)
        assert answer["statusCode"] == 403
        assert Refusal.FORGED.title in answer["body"]
        assert_says_not_where(answer["body"])
    assert world.aws_calls == []
    assert world.bootstrap.calls == []
    assert world.bootstrap.sent == []


@pytest.mark.parametrize(("make", "refusal"), UNSIGNED.values(), ids=UNSIGNED)
def test_a_link_whose_signature_fails_reads_the_signing_key_only(
    world: World, make: Callable[[World], str], refusal: Refusal
) -> None:
    link = make(world)
    for request in requests(link):
        answer = handle(request, world.portal, NOW)
        assert answer["statusCode"] == 403
        assert refusal.title in answer["body"]
        assert_says_not_where(answer["body"])
    assert world.aws_calls == ["GetSecretValue"] * 3  # the key, once per request
    assert world.bootstrap.calls == []
    assert world.bootstrap.sent == []


def test_the_link_that_passes_the_same_checks_reads_the_stack_and_says_where(
    world: World,
) -> None:
    """The control: the stack's own link, through the same requests, reads the key and the
    state, and its page names the stack."""
    link = world.link()
    answer = handle(Request("GET", f"/l/{link}", DOMAIN), world.portal, NOW)
    assert answer["statusCode"] == 200
    assert world.aws_calls[0] == "GetSecretValue"
    assert world.bootstrap.calls == ["status"]
    for where in (STACK.name, STACK.account, STACK.region):
        assert where in answer["body"]


@pytest.mark.parametrize(
    ("make", "refusal"),
    [
        (lambda w: w.link(now=NOW - 86_401), Refusal.EXPIRED),
        (lambda w: w.link(binding=AUTHORIZED_AT - 1), Refusal.VOID_AUTHORIZED),
    ],
    ids=["expired", "void-after-a-new-authorization"],
)
def test_a_refusal_of_a_link_this_stack_signed_says_where(
    world: World, make: Callable[[World], str], refusal: Refusal
) -> None:
    answer = handle(Request("GET", f"/l/{make(world)}", DOMAIN), world.portal, NOW)
    assert answer["statusCode"] == 403
    assert refusal.title in answer["body"]
    assert f"cmstoken-admin --stack {STACK.name} bootstrap" in html.unescape(answer["body"])
    assert (world.bootstrap.calls == []) is (refusal is Refusal.EXPIRED)


def test_an_unreadable_signing_key_is_a_503_that_says_not_where(world: World) -> None:
    world.clients["secretsmanager"].delete_secret(
        SecretId=world.portal.key_secret_id, ForceDeleteWithoutRecovery=True
    )
    for request in requests(world.link()):
        answer = handle(request, world.portal, NOW)
        assert answer["statusCode"] == 503
        assert_says_not_where(answer["body"])
    assert world.bootstrap.calls == []


def test_an_unreachable_bootstrap_behind_a_signed_link_is_a_503_that_says_where(
    world: World,
) -> None:
    world.bootstrap.down = True
    answer = handle(Request("GET", f"/l/{world.link()}", DOMAIN), world.portal, NOW)
    assert answer["statusCode"] == 503
    assert STACK.name in answer["body"]
    assert STACK.account in answer["body"]
