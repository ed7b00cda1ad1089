"""The bootstrap as the links function reaches it: through its alias ``links`` (the only
qualifier the links' role may invoke, tests/unit/template/test_one_click.py), a request asks
only what a link may (issue 29, items 3 and 4): an action and the asking link's tag; never a
new identity or the free-trial choice; a status without user codes; a start and a poll of
what that link started only. Against the emulator (over HTTP) and moto."""

from __future__ import annotations

from typing import Any

import pytest

from cmstoken.core.clock import parse_iso
from cmstoken.core.errors import ConfigurationError
from cmstoken.core.link_tags import LINKS_ALIAS
from cmstoken.core.version_budget import Writer
from harness import REFRESH_SECRET, Stack
from support import load_event

pytestmark = pytest.mark.integration

MINE = "0123456789abcdef" * 2  # a link's tag
OTHER = "fedcba9876543210" * 2
OUTSIDE = Writer.OUTSIDE.limit  # the most versions outside callers may fill


def through_links(stack: Stack, event: dict[str, Any]) -> Any:
    return stack.invoke("bootstrap", event, qualifier=LINKS_ALIAS)


def asked(stack: Stack, endpoint: str) -> int:
    """How many requests the identity provider got at ``endpoint``."""
    return sum(1 for request in stack.emulator.requests if request.endpoint == endpoint)


@pytest.mark.parametrize(
    "event",
    [
        {"action": "start", "link": MINE, "allow_new_identity": True},
        {"action": "start", "link": MINE, "free_trial": True},
        {"action": "poll", "link": MINE, "allow_new_identity": True},
        {"action": "poll", "link": MINE, "max_wait_seconds": 5},
        {"action": "start"},
        {"action": "poll"},
        {"action": "start", "link": "not-a-tag"},
        {"action": "start", "link": MINE.upper()},
    ],
    ids=[
        "new-identity",
        "free-trial",
        "poll-new-identity",
        "poll-wait",
        "start-without-link",
        "poll-without-link",
        "malformed-tag",
        "uppercase-tag",
    ],
)
def test_through_the_alias_a_request_asks_only_what_a_link_may(
    stack: Stack, event: dict[str, Any]
) -> None:
    stack.seed()
    with pytest.raises(ConfigurationError, match=f"through the alias '{LINKS_ALIAS}'"):
        through_links(stack, event)
    assert stack.refresh_document().pending is None  # nothing started
    assert asked(stack, "device_code") == 0


def test_an_operators_request_carries_no_links_tag(stack: Stack) -> None:
    stack.seed()
    with pytest.raises(ConfigurationError, match="'link' is sent only through the alias"):
        stack.invoke("bootstrap", {"action": "start", "link": MINE})
    assert stack.refresh_document().pending is None


def test_an_operators_authorization_is_neither_shown_nor_polled_through_the_alias(
    stack: Stack,
) -> None:
    """``cmstoken-admin bootstrap --new-identity`` is pending: through the alias, its code is
    never shown, a link's start gets only that it is pending, and a link's poll polls nothing,
    so nobody holding a link can approve it with their own account and switch the stack."""
    stack.seed()
    started = stack.invoke("bootstrap", load_event("bootstrap-start-new-identity"))
    assert started["status"] == "pending"
    before = stack.refresh_document().pending
    assert before is not None
    assert (before.allow_new_identity, before.link) == (True, None)
    status = through_links(stack, {"action": "status"})
    assert status["pending"] == {"link": None, "expires_at": started["expires_at"]}
    for event in ({"action": "start", "link": MINE}, {"action": "poll", "link": MINE}):
        answer = through_links(stack, event)
        assert answer["status"] == "pending_elsewhere"
        assert answer["expires_at"] == started["expires_at"]
        for shown in (started["user_code"], started["verification_uri_complete"]):
            assert shown not in str(answer)
            assert shown not in str(status)
    assert asked(stack, "device_code") == 1  # the operator's only
    assert asked(stack, "device_token") == 0  # nobody polled it
    assert stack.refresh_document().pending == before
    # the operator still sees and polls it
    operator = stack.invoke("bootstrap", {"action": "status"})["pending"]
    assert operator["user_code"] == started["user_code"]


