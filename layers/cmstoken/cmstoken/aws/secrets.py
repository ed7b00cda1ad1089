"""Secrets Manager adapter: reads and idempotent, conflict-detecting writes of secret values.

``ClientError`` codes and botocore failures become the project's ``StoreError`` types
(``store_error``, which ``secret_lookup`` uses too). Every write names its version
(``ClientRequestToken``): the id derived from the version it replaces, so two writers that read
the same version cannot both write (the second gets ``VersionConflictError``), and a retried
write whose answer was lost is a no-op instead of a duplicate.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from cmstoken.aws import clients
from cmstoken.core.errors import (
    KMS_KEY_CODES,
    StoreAccessError,
    StoreError,
    StoreKeyError,
    StoreUnavailableError,
    VersionConflictError,
)

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

_ACCESS_CODES = frozenset(
    {
        "AccessDeniedException",
        "InvalidRequestException",
        "UnrecognizedClientException",
        "ExpiredTokenException",
    }
)
# What Secrets Manager says when KMS, not the secret's policy, refused a caller: an
# AccessDeniedException "Access to KMS is not allowed" (the key policy), or, for a secret of
# another account, an InvalidRequestException about the default KMS service key (AWS
# Knowledge Center, "secrets-manager-cross-account-key").
_KMS_REFUSALS = ("access to kms", "kms service key")
_FIRST_VERSION_BASIS = "cmstoken:first-version"


def next_version_id(current_version_id: str | None) -> str:
    """The version id a write replacing ``current_version_id`` uses (``None``: empty secret)."""
    basis = f"cmstoken:after:{current_version_id or _FIRST_VERSION_BASIS}"
    return str(uuid.UUID(bytes=hashlib.sha256(basis.encode()).digest()[:16]))


@dataclass(frozen=True)
class SecretValue:
    """What a read found: the ``SecretString`` (``None`` when the secret has no value yet) and
    the id of that version."""

    text: str | None
    version_id: str | None


@dataclass(frozen=True)
class StoreTimeouts:
    """How long one Secrets Manager call may take: ``connect`` and ``read`` timeouts, and no
    retry inside botocore. The callers retry (``CredentialVault``), each retry started only when
    ``attempt_limit`` still fits before their deadline, so that the time kept for storing a
    rotated refresh token can be sized from these numbers (``Rotator.write_reserve``).
    Secrets Manager answers in well under a second; a call that takes longer is retried."""

    connect: float = 2.0
    read: float = 4.0

    @property
    def attempt_limit(self) -> float:
        """The longest one call can take: connecting, then waiting for the answer."""
        return self.connect + self.read


class SecretStore:
    """Reads and writes secret values. The boto3 client is created on first use (it honours
    ``AWS_ENDPOINT_URL``) with ``timeouts``; tests may inject one."""

    def __init__(
        self, client: SecretsManagerClient | None = None, *, timeouts: StoreTimeouts | None = None
    ) -> None:
        self._client = client
        self.timeouts = timeouts or StoreTimeouts()

    @property
    def client(self) -> SecretsManagerClient:
        """The Secrets Manager client, created on first use."""
        if self._client is None:
            self._client = clients.client(
                "secretsmanager",
                connect_timeout=self.timeouts.connect,
                read_timeout=self.timeouts.read,
                max_attempts=1,
            )
        return self._client

    def read(self, secret_id: str) -> SecretValue:
        """The current value of a secret; an empty secret reads as ``SecretValue(None, None)``."""
        try:
            answer = self.client.get_secret_value(SecretId=secret_id)
        except (ClientError, BotoCoreError) as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return SecretValue(text=None, version_id=None)
            raise store_error(exc, "read", secret_id) from exc
        text = answer.get("SecretString")
        if text is None:
            raise StoreAccessError(
                f"secret {secret_id!r} holds binary data, not a JSON document", code="SecretBinary"
            )
        return SecretValue(text=text, version_id=answer.get("VersionId"))

    def versions(self, secret_id: str) -> list[tuple[float, bool]]:
        """Every version of a secret, deprecated ones included: when each was created (epoch
        seconds) and whether it carries a staging label."""
        found: list[tuple[float, bool]] = []
        request: dict[str, Any] = {"SecretId": secret_id, "IncludeDeprecated": True}
        try:
            while True:
                answer = self.client.list_secret_version_ids(MaxResults=100, **request)
                for version in answer.get("Versions", []):
                    created = version.get("CreatedDate")  # missing: counted as new
                    stamp = created.timestamp() if created is not None else math.inf
                    found.append((stamp, bool(version.get("VersionStages"))))
                if not answer.get("NextToken"):
                    return found
                request["NextToken"] = answer["NextToken"]
        except (ClientError, BotoCoreError) as exc:
            raise store_error(exc, "list the versions of", secret_id) from exc

    def write(self, secret_id: str, text: str, *, replacing: str | None) -> str:
        """Store ``text`` as the current value, as the version that replaces ``replacing``.

        Returns the new version id. Writing the same text again is a no-op; a different text
        raises ``VersionConflictError`` (someone else replaced that version first).
        """
        version_id = next_version_id(replacing)
        try:
            self.client.put_secret_value(
                SecretId=secret_id, SecretString=text, ClientRequestToken=version_id
            )
        except (ClientError, BotoCoreError) as exc:
            if error_code(exc) == "ResourceExistsException":
                raise VersionConflictError(
                    f"secret {secret_id!r} changed since it was read (another writer)",
                    code="ResourceExistsException",
                ) from exc
            raise store_error(exc, "write", secret_id) from exc
        return version_id


def error_code(exc: ClientError | BotoCoreError) -> str | None:
    """The AWS error code of an answer (``None``: no answer, or none in it)."""
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code")
    return None


def store_error(exc: ClientError | BotoCoreError, action: str, secret_id: str) -> StoreError:
    """The ``StoreError`` type of a failed call (``action``: what it did to ``secret_id``)."""
    code, transient = clients.failure(exc)
    text = f"cannot {action} secret {secret_id!r}: {code}"
    if transient:
        return StoreUnavailableError(text, code=code)
    assert isinstance(exc, ClientError)  # an answer: botocore's own failures are transient
    if code == "ResourceNotFoundException":
        return StoreAccessError(f"{text} (does the secret exist?)", code=code)
    if code in KMS_KEY_CODES or (code in _ACCESS_CODES and _kms_refused(exc)):
        return StoreKeyError(text, code=code)
    if code in _ACCESS_CODES:
        return StoreAccessError(text, code=code)
    return StoreError(text, code=code)


def _kms_refused(exc: ClientError) -> bool:
    """Whether an access or request error is KMS's refusal rather than the secret's policy."""
    message = str(exc.response.get("Error", {}).get("Message") or "").lower()
    return any(refusal in message for refusal in _KMS_REFUSALS)
