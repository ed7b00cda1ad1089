"""The AWS adapters the consumer helper calls (``aws.secret_lookup``, ``aws.refresh_requests``,
``clients.credentials_account``): what they answer, and how they translate every botocore
failure into the project's errors (moto in-process and botocore's Stubber, no sockets)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber
from moto import mock_aws

from cmstoken.aws import clients
from cmstoken.aws.refresh_requests import request_refresh
from cmstoken.aws.secret_lookup import SecretArn, secret_arn, secret_exists
from cmstoken.core.errors import (
    EventBusAccessError,
    EventBusError,
    EventBusUnavailableError,
    StoreAccessError,
    StoreError,
    StoreUnavailableError,
)
from cmstoken.core.triggers import REFRESH_REQUESTED

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:stack/service-token-AbCdEf"
DETAIL = {"reason": "refused", "secret_id": "stack/service-token"}


@pytest.fixture
def secrets(aws_credentials: None) -> Any:
    return boto3.client("secretsmanager")


@pytest.fixture
def events(aws_credentials: None) -> Any:
    return boto3.client("events")


def fail(client: Any, event: str, error: Exception) -> None:
    """Make every call that emits ``event`` (``before-call.SERVICE.OPERATION``) raise ``error``
    before anything is sent."""

    def raise_it(**_: Any) -> None:
        raise error

    client.meta.events.register(event, raise_it)


def client_error(code: str, *, status: int = 400) -> ClientError:
    answer: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(answer, "DescribeSecret")


NO_ANSWER = EndpointConnectionError(endpoint_url="https://secretsmanager.example")


# --- secret_lookup -------------------------------------------------------------------------


def test_an_arn_names_its_region_and_account_and_a_name_none() -> None:
    assert secret_arn(ARN) == SecretArn(region="eu-west-1", account="123456789012")
    assert secret_arn("stack/service-token") is None
    assert secret_arn("arn:aws:ssm:eu-west-1:123456789012:parameter/x") is None


@pytest.fixture
def moto_secrets(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("secretsmanager")


def test_an_existing_secret_exists_with_or_without_a_value(moto_secrets: Any) -> None:
    moto_secrets.create_secret(Name="empty")
    moto_secrets.create_secret(Name="full", SecretString="{}")
    assert secret_exists(moto_secrets, "empty")
    assert secret_exists(moto_secrets, "full")


def test_a_missing_secret_does_not_exist(moto_secrets: Any) -> None:
    assert not secret_exists(moto_secrets, "no/such/secret")


@pytest.mark.parametrize(
    ("error", "kind", "code"),
    [
        (client_error("AccessDeniedException"), StoreAccessError, "AccessDeniedException"),
        (client_error("ThrottlingException"), StoreUnavailableError, "ThrottlingException"),
        (client_error("Anything", status=503), StoreUnavailableError, "Anything"),
        (client_error("ValidationException"), StoreError, "ValidationException"),
        (NO_ANSWER, StoreUnavailableError, "EndpointConnectionError"),
    ],
    ids=["access-denied", "throttling", "server-error", "other", "no-answer"],
)
def test_a_failed_lookup_raises_the_stores_error_types(
    secrets: Any, error: Exception, kind: type[StoreError], code: str
) -> None:
    fail(secrets, "before-call.secrets-manager.DescribeSecret", error)
    with pytest.raises(StoreError) as caught:
        secret_exists(secrets, "stack/service-token")
    assert type(caught.value) is kind
    assert caught.value.code == code
    assert str(caught.value) == f"cannot describe secret 'stack/service-token': {code}"
    assert caught.value.__cause__ is error


# --- refresh_requests ------------------------------------------------------------------------


def test_a_refresh_request_is_one_event_on_the_default_bus(events: Any) -> None:
    with Stubber(events) as stub:
        stub.add_response(
            "put_events",
            {"FailedEntryCount": 0, "Entries": [{"EventId": "event-1"}]},
            {
                "Entries": [
                    {
                        "Source": "cmstoken.consumer",
                        "DetailType": REFRESH_REQUESTED,
                        "Detail": json.dumps(DETAIL, sort_keys=True),
                    }
                ]
            },
        )
        assert request_refresh(events, source="cmstoken.consumer", detail=DETAIL) == "event-1"


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("AccessDeniedException", 400, EventBusAccessError),
        ("NotAuthorizedForSourceException", 400, EventBusAccessError),
        ("ThrottlingException", 400, EventBusUnavailableError),
        ("InternalException", 500, EventBusUnavailableError),
        ("AccessDeniedException", 503, EventBusUnavailableError),
        ("ValidationException", 400, EventBusError),
    ],
)
def test_a_failed_call_is_translated(
    events: Any, code: str, status: int, kind: type[EventBusError]
) -> None:
    with Stubber(events) as stub:
        stub.add_client_error("put_events", code, "m", http_status_code=status)
        with pytest.raises(EventBusError) as caught:
            request_refresh(events, source="cmstoken.consumer", detail=DETAIL)
    assert type(caught.value) is kind
    assert caught.value.code == code
    assert str(caught.value) == code, "the call's own message is not repeated"
    assert isinstance(caught.value.__cause__, ClientError)


def test_no_answer_is_transient_and_named(events: Any) -> None:
    error = EndpointConnectionError(endpoint_url="https://events.example")
    fail(events, "before-call.events.PutEvents", error)
    with pytest.raises(EventBusUnavailableError) as caught:
        request_refresh(events, source="cmstoken.consumer", detail=DETAIL)
    assert caught.value.code == str(caught.value) == "EndpointConnectionError"
    assert caught.value.__cause__ is error


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("NotAuthorizedForDetailTypeException", EventBusAccessError),
        ("ThrottlingException", EventBusUnavailableError),
        ("InternalFailure", EventBusUnavailableError),
        ("MalformedDetail", EventBusError),
    ],
)
def test_a_refused_entry_in_a_successful_answer_is_translated(
    events: Any, code: str, kind: type[EventBusError]
) -> None:
    with Stubber(events) as stub:
        stub.add_response(
            "put_events",
            {"FailedEntryCount": 1, "Entries": [{"ErrorCode": code, "ErrorMessage": "Said."}]},
        )
        with pytest.raises(EventBusError) as caught:
            request_refresh(events, source="cmstoken.consumer", detail=DETAIL)
    assert type(caught.value) is kind
    assert caught.value.code == code
    assert str(caught.value) == f"{code}: Said."


def test_an_answer_without_an_event_id_is_an_error(events: Any) -> None:
    with Stubber(events) as stub:
        stub.add_response("put_events", {"FailedEntryCount": 0, "Entries": [{}]})
        with pytest.raises(EventBusError) as caught:
            request_refresh(events, source="cmstoken.consumer", detail=DETAIL)
    assert type(caught.value) is EventBusError
    assert str(caught.value) == "no EventId in the answer"


def test_eventbridges_text_is_printable_and_short(events: Any) -> None:
    text = "\x1b[31mred\x1b[0m " + "x" * 300
    with Stubber(events) as stub:
        stub.add_response(
            "put_events",
            {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "Bad", "ErrorMessage": text}]},
        )
        with pytest.raises(EventBusError) as caught:
            request_refresh(events, source="cmstoken.consumer", detail=DETAIL)
    message = str(caught.value)
    assert message.startswith("Bad: ?[31mred?[0m xxx")
    assert "\x1b" not in message
    assert message.endswith("...")
    assert len(message) == len("Bad: ") + 200


# --- clients.credentials_account -------------------------------------------------------------


def test_the_account_comes_from_credentials_that_carry_it(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCOUNT_ID", raising=False)
    assert clients.credentials_account(clients.session()) is None
    monkeypatch.setenv("AWS_ACCOUNT_ID", "123456789012")
    assert clients.credentials_account(clients.session()) == "123456789012"


def test_credentials_that_cannot_be_resolved_name_no_account() -> None:
    class Unresolvable:
        def get_credentials(self) -> None:
            raise NoCredentialsError

    assert clients.credentials_account(Unresolvable()) is None
