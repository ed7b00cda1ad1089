"""The https-or-loopback rule for every configured or received address."""

from __future__ import annotations

import pytest

from cmstoken.core.errors import ConfigurationError
from cmstoken.core.urls import validate_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example.com", "https://api.example.com"),
        ("https://api.example.com/", "https://api.example.com"),
        ("https://login.example.com/tenant/", "https://login.example.com/tenant"),
        ("https://api.example.com:8443/x", "https://api.example.com:8443/x"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://localhost:9000/idp/", "http://localhost:9000/idp"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("  https://api.example.com  ", "https://api.example.com"),
    ],
)
def test_accepted_urls_are_normalised_without_trailing_slash(url: str, expected: str) -> None:
    assert validate_url(url, what="base URL") == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "empty"),
        ("http://api.example.com", "must use https"),
        ("http://10.0.0.5:8080", "must use https"),
        ("http://127.0.0.2", "must use https"),
        ("ftp://api.example.com", "absolute https URL"),
        ("api.example.com", "absolute https URL"),
        ("https://", "absolute https URL"),
        ("https://user:pw@api.example.com", "user name or password"),
        ("https://api.example.com/?x=1", "query or fragment"),
        ("https://api.example.com/#frag", "query or fragment"),
        ("https://api.example.com:99999", "not a valid URL"),
    ],
)
def test_rejected_urls_name_the_setting_and_the_rule(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem) as info:
        validate_url(url, what="SERVICE_BASE_URL")
    assert "SERVICE_BASE_URL" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://user:hunter2secret@api.example.com",
        "ftp://user:hunter2secret@api.example.com",
        "http://user:hunter2secret@example.com",
        "hunter2secret",
        "https://api.example.com:hunter2secret/",
        "https://api.example.com:hunter2secret",
        "https://[hunter2secret/",
    ],
)
def test_rejected_url_messages_never_echo_the_url(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        validate_url(url, what="base URL")
    assert "hunter2secret" not in str(info.value)
