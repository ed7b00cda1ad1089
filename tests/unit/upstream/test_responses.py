"""Mapping upstream responses onto the error taxonomy, and reading JSON bodies."""

from __future__ import annotations

import pytest

from cmstoken.core import errors
from cmstoken.upstream.responses import (
    json_object,
    json_value,
    oauth_error,
    retry_after_seconds,
    service_error,
)
from support import make_jwt, response

NOW = 1_795_000_000.0


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (403, "authorization_pending", errors.AuthorizationPendingError),
        (429, "slow_down", errors.SlowDownError),
        (403, "expired_token", errors.ExpiredTokenError),
        (403, "access_denied", errors.AccessDeniedError),
        (403, "invalid_grant", errors.InvalidGrantError),
        (401, "invalid_client", errors.InvalidClientError),
        (403, "unauthorized_client", errors.InvalidClientError),
        (500, "server_error", errors.ServerError),
        (503, "temporarily_unavailable", errors.ServerError),
        (429, "too_many_requests", errors.RateLimitedError),
        (400, "invalid_request", errors.RequestRejectedError),
        (400, "unsupported_grant_type", errors.RequestRejectedError),
        (502, None, errors.ServerError),
        (404, None, errors.RequestRejectedError),
        (302, None, errors.MalformedResponseError),
    ],
)
def test_oauth_errors_map_onto_the_taxonomy(
    status: int, code: str | None, expected: type[errors.UpstreamError]
) -> None:
    body = {"error": code, "error_description": "described"} if code else {}
    error = oauth_error(response(status, body), endpoint="refresh", now=NOW)
    assert type(error) is expected
    assert error.status == status
    assert error.code == code
    assert error.endpoint == "refresh"
    assert str(error).startswith(f"refresh: HTTP {status}")


def test_terminal_and_transient_families() -> None:
    assert issubclass(errors.InvalidGrantError, errors.CredentialRejectedError)
    assert issubclass(errors.InvalidClientError, errors.CredentialRejectedError)
    for terminal in (
        errors.AccessDeniedError,
        errors.ExpiredTokenError,
        errors.TokenRefusedError,
        errors.CredentialRejectedError,
    ):
        assert issubclass(terminal, errors.TerminalError)
        assert not issubclass(terminal, errors.TransientError)
    for transient in (
        errors.ServerError,
        errors.RateLimitedError,
        errors.UpstreamTimeoutError,
        errors.UpstreamConnectionError,
        errors.MalformedResponseError,
    ):
        assert issubclass(transient, errors.TransientError)
    for state in (errors.AuthorizationPendingError, errors.SlowDownError):
        assert issubclass(state, errors.PollAgainError)
        assert not issubclass(state, errors.TerminalError | errors.TransientError)


