"""Properties of link tokens over any claims, keys and texts: a signed link checks back to its
claims until it expires, no single-character change or truncation of one is ever valid, no
text makes ``check`` raise, and a link signed with another key is void or tampered.

``make verify`` runs 300 examples of each property, ``make test`` a third
(``support.examples``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmstoken.links.tokens import Claims, Refusal, check, key_id, sign
from support import examples
from unit.links.link_samples import (
    KEY,
    NAMES,
    document_of,
    expected_for,
    keys,
    token_of,
    valid_claims,
)

EXAMPLES = examples(300)
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
NOT_VALID = {Refusal.FORGED, Refusal.TAMPERED, Refusal.VOID_KEY}
TOKEN_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ "
# Characters a token is made of (and their near misses), and any other.
characters = st.one_of(st.sampled_from(TOKEN_CHARACTERS), st.characters())


def _moment(claims: Claims) -> st.SearchStrategy[int]:
    """Any time at which the link is valid: from five minutes before its issue time (another
    clock's drift) to just before its expiry."""
    return st.integers(claims.issued_at - 300, claims.expires_at - 1)


@PROPERTY_SETTINGS
@given(st.data(), keys)
def test_any_signed_link_checks_back_to_its_claims_until_it_expires(
    data: st.DataObject, key: bytes
) -> None:
    claims = data.draw(valid_claims(key))
    token = sign(claims, key)
    assert len(token) <= 512
    assert token.isascii()
    assert check(token, key, expected_for(claims), data.draw(_moment(claims))) == claims


@PROPERTY_SETTINGS
@given(valid_claims())
def test_a_link_expires_exactly_at_its_expiry_time(claims: Claims) -> None:
    token, expected = sign(claims, KEY), expected_for(claims)
    assert check(token, KEY, expected, claims.expires_at - 1) == claims
    assert check(token, KEY, expected, claims.expires_at) is Refusal.EXPIRED


@PROPERTY_SETTINGS
@given(st.data(), valid_claims(), characters)
def test_no_single_character_change_of_a_link_is_valid(
    data: st.DataObject, claims: Claims, character: str
) -> None:
    token = sign(claims, KEY)
    where = data.draw(st.integers(0, len(token) - 1))
    replaced = token[:where] + character + token[where + 1 :]
    removed = token[:where] + token[where + 1 :]
    inserted = token[:where] + character + token[where:]
    changed = {replaced, removed, inserted} - {token}
    now = data.draw(_moment(claims))
    for other in changed:
        assert check(other, KEY, expected_for(claims), now) in NOT_VALID


@PROPERTY_SETTINGS
@given(st.data(), valid_claims())
def test_no_truncation_of_a_link_is_valid(data: st.DataObject, claims: Claims) -> None:
    token = sign(claims, KEY)
    cut = token[: data.draw(st.integers(0, len(token) - 1))]
    assert check(cut, KEY, expected_for(claims), data.draw(_moment(claims))) in NOT_VALID


@PROPERTY_SETTINGS
@given(
    st.one_of(
        st.text(),
        st.text(TOKEN_CHARACTERS).map(lambda text: "v1." + text),
        st.text(TOKEN_CHARACTERS, min_size=400, max_size=600),
    ),
    st.integers(-(2**40), 2**40),
)
def test_no_text_makes_check_raise_or_pass(text: str, now: int) -> None:
    claims = Claims("cmstoken-prod", "123456789012", "eu-central-1", 0, key_id(KEY), "", 0, 0)
    assert isinstance(check(text, KEY, expected_for(claims), now), Refusal)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@PROPERTY_SETTINGS
@given(st.data(), valid_claims())
def test_a_validly_signed_payload_checks_only_as_exactly_what_sign_writes(
    data: st.DataObject, claims: Claims
) -> None:
    """Any values under the design's keys, even with a valid mac: never raises, and whatever
    checks as valid is signed back to the very same token."""
    document: dict[str, Any] = document_of(claims)
    for name in data.draw(st.lists(st.sampled_from(NAMES), max_size=3)):
        document[name] = data.draw(json_values)
    token = token_of(document)
    got = check(token, KEY, expected_for(claims), data.draw(_moment(claims)))
    if token == sign(claims, KEY):
        assert got == claims
    if isinstance(got, Claims):
        assert sign(got, KEY) == token


@PROPERTY_SETTINGS
@given(valid_claims(), keys, keys)
def test_a_link_signed_with_another_key_is_void_or_tampered(
    claims: Claims, signer: bytes, checker: bytes
) -> None:
    if key_id(signer) == key_id(checker):  # the same key (another with its id: impossible)
        return
    expected, now = expected_for(claims), claims.issued_at
    own = replace(claims, key_id=key_id(signer))
    assert check(sign(own, signer), checker, expected, now) is Refusal.VOID_KEY
    naming_the_checker = token_of(document_of(replace(claims, key_id=key_id(checker))), signer)
    assert check(naming_the_checker, checker, expected, now) is Refusal.TAMPERED
