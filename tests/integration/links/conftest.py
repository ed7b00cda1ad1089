"""The one-click path over HTTP (tests/links_harness.py): the `one_click` fixture, and
`person_paced` for tests in which a person takes real time between the button and the
approval."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from cmstoken import runtime
from cmstoken.aws.link_state import KEY
from cmstoken.cli.admin.invokers import LocalInvoker
from function_url import FunctionUrl
from harness import Stack
from links_harness import ACCOUNT, REGION, OneClick, PersonPacedClock
from local_stack import LambdaEndpoint
from support import load_handler


def context(function: str) -> Any:
    return SimpleNamespace(
        function_name=function,
        function_version="$LATEST",
        memory_limit_in_mb=256,
        invoked_function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}",
        aws_request_id=f"test-{time.monotonic_ns()}",
        get_remaining_time_in_millis=lambda: 30_000,
    )


@pytest.fixture
def one_click(server_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[OneClick]:
    secrets, dynamodb = boto3.client("secretsmanager"), boto3.client("dynamodb")
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    key = secrets.create_secret(Name="cmstoken/link-signing-key", SecretString="k3Y" * 22)
    dynamodb.create_table(
        TableName="links",
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"])
    for name, value in {
        "STACK_NAME": "cmstoken-prod",
        "LINKS_KEY_SECRET_ID": key["ARN"],
        "LINKS_TABLE": "links",
        "BOOTSTRAP_FUNCTION_NAME": "bootstrap",
        "ALARM_TOPIC_ARN": topic,
        "REAUTHORIZATION_WARNING_SECONDS": "432000",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    links = load_handler("links")
    invoker = LocalInvoker(
        {"bootstrap": load_handler("bootstrap"), "links": links},
        timeout_seconds={"bootstrap": 900, "links": 30},
        region=REGION,
        account=ACCOUNT,
    )
    with FunctionUrl(links, region=REGION, context_factory=lambda _: context("links")) as url:
        endpoint = LambdaEndpoint(
            invoker,
            ("bootstrap", "links"),
            destinations={"bootstrap": "links"},
            urls={"links": url.origin + "/"},
        ).start()
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint.url)
        try:
            yield OneClick(server_stack, url, endpoint, invoker, sqs, queue, topic)
        finally:
            endpoint.stop()


@pytest.fixture
def person_paced(
    one_click: OneClick, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PersonPacedClock]:
    """The functions' clock at a person's pace (``PersonPacedClock``) for the whole test; at
    its end the clock hurries, so that a poll still pending runs out before the Lambda API
    stops."""
    clock = PersonPacedClock(one_click.stack.emulator)
    monkeypatch.setattr(runtime, "CLOCK", clock)
    runtime.service.cache_clear()  # the service client holds the clock it was made with
    try:
        yield clock
    finally:
        clock.hurry()
