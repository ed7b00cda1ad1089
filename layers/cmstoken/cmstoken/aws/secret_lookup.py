"""Where a secret is, for the consumer helper's messages: the region and account a Secrets
Manager ARN names, and whether a secret exists (``DescribeSecret``, which describes a secret
whether or not it holds a value, where ``GetSecretValue`` answers ``ResourceNotFoundException``
for both). Workloads make this call (the stack's ConsumerPolicy grants it); the functions never
do. botocore is imported on the first call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient


@dataclass(frozen=True)
class SecretArn:
    """The region and account of a Secrets Manager ARN."""

    region: str
    account: str


def secret_arn(secret_id: str) -> SecretArn | None:
    """The region and account ``secret_id`` names when it is an ARN (``None`` for a name)."""
    parts = secret_id.split(":", 6)
    if len(parts) < 7 or parts[0] != "arn" or parts[2] != "secretsmanager":
        return None
    return SecretArn(region=parts[3], account=parts[4])


def secret_exists(client: SecretsManagerClient, secret_id: str) -> bool:
    """Whether ``secret_id`` names a secret where ``client`` asks (``DescribeSecret``). Any
    other failure raises the ``StoreError`` type ``SecretStore`` raises for it
    (``StoreUnavailableError``, ``StoreAccessError``, ``StoreError``), its ``code`` the AWS
    error code (botocore's exception name when no answer came)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from cmstoken.aws.secrets import error_code, store_error

    try:
        client.describe_secret(SecretId=secret_id)
    except (ClientError, BotoCoreError) as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return False
        raise store_error(exc, "describe", secret_id) from exc
    return True
