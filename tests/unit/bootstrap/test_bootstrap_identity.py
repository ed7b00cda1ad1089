"""Who authorized a credential: the subject the tokens name (as a hash), and when another one
may replace the stored credential."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from cmstoken.aws.documents import STATUS_ACTIVE, RefreshCredential
from cmstoken.bootstrap import BootstrapRequest
from cmstoken.bootstrap.identity import identity_refusal, token_subject
from cmstoken.core.errors import ConfigurationError
from cmstoken.upstream.models import RawTokens
from support import make_jwt

ISSUER = "https://login.example.com/"
CLIENT = "client-abc"


def tokens(id_claims: Any = None, access_claims: Any = None) -> RawTokens:
    def token(claims: Any) -> str | None:
        if claims is None:
            return None
        return claims if isinstance(claims, str) else make_jwt(claims)

    return RawTokens(
        access_token=token(access_claims) or "opaque-access-token",
        refresh_token="v1.refresh-secret-0123456789",
        id_token=token(id_claims),
        scope=None,
        expires_in=86400,
        received_at=1_795_000_000.0,
    )


def digest(subject: str) -> str:
    return hashlib.sha256(f"https://login.example.com\n{subject}".encode()).hexdigest()


def test_the_id_token_names_the_subject_hashed_with_the_issuer() -> None:
    named = tokens(
        {"iss": ISSUER, "sub": "auth0|alice", "aud": CLIENT},
        {"iss": ISSUER, "sub": "auth0|bob", "aud": ["https://api.example.com/api"]},
    )
    assert token_subject(named, ISSUER, CLIENT) == digest("auth0|alice")
    assert token_subject(named, ISSUER.rstrip("/"), CLIENT) == digest("auth0|alice")


def test_the_access_token_names_it_when_the_id_token_cannot() -> None:
    access = {"iss": ISSUER, "sub": "auth0|alice", "aud": "https://api.example.com/api"}
    for id_claims in (None, "not-a-jwt", {"iss": ISSUER, "aud": CLIENT}):
        assert token_subject(tokens(id_claims, access), ISSUER, CLIENT) == digest("auth0|alice")


@pytest.mark.parametrize(
    "id_claims",
    [
        {"iss": "https://elsewhere.example.com/", "sub": "auth0|mallory", "aud": CLIENT},
        {"iss": ISSUER, "sub": "auth0|mallory", "aud": "another-client"},
        {"iss": ISSUER, "sub": "auth0|mallory", "aud": ["another-client"]},
        {"iss": ISSUER, "sub": 42, "aud": CLIENT},
        {"iss": ISSUER, "sub": "", "aud": CLIENT},
    ],
)
def test_an_id_token_for_another_issuer_or_client_or_without_a_subject_is_not_read(
    id_claims: dict[str, Any],
) -> None:
    assert token_subject(tokens(id_claims), ISSUER, CLIENT) is None


def test_no_readable_subject_is_none() -> None:
    assert token_subject(tokens(), ISSUER, CLIENT) is None
    assert (
        token_subject(tokens(access_claims={"iss": "https://x/", "sub": "a"}), ISSUER, CLIENT)
        is None
    )


CREDENTIAL = RefreshCredential(
    refresh_token="v1.refresh-secret-0123456789",
    client_id=CLIENT,
    issuer_url=ISSUER,
    status=STATUS_ACTIVE,
    authorized_at=1_795_000_000,
    refreshed_at=1_795_000_000,
    reauthorize_by=None,
    subject_sha256=digest("auth0|alice"),
)


def test_the_same_identity_nothing_stored_or_no_identity_recorded_may_authorize() -> None:
    assert identity_refusal(CREDENTIAL, digest("auth0|alice"), allowed=False) is None
    assert identity_refusal(None, digest("auth0|bob"), allowed=False) is None
    assert identity_refusal(None, None, allowed=False) is None
    legacy = replace(CREDENTIAL, subject_sha256=None)
    assert identity_refusal(legacy, digest("auth0|bob"), allowed=False) is None
    assert identity_refusal(legacy, None, allowed=False) is None


def test_another_identity_or_an_unreadable_one_is_refused_unless_allowed() -> None:
    refusal = identity_refusal(CREDENTIAL, digest("auth0|bob"), allowed=False)
    assert refusal is not None
    assert "different identity" in refusal
    assert digest("auth0|bob")[:12] in refusal
    assert digest("auth0|alice")[:12] in refusal
    assert "auth0|" not in refusal
    unreadable = identity_refusal(CREDENTIAL, None, allowed=False)
    assert unreadable is not None
    assert "no subject that can be read" in unreadable
    assert identity_refusal(CREDENTIAL, digest("auth0|bob"), allowed=True) is None
    assert identity_refusal(CREDENTIAL, None, allowed=True) is None


def test_allow_new_identity_is_a_json_boolean() -> None:
    assert BootstrapRequest.from_event({"action": "start"}).allow_new_identity is False
    request = BootstrapRequest.from_event({"action": "start", "allow_new_identity": True})
    assert request.allow_new_identity is True
    with pytest.raises(ConfigurationError, match="'allow_new_identity' must be true or false"):
        BootstrapRequest.from_event({"action": "poll", "allow_new_identity": "yes"})
