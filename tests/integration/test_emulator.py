"""The upstream emulator itself, over real HTTP: the behaviours other tests rely on."""

import base64
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import pytest
import requests

from cmsemu import Emulator, EmulatorConfig
from support import interruptible

pytestmark = pytest.mark.integration

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
USER_CODE = re.compile(r"^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")
JWT = re.compile(r"^eyJ[\w-]+\.[\w-]+\.[\w-]+$")
TIMEOUT = 5


def _token_url(emu: Emulator) -> str:
    return emu.issuer_url.rstrip("/") + "/oauth/token"


def start_device(emu: Emulator, **fields: str) -> requests.Response:
    data = {"client_id": emu.config.client_id, "scope": emu.config.scope, "audience": emu.api_url}
    data.update(fields)
    url = emu.issuer_url.rstrip("/") + "/oauth/device/code"
    return requests.post(url, data=data, timeout=TIMEOUT)


def device_code(emu: Emulator) -> dict[str, Any]:
    response = start_device(emu)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def poll(emu: Emulator, code: str, client_id: str | None = None) -> requests.Response:
    data = {
        "grant_type": DEVICE_GRANT,
        "device_code": code,
        "client_id": client_id or emu.config.client_id,
    }
    return requests.post(_token_url(emu), data=data, timeout=TIMEOUT)


def refresh(emu: Emulator, token: str, client_id: str | None = None) -> requests.Response:
    data = {
        "grant_type": "refresh_token",
        "refresh_token": token,
        "client_id": client_id or emu.config.client_id,
    }
    return requests.post(_token_url(emu), data=data, timeout=TIMEOUT)


def exchange(emu: Emulator, raw_token: str) -> requests.Response:
    url = emu.base_url + "/api/v3/auth/token"
    return requests.post(url, json={"token": raw_token}, timeout=TIMEOUT)


def projects(emu: Emulator, token: str | None) -> requests.Response:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return requests.get(emu.api_url + "/v3/projects", headers=headers, timeout=TIMEOUT)


def error_of(response: requests.Response) -> str:
    body: dict[str, str] = response.json()
    return body["error"]


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * 4))
    return decoded


def service_token(emu: Emulator) -> str:
    token: str = exchange(emu, emu.issue_tokens()["access_token"]).json()["token"]
    return token


# Provider information and device authorization


