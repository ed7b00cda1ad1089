"""The Lambda adapter (through botocore's Stubber: moto runs functions only in Docker) and the
SNS adapter (on moto in-process, a queue subscribed to the topic): what they send, what they
make of the answers, and AWS errors translated into the project's types."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws

from cmstoken.aws.functions import FunctionCaller
from cmstoken.aws.topic import Topic
from cmstoken.core.errors import (
    FunctionCallError,
    FunctionFailedError,
    FunctionUnavailableError,
    TopicError,
)

FUNCTION = "cmstoken-prod-bootstrap"


def body(payload: Any) -> StreamingBody:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


@pytest.fixture
def stubbed(aws_credentials: None) -> Iterator[tuple[FunctionCaller, Stubber]]:
    client = boto3.client("lambda")
    with Stubber(client) as stubber:
        yield FunctionCaller(FUNCTION, client=client), stubber
        stubber.assert_no_pending_responses()


def expect(stubber: Stubber, kind: str, payload: dict[str, Any], answer: dict[str, Any]) -> None:
    stubber.add_response(
        "invoke",
        answer,
        {"FunctionName": FUNCTION, "InvocationType": kind, "Payload": json.dumps(payload).encode()},
    )


def test_a_call_returns_the_functions_json_result(
    stubbed: tuple[FunctionCaller, Stubber],
) -> None:
    caller, stubber = stubbed
    expect(
        stubber,
        "RequestResponse",
        {"action": "status"},
        {"StatusCode": 200, "Payload": body({"pending": None})},
    )
    assert caller.call({"action": "status"}) == {"pending": None}


def test_a_send_queues_the_invocation(stubbed: tuple[FunctionCaller, Stubber]) -> None:
    caller, stubber = stubbed
    expect(stubber, "Event", {"action": "poll"}, {"StatusCode": 202, "Payload": body(b"")})
    caller.send({"action": "poll"})  # the stubber checks the request


def test_a_function_that_raised_is_named_by_its_error_type_only(
    stubbed: tuple[FunctionCaller, Stubber],
) -> None:
    """Lambda's error payload carries the exception's message; it stays out of ours (it may
    say more than a page or a log should)."""
    caller, stubber = stubbed
    failure = {"errorType": "StoreAccessError", "errorMessage": "private detail"}
    expect(
        stubber,
        "RequestResponse",
        {"action": "start"},
        {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": body(failure)},
    )
    with pytest.raises(FunctionFailedError) as raised:
        caller.call({"action": "start"})
    assert raised.value.code == "StoreAccessError"
    assert "private detail" not in str(raised.value)


def test_an_answer_that_is_not_json_is_a_failure(stubbed: tuple[FunctionCaller, Stubber]) -> None:
    caller, stubber = stubbed
    expect(stubber, "RequestResponse", {}, {"StatusCode": 200, "Payload": body(b"<html>")})
    with pytest.raises(FunctionFailedError, match="not JSON"):
        caller.call({})


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("TooManyRequestsException", 429, FunctionUnavailableError),
        ("ServiceException", 500, FunctionUnavailableError),
        ("AccessDeniedException", 403, FunctionCallError),
        ("ResourceNotFoundException", 404, FunctionCallError),
    ],
)
def test_aws_errors_become_the_projects_types(
    stubbed: tuple[FunctionCaller, Stubber], code: str, status: int, kind: type[FunctionCallError]
) -> None:
    caller, stubber = stubbed
    stubber.add_client_error("invoke", code, http_status_code=status)
    with pytest.raises(kind) as raised:
        caller.send({})
    assert type(raised.value) is kind
    assert raised.value.code == code
    assert FUNCTION in str(raised.value)


def test_no_connection_is_unavailable(aws_credentials: None) -> None:
    client = boto3.client("lambda")

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://lambda")

    client.meta.events.register("before-call.lambda.Invoke", refuse)
    with pytest.raises(FunctionUnavailableError) as raised:
        FunctionCaller(FUNCTION, client=client).call({})
    assert raised.value.code == "EndpointConnectionError"


@pytest.fixture
def topic_and_queue(aws_credentials: None) -> Iterator[tuple[Topic, Any, str]]:
    with mock_aws():
        sns, sqs = boto3.client("sns"), boto3.client("sqs")
        arn = sns.create_topic(Name="alarms")["TopicArn"]
        queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"])
        yield Topic(arn, sns), sqs, queue


def test_each_subscriber_gets_the_body_of_its_protocol(
    topic_and_queue: tuple[Topic, Any, str],
) -> None:
    topic, sqs, queue = topic_and_queue
    bodies = {"default": "for everyone", "email": "for a person", "sqs": "for a queue"}
    message_id = topic.publish(subject="cmstoken prod: re-authorize", message=json.dumps(bodies))
    received = json.loads(sqs.receive_message(QueueUrl=queue)["Messages"][0]["Body"])
    assert received["MessageId"] == message_id
    assert (received["Subject"], received["Message"]) == (
        "cmstoken prod: re-authorize",
        "for a queue",
    )


def test_a_refused_publish_is_a_topic_error_with_its_code(
    topic_and_queue: tuple[Topic, Any, str],
) -> None:
    topic, _, _ = topic_and_queue
    with pytest.raises(TopicError) as raised:
        topic.publish(subject="x" * 101, message=json.dumps({"default": "d"}))
    assert raised.value.code == "InvalidParameter"


def test_no_connection_to_sns_is_a_topic_error(topic_and_queue: tuple[Topic, Any, str]) -> None:
    topic, _, _ = topic_and_queue

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://sns")

    topic.client.meta.events.register("before-call.sns.Publish", refuse)
    with pytest.raises(TopicError) as raised:
        topic.publish(subject="s", message=json.dumps({"default": "d"}))
    assert raised.value.code == "EndpointConnectionError"
