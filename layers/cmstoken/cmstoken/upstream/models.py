"""Typed models of the upstream's responses (service-api.md section 2), validated on parsing.

Each ``parse`` takes the decoded JSON object and raises ``MalformedResponseError`` naming the
endpoint and the field (never its value) when a required field is missing or has the wrong type,
so that no caller ever holds a ``None`` token. Secret fields are left out of ``repr``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cmstoken.core.errors import ConfigurationError, MalformedResponseError
from cmstoken.core.lifetimes import (
    ASSUMED_TOKEN_LIFETIME_SECONDS,
    MAX_TOKEN_LIFETIME_SECONDS,
    clamp_expiry,
    jwt_expiry,
)
from cmstoken.core.redaction import displayable
from cmstoken.core.urls import validate_url

# Upper bounds of the device flow's numbers (the provider sends 900 and 5): larger ones are
# clamped, so that no stored time is out of range and no poll waits for hours.
MAX_DEVICE_CODE_LIFETIME_SECONDS = 86400
MAX_POLL_INTERVAL_SECONDS = 300


def _fail(endpoint: str, problem: str) -> MalformedResponseError:
    return MalformedResponseError(f"{endpoint}: {problem}", endpoint=endpoint)


def _text(document: dict[str, Any], key: str, endpoint: str) -> str:
    value = document.get(key)
    if value is None:
        raise _fail(endpoint, f"response lacks the field {key!r}")
    if not isinstance(value, str) or not value.strip():
        raise _fail(endpoint, f"field {key!r} must be a non-empty string")
    return value


def _optional_text(document: dict[str, Any], key: str, endpoint: str) -> str | None:
    if document.get(key) is None:
        return None
    return _text(document, key, endpoint)


def _integer(
    document: dict[str, Any], key: str, endpoint: str, *, default: int | None = None
) -> int:
    value = document.get(key)
    if value is None and default is not None:
        return default
    if value is None:
        raise _fail(endpoint, f"response lacks the field {key!r}")
    # JSON numbers like 900.0 are accepted; booleans, strings, NaN and infinities are not.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and (not math.isfinite(value) or value != int(value)))
    ):
        raise _fail(endpoint, f"field {key!r} must be a whole number")
    if value < 0:
        raise _fail(endpoint, f"field {key!r} must not be negative")
    return int(value)


def _url(document: dict[str, Any], key: str, endpoint: str, *, allow_query: bool = False) -> str:
    value = _text(document, key, endpoint)
    try:
        return validate_url(value, what=f"{endpoint} field {key!r}", allow_query=allow_query)
    except ConfigurationError as exc:
        raise _fail(endpoint, str(exc)) from exc


@dataclass(frozen=True)
class ProviderInfo:
    """Authentication provider information (endpoint 1)."""

    client_id: str
    freetrial_client_id: str
    issuer_url: str
    scope: str
    audience: str

    @classmethod
    def parse(cls, document: dict[str, Any], endpoint: str = "provider") -> ProviderInfo:
        """Validate a provider-information object; URLs follow the https-or-loopback rule."""
        return cls(
            client_id=_text(document, "clientId", endpoint),
            freetrial_client_id=_text(document, "freetrialClientId", endpoint),
            issuer_url=_url(document, "issuerUri", endpoint),
            scope=_text(document, "scope", endpoint),
            audience=_url(document, "audience", endpoint),
        )

    def client_id_for(self, free_trial: bool) -> str:
        """The client id for the device and token calls: ``freetrialClientId`` for free trials."""
        return self.freetrial_client_id if free_trial else self.client_id


@dataclass(frozen=True)
class DeviceAuthorization:
    """A device code response (endpoint 2), with the time it arrived."""

    device_code: str = field(repr=False)
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int
    received_at: float

    @property
    def expires_at(self) -> float:
        """Epoch seconds when the device code and user code stop working."""
        return self.received_at + self.expires_in

    @classmethod
    def parse(
        cls, document: dict[str, Any], *, received_at: float, endpoint: str = "device_code"
    ) -> DeviceAuthorization:
        """Validate a device code response. ``interval`` defaults to 5 s (RFC 8628 3.2);
        a missing ``verification_uri_complete`` is built from the address and the user code.
        The user code and the addresses are shown to a person: one holding a control
        character, a bidirectional or other invisible formatting character, or whitespace
        (which could rewrite a terminal or disguise the address) is refused, naming the
        field, never quoting it."""
        for key in ("user_code", "verification_uri", "verification_uri_complete"):
            value = document.get(key)
            if isinstance(value, str) and not displayable(value):
                raise _fail(
                    endpoint,
                    f"field {key!r} contains control, invisible or whitespace characters",
                )
        verification_uri = _url(document, "verification_uri", endpoint)
        user_code = _text(document, "user_code", endpoint)
        complete = _optional_text(document, "verification_uri_complete", endpoint)
        expires_in = min(
            _integer(document, "expires_in", endpoint), MAX_DEVICE_CODE_LIFETIME_SECONDS
        )
        if expires_in == 0:
            raise _fail(endpoint, "field 'expires_in' must be positive")
        return cls(
            device_code=_text(document, "device_code", endpoint),
            user_code=user_code,
            verification_uri=verification_uri,
            verification_uri_complete=(
                _url(document, "verification_uri_complete", endpoint, allow_query=True)
                if complete
                else f"{verification_uri}?user_code={user_code}"
            ),
            expires_in=expires_in,
            interval=min(
                MAX_POLL_INTERVAL_SECONDS,
                max(1, _integer(document, "interval", endpoint, default=5)),
            ),
            received_at=received_at,
        )


@dataclass(frozen=True)
class RawTokens:
    """A raw token response (endpoints 3 and 5), with the time it arrived."""

    access_token: str = field(repr=False)
    refresh_token: str = field(repr=False)
    id_token: str | None = field(repr=False)
    scope: str | None
    expires_in: int
    received_at: float

    @property
    def access_token_expires_at(self) -> float:
        """Epoch seconds when the raw access token expires."""
        return self.received_at + self.expires_in

    @classmethod
    def parse(cls, document: dict[str, Any], *, received_at: float, endpoint: str) -> RawTokens:
        """Validate a raw token response; a refresh token is required (the product lives on it)."""
        token_type = _text(document, "token_type", endpoint)
        if token_type.lower() != "bearer":
            raise _fail(endpoint, f"token_type is {token_type!r}, expected 'Bearer'")
        if document.get("refresh_token") is None and document.get("access_token") is not None:
            raise _fail(
                endpoint,
                "response has no refresh_token (was the offline_access scope granted?)",
            )
        return cls(
            access_token=_text(document, "access_token", endpoint),
            refresh_token=_text(document, "refresh_token", endpoint),
            id_token=_optional_text(document, "id_token", endpoint),
            scope=_optional_text(document, "scope", endpoint),
            expires_in=min(_integer(document, "expires_in", endpoint), MAX_TOKEN_LIFETIME_SECONDS),
            received_at=received_at,
        )


@dataclass(frozen=True)
class TokenAnswer:
    """A 2xx token answer (a refresh, or an approved device-code poll), read leniently: the
    identity provider has already rotated the refresh token or spent the device code, so
    ``refresh_token`` is the credential from now on and must be kept even when the rest of the
    answer is sloppy (``expires_in`` missing or a string, ``scope`` empty: RFC 6749 5.1 makes
    only ``access_token`` and ``token_type`` required) or wrong. ``problems`` lists what strict
    reading objects to (field names, never values); ``expiry_source`` says where
    ``access_token_expires_at`` came from: ``"expires_in"``, ``"jwt"`` (the access token's
    ``exp``) or ``"assumed"``."""

    refresh_token: str = field(repr=False)
    access_token: str | None = field(repr=False)
    scope: str | None
    access_token_expires_at: float
    expiry_source: str
    received_at: float
    problems: tuple[str, ...] = ()
    id_token: str | None = field(default=None, repr=False)

    @property
    def expiry_assumed(self) -> bool:
        """True when the answer gave no usable lifetime and the default was assumed."""
        return self.expiry_source == "assumed"

    @classmethod
    def parse(cls, document: Any, *, received_at: float, endpoint: str) -> TokenAnswer:
        """Take what a 2xx token answer holds. Only an answer without a usable
        ``refresh_token`` string raises (``MalformedResponseError`` with status 200): there is
        nothing to keep."""
        if not isinstance(document, dict):
            raise MalformedResponseError(
                f"{endpoint}: expected a JSON object", endpoint=endpoint, status=200
            )
        refresh_token = document.get("refresh_token")
        if not isinstance(refresh_token, str) or not refresh_token.strip():
            raise MalformedResponseError(
                f"{endpoint}: the answer holds no usable refresh_token (the identity provider "
                "may have rotated the one sent: it is not sent again)",
                endpoint=endpoint,
                status=200,
            )
        problems: list[str] = []
        access_token = document.get("access_token")
        if not isinstance(access_token, str) or not access_token.strip():
            problems.append("field 'access_token' is missing or not a non-empty string")
            access_token = None
        # A missing token_type is taken as Bearer (as lenient OAuth clients do); another type
        # means the access token cannot be used as a bearer token.
        token_type = document.get("token_type")
        if token_type is not None and (
            not isinstance(token_type, str) or token_type.strip().lower() != "bearer"
        ):
            problems.append("field 'token_type' is not 'Bearer'")
        scope = document.get("scope")
        expires_in = _lenient_seconds(document.get("expires_in"))
        if expires_in is not None:
            source = "expires_in"
            expires_at = received_at + expires_in
        elif access_token is not None and jwt_expiry(access_token) is not None:
            source = "jwt"
            expires_at = jwt_expiry(access_token) or received_at
        else:
            source = "assumed"
            expires_at = received_at + ASSUMED_TOKEN_LIFETIME_SECONDS
        id_token = document.get("id_token")
        return cls(
            refresh_token=refresh_token,
            access_token=access_token,
            scope=scope if isinstance(scope, str) and scope.strip() else None,
            access_token_expires_at=clamp_expiry(expires_at, received_at),
            expiry_source=source,
            received_at=received_at,
            problems=tuple(problems),
            id_token=id_token if isinstance(id_token, str) and id_token.strip() else None,
        )

    @property
    def usable_access_token(self) -> str | None:
        """The access token, when the answer's problems leave it usable as a bearer token."""
        return None if self.problems else self.access_token

    def strict(self, endpoint: str = "refresh") -> RawTokens:
        """The answer as ``RawTokens``; ``MalformedResponseError`` (status 200) naming the
        problems when there are any."""
        if self.problems or self.access_token is None:
            raise MalformedResponseError(
                f"{endpoint}: " + "; ".join(self.problems), endpoint=endpoint, status=200
            )
        return RawTokens(
            access_token=self.access_token,
            refresh_token=self.refresh_token,
            id_token=self.id_token,
            scope=self.scope,
            expires_in=max(0, round(self.access_token_expires_at - self.received_at)),
            received_at=self.received_at,
        )


