"""The Secrets Manager adapter on moto in-process: reads, idempotent and conflicting writes, and
AWS errors translated into the project's types."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from moto import mock_aws

from cmstoken.aws.secrets import SecretStore, next_version_id
from cmstoken.core.errors import (
    KMS_KEY_CODES,
    StoreAccessError,
    StoreError,
    StoreKeyError,
    StoreUnavailableError,
    VersionConflictError,
)
from support import client_error, fail_with


@pytest.fixture
def client(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("secretsmanager")
        client.create_secret(Name="s")
        yield client


def test_an_empty_secret_reads_as_no_value(client: Any) -> None:
    value = SecretStore(client).read("s")
    assert (value.text, value.version_id) == (None, None)


def test_a_write_becomes_the_current_value_with_a_derived_version(client: Any) -> None:
    store = SecretStore(client)
    version = store.write("s", '{"a": 1}', replacing=None)
    assert version == next_version_id(None)
    assert store.read("s").text == '{"a": 1}'
    assert store.read("s").version_id == version
    second = store.write("s", '{"a": 2}', replacing=version)
    assert second == next_version_id(version)
    assert store.read("s").text == '{"a": 2}'


def test_version_ids_are_valid_client_request_tokens_and_deterministic() -> None:
    version = next_version_id("0f6c0bd9-5a5c-4a55-9f7a-1c5d7f6a1e00")
    assert len(version) == 36
    assert version == next_version_id("0f6c0bd9-5a5c-4a55-9f7a-1c5d7f6a1e00")
    assert version != next_version_id(None)


def test_repeating_a_write_is_a_no_op(client: Any) -> None:
    store = SecretStore(client)
    first = store.write("s", "x", replacing=None)
    assert store.write("s", "x", replacing=None) == first
    versions = client.list_secret_version_ids(SecretId="s")["Versions"]
    assert len(versions) == 1


def test_a_second_writer_of_the_same_version_gets_a_conflict(client: Any) -> None:
    store = SecretStore(client)
    store.write("s", "mine", replacing=None)
    with pytest.raises(VersionConflictError, match="another writer"):
        store.write("s", "theirs", replacing=None)
    assert store.read("s").text == "mine"


@pytest.mark.parametrize(
    "code",
    ["ThrottlingException", "InternalServiceError", "RequestLimitExceeded"],
)
def test_throttling_and_aws_errors_are_transient(client: Any, code: str) -> None:
    fail_with(client, "GetSecretValue", client_error(code))
    with pytest.raises(StoreUnavailableError, match=code) as info:
        SecretStore(client).read("s")
    assert info.value.code == code


def test_any_5xx_is_transient(client: Any) -> None:
    fail_with(client, "PutSecretValue", client_error("SomethingNew", status=503))
    with pytest.raises(StoreUnavailableError):
        SecretStore(client).write("s", "x", replacing=None)


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="https://secretsmanager.example"),
        ReadTimeoutError(endpoint_url="https://secretsmanager.example"),
    ],
)
def test_network_failures_are_transient(client: Any, error: Exception) -> None:
    fail_with(client, "GetSecretValue", error)
    with pytest.raises(StoreUnavailableError):
        SecretStore(client).read("s")


@pytest.mark.parametrize(
    "code",
    [
        "AccessDeniedException",
        "DecryptionFailure",
        "InvalidRequestException",
        *sorted(KMS_KEY_CODES),
    ],
)
def test_access_problems_are_reported_as_such(client: Any, code: str) -> None:
    fail_with(client, "GetSecretValue", client_error(code))
    with pytest.raises(StoreAccessError, match=code) as info:
        SecretStore(client).read("s")
    assert info.value.code == code


def answered(code: str, message: str) -> Any:
    error = client_error(code, operation="GetSecretValue")
    error.response["Error"]["Message"] = message
    return error


# The texts Secrets Manager answers with when KMS refused the caller (AWS Knowledge Center,
# https://repost.aws/knowledge-center/secrets-manager-cross-account-key), and with which the
# secret's own policy or the caller's identity policy refused it (IAM's "is not authorized to
# perform" message); the last two name a secret whose name has "kms" in it.
KEY_REFUSALS = [
    ("AccessDeniedException", "Access to KMS is not allowed"),
    (
        "AccessDeniedException",
        "Access to KMS is not allowed. This version of secret is not encrypted with the current "
        "KMS key.",
    ),
    (
        "InvalidRequestException",
        "You can't access a secret from a different AWS account if you encrypt the secret with "
        "the default KMS service key.",
    ),
    *[(code, "m") for code in sorted(KMS_KEY_CODES)],
]
POLICY_REFUSALS = [
    (
        "AccessDeniedException",
        "User: arn:aws:sts::222233334444:assumed-role/app/x is not authorized to perform: "
        "secretsmanager:GetSecretValue on resource: arn:aws:secretsmanager:eu-west-1:"
        "123456789012:secret:kms/service-token-AbCdEf because no resource-based policy allows "
        "the secretsmanager:GetSecretValue action",
    ),
    ("InvalidRequestException", "You tried to perform the operation on a secret marked deleted."),
]


@pytest.mark.parametrize(("code", "message"), KEY_REFUSALS)
def test_a_key_that_refuses_is_a_key_error(client: Any, code: str, message: str) -> None:
    fail_with(client, "GetSecretValue", answered(code, message))
    with pytest.raises(StoreKeyError) as info:
        SecretStore(client).read("s")
    assert info.value.code == code


@pytest.mark.parametrize(("code", "message"), POLICY_REFUSALS)
def test_a_policy_that_refuses_is_no_key_error(client: Any, code: str, message: str) -> None:
    fail_with(client, "GetSecretValue", answered(code, message))
    with pytest.raises(StoreAccessError) as info:
        SecretStore(client).read("s")
    assert type(info.value) is StoreAccessError
    assert info.value.code == code


def test_writing_a_secret_that_does_not_exist_says_so(client: Any) -> None:
    with pytest.raises(StoreAccessError, match="does the secret exist"):
        SecretStore(client).write("missing", "x", replacing=None)


def test_unknown_client_errors_keep_their_code(client: Any) -> None:
    fail_with(client, "GetSecretValue", client_error("BrandNewException"))
    with pytest.raises(StoreError) as info:
        SecretStore(client).read("s")
    assert type(info.value) is StoreError
    assert info.value.code == "BrandNewException"


def test_binary_secrets_are_refused(client: Any) -> None:
    client.put_secret_value(SecretId="s", SecretBinary=b"\x00\x01")
    with pytest.raises(StoreAccessError, match="binary"):
        SecretStore(client).read("s")


def test_the_client_is_built_lazily_and_honours_aws_endpoint_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    store = SecretStore()
    assert store._client is None
    assert store.client.meta.endpoint_url == "http://127.0.0.1:9"