def test_a_links_authorization_keeps_the_stacks_identity_and_is_the_links_alone(
    stack: Stack,
) -> None:
    """A link starts an authorization (the stack's free-trial choice, no new identity) and
    polls it; another link neither sees nor polls it; approved by another identity, it is
    refused and the credential stays."""
    first = stack.invoke("bootstrap", {"action": "start"})  # the operator's first, pinning it
    stack.emulator.approve(first["user_code"])
    assert stack.invoke("bootstrap", load_event("bootstrap-poll"))["status"] == "authorized"
    credential = stack.refresh_document().credential
    started = through_links(stack, {"action": "start", "link": MINE})
    assert started["status"] == "pending"
    pending = stack.refresh_document().pending
    assert pending is not None
    assert (pending.link, pending.allow_new_identity, pending.free_trial) == (MINE, False, False)
    assert through_links(stack, {"action": "start", "link": MINE})["user_code"] == pending.user_code
    assert asked(stack, "device_code") == 2  # the same one, shown again to its link
    other = through_links(stack, {"action": "start", "link": OTHER})
    assert other["status"] == "pending_elsewhere"
    assert pending.user_code not in str(other)
    stack.emulator.approve(pending.user_code, subject="auth0|someone-else")
    polled = asked(stack, "device_token")
    assert through_links(stack, {"action": "poll", "link": OTHER})["status"] == "pending_elsewhere"
    assert asked(stack, "device_token") == polled
    refused = through_links(stack, {"action": "poll", "link": MINE})
    assert refused["status"] == "failed"
    assert "approved by a different identity" in refused["message"]
    assert stack.refresh_document().credential == credential


def test_a_links_start_past_the_outside_callers_versions_is_refused_before_anything(
    stack: Stack,
) -> None:
    """17 versions of the refresh credential in use (the most outside callers may fill,
    docs/how-rotation-works.md, "The version budget"): a link's start is refused before any
    write and before the identity provider is asked, saying when a version ages out; an
    operator's start, whose room is kept from outside callers, still starts."""
    stack.seed()
    secret = REFRESH_SECRET
    text = stack.secretsmanager.get_secret_value(SecretId=secret)["SecretString"]
    while len(stack.secretsmanager.list_secret_version_ids(SecretId=secret)["Versions"]) < OUTSIDE:
        stack.secretsmanager.put_secret_value(SecretId=secret, SecretString=text)
    before = stack.secretsmanager.get_secret_value(SecretId=secret)["VersionId"]
    refused = through_links(stack, {"action": "start", "link": MINE})
    assert (refused["status"], refused["reason"]) == ("failed", "version_budget")
    assert (
        f"{OUTSIDE} are in use, of the {OUTSIDE} that callers outside the stack may fill"
        in refused["message"]
    )
    assert parse_iso(refused["retry_at"]) > stack.clock.now()
    assert stack.secretsmanager.get_secret_value(SecretId=secret)["VersionId"] == before
    assert asked(stack, "device_code") == 0
    started = stack.invoke("bootstrap", {"action": "start"})
    assert started["status"] == "pending"


def test_an_operators_start_replaces_a_links_authorization_and_is_polled_alone(
    stack: Stack,
) -> None:
    """A link's authorization is pending when the operator re-authorizes: the operator's start
    gets a new code (no two pollers of one code, which would answer each other's
    ``slow_down``), the link's poll then polls nothing, and the operator's approval is
    authorized."""
    stack.seed()
    links = through_links(stack, {"action": "start", "link": MINE})
    assert links["status"] == "pending"
    started = stack.invoke("bootstrap", {"action": "start"})
    assert started["status"] == "pending"
    assert started["user_code"] != links["user_code"]
    assert asked(stack, "device_code") == 2
    pending = stack.refresh_document().pending
    assert pending is not None
    assert (pending.user_code, pending.link) == (started["user_code"], None)
    assert through_links(stack, {"action": "poll", "link": MINE})["status"] == "pending_elsewhere"
    assert asked(stack, "device_token") == 0
    stack.emulator.approve(started["user_code"])
    assert stack.invoke("bootstrap", load_event("bootstrap-poll"))["status"] == "authorized"