def test_provider_information(emulator: Emulator) -> None:
    response = requests.get(emulator.base_url + "/api/v3/auth/provider", timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.json() == {
        "clientId": "cms-client",
        "freetrialClientId": "cms-freetrial-client",
        "issuerUri": emulator.issuer_url,
        "scope": "openid profile email offline_access",
        "audience": emulator.base_url + "/api",
    }
    assert emulator.issuer_url.endswith("/idp/")


def test_device_code_shape(emulator: Emulator) -> None:
    body = device_code(emulator)
    assert USER_CODE.match(body["user_code"])
    assert re.match(r"^[\w-]{32,}$", body["device_code"])
    verification_uri = emulator.issuer_url.rstrip("/") + "/activate"
    assert body["verification_uri"] == verification_uri
    assert body["verification_uri_complete"] == f"{verification_uri}?user_code={body['user_code']}"
    assert (body["expires_in"], body["interval"]) == (900, 5)


def test_device_code_request_errors(emulator: Emulator) -> None:
    unknown = start_device(emulator, client_id="nobody")
    assert (unknown.status_code, error_of(unknown)) == (401, "invalid_client")
    missing = start_device(emulator, scope="")
    assert (missing.status_code, error_of(missing)) == (400, "invalid_request")
    audience = start_device(emulator, audience="https://elsewhere.example/api")
    assert (audience.status_code, error_of(audience)) == (403, "access_denied")
    assert "Service not found" in audience.json()["error_description"]
    freetrial = start_device(emulator, client_id=emulator.config.freetrial_client_id)
    assert freetrial.status_code == 200


def test_poll_pending_then_slow_down_grows_interval_for_good(emulator: Emulator) -> None:
    code = device_code(emulator)["device_code"]
    pending = poll(emulator, code)
    assert (pending.status_code, pending.json()) == (
        403,
        {
            "error": "authorization_pending",
            "error_description": "User has yet to authorize device code.",
        },
    )
    too_soon = poll(emulator, code)
    assert (too_soon.status_code, error_of(too_soon)) == (429, "slow_down")
    emulator.advance(6)  # enough for the old 5 s interval, not for the new 10 s one
    assert error_of(poll(emulator, code)) == "slow_down"
    emulator.advance(15)  # the interval is now 15 s
    assert error_of(poll(emulator, code)) == "authorization_pending"
    emulator.advance(14)  # and stays 15 s
    assert error_of(poll(emulator, code)) == "slow_down"


def test_expired_token_once_then_invalid_grant(emulator: Emulator) -> None:
    code = device_code(emulator)
    emulator.advance(900)
    expired = poll(emulator, code["device_code"])
    assert (expired.status_code, error_of(expired)) == (403, "expired_token")
    emulator.advance(10)
    later = poll(emulator, code["device_code"])
    assert (later.status_code, error_of(later)) == (403, "invalid_grant")
    with pytest.raises(KeyError):
        emulator.approve("BBBB-BBBB")


def test_denied_code_answers_access_denied(emulator: Emulator) -> None:
    code = device_code(emulator)
    emulator.deny(code["user_code"])
    denied = poll(emulator, code["device_code"])
    assert (denied.status_code, error_of(denied)) == (403, "access_denied")


def test_approved_code_yields_tokens_once(emulator: Emulator) -> None:
    code = device_code(emulator)
    emulator.approve(code["user_code"].lower())  # user codes are case-insensitive
    other_client = poll(emulator, code["device_code"], client_id="cms-freetrial-client")
    assert (other_client.status_code, error_of(other_client)) == (401, "invalid_client")
    emulator.advance(5)
    tokens = poll(emulator, code["device_code"])
    assert tokens.status_code == 200
    body = tokens.json()
    assert set(body) == {
        "access_token",
        "id_token",
        "refresh_token",
        "scope",
        "expires_in",
        "token_type",
    }
    assert JWT.match(body["access_token"])
    assert JWT.match(body["id_token"])
    assert not JWT.match(body["refresh_token"])
    assert (body["scope"], body["expires_in"], body["token_type"]) == (
        emulator.config.scope,
        86400,
        "Bearer",
    )
    access = claims(body["access_token"])
    assert access["iss"] == emulator.issuer_url
    assert emulator.api_url in access["aud"]
    assert access["exp"] - access["iat"] == 86400
    assert claims(body["id_token"])["aud"] == "cms-client"
    emulator.advance(5)
    again = poll(emulator, code["device_code"])
    assert (again.status_code, error_of(again)) == (403, "invalid_grant")


def test_auto_approve(emulator: Emulator) -> None:
    emulator.config.auto_approve = True
    assert poll(emulator, device_code(emulator)["device_code"]).status_code == 200


# Refresh rotation and lifetimes


def test_refresh_rotates_and_reuse_revokes_the_whole_family(emulator: Emulator) -> None:
    first = emulator.issue_tokens()["refresh_token"]
    rotated = refresh(emulator, first)
    assert rotated.status_code == 200
    assert rotated.json()["scope"] == "openid profile offline_access"
    second = rotated.json()["refresh_token"]
    assert second != first
    assert not emulator.refresh_token_valid(first)
    assert emulator.refresh_token_valid(second)
    reused = refresh(emulator, first)
    assert (reused.status_code, reused.json()) == (
        403,
        {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."},
    )
    assert emulator.family_revoked(second)
    assert error_of(refresh(emulator, second)) == "invalid_grant"


def test_reuse_interval_allows_only_the_previous_token_in_time(emulator: Emulator) -> None:
    emulator.config.refresh_reuse_interval = 30
    first = emulator.issue_tokens()["refresh_token"]
    second = refresh(emulator, first).json()["refresh_token"]
    emulator.advance(10)
    retry = refresh(emulator, first)  # a client that lost the answer retries
    assert retry.status_code == 200
    third = retry.json()["refresh_token"]
    fourth = refresh(emulator, third).json()["refresh_token"]
    assert not emulator.family_revoked(fourth)
    reused = refresh(emulator, first)  # no longer the immediately previous token
    assert error_of(reused) == "invalid_grant"
    assert emulator.family_revoked(second)

    late = emulator.issue_tokens()["refresh_token"]
    newer = refresh(emulator, late).json()["refresh_token"]
    emulator.advance(31)
    assert error_of(refresh(emulator, late)) == "invalid_grant"
    assert emulator.family_revoked(newer)


def test_absolute_lifetime_is_not_extended_by_rotation(emulator: Emulator) -> None:
    emulator.config.refresh_absolute_lifetime = 1000
    token = emulator.issue_tokens()["refresh_token"]
    emulator.advance(600)
    token = refresh(emulator, token).json()["refresh_token"]
    emulator.advance(399)
    token = refresh(emulator, token).json()["refresh_token"]
    emulator.advance(1)
    assert not emulator.refresh_token_valid(token)
    assert error_of(refresh(emulator, token)) == "invalid_grant"
    assert not emulator.family_revoked(token)


def test_idle_lifetime_is_reset_by_each_refresh(emulator: Emulator) -> None:
    emulator.config.refresh_absolute_lifetime = 0
    emulator.config.refresh_idle_lifetime = 1000
    token = emulator.issue_tokens()["refresh_token"]
    for _ in range(3):
        emulator.advance(999)
        response = refresh(emulator, token)
        assert response.status_code == 200
        token = response.json()["refresh_token"]
    emulator.advance(1000)
    assert error_of(refresh(emulator, token)) == "invalid_grant"


def test_refresh_request_errors(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    missing = requests.post(
        _token_url(emulator), data={"grant_type": "refresh_token"}, timeout=TIMEOUT
    )
    assert (missing.status_code, error_of(missing)) == (400, "invalid_request")
    grant = requests.post(_token_url(emulator), data={"grant_type": "password"}, timeout=TIMEOUT)
    assert (grant.status_code, error_of(grant)) == (400, "unsupported_grant_type")
    assert error_of(refresh(emulator, "v1.unknown")) == "invalid_grant"
    unknown_client = refresh(emulator, token, client_id="nobody")
    assert (unknown_client.status_code, error_of(unknown_client)) == (401, "invalid_client")
    other_client = refresh(emulator, token, client_id="cms-freetrial-client")
    assert (other_client.status_code, error_of(other_client)) == (403, "invalid_grant")
    assert emulator.refresh_token_valid(token)
    assert emulator.counts["token"] == 1
    assert emulator.counts["refresh"] == 4


def test_admin_revocation(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    assert not emulator.family_revoked(token)
    emulator.revoke_family(token)
    assert emulator.family_revoked(token)
    assert error_of(refresh(emulator, token)) == "invalid_grant"
    with pytest.raises(KeyError):
        emulator.family_revoked("v1.never-issued")


def test_rate_limit_headers_and_429(emulator: Emulator) -> None:
    emulator.config.rate_limit = 2
    token = emulator.issue_tokens()["refresh_token"]
    first = refresh(emulator, token)
    token = first.json()["refresh_token"]
    assert first.headers["X-RateLimit-Limit"] == "2"
    assert first.headers["X-RateLimit-Remaining"] == "1"
    reset = int(first.headers["X-RateLimit-Reset"])
    assert emulator.now() < reset <= emulator.now() + 60
    assert refresh(emulator, "v1.other").headers["X-RateLimit-Remaining"] == "1"
    code = device_code(emulator)["device_code"]
    assert poll(emulator, code).headers["X-RateLimit-Remaining"] == "1"
    assert poll(emulator, code).headers["X-RateLimit-Remaining"] == "0"
    limited = poll(emulator, code)
    assert (limited.status_code, limited.json()) == (
        429,
        {"error": "too_many_requests", "error_description": "Global limit has been reached"},
    )
    assert limited.headers["X-RateLimit-Remaining"] == "0"
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    emulator.config.rate_limit_retry_after = False
    assert "Retry-After" not in poll(emulator, code).headers
    emulator.advance(60)
    assert refresh(emulator, token).status_code == 200


# Exchange and project listing


def test_exchange_accepts_only_raw_access_tokens(emulator: Emulator) -> None:
    tokens = emulator.issue_tokens()
    response = exchange(emulator, tokens["access_token"])
    assert response.status_code == 200
    service = response.json()["token"]
    assert JWT.match(service)
    assert emulator.service_token_valid(service)
    for refused in (service, tokens["id_token"], tokens["refresh_token"], "garbage"):
        failed = exchange(emulator, refused)
        assert failed.status_code == 500
        envelope = failed.json()["error"]
        assert envelope["status"] == 500
        assert envelope["message"] == "Internal Server Error"
        assert envelope["details"] == "failed to get service token"
        assert envelope["reference"].startswith("upmrid/")
        assert envelope["source"] == "API"
    url = emulator.base_url + "/api/v3/auth/token"
    assert requests.post(url, json={}, timeout=TIMEOUT).status_code == 500
    bad_json = requests.post(
        url, data="{", headers={"content-type": "application/json"}, timeout=TIMEOUT
    )
    assert bad_json.status_code == 500
    form = requests.post(url, data={"token": tokens["access_token"]}, timeout=TIMEOUT)
    assert form.status_code == 415
    assert form.json()["error"]["status"] == 415
    emulator.advance(86400)
    assert exchange(emulator, tokens["access_token"]).status_code == 500


def test_exchange_error_in_errors_style(emulator: Emulator) -> None:
    emulator.config.service_error_style = "errors"
    envelope = exchange(emulator, "garbage").json()["error"]
    assert envelope["errors"] == [{"message": "failed to get service token"}]
    assert "details" not in envelope


def test_projects_accept_only_valid_service_tokens(emulator: Emulator) -> None:
    tokens = emulator.issue_tokens()
    token = exchange(emulator, tokens["access_token"]).json()["token"]
    listing = projects(emulator, token)
    assert listing.status_code == 200
    (project,) = listing.json()["data"]
    assert re.match(r"^prj_[A-Za-z0-9]{16}$", project["projectId"])
    assert set(project) == {
        "projectId",
        "projectName",
        "clusterCount",
        "userCount",
        "cloudProviders",
    }
    assert set(project["cloudProviders"][0]) == {"cloudProviderId", "cloudProviderName"}
    emulator.config.projects_envelope = "bare"
    assert projects(emulator, token).json() == project
    for refused in (None, "garbage", tokens["access_token"], tokens["id_token"]):
        response = projects(emulator, refused)
        assert response.status_code == 401
        assert response.json()["error"]["message"] == "Unauthorized"
    emulator.config.refused_token_status = 403
    assert projects(emulator, tokens["access_token"]).json()["error"]["message"] == "Forbidden"
    emulator.advance(86400)
    assert not emulator.service_token_valid(token)
    assert projects(emulator, token).status_code == 403


def test_unknown_path_wrong_method_and_big_body(emulator: Emulator) -> None:
    missing = requests.get(emulator.base_url + "/api/v3/clusters", timeout=TIMEOUT)
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == 404
    wrong = requests.get(_token_url(emulator), timeout=TIMEOUT)
    assert (wrong.status_code, wrong.headers["Allow"]) == (405, "POST")
    big = requests.post(_token_url(emulator), data={"x": "y" * 70_000}, timeout=TIMEOUT)
    assert big.status_code == 413


# Faults


def test_status_fault_answers_without_acting(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "status", times=2, status=503)
    for _ in range(2):
        failed = refresh(emulator, token)
        assert (failed.status_code, error_of(failed)) == (503, "temporarily_unavailable")
    assert emulator.refresh_token_valid(token)
    assert refresh(emulator, token).status_code == 200
    emulator.inject("exchange", "status", status=502)
    failed = exchange(emulator, emulator.issue_tokens()["access_token"])
    assert failed.status_code == 502
    assert failed.json()["error"]["message"] == "Bad Gateway"


def test_rate_limit_fault(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "rate_limit", retry_after=7)
    emulator.inject("refresh", "rate_limit", reset_in=30)
    first = refresh(emulator, token)
    assert (first.status_code, error_of(first), first.headers["Retry-After"]) == (
        429,
        "too_many_requests",
        "7",
    )
    second = refresh(emulator, token)
    assert second.status_code == 429
    assert "Retry-After" not in second.headers
    assert second.headers["X-RateLimit-Remaining"] == "0"
    reset = int(second.headers["X-RateLimit-Reset"])
    assert emulator.now() + 29 <= reset <= emulator.now() + 31
    assert emulator.refresh_token_valid(token)
    emulator.inject("projects", "rate_limit")
    assert projects(emulator, None).json()["error"]["status"] == 429


def test_delay_fault_causes_a_client_read_timeout(emulator: Emulator) -> None:
    emulator.inject("provider", "delay", seconds=1.0)
    with pytest.raises(requests.ReadTimeout):
        requests.get(emulator.base_url + "/api/v3/auth/provider", timeout=0.2)
    provider = requests.get(emulator.base_url + "/api/v3/auth/provider", timeout=TIMEOUT)
    assert provider.status_code == 200


def test_drop_fault_acts_then_loses_the_response(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "drop")
    with pytest.raises(requests.ConnectionError):
        refresh(emulator, token)
    assert not emulator.refresh_token_valid(token)  # the rotation happened
    assert not emulator.family_revoked(token)
    assert emulator.requests[-1].status is None
    assert error_of(refresh(emulator, token)) == "invalid_grant"  # a blind retry: theft
    assert emulator.family_revoked(token)


@pytest.mark.parametrize(
    ("body", "check"),
    [
        ("html", lambda r: r.headers["Content-Type"].startswith("text/html")),
        ("truncated", lambda r: r.text and not _parses(r.text)),
        ("empty", lambda r: r.content == b""),
        ("not_object", lambda r: isinstance(r.json(), list)),
        ("missing_fields", lambda r: "access_token" not in r.json()),
        ("null_token", lambda r: r.json()["access_token"] is None),
        ("huge", lambda r: len(r.content) > 2 * 1024 * 1024),
    ],
)
def test_malformed_fault_does_not_act(
    emulator: Emulator, body: str, check: Callable[[requests.Response], object]
) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "malformed", body=body)
    response = refresh(emulator, token)
    assert response.status_code == 200
    assert check(response)
    assert emulator.refresh_token_valid(token)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_malformed_fault_after_acting(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "malformed", body="null_token", acted=True)
    response = refresh(emulator, token)
    assert response.json()["access_token"] is None
    assert response.json()["refresh_token"].startswith("v1.")
    assert not emulator.refresh_token_valid(token)
    emulator.inject("exchange", "malformed", body="missing_fields")
    assert "token" not in exchange(emulator, "anything").json()


def test_fault_validation_and_clearing(emulator: Emulator) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        emulator.inject("nowhere", "drop")
    with pytest.raises(ValueError, match="fault"):
        emulator.inject("refresh", "explode")
    emulator.inject("provider", "status", times=3, status=500)
    emulator.clear_faults()
    assert requests.get(emulator.base_url + "/api/v3/auth/provider", timeout=TIMEOUT).ok


# Request log, reset


def test_request_log_holds_fingerprints_not_credentials(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    refresh(emulator, token)
    (record,) = emulator.requests
    assert (record.endpoint, record.method, record.path, record.status) == (
        "refresh",
        "POST",
        "/idp/oauth/token",
        200,
    )
    assert record.grant_type == "refresh_token"
    assert record.error is None
    assert record.credential is not None
    assert len(record.credential) == 12
    assert record.credential not in token
    assert abs(record.at - emulator.now()) < 5


def test_reset_forgets_everything(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.advance(1000)
    emulator.inject("provider", "status")
    refresh(emulator, "v1.unknown")
    emulator.reset()
    assert emulator.counts == {}
    assert emulator.requests == []
    assert abs(emulator.now() - time.time()) < 1
    assert not emulator.refresh_token_valid(token)
    with pytest.raises(KeyError):
        emulator.family_revoked(token)
    assert requests.get(emulator.base_url + "/api/v3/auth/provider", timeout=TIMEOUT).ok


# Activation pages


class _Forms(HTMLParser):
    """The forms of a page: action, fields and submit buttons (label -> (name, value))."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self._button: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.forms.append({"action": attributes["action"], "fields": {}, "buttons": {}})
        elif tag == "input":
            self.forms[-1]["fields"][attributes["name"]] = attributes.get("value", "")
        elif tag == "button":
            self._button = attributes

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            button = self._button
            self.forms[-1]["buttons"][data.strip()] = (button["name"], button["value"])
            self._button = None


def submit(emu: Emulator, page: requests.Response, button: str, **fields: str) -> requests.Response:
    """Press `button` on the page's only form, as a browser would."""
    parser = _Forms()
    parser.feed(page.text)
    (form,) = parser.forms
    name, value = form["buttons"][button]
    data = {**form["fields"], **fields, name: value}
    return requests.post(emu.base_url + form["action"], data=data, timeout=TIMEOUT)


def test_activation_pages_approve_a_code(emulator: Emulator) -> None:
    code = device_code(emulator)
    entry = requests.get(code["verification_uri_complete"], timeout=TIMEOUT)
    assert entry.status_code == 200
    assert code["user_code"] in entry.text
    confirmation = submit(emulator, entry, "Continue")
    assert "Device Confirmation" in confirmation.text
    assert code["user_code"] in confirmation.text
    welcome = submit(emulator, confirmation, "Confirm")
    assert "Welcome" in welcome.text
    done = submit(emulator, welcome, "Confirm")
    assert "Congratulations, you're all set!" in done.text
    emulator.advance(5)
    assert poll(emulator, code["device_code"]).status_code == 200


def test_activation_pages_cancel_and_unknown_code(emulator: Emulator) -> None:
    code = device_code(emulator)
    entry = requests.get(code["verification_uri"], timeout=TIMEOUT)
    wrong = submit(emulator, entry, "Continue", user_code="<b>BBBB-BBBB</b>")
    assert wrong.status_code == 400
    assert "<b>" not in wrong.text
    confirmation = submit(emulator, entry, "Continue", user_code=code["user_code"])
    cancelled = submit(emulator, submit(emulator, confirmation, "Confirm"), "Cancel")
    assert "cancelled" in cancelled.text
    assert error_of(poll(emulator, code["device_code"])) == "access_denied"
    assert emulator.counts["activate"] == 5


# Control API and the standalone command


def test_control_api(emulator: Emulator) -> None:
    control = emulator.base_url + "/_emulator"
    code = device_code(emulator)
    state = requests.get(control + "/state", timeout=TIMEOUT).json()
    assert state["pending_user_codes"] == [code["user_code"]]
    assert state["counts"]["device_code"] == 1
    approve = requests.post(
        control + "/approve", json={"user_code": code["user_code"]}, timeout=TIMEOUT
    )
    assert approve.status_code == 200
    unknown = requests.post(control + "/deny", json={"user_code": "BBBB-BBBB"}, timeout=TIMEOUT)
    assert unknown.status_code == 404
    before = emulator.now()
    requests.post(control + "/advance", json={"seconds": 3600}, timeout=TIMEOUT)
    assert emulator.now() - before >= 3600
    assert poll(emulator, code["device_code"]).status_code == 403  # expired while approved
    fault = {"endpoint": "provider", "fault": "status", "times": 1, "status": 500}
    assert requests.post(control + "/faults", json=fault, timeout=TIMEOUT).status_code == 200
    provider_url = emulator.base_url + "/api/v3/auth/provider"
    assert requests.get(provider_url, timeout=TIMEOUT).status_code == 500
    bad = requests.post(control + "/faults", json={"endpoint": "x"}, timeout=TIMEOUT)
    assert bad.status_code == 400
    requests.post(control + "/faults", json=fault, timeout=TIMEOUT)
    assert requests.delete(control + "/faults", timeout=TIMEOUT).status_code == 200
    assert requests.get(provider_url, timeout=TIMEOUT).status_code == 200
    assert requests.post(control + "/reset", timeout=TIMEOUT).status_code == 200
    assert emulator.now() - before < 3600
    assert "secret" not in requests.get(control + "/state", timeout=TIMEOUT).text


def test_python_m_cmsemu_serves_until_sigint() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "cmsemu", "--auto-approve"],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert re.match(r"^base_url=http://127\.0\.0\.1:\d+$", line)
        base_url = line.removeprefix("base_url=")
        provider = requests.get(base_url + "/api/v3/auth/provider", timeout=TIMEOUT)
        assert provider.json()["issuerUri"] == base_url + "/idp/"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()


def test_python_m_cmsemu_refuses_other_hosts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cmsemu", "--host", "192.0.2.1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "loopback" in result.stderr


def test_custom_config_and_stop() -> None:
    emu = Emulator(EmulatorConfig(client_id="other", poll_interval=1)).start()
    base_url = emu.base_url
    try:
        assert device_code(emu)["interval"] == 1
    finally:
        emu.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(base_url + "/api/v3/auth/provider", timeout=TIMEOUT)
    with pytest.raises(RuntimeError):
        _ = emu.base_url
