"""The two secret documents (SPEC section 3): the private refresh credential and the published
service token, as JSON strings with ISO 8601 UTC times and a schema version.

Parsing is strict (types, required fields, known status values, no newer schema) and raises
``DocumentError`` naming the field, never its value. Fields this version does not know are kept
in ``extra`` and written back unchanged, so that no writer drops what another one owns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from cmstoken.core.clock import optional_iso, parse_iso, to_iso
from cmstoken.core.errors import DocumentError
from cmstoken.core.refresh_backoff import Failures

SCHEMA_VERSION = 1
STATUS_ACTIVE = "active"
STATUS_REAUTHORIZATION_REQUIRED = "reauthorization_required"
TOKEN_TYPE = "Bearer"  # noqa: S105 -- the scheme's name, not a secret
CREDENTIAL_STATUSES = frozenset({STATUS_ACTIVE, STATUS_REAUTHORIZATION_REQUIRED})

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _no_extra() -> Mapping[str, Any]:
    """The shared empty ``extra``: a factory, as Python 3.11's dataclasses refuse an unhashable
    default (the consumer wheel runs there)."""
    return _EMPTY


class _Reader:
    """Typed access to one JSON object, with errors that name the document and the field."""

    def __init__(self, document: Mapping[str, Any], where: str) -> None:
        self.document = document
        self.where = where

    def fail(self, problem: str) -> DocumentError:
        return DocumentError(f"{self.where}: {problem}")

    def text(self, key: str) -> str:
        value = self.document.get(key)
        if not isinstance(value, str) or not value:
            raise self.fail(f"field {key!r} must be a non-empty string")
        return value

    def optional_text(self, key: str) -> str | None:
        return None if self.document.get(key) is None else self.text(key)

    def time(self, key: str) -> float:
        text = self.text(key)
        try:
            return parse_iso(text)
        except ValueError as exc:
            raise self.fail(f"field {key!r} must be an ISO 8601 UTC time") from exc

    def optional_time(self, key: str) -> float | None:
        return None if self.document.get(key) is None else self.time(key)

    def integer(self, key: str) -> int:
        value = self.document.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"field {key!r} must be a whole number")
        return value

    def optional_seconds(self, key: str) -> int | None:
        return None if self.document.get(key) is None else self.tally(key)

    def tally(self, key: str, default: int = 0) -> int:
        """A whole number, not negative: ``default`` when absent."""
        if self.document.get(key) is None:
            return default
        value = self.integer(key)
        if value < 0:
            raise self.fail(f"field {key!r} must not be negative")
        return value

    def positive(self, key: str) -> int:
        value = self.integer(key)
        if value < 1:
            raise self.fail(f"field {key!r} must be at least 1")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.document.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(f"field {key!r} must be true or false")
        return value


def _section(document: Any, key: str, where: str) -> _Reader:
    """A reader of the object under the refresh credential's ``key``."""
    if not isinstance(document, dict):
        raise DocumentError(f"refresh credential: field {key!r} must be an object")
    return _Reader(document, where)


