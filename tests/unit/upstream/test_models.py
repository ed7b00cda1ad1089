"""Typed, validated models of every upstream response (service-api.md section 2)."""

from __future__ import annotations

from typing import Any

import pytest

from cmstoken.core.errors import MalformedResponseError
from cmstoken.upstream.models import (
    DeviceAuthorization,
    Project,
    ProviderInfo,
    RawTokens,
    parse_project_listing,
)
from support import DEVICE_DOCUMENT, PROVIDER_DOCUMENT, TOKENS_DOCUMENT

PROVIDER = PROVIDER_DOCUMENT
DEVICE = DEVICE_DOCUMENT
TOKENS = TOKENS_DOCUMENT
PROJECT = {
    "projectId": "prj_0123456789abcdef",
    "projectName": "Default",
    "clusterCount": 2,
    "userCount": 3,
    "cloudProviders": [{"cloudProviderId": "aws", "cloudProviderName": "AWS"}],
}


def without(document: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != key}


def test_provider_info_parses_and_normalises_the_issuer() -> None:
    provider = ProviderInfo.parse(PROVIDER)
    assert provider.issuer_url == "https://login.example.com"
    assert provider.audience == "https://api.example.com/api"
    assert provider.scope == "openid profile email offline_access"


def test_free_trial_uses_the_free_trial_client_id() -> None:
    provider = ProviderInfo.parse(PROVIDER)
    assert provider.client_id_for(free_trial=False) == "client-abc"
    assert provider.client_id_for(free_trial=True) == "client-trial"


@pytest.mark.parametrize("key", sorted(PROVIDER))
def test_provider_info_requires_every_field(key: str) -> None:
    with pytest.raises(MalformedResponseError, match=repr(key)):
        ProviderInfo.parse(without(PROVIDER, key))


def test_provider_info_refuses_a_plain_http_issuer() -> None:
    with pytest.raises(MalformedResponseError, match="must use https"):
        ProviderInfo.parse({**PROVIDER, "issuerUri": "http://login.example.com/"})


def test_device_authorization_parses_with_expiry_from_arrival() -> None:
    authorization = DeviceAuthorization.parse(DEVICE, received_at=1000.0)
    assert authorization.user_code == "HHHJ-MMSZ"
    assert authorization.expires_at == 1900.0
    assert authorization.interval == 5
    assert "device-code-secret" not in repr(authorization)


def test_device_authorization_defaults_interval_and_complete_uri() -> None:
    document = without(without(DEVICE, "interval"), "verification_uri_complete")
    authorization = DeviceAuthorization.parse(document, received_at=0)
    assert authorization.interval == 5
    assert authorization.verification_uri_complete == (
        "https://login.example.com/activate?user_code=HHHJ-MMSZ"
    )


@pytest.mark.parametrize("key", ["device_code", "user_code", "verification_uri", "expires_in"])
def test_device_authorization_requires_core_fields(key: str) -> None:
    with pytest.raises(MalformedResponseError, match=repr(key)):
        DeviceAuthorization.parse(without(DEVICE, key), received_at=0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("expires_in", "900"),
        ("expires_in", True),
        ("expires_in", 0),
        ("interval", -1),
        ("device_code", ""),
    ],
)
def test_device_authorization_rejects_wrong_types(key: str, value: object) -> None:
    with pytest.raises(MalformedResponseError, match=repr(key)):
        DeviceAuthorization.parse({**DEVICE, key: value}, received_at=0)


def test_raw_tokens_parse_and_hide_secrets_from_repr() -> None:
    tokens = RawTokens.parse(TOKENS, received_at=100.0, endpoint="refresh")
    assert tokens.access_token_expires_at == 86500.0
    assert tokens.scope == "openid profile email offline_access"
    text = repr(tokens)
    assert "refresh-secret" not in text
    assert "eyJ" not in text


def test_raw_tokens_accept_a_narrower_scope_and_no_id_token() -> None:
    tokens = RawTokens.parse(
        {**without(TOKENS, "id_token"), "scope": "openid offline_access"},
        received_at=0,
        endpoint="refresh",
    )
    assert tokens.id_token is None
    assert tokens.scope == "openid offline_access"


def test_raw_tokens_token_type_is_case_insensitive_bearer() -> None:
    RawTokens.parse({**TOKENS, "token_type": "bearer"}, received_at=0, endpoint="refresh")
    with pytest.raises(MalformedResponseError, match="token_type"):
        RawTokens.parse({**TOKENS, "token_type": "mac"}, received_at=0, endpoint="refresh")


def test_raw_tokens_without_refresh_token_explain_offline_access() -> None:
    with pytest.raises(MalformedResponseError, match="offline_access"):
        RawTokens.parse(without(TOKENS, "refresh_token"), received_at=0, endpoint="device_token")


@pytest.mark.parametrize("key", ["access_token", "refresh_token", "expires_in", "token_type"])
@pytest.mark.parametrize("value", [None, "", 12, ["x"]])
def test_raw_tokens_never_yield_a_missing_or_null_token(key: str, value: object) -> None:
    if key == "expires_in" and value == 12:
        return
    with pytest.raises(MalformedResponseError) as info:
        RawTokens.parse({**TOKENS, key: value}, received_at=0, endpoint="refresh")
    assert "refresh-secret" not in str(info.value)


def test_project_listing_accepts_the_data_envelope() -> None:
    projects = parse_project_listing({"data": [PROJECT, {**PROJECT, "projectId": "prj_other"}]})
    assert [p.project_id for p in projects] == ["prj_0123456789abcdef", "prj_other"]
    assert projects[0].cloud_providers[0].cloud_provider_name == "AWS"


def test_project_listing_accepts_a_bare_object_and_a_bare_list() -> None:
    assert parse_project_listing(PROJECT) == [Project.parse(PROJECT)]
    assert parse_project_listing([PROJECT]) == [Project.parse(PROJECT)]
    assert parse_project_listing({"data": []}) == []


@pytest.mark.parametrize(
    "document",
    [
        "projects",
        None,
        {"data": "x"},
        {"data": [1]},
        [PROJECT, "x"],
        {**PROJECT, "projectId": None},
        {**PROJECT, "cloudProviders": "aws"},
        {**PROJECT, "cloudProviders": [{"cloudProviderId": "aws"}]},
        {**PROJECT, "clusterCount": "2"},
    ],
)
def test_project_listing_rejects_malformed_documents(document: object) -> None:
    with pytest.raises(MalformedResponseError):
        parse_project_listing(document)
