"""Refresh answers read leniently (RFC 6749 section 5.1), hostile numbers and shapes turned into
the project's errors, expiries clamped, the refresh's retry rule and the bounded merge loop."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cmstoken.aws.documents import RefreshSecret
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import MAX_MERGES, CredentialVault, Snapshot
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import (
    InvalidGrantError,
    MalformedResponseError,
    RateLimitedError,
    ServerError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
    VersionConflictError,
    may_send_again,
)
from cmstoken.core.lifetimes import (
    ASSUMED_TOKEN_LIFETIME_SECONDS,
    MAX_TOKEN_LIFETIME_SECONDS,
    jwt_expiry,
)
from cmstoken.core.settings import Settings
from cmstoken.upstream.http import HttpResponse
from cmstoken.upstream.models import DeviceAuthorization, Project, ServiceToken, TokenAnswer
from cmstoken.upstream.responses import json_object, oauth_error
from support import DEVICE_DOCUMENT, TOKENS_DOCUMENT, FakeClock, make_jwt

NOW = 1_795_000_000.0
TOKENS = TOKENS_DOCUMENT


def parse(document: Any) -> TokenAnswer:
    return TokenAnswer.parse(document, received_at=NOW, endpoint="refresh")


def without(*keys: str) -> dict[str, Any]:
    return {k: v for k, v in TOKENS.items() if k not in keys}


def test_a_complete_answer_is_read_as_before() -> None:
    tokens = parse(TOKENS)
    assert tokens.refresh_token == TOKENS["refresh_token"]
    assert tokens.access_token == TOKENS["access_token"]
    assert tokens.access_token_expires_at == NOW + 86400
    assert tokens.expiry_source == "expires_in"
    assert tokens.problems == ()
    assert tokens.strict().expires_in == 86400


def test_an_rfc_minimal_answer_takes_the_expiry_from_the_access_tokens_jwt() -> None:
    access = make_jwt({"exp": NOW + 7200})
    tokens = parse({**without("expires_in", "scope", "id_token"), "access_token": access})
    assert tokens.expiry_source == "jwt"
    assert tokens.access_token_expires_at == NOW + 7200
    assert tokens.scope is None
    assert tokens.problems == ()


def test_a_missing_token_type_is_taken_as_bearer() -> None:
    assert parse(without("token_type")).problems == ()


def test_an_rfc_minimal_answer_without_a_jwt_assumes_a_short_lifetime() -> None:
    tokens = parse(without("expires_in", "scope"))
    assert tokens.expiry_assumed
    assert tokens.access_token_expires_at == NOW + ASSUMED_TOKEN_LIFETIME_SECONDS
    assert tokens.problems == ()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("86400", 86400), (" 3600 ", 3600), (86400.0, 86400), (0, 0)],
)
def test_sloppy_lifetimes_are_accepted(value: Any, seconds: float) -> None:
    tokens = parse({**TOKENS, "expires_in": value, "scope": ""})
    assert tokens.access_token_expires_at == NOW + seconds
    assert tokens.scope is None
    assert tokens.problems == ()


@pytest.mark.parametrize(
    "text", ['"NaN"', "NaN", "Infinity", "-Infinity", "1e400", "-5", "true", '"soon"', "null"]
)
def test_unusable_lifetimes_fall_back_without_a_python_error(text: str) -> None:
    document = json.loads(json.dumps(TOKENS)[:-1] + f', "expires_in": {text}}}')
    tokens = parse(document)
    assert tokens.expiry_source in ("assumed", "expires_in")
    assert math.isfinite(tokens.access_token_expires_at)
    assert NOW <= tokens.access_token_expires_at <= NOW + MAX_TOKEN_LIFETIME_SECONDS
    to_iso(tokens.access_token_expires_at)  # printable


@pytest.mark.parametrize("value", [10**12, 10**400, 1e300])
def test_huge_lifetimes_are_clamped(value: Any) -> None:
    tokens = parse({**TOKENS, "expires_in": value})
    assert tokens.access_token_expires_at == NOW + MAX_TOKEN_LIFETIME_SECONDS


@pytest.mark.parametrize("exp", [1e30, 10**400, float("inf"), float("nan"), -1, "soon", True])
def test_hostile_jwt_expiries_are_ignored_or_clamped(exp: Any) -> None:
    try:
        token = make_jwt({"exp": exp})
    except ValueError:  # json.dumps refuses 10**400 as a float; write it as text
        token = make_jwt({"exp": 0})
    found = jwt_expiry(token)
    assert found is None or found == 1e30
    service = ServiceToken.parse({"token": token}, fallback_expires_at=NOW + 60, now=NOW)
    assert NOW <= service.expires_at <= NOW + MAX_TOKEN_LIFETIME_SECONDS
    to_iso(service.expires_at)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        (without("access_token"), "access_token"),
        ({**TOKENS, "access_token": ""}, "access_token"),
        ({**TOKENS, "access_token": 7}, "access_token"),
        ({**TOKENS, "token_type": "mac"}, "token_type"),
        ({**TOKENS, "token_type": 5}, "token_type"),
    ],
)
def test_other_problems_are_listed_and_the_refresh_token_kept(
    document: dict[str, Any], problem: str
) -> None:
    tokens = parse(document)
    assert tokens.refresh_token == TOKENS["refresh_token"]
    assert any(problem in text for text in tokens.problems)
    with pytest.raises(MalformedResponseError, match=problem) as info:
        tokens.strict()
    assert info.value.status == 200
    assert TOKENS["refresh_token"] not in str(info.value)


@pytest.mark.parametrize("value", [None, "", "  ", 7, ["v1.x"], {"t": 1}])
def test_an_answer_without_a_usable_refresh_token_raises_with_its_2xx_status(value: Any) -> None:
    with pytest.raises(MalformedResponseError, match="no usable refresh_token") as info:
        parse({**TOKENS, "refresh_token": value})
    assert info.value.status == 200
    assert not may_send_again(info.value)


def test_a_non_object_answer_raises_with_its_2xx_status() -> None:
    with pytest.raises(MalformedResponseError) as info:
        parse(["v1.refresh"])
    assert info.value.status == 200


def body(text: str, status: int = 200) -> HttpResponse:
    return HttpResponse(
        status=status, headers={"Content-Type": "application/json"}, body=text.encode()
    )


def test_deeply_nested_json_is_a_malformed_response() -> None:
    depth = 200_000
    with pytest.raises(MalformedResponseError, match="nested too deeply"):
        json_object(body("[" * depth + "]" * depth), endpoint="refresh")
    error = oauth_error(
        body('{"error":' + "[" * depth + "]" * depth + "}", 500), endpoint="refresh", now=NOW
    )
    assert isinstance(error, ServerError)
    assert jwt_expiry("e30." + "W" * 10 + ".sig") is None


@pytest.mark.parametrize("text", ["NaN", "Infinity", "1e400", "1.5", "true", '"900"'])
def test_hostile_device_and_project_numbers_are_malformed_responses(text: str) -> None:
    document = json.loads(json.dumps(DEVICE_DOCUMENT)[:-1] + f', "expires_in": {text}}}')
    with pytest.raises(MalformedResponseError, match="expires_in"):
        DeviceAuthorization.parse(document, received_at=NOW)
    project = json.loads(
        '{"projectId": "prj_0123456789abcdef", "projectName": "p", "clusterCount": ' + text + "}"
    )
    with pytest.raises(MalformedResponseError, match="clusterCount"):
        Project.parse(project)


def test_device_lifetimes_and_intervals_are_clamped() -> None:
    authorization = DeviceAuthorization.parse(
        {**DEVICE_DOCUMENT, "expires_in": 10**12, "interval": 10**9}, received_at=NOW
    )
    assert authorization.expires_in == 86400
    assert authorization.interval == 300
    to_iso(authorization.expires_at)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        # No answer within the limit, or the connection dropped: the request may have been acted on.
        (UpstreamTimeoutError("t", endpoint="refresh", outcome_unknown=True), False),
        (UpstreamConnectionError("c", endpoint="refresh", outcome_unknown=True), False),
        # It never left: refused, unresolvable, no TLS connection.
        (UpstreamConnectionError("c", endpoint="refresh"), True),
        (UpstreamTimeoutError("t", endpoint="refresh", status=200, outcome_unknown=True), False),
        (MalformedResponseError("m", endpoint="refresh", status=200), False),
        (MalformedResponseError("m", endpoint="refresh", status=500, outcome_unknown=True), False),
        (ServerError("s", endpoint="refresh", status=503), True),
        (ServerError("s", endpoint="refresh", status=504, outcome_unknown=True), False),
        (RateLimitedError("r", endpoint="refresh", status=429), True),
        (InvalidGrantError("g", endpoint="refresh", status=403), False),
    ],
)
def test_a_request_is_sent_again_only_when_it_was_provably_not_acted_on(
    error: Exception, retryable: bool
) -> None:
    assert may_send_again(error) is retryable


@pytest.mark.parametrize(
    ("status", "unknown"), [(500, False), (502, True), (503, False), (504, True)]
)
def test_a_gateways_5xx_leaves_the_outcome_unknown(status: int, unknown: bool) -> None:
    error = oauth_error(body('{"error": "server_error"}', status), endpoint="refresh", now=NOW)
    assert isinstance(error, ServerError)
    assert error.outcome_unknown is unknown


@pytest.fixture
def vault(aws_credentials: None) -> Iterator[CredentialVault]:
    with mock_aws():
        boto3.client("secretsmanager").create_secret(Name="r")
        settings = Settings.from_environ(
            {
                "SERVICE_BASE_URL": "https://api.example.com",
                "REFRESH_SECRET_ID": "r",
                "SERVICE_TOKEN_SECRET_ID": "s",
            }
        )
        yield CredentialVault(settings, SecretStore(), FakeClock())


def test_the_conflict_merge_loop_is_bounded(vault: CredentialVault) -> None:
    changes = []

    def change(document: RefreshSecret) -> RefreshSecret:
        changes.append(1)
        # Another writer always comes first: write a new version behind this one's back.
        current = vault.store.read("r")
        vault.store.write(
            "r", json.dumps({"schema_version": 1, "n": len(changes)}), replacing=current.version_id
        )
        return RefreshSecret(extra={"mine": True})

    stale = Snapshot(secret=RefreshSecret(), version_id=None)
    vault.store.write("r", json.dumps({"schema_version": 1}), replacing=None)
    with pytest.raises(VersionConflictError):
        vault.update_refresh(stale, change, deadline=FakeClock().now() + 60)
    assert len(changes) == MAX_MERGES + 1