def _lenient_seconds(value: Any) -> float | None:
    """A lifetime in seconds from a number or a numeric string (``"86400"``); ``None`` for
    anything else, negative, NaN or infinite (the caller falls back)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return float(MAX_TOKEN_LIFETIME_SECONDS)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, float(MAX_TOKEN_LIFETIME_SECONDS))


@dataclass(frozen=True)
class ServiceToken:
    """The service token (endpoint 4) and when it expires."""

    token: str = field(repr=False)
    expires_at: float

    @classmethod
    def parse(
        cls,
        document: dict[str, Any],
        *,
        fallback_expires_at: float,
        endpoint: str = "exchange",
        now: float | None = None,
    ) -> ServiceToken:
        """Validate an exchange response. The expiry is the JWT ``exp`` when the token has one,
        else ``fallback_expires_at`` (the raw access token's expiry); with ``now``, it is
        clamped to ``[now, now + MAX_TOKEN_LIFETIME_SECONDS]``."""
        token = _text(document, "token", endpoint)
        expires_at = jwt_expiry(token) or fallback_expires_at
        if now is not None:
            expires_at = clamp_expiry(expires_at, now)
        return cls(token=token, expires_at=expires_at)


@dataclass(frozen=True)
class CloudProvider:
    """A cloud provider available to a project."""

    cloud_provider_id: str
    cloud_provider_name: str


@dataclass(frozen=True)
class Project:
    """A project of the project listing (endpoint 6)."""

    project_id: str
    project_name: str
    cluster_count: int
    user_count: int
    cloud_providers: tuple[CloudProvider, ...]

    @classmethod
    def parse(cls, document: dict[str, Any], endpoint: str = "projects") -> Project:
        """Validate one project object."""
        providers = document.get("cloudProviders") or []
        if not isinstance(providers, list) or not all(isinstance(p, dict) for p in providers):
            raise _fail(endpoint, "field 'cloudProviders' must be a list of objects")
        return cls(
            project_id=_text(document, "projectId", endpoint),
            project_name=_text(document, "projectName", endpoint),
            cluster_count=_integer(document, "clusterCount", endpoint, default=0),
            user_count=_integer(document, "userCount", endpoint, default=0),
            cloud_providers=tuple(
                CloudProvider(
                    cloud_provider_id=_text(p, "cloudProviderId", endpoint),
                    cloud_provider_name=_text(p, "cloudProviderName", endpoint),
                )
                for p in providers
            ),
        )


def parse_project_listing(document: Any, endpoint: str = "projects") -> list[Project]:
    """Projects from a listing: the ``{"data": [...]}`` envelope, a bare list or a bare object."""
    if isinstance(document, dict) and "data" in document:
        document = document["data"]
    if isinstance(document, dict):
        return [Project.parse(document, endpoint)]
    if isinstance(document, list) and all(isinstance(item, dict) for item in document):
        return [Project.parse(item, endpoint) for item in document]
    raise _fail(endpoint, "expected a project object or a list of projects")
