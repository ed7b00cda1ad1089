"""Issue 29, item 5: refresh requests coalesce in a queue before they reach the rotator, so that
the cost of N requests is bounded and the schedule's run never waits behind them (the burst and
the day-long flood: tests/unit/simulation/test_simulation_refresh_flood.py on this wiring,
tests/integration/test_refresh_flood.py on moto's CloudFormation); the debounce has a floor."""

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
    one batch in flight (SQS Developer Guide, FIFO message groups). Lambda refuses a mapping
    whose queue's visibility timeout is shorter than the function's timeout (Lambda Developer
    Guide, "Using Lambda with Amazon SQS", configuring a queue); a message a failed run left
    comes back after it, until it is older than its retention."""
    mapping = resources["RotatorFunctionRefreshRequests"]["Properties"]
    assert mapping == {
        "BatchSize": 10,
        "EventSourceArn": {"Fn::GetAtt": ["RefreshRequestQueue", "Arn"]},
        "FunctionName": {"Ref": "RotatorFunction"},
    }
    queue = resources["RefreshRequestQueue"]["Properties"]
    timeout = resources["RotatorFunction"]["Properties"]["Timeout"]
    assert timeout < queue["VisibilityTimeout"] < 2 * timeout
    assert queue["MessageRetentionPeriod"] == 600  # a request older than that is moot


def test_the_queue_is_named_for_the_stack_and_fits_sqs_names() -> None:
    """A FIFO queue's name ends ``.fifo`` and has at most 80 characters (SQS API reference,
    CreateQueue, QueueName); the README limits stack names to 56 characters."""
    values = Resolver(parameter_values())
    values.values["AWS::StackName"] = "s" * 56
    name = values.resolve(transformed()["Resources"]["RefreshRequestQueue"]["Properties"])[
        "QueueName"
    ]
    assert name == "s" * 56 + "-refresh-requests.fifo"
    assert len(name) <= 80


def test_the_debounce_has_a_floor() -> None:
    """A forced refresh writes the refresh credential twice; the floor matches the queue's
    five minutes, so a flood that gets a request through every window refreshes at most
    every five minutes."""
    parameter = source()["Parameters"]["MinRefreshIntervalSeconds"]
    assert (parameter["MinValue"], parameter["Default"]) == (300, 600)
    assert "300 to 86400" in parameter["ConstraintDescription"]
