"""Reading the service token secret (no cache): its document, or a ``ConsumerError`` that says
why there is none and where the secret was asked for (after ``ResourceNotFoundException``,
``DescribeSecret`` tells a missing secret from the empty one of a stack not bootstrapped yet)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cmstoken.aws import clients
from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.aws.secret_lookup import secret_arn, secret_exists
from cmstoken.consumer.errors import (
    ACCESS_DENIED,
    BOOTSTRAP_HINT,
    CANNOT_DECRYPT,
    NOT_BOOTSTRAPPED,
    SECRET_NOT_FOUND,
    UNAVAILABLE,
    UNREADABLE,
    ConsumerError,
    not_bootstrapped,
)
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import (
    DocumentError,
    StoreError,
    StoreKeyError,
    StoreUnavailableError,
)
from cmstoken.core.redaction import fingerprint

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

    from cmstoken.aws.secrets import SecretStore

logger = logging.getLogger(__name__)


def read_document(store: SecretStore, secret_id: str, session: Any) -> ServiceTokenDocument:
    """The document of ``secret_id``, read now with ``store``; ``ConsumerError`` when there is
    none. ``session`` is the boto3 session of ``store``'s client (``None`` for a client the
    workload made), whose credentials may name their account in messages."""
    asked = _Asked(store.client, secret_id, session)
    try:
        value = store.read(secret_id)
    except StoreError as exc:
        raise _store_failure(exc, asked) from exc
    text = value.text
    if text is None and value.version_id is None:
        raise _not_found(asked)  # GetSecretValue said ResourceNotFoundException
    if text is None or not text.strip():
        raise not_bootstrapped(secret_id)
    try:
        document = ServiceTokenDocument.from_json(text)
    except DocumentError as exc:
        raise ConsumerError(
            f"the service token secret {secret_id!r} cannot be used: {exc}", reason=UNREADABLE
        ) from exc
    logger.debug(
        "service token secret read",
        extra={
            "token_fingerprint": fingerprint(document.token),
            "expires_at": to_iso(document.expires_at),
        },
    )
    return document


def _not_found(asked: _Asked) -> ConsumerError:
    """Why GetSecretValue found nothing: ``DescribeSecret`` answers for the secret itself.
    An existing secret without a current value is the empty secret the stack created (not
    bootstrapped); no secret there is a configuration error."""
    secret_id = asked.secret_id
    try:
        if secret_exists(asked.client, secret_id):
            return not_bootstrapped(secret_id)
    except StoreError as exc:
        return ConsumerError(
            f"Secrets Manager has no value for the service token secret {secret_id!r} "
            f"({asked.where()}): either the stack is not bootstrapped yet ({BOOTSTRAP_HINT}) "
            f"or no such secret exists there (the secret id or the consumer's region is "
            f"wrong{asked.mismatch()}); DescribeSecret, which tells the two apart, failed "
            f"({exc.code}): the stack's ConsumerPolicy grants it",
            reason=NOT_BOOTSTRAPPED,
        )
    return ConsumerError(
        f"the service token secret {secret_id!r} does not exist where it was asked for "
        f"({asked.where()}): the secret id or the consumer's region is wrong"
        f"{asked.mismatch()}; use the stack's ServiceTokenSecretArn output, its full ARN (a "
        "name or a partial ARN is looked up in the caller's own account)",
        reason=SECRET_NOT_FOUND,
    )


def _store_failure(exc: StoreError, asked: _Asked) -> ConsumerError:
    """The three refusals apart: the key (``cannot_decrypt``), the policies
    (``access_denied``), anything else (``unreadable``)."""
    if isinstance(exc, StoreUnavailableError):
        return ConsumerError(f"{exc}; retry later", reason=UNAVAILABLE)
    if isinstance(exc, StoreKeyError):
        return ConsumerError(
            f"{exc} ({asked.where()}); Secrets Manager cannot use the secret's KMS key (the "
            "stack's KmsKeyArn or its service token key): the key must be enabled (not "
            "disabled or pending deletion), its key policy must let this principal use it for "
            "kms:Decrypt through Secrets Manager, and so must the principal's own policy "
            "(ConsumerPolicy, or consumer.yaml's in another account); the AWS managed key "
            "aws/secretsmanager cannot be shared with another account",
            reason=CANNOT_DECRYPT,
        )
    if exc.code == "AccessDeniedException":
        return ConsumerError(
            f"{exc} ({asked.where()}); this principal needs secretsmanager:GetSecretValue on "
            "the secret's full ARN (the stack's ConsumerPolicy grants it, consumer.yaml's "
            "policy in another account), and from another account the secret's resource "
            "policy must allow this account (the stack's ConsumerAccountIds, "
            "ConsumerOrganizationId or ConsumerOrganizationalUnitPaths)",
            reason=ACCESS_DENIED,
        )
    return ConsumerError(
        f"{exc} ({asked.where()}); the workload needs secretsmanager:GetSecretValue on the "
        "service token secret (the stack's ConsumerPolicy grants it)",
        reason=UNREADABLE,
    )


@dataclass(frozen=True)
class _Asked:
    """Where a secret was asked for: the client, the secret id, the client's session."""

    client: SecretsManagerClient
    secret_id: str
    session: Any

    def where(self) -> str:
        """The region and account, for messages: the region from the client, the account from
        the ARN, else from the credentials when they carry it (no STS call)."""
        region = self.client.meta.region_name or "none configured"
        arn = secret_arn(self.secret_id)
        if arn is not None:
            return f"region {region}, account {arn.account} (from the ARN)"
        account = self._account()
        if account is not None:
            return f"region {region}, account {account} (of the credentials)"
        return f"region {region}, the credentials' account"

    def mismatch(self) -> str:
        """Where an ARN names another region or account than the client's, that difference."""
        arn = secret_arn(self.secret_id)
        if arn is None:
            return ""
        region = self.client.meta.region_name
        if region and arn.region != region:
            # Only a secrets_client the workload gave asks another region than the ARN's.
            return (
                f" (the ARN is in region {arn.region}, the given secrets_client asks region "
                f"{region}: give none, and the helper reads in the ARN's region, or pass "
                f"secrets_client=boto3.client('secretsmanager', region_name='{arn.region}'))"
            )
        account = self._account()
        if account is not None and arn.account != account:
            return f" (the ARN is in account {arn.account}, the credentials in account {account})"
        return ""

    def _account(self) -> str | None:
        """The account of the session's credentials; ``None`` for a client the workload made."""
        return None if self.session is None else clients.credentials_account(self.session)
