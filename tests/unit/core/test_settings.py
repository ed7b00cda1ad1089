"""Settings from the environment: defaults, validation, and every problem named at once."""

from __future__ import annotations

import pytest

from cmstoken.core.errors import ConfigurationError
from cmstoken.core.settings import Settings

REQUIRED = {
    "SERVICE_BASE_URL": "https://api.example.com/",
    "REFRESH_SECRET_ID": "stack/refresh-credential",
    "SERVICE_TOKEN_SECRET_ID": "stack/service-token",
}


def test_defaults_are_the_specs() -> None:
    settings = Settings.from_environ(REQUIRED)
    assert settings.service_base_url == "https://api.example.com"
    assert settings.refresh_margin_seconds == 21600
    assert settings.min_refresh_interval_seconds == 600
    assert settings.verify_service_token is True
    assert settings.absolute_lifetime_seconds == 2592000


def test_every_variable_is_read() -> None:
    settings = Settings.from_environ(
        {
            **REQUIRED,
            "REFRESH_MARGIN_SECONDS": "3600",
            "MIN_REFRESH_INTERVAL_SECONDS": "0",
            "VERIFY_SERVICE_TOKEN": "False",
            "ABSOLUTE_LIFETIME_SECONDS": "0",
        }
    )
    assert settings.refresh_margin_seconds == 3600
    assert settings.min_refresh_interval_seconds == 0
    assert settings.verify_service_token is False
    assert settings.reauthorize_by(1000.0) is None


def test_reauthorize_by_adds_the_absolute_lifetime() -> None:
    settings = Settings.from_environ({**REQUIRED, "ABSOLUTE_LIFETIME_SECONDS": "100"})
    assert settings.reauthorize_by(1000.0) == 1100.0


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_environ(
            {
                "SERVICE_BASE_URL": "http://api.example.com",
                "REFRESH_MARGIN_SECONDS": "six hours",
                "MIN_REFRESH_INTERVAL_SECONDS": "-1",
                "VERIFY_SERVICE_TOKEN": "maybe",
            }
        )
    message = str(info.value)
    for fragment in (
        "SERVICE_BASE_URL must use https",
        "REFRESH_SECRET_ID is required",
        "SERVICE_TOKEN_SECRET_ID is required",
        "REFRESH_MARGIN_SECONDS must be a whole number",
        "MIN_REFRESH_INTERVAL_SECONDS must be at least 0",
        "VERIFY_SERVICE_TOKEN must be true or false",
    ):
        assert fragment in message


def test_loopback_http_is_allowed_for_local_runs() -> None:
    settings = Settings.from_environ({**REQUIRED, "SERVICE_BASE_URL": "http://127.0.0.1:8080"})
    assert settings.service_base_url == "http://127.0.0.1:8080"


def test_the_two_secrets_must_differ() -> None:
    with pytest.raises(ConfigurationError, match="different secrets"):
        Settings.from_environ({**REQUIRED, "SERVICE_TOKEN_SECRET_ID": "stack/refresh-credential"})
