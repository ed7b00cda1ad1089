"""Secrets Manager in memory: the boto3 client calls the project makes, with AWS's semantics.

``SecretsManagerModel`` stands in for a boto3 ``secretsmanager`` client (``SecretStore(client)``)
and implements ``create_secret``, ``get_secret_value``, ``put_secret_value``,
``describe_secret`` and ``list_secret_version_ids``:

- versions named by ``ClientRequestToken`` (32 to 64 characters, as boto3 validates; a fresh
  UUID when omitted, as boto3 fills it in);
- a put with a token already used is a no-op when the value is the same and
  ``ResourceExistsException`` when it differs;
- every new version becomes ``AWSCURRENT``, the one it replaces ``AWSPREVIOUS``, the one before
  that loses its label (deprecated: kept, listed only with ``IncludeDeprecated``);
- an empty secret (created without a value) answers ``GetSecretValue`` with
  ``ResourceNotFoundException``; errors are ``botocore`` ``ClientError``s with the codes, HTTP
  statuses and (where the project could look) the messages AWS and moto use.

The version quota: "Secrets Manager removes outdated versions when there are more than 100, but
it does not remove versions created less than 24 hours ago. If you call PutSecretValue more than
once every 10 minutes, you create more versions than Secrets Manager removes, and you will reach
the quota for secret versions" (Secrets Manager API Reference, PutSecretValue; moto enforces
none of it). A new version past ``QUOTA`` first removes the versions without a label created a
day or more before ``clock()``; when that leaves no room, the write is refused with
``LimitExceededException`` (the error Secrets Manager gives for a quota, API Reference, Common
Errors of PutSecretValue). ``ListSecretVersionIds`` gives each version's ``CreatedDate``.

Stale reads (off by default): with ``stale_reads=k``, a ``GetSecretValue`` of ``AWSCURRENT`` may
answer any of the last ``k + 1`` values ``AWSCURRENT`` had (the empty secret included), as an
eventually consistent read may; ``choose(n)`` picks which (0 is the newest, the default).

Every call runs through ``interceptor`` (see ``simulation.interception``); ``calls`` logs them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError, ParamValidationError

from simulation.interception import Interceptor, direct

# The methods keep boto3's parameter names (SecretId, ...): callers pass them as keywords.
# ruff: noqa: N803

CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"
SERVICE = "secretsmanager"
ACCOUNT_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:"
QUOTA = 100
DAY = 86_400.0


def client_error(operation: str, code: str, message: str, status: int) -> ClientError:
    """The ``ClientError`` botocore raises for an AWS error answer."""
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


def _no_secret(operation: str) -> ClientError:
    return client_error(
        operation,
        "ResourceNotFoundException",
        "Secrets Manager can't find the specified secret.",
        404,
    )


def _token_in_use(operation: str, token: str, secret: Secret) -> ClientError:
    return client_error(
        operation,
        "ResourceExistsException",
        f"You can't use ClientRequestToken {token} because that value is already in use for a "
        f"version of secret {secret.arn}.",
        400,
    )


@dataclass
class Version:
    """One version of a secret: its value and staging labels."""

    version_id: str
    text: str
    stages: list[str] = field(default_factory=list)
    created: float = 0.0  # epoch seconds, on the model's clock


@dataclass
class Secret:
    """One secret: its versions in creation order and every version that was ``AWSCURRENT``
    (``None``: the secret had no value)."""

    name: str
    versions: dict[str, Version] = field(default_factory=dict)
    history: list[str | None] = field(default_factory=lambda: [None])
    removed: list[Version] = field(default_factory=list)  # outdated, removed by the quota

    @property
    def arn(self) -> str:
        return f"{ACCOUNT_ARN}{self.name}-SimArn"

    def staged(self, stage: str) -> Version | None:
        return next((v for v in self.versions.values() if stage in v.stages), None)


class SecretsManagerModel:
    """An in-memory Secrets Manager account (see the module docstring)."""

    def __init__(
        self,
        *,
        stale_reads: int = 0,
        choose: Callable[[int], int] | None = None,
        interceptor: Interceptor = direct,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if stale_reads < 0:
            raise ValueError("stale_reads must be at least 0")
        self.stale_reads = stale_reads
        self.choose = choose or (lambda count: 0)
        self.interceptor = interceptor
        self.clock = clock
        self.secrets: dict[str, Secret] = {}
        self.calls: list[tuple[str, str]] = []

    # --- the boto3 client methods --------------------------------------------------------

    def create_secret(
        self, *, Name: str, SecretString: str | None = None, ClientRequestToken: str | None = None
    ) -> dict[str, Any]:
        token = _token(ClientRequestToken)

        def act() -> dict[str, Any]:
            existing = self.secrets.get(Name)
            if existing is not None:
                version = existing.versions.get(token)
                if version is None:
                    raise client_error(
                        "CreateSecret",
                        "ResourceExistsException",
                        f"The operation failed because the secret {Name} already exists.",
                        400,
                    )
                if version.text != SecretString:
                    raise _token_in_use("CreateSecret", token, existing)
                # The same request again: answered with the current version, as moto does.
                again: dict[str, Any] = {"ARN": existing.arn, "Name": Name}
                current = existing.staged(CURRENT)
                if current is not None:
                    again["VersionId"] = current.version_id
                return again
            secret = self.secrets[Name] = Secret(Name)
            answer: dict[str, Any] = {"ARN": secret.arn, "Name": Name}
            if SecretString is not None:
                version = self._add(secret, SecretString, token)
                answer["VersionId"] = version.version_id
            return answer

        return self._run("CreateSecret", SecretId=Name, act=act)

    def get_secret_value(
        self, *, SecretId: str, VersionId: str | None = None, VersionStage: str | None = None
    ) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            secret = self._secret(SecretId, "GetSecretValue")
            if VersionId is not None:
                version = secret.versions.get(VersionId)
                if version is None:
                    raise client_error(
                        "GetSecretValue",
                        "ResourceNotFoundException",
                        "Secrets Manager can't find the specified secret value for VersionId: "
                        + VersionId,
                        404,
                    )
                if VersionStage is not None and VersionStage not in version.stages:
                    raise client_error(
                        "GetSecretValue",
                        "InvalidRequestException",
                        "You provided a VersionStage that is not associated to the provided "
                        "VersionId.",
                        400,
                    )
                return _value(secret, version, version.stages)
            stage = VersionStage or CURRENT
            if stage == CURRENT:
                window = secret.history[-(self.stale_reads + 1) :][::-1]
                chosen = window[self.choose(len(window)) if len(window) > 1 else 0]
                if chosen is None:
                    raise client_error(
                        "GetSecretValue",
                        "ResourceNotFoundException",
                        "Secrets Manager can't find the specified secret value for staging "
                        "label: AWSCURRENT",
                        404,
                    )
                # A stale answer shows the version as it was when it was current.
                return _value(secret, secret.versions[chosen], [CURRENT])
            version = secret.staged(stage)
            if version is None:
                raise _no_secret("GetSecretValue")
            return _value(secret, version, version.stages)

        return self._run("GetSecretValue", SecretId=SecretId, act=act)

    def put_secret_value(
        self, *, SecretId: str, SecretString: str, ClientRequestToken: str | None = None
    ) -> dict[str, Any]:
        token = _token(ClientRequestToken)

        def act() -> dict[str, Any]:
            secret = self._secret(SecretId, "PutSecretValue")
            existing = secret.versions.get(token)
            if existing is not None:
                if existing.text != SecretString:
                    raise _token_in_use("PutSecretValue", token, secret)
                version = existing  # the same request again: ignored
            else:
                version = self._add(secret, SecretString, token)
            return {
                "ARN": secret.arn,
                "Name": secret.name,
                "VersionId": version.version_id,
                "VersionStages": list(version.stages),
            }

        return self._run("PutSecretValue", SecretId=SecretId, act=act)

    def describe_secret(self, *, SecretId: str) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            secret = self._secret(SecretId, "DescribeSecret")
            answer: dict[str, Any] = {"ARN": secret.arn, "Name": secret.name}
            staged = {v.version_id: list(v.stages) for v in secret.versions.values() if v.stages}
            if staged:
                answer["VersionIdsToStages"] = staged
            return answer

        return self._run("DescribeSecret", SecretId=SecretId, act=act)

    def list_secret_version_ids(
        self, *, SecretId: str, IncludeDeprecated: bool = False, MaxResults: int = 100
    ) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            secret = self._secret(SecretId, "ListSecretVersionIds")
            versions = [
                {
                    "VersionId": v.version_id,
                    "VersionStages": list(v.stages),
                    "CreatedDate": datetime.fromtimestamp(v.created, UTC),
                }
                for v in secret.versions.values()
                if v.stages or IncludeDeprecated
            ]
            return {"ARN": secret.arn, "Name": secret.name, "Versions": versions}

        return self._run("ListSecretVersionIds", SecretId=SecretId, act=act)

    # --- inspection for tests (no interception, no stale reads) ---------------------------

    def current_text(self, secret_id: str) -> str | None:
        """The value ``AWSCURRENT`` labels now (``None``: no value yet)."""
        version = self.secrets[secret_id].staged(CURRENT)
        return None if version is None else version.text

    def texts(self, secret_id: str) -> list[str]:
        """Every value the secret ever held, oldest first."""
        secret = self.secrets[secret_id]
        return [v.text for v in (*secret.removed, *secret.versions.values())]

    # --- internals -----------------------------------------------------------------------

    def _run(
        self, operation: str, *, SecretId: str, act: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        self.calls.append((operation, SecretId))
        answer: dict[str, Any] = self.interceptor(SERVICE, operation, act)
        answer.setdefault("ResponseMetadata", {"HTTPStatusCode": 200})
        return answer

    def _secret(self, secret_id: str, operation: str) -> Secret:
        name = secret_id.removeprefix(ACCOUNT_ARN).removesuffix("-SimArn")
        secret = self.secrets.get(name)
        if secret is None:
            raise _no_secret(operation)
        return secret

    def _add(self, secret: Secret, text: str, token: str) -> Version:
        now = self.clock()
        if len(secret.versions) >= QUOTA:
            for old in [
                v for v in secret.versions.values() if not v.stages and now - v.created >= DAY
            ]:
                secret.removed.append(secret.versions.pop(old.version_id))
        if len(secret.versions) >= QUOTA:
            raise client_error(
                "PutSecretValue",
                "LimitExceededException",
                "The request failed because it would exceed one of the Secrets Manager quotas.",
                400,
            )
        for version in secret.versions.values():
            if PREVIOUS in version.stages:
                version.stages.remove(PREVIOUS)
        for version in secret.versions.values():
            if CURRENT in version.stages:
                version.stages.remove(CURRENT)
                version.stages.append(PREVIOUS)
        version = secret.versions[token] = Version(token, text, [CURRENT], created=now)
        secret.history.append(token)
        return version


def _token(token: str | None) -> str:
    """The version id of a write: the caller's ``ClientRequestToken``, validated as boto3 does,
    or a fresh UUID (boto3 fills one in)."""
    if token is None:
        return str(uuid.uuid4())
    if not 32 <= len(token) <= 64:
        raise ParamValidationError(
            report=f"Invalid length for parameter ClientRequestToken, value: {len(token)}, "
            "valid min length: 32"
        )
    return token


def _value(secret: Secret, version: Version, stages: list[str]) -> dict[str, Any]:
    return {
        "ARN": secret.arn,
        "Name": secret.name,
        "VersionId": version.version_id,
        "SecretString": version.text,
        "VersionStages": list(stages),
        "CreatedDate": version.created,
    }
