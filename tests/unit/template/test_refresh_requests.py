"""Issue 29, item 5: refresh requests coalesce in a queue before they reach the rotator, so that
the cost of N requests is bounded (the burst and the day-long flood, and the scheduled run's
delay behind them: tests/unit/simulation/test_simulation_refresh_flood.py on this wiring,
tests/integration/test_refresh_flood.py on moto's CloudFormation); the debounce has a floor.
Issue 36, item 4: the queue as AWS advises for a queue a function reads, with a record of the
requests that kept failing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cmstoken.core.triggers import RotationRequest
from template_model import Resolver, parameter_values, source, transformed


@pytest.fixture
def resources() -> dict[str, Any]:
    return transformed()["Resources"]  # type: ignore[no-any-return]


def test_the_queue_accepts_one_request_in_five_minutes(resources: dict[str, Any]) -> None:
    """A FIFO queue with content-based deduplication takes a message whose body it received in
    the last 5 minutes without delivering it (SQS Developer Guide, "Exactly-once processing in
    Amazon SQS"); queue-wide scope, so both rules' requests count as one. Every request is the
    same body (each rule's input template), one the rotator takes as a refresh request."""
    queue = resources["RefreshRequestQueue"]["Properties"]
    assert queue["FifoQueue"] is True
    assert queue["ContentBasedDeduplication"] is True
    assert queue["DeduplicationScope"] == "queue"
    assert queue["SqsManagedSseEnabled"] is True
    bodies = set()
    for rule in ("RefreshRequestedRule", "RemoteRefreshRequestedRule"):
        (target,) = resources[rule]["Properties"]["Targets"]
        assert target["Arn"] == {"Fn::GetAtt": ["RefreshRequestQueue", "Arn"]}
        assert target["SqsParameters"] == {"MessageGroupId": "refresh-requests"}
        assert set(target["InputTransformer"]) == {"InputTemplate"}  # nothing of the event
        bodies.add(target["InputTransformer"]["InputTemplate"])
    (body,) = bodies
    assert RotationRequest.from_event(json.loads(body)).forced


def test_the_rotator_takes_the_requests_one_batch_at_a_time(resources: dict[str, Any]) -> None:
    """The event source mapping reads the queue with the rotator's role; one message group, so
    one batch in flight (SQS Developer Guide, FIFO message groups)."""
    mapping = resources["RotatorFunctionRefreshRequests"]["Properties"]
    assert mapping == {
        "BatchSize": 10,
        "EventSourceArn": {"Fn::GetAtt": ["RefreshRequestQueue", "Arn"]},
        "FunctionName": {"Ref": "RotatorFunction"},
    }


def test_the_queue_follows_aws_advice_for_a_queue_a_function_reads(
    resources: dict[str, Any],
) -> None:
    """Lambda Operator Guide, "Understanding SQS retries": "Set the queue's visibility timeout to
    at least six times the function timeout value. This allows the function time to process each
    batch of records if the function execution is throttled while processing a previous batch."
    and "Set the maxReceiveCount on the source queue's redrive policy to at least 5. This
    improves the chances of messages being processed before reaching the DLQ." A message is
    received at most 5 times, a visibility timeout apart: its retention keeps it at least that
    long, and the wait behind the group's earlier messages (measured in
    tests/unit/simulation/test_simulation_refresh_flood.py)."""
    queue = resources["RefreshRequestQueue"]["Properties"]
    timeout = resources["RotatorFunction"]["Properties"]["Timeout"]
    assert queue["VisibilityTimeout"] >= 6 * timeout
    redrive = queue["RedrivePolicy"]
    assert redrive == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["FailedRefreshRequestQueue", "Arn"]},
        "maxReceiveCount": 5,
    }
    receives = redrive["maxReceiveCount"] * queue["VisibilityTimeout"]
    assert queue["MessageRetentionPeriod"] > receives


def test_requests_that_kept_failing_leave_a_record_of_their_own(resources: dict[str, Any]) -> None:
    """A FIFO queue's dead letter queue is a FIFO queue ("a FIFO queue can only use a FIFO DLQ",
    SQS Developer Guide, "Configure a dead-letter queue using the Amazon SQS console"); "For FIFO
    queues, the enqueue timestamp resets when the message is moved to a dead-letter queue"
    ("Setting-up dead-letter queue retention"): 14 days from the move. Only the requests' queue
    may use it as its dead letter queue, and nothing sends to it (no policy)."""
    failed = resources["FailedRefreshRequestQueue"]["Properties"]
    assert failed["FifoQueue"] is True
    assert (failed["MessageRetentionPeriod"], failed["SqsManagedSseEnabled"]) == (1209600, True)
    values = Resolver(parameter_values())
    values.values["AWS::StackName"] = "tokens"
    allowed = values.resolve(failed["RedriveAllowPolicy"])
    (source_queue,) = allowed.pop("sourceQueueArns")
    assert allowed == {"redrivePermission": "byQueue"}
    assert source_queue.endswith(":tokens-refresh-requests.fifo")
    assert source_queue.startswith("arn:")
    policies = [
        r
        for r in resources.values()
        if r["Type"] == "AWS::SQS::QueuePolicy"
        and {"Ref": "FailedRefreshRequestQueue"} in r["Properties"]["Queues"]
    ]
    assert policies == []


@pytest.mark.parametrize(
    ("queue", "suffix"),
    [
        ("RefreshRequestQueue", "-refresh-requests.fifo"),
        ("FailedRefreshRequestQueue", "-failed-requests.fifo"),
        ("UndeliveredRefreshRequestQueue", "-undelivered-requests"),
    ],
)
def test_the_queues_are_named_for_the_stack_and_fit_sqs_names(queue: str, suffix: str) -> None:
    """A queue's name has at most 80 characters, a FIFO queue's ends ``.fifo`` (SQS API
    reference, CreateQueue, QueueName); the README limits stack names to 56 characters."""
    values = Resolver(parameter_values())
    values.values["AWS::StackName"] = "s" * 56
    name = values.resolve(transformed()["Resources"][queue]["Properties"])["QueueName"]
    assert name == "s" * 56 + suffix
    assert len(name) <= 80


def test_the_debounce_has_a_floor() -> None:
    """A forced refresh writes the refresh credential twice; the floor matches the queue's
    five minutes, so a flood that gets a request through every window refreshes at most
    every five minutes."""
    parameter = source()["Parameters"]["MinRefreshIntervalSeconds"]
    assert (parameter["MinValue"], parameter["Default"]) == (300, 600)
    assert "300 to 86400" in parameter["ConstraintDescription"]
