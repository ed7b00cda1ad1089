"""What the upstream clients send, and what they make of the answers (no sockets)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from cmstoken.core.errors import (
    InvalidGrantError,
    MalformedResponseError,
    ServerError,
    TokenRefusedError,
)
from cmstoken.upstream.device_flow import start_device_authorization
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.service import ServiceClient
from support import (
    DEVICE_DOCUMENT,
    PROVIDER_DOCUMENT,
    TOKENS_DOCUMENT,
    Answer,
    FakeClock,
    ScriptedTransport,
    make_jwt,
    response,
)

PROVIDER = PROVIDER_DOCUMENT
DEVICE = DEVICE_DOCUMENT
TOKENS = {
    **TOKENS_DOCUMENT,
    "refresh_token": "v1.rotated-refresh-0123456789",
    "scope": "openid offline_access",
}


def service(script: Sequence[Answer]) -> tuple[ServiceClient, ScriptedTransport]:
    clock = FakeClock()
    transport = ScriptedTransport(script=list(script), clock=clock)
    return ServiceClient("https://api.example.com/", transport=transport, clock=clock), transport


@pytest.mark.parametrize(
    ("free_trial", "client_id"), [(False, "client-abc"), (True, "client-trial")]
)
def test_device_authorization_uses_provider_values_and_the_right_client_id(
    free_trial: bool, client_id: str
) -> None:
    client, transport = service([response(200, PROVIDER), response(200, DEVICE)])
    started = start_device_authorization(client, free_trial=free_trial)
    assert started.client_id == client_id
    assert started.authorization.user_code == "HHHJ-MMSZ"
    provider_call, device_call = transport.sent
    assert (provider_call.method, provider_call.url) == (
        "GET",
        "https://api.example.com/api/v3/auth/provider",
    )
    assert (device_call.method, device_call.url) == (
        "POST",
        "https://login.example.com/oauth/device/code",
    )
    assert device_call.form == {
        "client_id": client_id,
        "scope": "openid profile email offline_access",
        "audience": "https://api.example.com/api",
    }


def test_refresh_sends_the_refresh_grant_and_returns_the_rotated_token() -> None:
    clock = FakeClock()
    transport = ScriptedTransport(script=[response(200, TOKENS)], clock=clock)
    identity = IdentityClient("https://login.example.com", transport=transport, clock=clock)
    tokens = identity.refresh(client_id="client-abc", refresh_token="v1.old-refresh-0123456789")
    assert tokens.refresh_token == "v1.rotated-refresh-0123456789"
    assert tokens.scope == "openid offline_access"
    assert transport.sent[0].form == {
        "grant_type": "refresh_token",
        "client_id": "client-abc",
        "refresh_token": "v1.old-refresh-0123456789",
    }


def test_refresh_rejection_is_invalid_grant_without_the_token_in_the_message() -> None:
    clock = FakeClock()
    body = {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."}
    transport = ScriptedTransport(script=[response(403, body)], clock=clock)
    identity = IdentityClient("https://login.example.com", transport=transport, clock=clock)
    with pytest.raises(InvalidGrantError) as info:
        identity.refresh(client_id="c", refresh_token="v1.old-refresh-0123456789")
    assert "v1.old-refresh" not in str(info.value)


def test_exchange_posts_json_and_reads_the_expiry_from_the_jwt() -> None:
    service_token = make_jwt({"exp": 1_795_050_000})
    client, transport = service([response(200, {"token": service_token})])
    token = client.exchange("raw-access-token-0123456789", fallback_expires_at=1)
    assert token.token == service_token
    assert token.expires_at == 1_795_050_000
    sent = transport.sent[0]
    assert (sent.method, sent.url) == ("POST", "https://api.example.com/api/v3/auth/token")
    assert sent.json_body == {"token": "raw-access-token-0123456789"}
    assert sent.form is None


def test_exchange_failure_is_a_server_error_with_the_envelope_rendered() -> None:
    body = {
        "error": {
            "status": 500,
            "message": "Internal Server Error",
            "details": "failed to get service token",
        }
    }
    client, _ = service([response(500, body)])
    with pytest.raises(ServerError, match="failed to get service token"):
        client.exchange("raw-access-token-0123456789", fallback_expires_at=1)


@pytest.mark.parametrize("body", [{}, {"token": None}, {"token": ""}])
def test_exchange_never_returns_a_missing_token(body: dict[str, object]) -> None:
    client, _ = service([response(200, body)])
    with pytest.raises(MalformedResponseError, match="token"):
        client.exchange("raw-access-token-0123456789", fallback_expires_at=1)


def test_project_listing_sends_the_bearer_and_reads_the_envelope() -> None:
    project = {
        "projectId": "prj_0123456789abcdef",
        "projectName": "p",
        "clusterCount": 0,
        "userCount": 1,
    }
    client, transport = service([response(200, {"data": [project]})])
    projects = client.list_projects("service-token-0123456789")
    assert [p.project_id for p in projects] == ["prj_0123456789abcdef"]
    sent = transport.sent[0]
    assert (sent.method, sent.url) == ("GET", "https://api.example.com/api/v3/projects")
    assert sent.headers == {
        "Authorization": "Bearer service-token-0123456789",
        "Content-Type": "application/json",
    }


def test_project_listing_uses_the_audience_as_api_url() -> None:
    clock = FakeClock()
    transport = ScriptedTransport(script=[response(200, {"data": []})], clock=clock)
    client = ServiceClient(
        "https://api.example.com",
        api_url="https://gateway.example.com/api/",
        transport=transport,
        clock=clock,
    )
    assert client.list_projects("service-token-0123456789") == []
    assert transport.sent[0].url == "https://gateway.example.com/api/v3/projects"


@pytest.mark.parametrize("status", [401, 403])
def test_project_listing_refusal_is_token_refused(status: int) -> None:
    client, _ = service(
        [response(status, {"error": {"status": status, "message": "Unauthorized"}})]
    )
    with pytest.raises(TokenRefusedError):
        client.list_projects("service-token-0123456789")