def test_terminal_messages_tell_the_user_what_to_do() -> None:
    expired = oauth_error(
        response(403, {"error": "expired_token"}), endpoint="device_token", now=NOW
    )
    assert "start the flow again" in str(expired)
    denied = oauth_error(
        response(403, {"error": "access_denied"}), endpoint="device_token", now=NOW
    )
    assert "denied" in str(denied)
    revoked = oauth_error(
        response(
            403,
            {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."},
        ),
        endpoint="refresh",
        now=NOW,
    )
    assert "Unknown or invalid refresh token." in str(revoked)
    assert "authorize again" in str(revoked)


def test_rate_limit_wait_comes_from_retry_after_seconds() -> None:
    answer = response(429, {"error": "too_many_requests"}, headers={"Retry-After": "7"})
    error = oauth_error(answer, endpoint="refresh", now=NOW)
    assert isinstance(error, errors.RateLimitedError)
    assert error.retry_after == 7


def test_rate_limit_wait_comes_from_retry_after_http_date() -> None:
    answer = response(429, {}, headers={"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"})
    assert retry_after_seconds(answer, now=784111767.0) == 10


def test_rate_limit_wait_comes_from_x_ratelimit_reset() -> None:
    headers = {
        "X-RateLimit-Limit": "10",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(int(NOW) + 42),
    }
    error = oauth_error(
        response(429, {"error": "too_many_requests"}, headers=headers), endpoint="refresh", now=NOW
    )
    assert isinstance(error, errors.RateLimitedError)
    assert error.retry_after == 42


def test_retry_after_wins_over_reset_and_past_resets_mean_no_wait() -> None:
    both = response(429, {}, headers={"Retry-After": "3", "X-RateLimit-Reset": str(int(NOW) + 60)})
    assert retry_after_seconds(both, now=NOW) == 3
    past = response(429, {}, headers={"X-RateLimit-Reset": str(int(NOW) - 60)})
    assert retry_after_seconds(past, now=NOW) == 0
    garbage = response(429, {}, headers={"Retry-After": "soon", "X-RateLimit-Reset": "later"})
    assert retry_after_seconds(garbage, now=NOW) is None
    assert retry_after_seconds(response(429, {}), now=NOW) is None


def test_server_errors_carry_the_wait_hint_too() -> None:
    error = service_error(
        response(503, {}, headers={"Retry-After": "2"}), endpoint="exchange", now=NOW
    )
    assert isinstance(error, errors.ServerError)
    assert error.retry_after == 2


def test_service_envelope_with_details_is_rendered() -> None:
    body = {
        "error": {
            "status": 500,
            "message": "Internal Server Error",
            "details": "failed to get service token",
            "reference": "upmrid/abc123",
            "source": "API",
        }
    }
    error = service_error(response(500, body), endpoint="exchange", now=NOW)
    assert isinstance(error, errors.ServerError)
    assert str(error) == (
        "exchange: HTTP 500 Internal Server Error: failed to get service token "
        "(reference upmrid/abc123)"
    )


def test_service_envelope_with_errors_list_is_rendered() -> None:
    body = {
        "error": {
            "status": 500,
            "message": "Internal Server Error",
            "errors": [{"message": "failed to get service token"}, {"message": "try later"}],
            "reference": "upmrid/xyz",
        }
    }
    error = service_error(response(500, body), endpoint="exchange", now=NOW)
    assert "failed to get service token; try later" in str(error)
    assert "upmrid/xyz" in str(error)


@pytest.mark.parametrize("status", [401, 403])
def test_service_refusal_is_token_refused(status: int) -> None:
    body = {"error": {"status": status, "message": "Unauthorized"}}
    error = service_error(response(status, body), endpoint="projects", now=NOW)
    assert isinstance(error, errors.TokenRefusedError)
    assert error.status == status


def test_html_error_pages_are_described_not_echoed() -> None:
    page = b"<!DOCTYPE html><html><body>Bad gateway secret-ish stuff</body></html>"
    error = service_error(
        response(502, raw=page, content_type="text/html"), endpoint="exchange", now=NOW
    )
    assert isinstance(error, errors.ServerError)
    assert "HTML page" in str(error)
    assert "secret-ish" not in str(error)


def test_error_messages_never_contain_the_request_secret_or_any_jwt() -> None:
    refresh_token = "v1.Mrefresh-token-value-0123456789"
    echoed_jwt = make_jwt({"exp": 1})
    body = {
        "error": "invalid_grant",
        "error_description": f"token {refresh_token} rejected; access {echoed_jwt}",
    }
    error = oauth_error(response(403, body), endpoint="refresh", now=NOW, secrets=[refresh_token])
    assert refresh_token not in str(error)
    assert echoed_jwt not in str(error)
    assert "[redacted]" in str(error)


def test_long_descriptions_are_shortened() -> None:
    body = {"error": "invalid_request", "error_description": "x" * 5000}
    error = oauth_error(response(400, body), endpoint="device_code", now=NOW)
    assert len(str(error)) < 400


@pytest.mark.parametrize(
    ("raw", "content_type", "problem"),
    [
        (b"", "application/json", "empty response body"),
        (b"   ", "application/json", "empty response body"),
        (b'{"access_token": "abc', "application/json", "not valid JSON"),
        (b"<html><title>Oops</title></html>", "text/html", "an HTML page"),
        (b"\xff\xfe", "application/json", "not valid JSON"),
    ],
)
def test_bodies_that_are_not_json_are_malformed(
    raw: bytes, content_type: str, problem: str
) -> None:
    with pytest.raises(errors.MalformedResponseError, match=problem) as info:
        json_value(response(200, raw=raw, content_type=content_type), endpoint="refresh")
    assert info.value.outcome_unknown


@pytest.mark.parametrize("body", [[1, 2], "text", 3, None])
def test_json_that_is_not_an_object_is_malformed(body: object) -> None:
    with pytest.raises(errors.MalformedResponseError, match="expected a JSON object"):
        json_object(response(200, body), endpoint="refresh")