def _load(text: str | bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{where}: not valid JSON") from exc
    if not isinstance(document, dict):
        raise DocumentError(f"{where}: expected a JSON object")
    version = document.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise DocumentError(f"{where}: field 'schema_version' must be a positive whole number")
    if version > SCHEMA_VERSION:
        raise DocumentError(
            f"{where}: written by a newer version of this product (schema {version}, this one "
            f"reads up to {SCHEMA_VERSION}); upgrade the stack"
        )
    return document


def _dump(fields: dict[str, Any], extra: Mapping[str, Any]) -> str:
    merged = {**extra, **fields, "schema_version": SCHEMA_VERSION}
    return json.dumps(merged, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class PendingAuthorization:
    """A device authorization started by the bootstrap and not finished yet."""

    device_code: str = field(repr=False)
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    client_id: str
    issuer_url: str
    free_trial: bool
    interval: int
    started_at: float
    expires_at: float
    next_poll_at: float
    # The operator allowed this authorization to switch the stack to another identity.
    allow_new_identity: bool = False
    # The tag of the re-authorization link that started it (``links.tokens.tag``); ``None``:
    # an operator started it. Only that link's page shows it, and only that link polls it.
    link: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored under ``pending``."""
        return {
            "device_code": self.device_code,
            "user_code": self.user_code,
            "verification_uri": self.verification_uri,
            "verification_uri_complete": self.verification_uri_complete,
            "client_id": self.client_id,
            "issuer_url": self.issuer_url,
            "free_trial": self.free_trial,
            "interval": self.interval,
            "started_at": to_iso(self.started_at),
            "expires_at": to_iso(self.expires_at),
            # Rounded up: a poll resumed from the document is never early.
            "next_poll_at": to_iso(math.ceil(self.next_poll_at)),
            "allow_new_identity": self.allow_new_identity,
            **({} if self.link is None else {"link": self.link}),
        }

    @classmethod
    def from_dict(cls, document: Any) -> PendingAuthorization:
        """Parse the ``pending`` object of the refresh credential document."""
        read = _section(document, "pending", "refresh credential pending authorization")
        interval = read.positive("interval")
        return cls(
            device_code=read.text("device_code"),
            user_code=read.text("user_code"),
            verification_uri=read.text("verification_uri"),
            verification_uri_complete=read.text("verification_uri_complete"),
            client_id=read.text("client_id"),
            issuer_url=read.text("issuer_url"),
            free_trial=read.boolean("free_trial", False),
            interval=interval,
            started_at=read.time("started_at"),
            expires_at=read.time("expires_at"),
            next_poll_at=read.time("next_poll_at"),
            allow_new_identity=read.boolean("allow_new_identity", False),
            link=read.optional_text("link"),
        )


@dataclass(frozen=True)
class RefreshCredential:
    """The long-lived credential: the newest refresh token and what is known about its family."""

    refresh_token: str = field(repr=False)
    client_id: str
    issuer_url: str
    status: str
    authorized_at: float
    refreshed_at: float
    reauthorize_by: float | None
    free_trial: bool = False
    # Who authorized: SHA-256 (hex) of the issuer and the ``sub`` the tokens named; ``None``
    # when unknown (no readable subject, or a credential stored before identities were kept).
    subject_sha256: str | None = None
    # When the service refused a service token of this authorization (the verification's
    # 401/403, recorded by the bootstrap); ``None``: never. A token published after it means
    # the service accepts the credential again.
    service_refused_at: float | None = None

    def __post_init__(self) -> None:
        if self.status not in CREDENTIAL_STATUSES:
            raise DocumentError(
                f"refresh credential: field 'status' must be one of {sorted(CREDENTIAL_STATUSES)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The credential's top-level fields of the refresh credential document."""
        return {
            "refresh_token": self.refresh_token,
            "client_id": self.client_id,
            "issuer_url": self.issuer_url,
            "status": self.status,
            "authorized_at": to_iso(self.authorized_at),
            "refreshed_at": to_iso(self.refreshed_at),
            "reauthorize_by": optional_iso(self.reauthorize_by),
            "free_trial": self.free_trial,
            # Left out while unknown, so that a document stored without it reads back unchanged.
            **({} if self.subject_sha256 is None else {"subject_sha256": self.subject_sha256}),
            **(
                {}
                if self.service_refused_at is None
                else {"service_refused_at": to_iso(self.service_refused_at)}
            ),
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> RefreshCredential:
        """Parse the credential's fields from the top level of the document."""
        read = _Reader(document, "refresh credential")
        return cls(
            refresh_token=read.text("refresh_token"),
            client_id=read.text("client_id"),
            issuer_url=read.text("issuer_url"),
            status=read.text("status"),
            authorized_at=read.time("authorized_at"),
            refreshed_at=read.time("refreshed_at"),
            reauthorize_by=read.optional_time("reauthorize_by"),
            free_trial=read.boolean("free_trial", False),
            subject_sha256=read.optional_text("subject_sha256"),
            service_refused_at=read.optional_time("service_refused_at"),
        )


@dataclass(frozen=True)
class Lease:
    """A rotator's claim on the credential: nobody else refreshes it until ``expires_at``.
    ``presents`` is the fingerprint of the refresh token its holder presents (``None`` in a
    lease written by an older release): while the credential still holds that token, the
    holder may have spent it without storing the answer."""

    owner: str
    expires_at: float
    presents: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored under ``lease``."""
        stored: dict[str, Any] = {"owner": self.owner, "expires_at": to_iso(self.expires_at)}
        if self.presents is not None:
            stored["presents"] = self.presents
        return stored

    @classmethod
    def from_dict(cls, document: Any) -> Lease:
        """Parse the ``lease`` object."""
        read = _section(document, "lease", "refresh credential lease")
        return cls(
            owner=read.text("owner"),
            expires_at=read.time("expires_at"),
            presents=read.optional_text("presents"),
        )


def _failures_to_dict(failures: Failures) -> dict[str, Any]:
    """The JSON object stored under ``failures``: a streak of failed refresh attempts."""
    return {
        "count": failures.count,
        "last_at": to_iso(failures.last_at),
        "retry_at": to_iso(failures.retry_at),
        "owed": failures.owed,
        "spared": failures.spared,
    }


def _failures_from_dict(document: Any) -> Failures:
    """Parse the ``failures`` object."""
    read = _section(document, "failures", "refresh credential failures")
    return Failures(
        count=read.positive("count"),
        last_at=read.time("last_at"),
        retry_at=read.time("retry_at"),
        # A streak recorded by the release before these fields owes and has spared nothing.
        owed=read.tally("owed"),
        spared=read.tally("spared"),
    )


@dataclass(frozen=True)
class RawAccessToken:
    """The raw access token of the newest refresh, kept until it has been exchanged, so that a
    failed exchange is retried without spending another refresh."""

    token: str = field(repr=False)
    expires_at: float
    # True when the identity provider's answer gave no usable lifetime and a default was assumed.
    expires_at_assumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored under ``raw_access_token``."""
        stored: dict[str, Any] = {"token": self.token, "expires_at": to_iso(self.expires_at)}
        if self.expires_at_assumed:
            stored["expires_at_assumed"] = True
        return stored

    @classmethod
    def from_dict(cls, document: Any) -> RawAccessToken:
        """Parse the ``raw_access_token`` object."""
        if not isinstance(document, dict):
            raise DocumentError("refresh credential: field 'raw_access_token' must be an object")
        read = _Reader(document, "refresh credential raw access token")
        return cls(
            token=read.text("token"),
            expires_at=read.time("expires_at"),
            expires_at_assumed=read.boolean("expires_at_assumed", False),
        )


_CREDENTIAL_KEYS = frozenset(
    {
        "refresh_token",
        "client_id",
        "issuer_url",
        "status",
        "authorized_at",
        "refreshed_at",
        "reauthorize_by",
        "free_trial",
        "subject_sha256",
        "service_refused_at",
    }
)


@dataclass(frozen=True)
class CandidateCredential:
    """A new authorization that is stored but not trusted yet: the device flow's credential and
    raw access token, kept next to the active credential until its service token has been
    exchanged and verified (then it is promoted), or dropped when the service refuses it. The
    rotator never uses it."""

    credential: RefreshCredential
    raw_access_token: RawAccessToken

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored under ``candidate``."""
        return {**self.credential.to_dict(), "raw_access_token": self.raw_access_token.to_dict()}

    @classmethod
    def from_dict(cls, document: Any) -> CandidateCredential:
        """Parse the ``candidate`` object."""
        if not isinstance(document, dict):
            raise DocumentError("refresh credential: field 'candidate' must be an object")
        credential = RefreshCredential.from_dict(document)
        return cls(
            credential=credential,
            raw_access_token=RawAccessToken.from_dict(document.get("raw_access_token")),
        )


_SECTION_KEYS = frozenset(
    {"pending", "lease", "failures", "raw_access_token", "candidate", "schema_version"}
)


@dataclass(frozen=True)
class RefreshSecret:
    """The whole private document: the credential (once bootstrapped), the pending device
    authorization (while one runs), a new authorization waiting for its verification (the
    candidate), a rotator's lease, the streak of failed refresh attempts
    (``core.refresh_backoff``), the raw access token not yet exchanged, and every field another
    writer or version owns."""

    credential: RefreshCredential | None = None
    pending: PendingAuthorization | None = None
    lease: Lease | None = None
    failures: Failures | None = None
    raw_access_token: RawAccessToken | None = None
    candidate: CandidateCredential | None = None
    extra: Mapping[str, Any] = field(default_factory=_no_extra, repr=False)

    def to_json(self) -> str:
        """The ``SecretString`` to store."""
        fields: dict[str, Any] = {}
        if self.credential is not None:
            fields.update(self.credential.to_dict())
        for key, section in (
            ("pending", self.pending),
            ("lease", self.lease),
            ("raw_access_token", self.raw_access_token),
            ("candidate", self.candidate),
        ):
            if section is not None:
                fields[key] = section.to_dict()
        if self.failures is not None:
            fields["failures"] = _failures_to_dict(self.failures)
        extra = {
            key: value
            for key, value in self.extra.items()
            if key not in _CREDENTIAL_KEYS and key not in _SECTION_KEYS
        }
        return _dump(fields, extra)

    @classmethod
    def from_json(cls, text: str | bytes) -> RefreshSecret:
        """Parse a stored ``SecretString``; without ``refresh_token`` there is no credential."""
        document = _load(text, "refresh credential")
        credential = RefreshCredential.from_dict(document) if "refresh_token" in document else None
        pending = document.get("pending")
        lease = document.get("lease")
        failures = document.get("failures")
        raw = document.get("raw_access_token")
        candidate = document.get("candidate")
        extra = {
            key: value
            for key, value in document.items()
            if key not in _CREDENTIAL_KEYS and key not in _SECTION_KEYS
        }
        return cls(
            credential=credential,
            pending=None if pending is None else PendingAuthorization.from_dict(pending),
            lease=None if lease is None else Lease.from_dict(lease),
            failures=None if failures is None else _failures_from_dict(failures),
            raw_access_token=None if raw is None else RawAccessToken.from_dict(raw),
            candidate=None if candidate is None else CandidateCredential.from_dict(candidate),
            extra=MappingProxyType(extra),
        )


_SERVICE_TOKEN_KEYS = frozenset(
    {
        "token",
        "token_type",
        "expires_at",
        "api_url",
        "issued_at",
        "refreshed_at",
        "authorized_at",
        "reauthorize_by",
        "credential_status",
        "min_refresh_interval_seconds",
    }
)


@dataclass(frozen=True)
class ServiceTokenDocument:
    """The published document consumers read: a verified service token and where to use it.

    ``refreshed_at``, ``authorized_at``, ``reauthorize_by`` and ``credential_status`` copy the
    credential's metadata (no secret), so that a scheduled check needs to read this one secret.
    """

    token: str = field(repr=False)
    expires_at: float
    api_url: str
    issued_at: float
    refreshed_at: float | None = None
    authorized_at: float | None = None
    reauthorize_by: float | None = None
    credential_status: str = STATUS_ACTIVE
    min_refresh_interval_seconds: int | None = None
    extra: Mapping[str, Any] = field(default_factory=_no_extra, repr=False)

    def older_authorization_than(self, authorized_at: float) -> bool:
        """Whether this token comes from an authorization older than the one made at
        ``authorized_at`` (compared to the second, as stored); unknown counts as older."""
        return self.authorized_at is None or int(self.authorized_at) < int(authorized_at)

    def from_authorization(self, authorized_at: float) -> bool:
        """Whether this token comes from the authorization made at ``authorized_at`` (to the
        second, as stored)."""
        return self.authorized_at is not None and int(self.authorized_at) == int(authorized_at)

    def to_json(self) -> str:
        """The ``SecretString`` to store."""
        extra = {k: v for k, v in self.extra.items() if k not in _SERVICE_TOKEN_KEYS}
        interval = self.min_refresh_interval_seconds
        return _dump(
            {
                "token": self.token,
                "token_type": TOKEN_TYPE,
                "expires_at": to_iso(self.expires_at),
                "api_url": self.api_url,
                "issued_at": to_iso(self.issued_at),
                "refreshed_at": optional_iso(self.refreshed_at),
                "authorized_at": optional_iso(self.authorized_at),
                "reauthorize_by": optional_iso(self.reauthorize_by),
                "credential_status": self.credential_status,
                # Left out while unknown, so that an older document reads back unchanged.
                **({} if interval is None else {"min_refresh_interval_seconds": interval}),
            },
            extra,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ServiceTokenDocument:
        """Parse a stored ``SecretString``."""
        document = _load(text, "service token")
        read = _Reader(document, "service token")
        if read.text("token_type") != TOKEN_TYPE:
            raise read.fail(f"field 'token_type' must be {TOKEN_TYPE!r}")
        status = read.optional_text("credential_status") or STATUS_ACTIVE
        if status not in CREDENTIAL_STATUSES:
            raise read.fail(
                f"field 'credential_status' must be one of {sorted(CREDENTIAL_STATUSES)}"
            )
        return cls(
            token=read.text("token"),
            expires_at=read.time("expires_at"),
            api_url=read.text("api_url"),
            issued_at=read.time("issued_at"),
            refreshed_at=read.optional_time("refreshed_at"),
            authorized_at=read.optional_time("authorized_at"),
            reauthorize_by=read.optional_time("reauthorize_by"),
            credential_status=status,
            min_refresh_interval_seconds=read.optional_seconds("min_refresh_interval_seconds"),
            extra=MappingProxyType(
                {
                    k: v
                    for k, v in document.items()
                    if k not in _SERVICE_TOKEN_KEYS and k != "schema_version"
                }
            ),
        )
