"""Settings from the environment, parsed and validated once, failing with every problem named."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cmstoken.core.errors import ConfigurationError
from cmstoken.core.urls import validate_url
from cmstoken.core.version_budget import MAX_MARGIN_SECONDS

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


class _Reader:
    """Reads variables and collects problems, so that one error names all of them."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []

    def required(self, name: str) -> str:
        value = self.environ.get(name, "").strip()
        if not value:
            self.problems.append(f"{name} is required")
        return value

    def url(self, name: str) -> str:
        value = self.required(name)
        if not value:
            return value
        try:
            return validate_url(value, what=name)
        except ConfigurationError as exc:
            self.problems.append(str(exc))
            return value

    def seconds(
        self, name: str, default: int, *, minimum: int = 0, maximum: int | None = None
    ) -> int:
        value = self.whole(name, default, minimum=minimum, unit="seconds")
        if maximum is not None and value > maximum:
            self.problems.append(f"{name} must be at most {maximum}, got {value}")
        return value

    def whole(self, name: str, default: int, *, minimum: int = 0, unit: str = "") -> int:
        text = self.environ.get(name, "").strip()
        if not text:
            return default
        try:
            value = int(text)
        except ValueError:
            what = f"a whole number of {unit}" if unit else "a whole number"
            self.problems.append(f"{name} must be {what}, got {text!r}")
            return default
        if value < minimum:
            self.problems.append(f"{name} must be at least {minimum}, got {value}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        text = self.environ.get(name, "").strip().lower()
        if not text:
            return default
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        self.problems.append(f"{name} must be true or false, got {text!r}")
        return default


@dataclass(frozen=True)
class Settings:
    """The functions' configuration (SPEC section 3), from environment variables."""

    service_base_url: str
    refresh_secret_id: str
    service_token_secret_id: str
    refresh_margin_seconds: int = 21600
    min_refresh_interval_seconds: int = 600
    verify_service_token: bool = True
    absolute_lifetime_seconds: int = 2592000
    free_trial: bool = False
    # 1: Lambda runs at most one rotator invocation at a time (the template's reserved
    # concurrency), so a lease of another invocation belongs to one that has ended.
    rotator_reserved_concurrency: int = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Parse and validate; ``ConfigurationError`` lists every problem at once."""
        read = _Reader(environ)
        settings = cls(
            service_base_url=read.url("SERVICE_BASE_URL"),
            refresh_secret_id=read.required("REFRESH_SECRET_ID"),
            service_token_secret_id=read.required("SERVICE_TOKEN_SECRET_ID"),
            refresh_margin_seconds=read.seconds(
                "REFRESH_MARGIN_SECONDS", 21600, maximum=MAX_MARGIN_SECONDS
            ),
            min_refresh_interval_seconds=read.seconds("MIN_REFRESH_INTERVAL_SECONDS", 600),
            verify_service_token=read.flag("VERIFY_SERVICE_TOKEN", True),
            absolute_lifetime_seconds=read.seconds("ABSOLUTE_LIFETIME_SECONDS", 2592000),
            free_trial=read.flag("FREE_TRIAL", False),
            rotator_reserved_concurrency=read.whole("ROTATOR_RESERVED_CONCURRENCY", 0),
        )
        if (
            settings.refresh_secret_id
            and settings.refresh_secret_id == settings.service_token_secret_id
        ):
            read.problems.append(
                "REFRESH_SECRET_ID and SERVICE_TOKEN_SECRET_ID must name different secrets"
            )
        if read.problems:
            raise ConfigurationError("invalid configuration: " + "; ".join(read.problems))
        return settings

    def reauthorize_by(self, authorized_at: float) -> float | None:
        """When the refresh family's assumed absolute lifetime ends (``None`` when unlimited)."""
        if self.absolute_lifetime_seconds == 0:
            return None
        return authorized_at + self.absolute_lifetime_seconds


@dataclass(frozen=True)
class LinksSettings:
    """The re-authorization links function's configuration, from environment variables."""

    stack_name: str
    key_secret_id: str
    table: str
    bootstrap_function: str
    topic_arn: str
    warning_seconds: int = 0
    starts_per_hour: int = 6

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> LinksSettings:
        """Parse and validate; ``ConfigurationError`` lists every problem at once."""
        read = _Reader(environ)
        settings = cls(
            stack_name=read.required("STACK_NAME"),
            key_secret_id=read.required("LINKS_KEY_SECRET_ID"),
            table=read.required("LINKS_TABLE"),
            bootstrap_function=read.required("BOOTSTRAP_FUNCTION_NAME"),
            topic_arn=read.required("ALARM_TOPIC_ARN"),
            warning_seconds=read.seconds("REAUTHORIZATION_WARNING_SECONDS", 0),
            starts_per_hour=read.whole("LINKS_STARTS_PER_HOUR", 6, minimum=1),
        )
        if read.problems:
            raise ConfigurationError("invalid configuration: " + "; ".join(read.problems))
        return settings
