"""Re-authorization link tokens: the design's wire format, each refusal with a control that
differs from it in that one respect only, the order refusals are decided in, the form proof,
and the words of the 403 pages (which never carry any part of a link)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from cmstoken.links.tokens import (
    Claims,
    Refusal,
    check,
    check_form_proof,
    form_proof,
    issue,
    key_id,
    sign,
)
from unit.links.link_samples import (
    CLAIMS,
    KEY,
    NONCE,
    NOW,
    OTHER_KEY,
    b64url,
    document_of,
    expected_for,
    lenient,
    respelled,
    token_of,
)

TOKEN = sign(CLAIMS, KEY)


# -- format ----------------------------------------------------------------------------------


def test_the_key_id_is_the_first_16_hex_digits_of_the_keys_sha256() -> None:
    assert key_id(KEY) == hashlib.sha256(KEY).hexdigest()[:16]
    assert key_id(KEY) != key_id(OTHER_KEY)


def test_a_token_is_the_designs_format_and_checks_back_to_its_claims() -> None:
    assert token_of(document_of(CLAIMS)) == TOKEN
    payload = TOKEN.split(".")[1]
    assert json.loads(lenient(payload)) == document_of(CLAIMS)
    assert check(TOKEN, KEY, expected_for(CLAIMS), NOW) == CLAIMS


def test_issue_builds_claims_from_the_stack_the_time_and_16_random_bytes() -> None:
    claims = issue(
        stack=CLAIMS.stack,
        account=CLAIMS.account,
        region=CLAIMS.region,
        binding=CLAIMS.binding,
        key=KEY,
        now=NOW - 600,
        lifetime=86_400,
        nonce=bytes(range(16)),
    )
    assert claims == CLAIMS
    assert len(claims.nonce) == 22


def _issue(**changes: Any) -> Claims:
    arguments: dict[str, Any] = {
        "stack": "cmstoken-prod",
        "account": "123456789012",
        "region": "eu-central-1",
        "binding": 0,
        "key": KEY,
        "now": NOW,
        "lifetime": 3600,
        "nonce": bytes(16),
    }
    return issue(**(arguments | changes))


@pytest.mark.parametrize("lifetime", [60, 61, 86_399, 86_400])
def test_a_lifetime_from_a_minute_to_a_day_is_issued(lifetime: int) -> None:
    assert _issue(lifetime=lifetime).expires_at == NOW + lifetime


@pytest.mark.parametrize(
    "changes",
    [
        {"lifetime": 59},
        {"lifetime": 86_401},
        {"lifetime": 0},
        {"nonce": bytes(15)},
        {"nonce": bytes(17)},
        {"stack": "1stack"},
        {"stack": "stack_name"},
        {"stack": "s" * 129},
        {"account": "12345678901"},
        {"region": "EU-central-1"},
        {"binding": -1},
        {"now": -1},
    ],
    ids=str,
)
def test_issue_refuses_what_a_link_cannot_carry(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="link") as raised:
        _issue(**({"nonce": b"\xfe" * 16} | changes))
    assert b64url(b"\xfe" * 16)[:8] not in str(raised.value)


def test_sign_refuses_claims_that_name_another_key_a_short_key_and_ill_typed_claims() -> None:
    with pytest.raises(ValueError, match="cannot be signed") as raised:
        sign(CLAIMS, OTHER_KEY)
    assert NONCE not in str(raised.value)
    with pytest.raises(ValueError, match="shorter than 32 bytes"):
        sign(replace(CLAIMS, key_id=key_id(KEY[:31])), KEY[:31])
    assert sign(replace(CLAIMS, key_id=key_id(KEY[:32])), KEY[:32])  # control
    with pytest.raises(ValueError, match="cannot be signed"):
        sign(replace(CLAIMS, binding=True), KEY)


def test_check_raises_for_a_short_key_only_and_never_with_the_token() -> None:
    with pytest.raises(ValueError, match="shorter than 32 bytes") as raised:
        check(TOKEN, KEY[:31], expected_for(CLAIMS), NOW)
    assert not any(part in str(raised.value) for part in TOKEN.split("."))


# -- each refusal, with its control ------------------------------------------------------------


def _sized(length: int) -> tuple[str, Claims]:
    """A validly signed token of ``length`` characters and its claims (a long binding and a
    long stack name make the length)."""
    for digits in range(10, 120):
        for size in range(1, 129):
            claims = replace(CLAIMS, stack="s" * size, binding=10**digits)
            token = token_of(document_of(claims))
            if len(token) == length:
                return token, claims
    raise AssertionError(length)


def test_the_longest_possible_token_checks_and_a_longer_one_is_forged() -> None:
    # 511 is the longest token up to 512: an unpadded base64url text is never 4n + 1 long.
    token, claims = _sized(511)
    assert sign(claims, KEY) == token
    assert check(token, KEY, expected_for(claims), NOW) == claims
    token, claims = _sized(513)
    assert check(token, KEY, expected_for(claims), NOW) is Refusal.FORGED
    with pytest.raises(ValueError, match="longer than 512"):
        sign(claims, KEY)


def _swap_last(part: int, character: str) -> Callable[[str], str]:
    def change(token: str) -> str:
        parts = token.split(".")
        parts[part] = parts[part][:-1] + character
        return ".".join(parts)

    return change


def _respell(part: int) -> Callable[[str], str]:
    def change(token: str) -> str:
        parts = token.split(".")
        parts[part] = respelled(parts[part])
        return ".".join(parts)

    return change


MALFORMED: dict[str, Callable[[str], str]] = {
    "empty": lambda token: "",
    "not ascii": lambda token: token[:10] + "\u0410" + token[11:],  # a Cyrillic A
    "two parts": lambda token: token.rsplit(".", 1)[0],
    "four parts": lambda token: token + ".AAAA",
    "v2": lambda token: "v2" + token[2:],
    "V1": lambda token: "V1" + token[2:],
    "padded payload": lambda token: token.replace(".", "=.").replace("=.", ".", 1),
    "padded mac": lambda token: token + "=",
    "standard base64 alphabet": _swap_last(2, "+"),
    "space": lambda token: token + " ",
    "newline": lambda token: token + "\n",
    "short mac": lambda token: token[:-4],
    "non-canonical mac": _respell(2),
    "non-canonical payload": _respell(1),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_token_is_forged(name: str) -> None:
    # CLAIMS' payload is not a multiple of 3 bytes: its last character has bits to respell.
    assert len(json.dumps(document_of(CLAIMS), separators=(",", ":"))) % 3 != 0
    token = MALFORMED[name](TOKEN)
    assert token != TOKEN
    assert check(token, KEY, expected_for(CLAIMS), NOW) is Refusal.FORGED


def _edit(**changes: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda document: document | changes


def _without(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda document: {k: v for k, v in document.items() if k != name}


def _text(change: Callable[[str], str]) -> Callable[[dict[str, Any]], Any]:
    return lambda document: change(json.dumps(document, separators=(",", ":")))


# Each signed with the right key: the payload alone makes them forged.
ILL_FORMED: dict[str, Callable[[dict[str, Any]], Any]] = {
    "extra key": _edit(x=1),
    "missing nonce": _without("n"),
    "binding true": _edit(b=True),
    "binding float": _edit(b=1_794_000_000.0),
    "binding string": _edit(b="1794000000"),
    "binding null": _edit(b=None),
    "negative binding": _edit(b=-1),
    "issued at float": _edit(i=float(NOW - 600)),
    "nonce 21 characters": _edit(n=NONCE[:21]),
    "nonce 23 characters": _edit(n=NONCE + "A"),
    "nonce padded": _edit(n=NONCE + "=="),
    "nonce non-canonical": _edit(n=respelled(NONCE)),
    "nonce not a string": _edit(n=12345),
    "key id upper case": _edit(k=key_id(KEY).upper()),
    "lifetime over a day": _edit(e=NOW - 600 + 86_401),
    "lifetime under a minute": _edit(e=NOW - 600 + 59),
    "expires before issued": _edit(e=NOW - 700),
    "a list": lambda document: list(document.values()),
    "a string": lambda document: '"v1"',
    "spaces": lambda document: json.dumps(document),
    "other key order": lambda document: dict(sorted(document.items())),
    "duplicate key": _text(lambda text: text.replace("{", '{"b":0,', 1)),
    "escaped character": _text(lambda text: text.replace("cmstoken", "cms\\u0074oken")),
    "raw utf-8": _text(lambda text: text.replace("cmstoken", "cmst\u00f6ken")),
    "not utf-8": lambda document: b"\xff\xfe{}",
    "not json": lambda document: "{s:1}",
    "nan": _text(lambda text: text.replace("1794000000", "NaN")),
    "deeply nested": lambda document: "[" * 200 + "]" * 200,
}


@pytest.mark.parametrize("name", sorted(ILL_FORMED))
def test_an_ill_formed_payload_is_forged_even_with_a_valid_mac(name: str) -> None:
    payload = ILL_FORMED[name](document_of(CLAIMS))
    assert check(token_of(payload), KEY, expected_for(CLAIMS), NOW) is Refusal.FORGED
    assert check(token_of(document_of(CLAIMS)), KEY, expected_for(CLAIMS), NOW) == CLAIMS


def test_digits_of_other_scripts_are_not_an_account_id() -> None:
    arabic = "\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669\u0660\u0661\u0662"
    token = token_of(document_of(CLAIMS) | {"a": arabic})  # escaped: ASCII JSON
    assert check(token, KEY, expected_for(CLAIMS, account=arabic), NOW) is Refusal.FORGED


@pytest.mark.parametrize(
    "changes",
    [{"stack": "cmstoken-test"}, {"account": "210987654321"}, {"region": "eu-west-1"}],
    ids=str,
)
def test_a_link_for_another_stack_account_or_region_is_forged(changes: dict[str, str]) -> None:
    assert check(TOKEN, KEY, expected_for(CLAIMS, **changes), NOW) is Refusal.FORGED
    assert check(TOKEN, KEY, expected_for(CLAIMS), NOW) == CLAIMS


def test_a_link_issued_more_than_five_minutes_ahead_is_forged() -> None:
    claims = replace(CLAIMS, issued_at=NOW + 301, expires_at=NOW + 301 + 3600)
    assert check(sign(claims, KEY), KEY, expected_for(claims), NOW) is Refusal.FORGED
    claims = replace(CLAIMS, issued_at=NOW + 300, expires_at=NOW + 300 + 3600)
    assert check(sign(claims, KEY), KEY, expected_for(claims), NOW) == claims


def test_a_link_signed_before_the_key_was_rotated_is_void() -> None:
    assert check(TOKEN, OTHER_KEY, expected_for(CLAIMS), NOW) is Refusal.VOID_KEY
    assert check(TOKEN, KEY, expected_for(CLAIMS), NOW) == CLAIMS


def test_a_link_naming_the_current_key_but_signed_with_another_is_tampered() -> None:
    token = token_of(document_of(CLAIMS), OTHER_KEY)
    assert check(token, KEY, expected_for(CLAIMS), NOW) is Refusal.TAMPERED
    assert check(token_of(document_of(CLAIMS), KEY), KEY, expected_for(CLAIMS), NOW) == CLAIMS


def test_a_changed_binding_or_mac_is_tampered() -> None:
    changed = token_of(document_of(CLAIMS) | {"b": 0}).split(".")[1]
    payload, mac = TOKEN.split(".")[1:]
    assert check(f"v1.{changed}.{mac}", KEY, expected_for(CLAIMS), NOW) is Refusal.TAMPERED
    other_mac = b64url(bytes(32))
    assert check(f"v1.{payload}.{other_mac}", KEY, expected_for(CLAIMS), NOW) is Refusal.TAMPERED


def test_a_link_expires_at_its_expiry_time() -> None:
    expected = expected_for(CLAIMS)
    assert check(TOKEN, KEY, expected, CLAIMS.expires_at) is Refusal.EXPIRED
    assert check(TOKEN, KEY, expected, CLAIMS.expires_at + 10**6) is Refusal.EXPIRED
    assert check(TOKEN, KEY, expected, CLAIMS.expires_at - 1) == CLAIMS


@pytest.mark.parametrize("current", [0, CLAIMS.binding + 1, CLAIMS.binding - 1])
def test_a_link_issued_before_a_re_authorization_is_void(current: int) -> None:
    expected = expected_for(CLAIMS, binding=current)
    assert check(TOKEN, KEY, expected, NOW) is Refusal.VOID_AUTHORIZED
    unbound = replace(CLAIMS, binding=0)
    assert check(sign(unbound, KEY), KEY, expected_for(unbound), NOW) == unbound


# -- the order refusals are decided in ---------------------------------------------------------


def test_the_first_refusal_in_the_designs_order_is_the_one_given() -> None:
    late, moved = CLAIMS.expires_at, expected_for(CLAIMS, binding=0)
    forged_too = expected_for(CLAIMS, region="eu-west-1", binding=0)
    assert check(TOKEN, OTHER_KEY, forged_too, late) is Refusal.FORGED
    assert check(TOKEN, OTHER_KEY, moved, late) is Refusal.VOID_KEY
    tampered = token_of(document_of(CLAIMS), OTHER_KEY)
    assert check(tampered, KEY, forged_too, late) is Refusal.FORGED
    assert check(tampered, KEY, moved, late) is Refusal.TAMPERED
    assert check(TOKEN, KEY, moved, late) is Refusal.EXPIRED
    assert check(TOKEN, KEY, moved, NOW) is Refusal.VOID_AUTHORIZED


def test_the_reasons_are_in_the_designs_order_with_replayed_last() -> None:
    assert [reason.value for reason in Refusal] == [
        "forged",
        "void_key",
        "tampered",
        "expired",
        "void_authorized",
        "replayed",
    ]
    assert "REPLAYED" in (Refusal.__doc__ or "")
    assert "caller" in (Refusal.__doc__ or "")


# -- the form's proof --------------------------------------------------------------------------


def test_the_form_proof_holds_for_its_link_only() -> None:
    proof = form_proof(KEY, CLAIMS)
    assert check_form_proof(KEY, CLAIMS, proof)
    assert not check_form_proof(KEY, replace(CLAIMS, nonce=b64url(bytes(16))), proof)
    assert not check_form_proof(OTHER_KEY, CLAIMS, proof)
    assert proof != TOKEN.split(".")[2]
    for posted in ("", proof[:-1], proof + "A", proof.upper(), "\u00e9" + proof[1:], "\udc80"):
        assert not check_form_proof(KEY, CLAIMS, posted)


def test_the_form_proof_is_an_hmac_over_form_and_the_nonce() -> None:
    import hmac

    digest = hmac.new(KEY, b"form." + NONCE.encode(), hashlib.sha256).digest()
    assert form_proof(KEY, CLAIMS) == b64url(digest)


# -- the refusal pages' words ------------------------------------------------------------------


@pytest.mark.parametrize("reason", list(Refusal), ids=lambda reason: reason.value)
def test_each_refusal_says_what_it_is_and_what_to_do_in_one_plain_paragraph(
    reason: Refusal,
) -> None:
    assert reason.title
    assert 0 < len(reason.title) <= 40
    assert "\n" not in reason.title + reason.explanation
    assert "cmstoken-admin --stack NAME bootstrap" in reason.explanation
    assert "NAME" not in reason.explanation.replace("--stack NAME", "")  # the one placeholder
    assert len({r.title for r in Refusal}) == len({r.explanation for r in Refusal}) == 6


def test_the_void_key_refusal_says_the_key_was_rotated() -> None:
    assert "signing key was rotated" in Refusal.VOID_KEY.explanation
    assert "new link" in Refusal.VOID_KEY.explanation


def test_no_refusal_carries_any_part_of_the_link() -> None:
    refused = {
        MALFORMED["padded mac"](TOKEN): Refusal.FORGED,
        TOKEN: Refusal.VOID_KEY,  # checked with the other key
        token_of(document_of(CLAIMS), OTHER_KEY): Refusal.TAMPERED,
    }
    for token, reason in refused.items():
        key = OTHER_KEY if reason is Refusal.VOID_KEY else KEY
        assert check(token, key, expected_for(CLAIMS), NOW) is reason
        for text in (reason.title, reason.explanation, str(reason), repr(reason)):
            pieces = [token, *token.split("."), NONCE, key_id(KEY)]
            assert not any(piece in text for piece in pieces)
            payload, mac = token.split(".")[1:]
            assert not any(payload[i : i + 8] in text for i in range(len(payload) - 7))
            assert not any(mac[i : i + 8] in text for i in range(len(mac) - 7))
