"""Token lifetimes read from JWT claims."""

from __future__ import annotations

import pytest

from cmstoken.core.errors import MalformedResponseError
from cmstoken.core.lifetimes import jwt_expiry, unverified_claims
from cmstoken.upstream.models import ServiceToken
from support import make_jwt


def test_expiry_is_the_exp_claim() -> None:
    assert jwt_expiry(make_jwt({"exp": 1_800_000_000, "sub": "x"})) == 1_800_000_000.0


@pytest.mark.parametrize(
    "token",
    [
        "opaque-token-value",
        "a.b",
        "a..c",
        "a.!!!.c",
        make_jwt(["not", "an", "object"]),
        make_jwt({"sub": "no exp"}),
        make_jwt({"exp": "tomorrow"}),
        make_jwt({"exp": True}),
        make_jwt({"exp": -5}),
    ],
)
def test_tokens_without_a_usable_exp_have_no_expiry(token: str) -> None:
    assert jwt_expiry(token) is None


def test_claims_of_a_non_jwt_are_none() -> None:
    assert unverified_claims("not-a-jwt") is None
    assert unverified_claims(make_jwt({"aud": "x"})) == {"aud": "x"}


def test_service_token_expiry_prefers_the_jwt_exp() -> None:
    token = make_jwt({"exp": 1_800_000_000})
    parsed = ServiceToken.parse({"token": token}, fallback_expires_at=1_700_000_000)
    assert parsed.expires_at == 1_800_000_000


def test_service_token_expiry_falls_back_to_the_raw_token_expiry() -> None:
    parsed = ServiceToken.parse({"token": "opaque"}, fallback_expires_at=1_700_000_000)
    assert parsed.expires_at == 1_700_000_000


@pytest.mark.parametrize("document", [{}, {"token": None}, {"token": ""}, {"token": 42}])
def test_service_token_without_a_token_is_malformed(document: dict[str, object]) -> None:
    with pytest.raises(MalformedResponseError, match="'token'"):
        ServiceToken.parse(document, fallback_expires_at=0)
