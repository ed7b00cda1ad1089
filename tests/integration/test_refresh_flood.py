"""Issue 29, item 5: a flood of refresh requests on the real template's wiring, deployed through
CloudFormation on moto's server. 10,000 requests in a burst, half from this account on the
default bus and half from consumers on the stack's bus, become one message in the stack's
queue (content-based deduplication: SQS Developer Guide, "Exactly-once processing in Amazon
SQS": messages with the same deduplication ID sent within the 5-minute deduplication interval
are accepted but not delivered), so the rotator's event source mapping runs it once; the
schedule's invocations take another path (the rotator's ``EventInvokeConfig``), which the flood
never reaches. Issue 36, item 4: a request received 5 times and never deleted (every run
failed) moves to the failed requests' queue, which moto's SQS does. What moto cannot run
(Lambda's queue of asynchronous invocations, throttling, the visibility timeout against the
function's, a FIFO queue's 300 sends a second and EventBridge's dead letters, the schedule over
days) is in ``tests/simulation/refresh_flood.py``, on the documents it cites."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonpath_ng.ext
import moto.sqs.models
import pytest

from cmstoken.core.triggers import QUEUED, REFRESH_REQUESTED, RotationRequest
from deployment import Deployer, server_client, server_deployer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
    pytest.mark.timeout(900),  # 1,000 PutEvents calls to moto's server
]

BUCKET = "cmstoken-flood-artifacts"
SHARED = {"ServiceBaseUrl": "https://cms.example.invalid", "ConsumerAccountIds": "111111111111"}
REQUESTS = 10_000


@pytest.fixture
def deployer(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> Deployer:
    """The stack's deployer on moto's server (in this process). moto's EventBridge builds a new
    JSONPath parser (PLY's tables) for each event's input template; the parse of a path is a pure
    function of it, so it is made once a path: the same deliveries, about ten times faster.
    Likewise moto's SQS converts each attribute's name (a pure function of the name, character
    by character) every time it reads a queue's attributes, several times for each message
    sent: each name is converted once, which was most of the test's CPU."""
    monkeypatch.setattr(jsonpath_ng.ext, "parse", cache(vars(jsonpath_ng.ext)["parse"]))
    convert = cache(vars(moto.sqs.models)["camelcase_to_underscores"])
    monkeypatch.setattr(moto.sqs.models, "camelcase_to_underscores", convert)
    return server_deployer(BUCKET)


def request(bus: str) -> dict[str, Any]:
    return {
        "EventBusName": bus,
        "Source": "cmstoken.consumer",
        "DetailType": REFRESH_REQUESTED,
        "Detail": json.dumps({"reason": "the service answered 401"}),
    }


def drain(queue: str) -> list[list[dict[str, Any]]]:
    """The batches the rotator's event source mapping would receive (10 messages at most
    each), deleting each as a run that returned does."""
    sqs = server_client("sqs")
    batches: list[list[dict[str, Any]]] = []
    while True:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return batches
        batches.append(got)
        sqs.delete_message_batch(
            QueueUrl=queue,
            Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(got)
            ],
        )


def test_ten_thousand_requests_in_a_burst_are_one_rotator_run(deployer: Deployer, say: Any) -> None:
    stack = deployer.deploy("cmstoken-flood", SHARED)
    assert stack.status == "CREATE_COMPLETE"
    # The test is the mapping's poller (moto would run the function in a container).
    lambdas = server_client("lambda")
    rotator = lambdas.get_function_configuration(FunctionName=stack.physical_id("RotatorFunction"))
    (mapping,) = lambdas.list_event_source_mappings(FunctionName=rotator["FunctionName"])[
        "EventSourceMappings"
    ]
    lambdas.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    events = server_client("events")
    buses = ("default", "cmstoken-flood-refresh-requests")
    for start in range(0, REQUESTS, 10):
        entries = [request(buses[(start // 10) % 2])] * 10
        answer = events.put_events(Entries=entries)
        assert answer["FailedEntryCount"] == 0
    queue = stack.physical_id("RefreshRequestQueue")
    batches = drain(queue)
    # One message, whatever the bus: one run of the rotator, forced.
    assert [len(batch) for batch in batches] == [1]
    (message,) = batches[0]
    records = {"Records": [{"eventSource": "aws:sqs", "body": message["Body"]}]}
    assert RotationRequest.from_event(records) == RotationRequest(forced=True, source=QUEUED)
    assert RotationRequest.from_event(json.loads(message["Body"])).forced  # as EventBridge's
    # The event source mapping is what runs it: from this queue to the rotator, 10 at a time.
    attributes = server_client("sqs").get_queue_attributes(
        QueueUrl=queue, AttributeNames=["QueueArn", "FifoQueue", "ContentBasedDeduplication"]
    )["Attributes"]
    assert mapping["EventSourceArn"] == attributes["QueueArn"]
    assert mapping["BatchSize"] == 10
    assert (attributes["FifoQueue"], attributes["ContentBasedDeduplication"]) == ("true", "true")
    # Nothing else of the flood reaches the rotator: no rule targets it.
    for bus in buses:
        for rule in events.list_rules(EventBusName=bus)["Rules"]:
            targets = events.list_targets_by_rule(Rule=rule["Name"], EventBusName=bus)["Targets"]
            assert rotator["FunctionArn"] not in [t["Arn"] for t in targets]
    say(f"[flood] {REQUESTS} refresh requests in a burst: {len(batches)} rotator run")


def test_a_request_received_five_times_moves_to_the_failed_requests_queue(
    deployer: Deployer,
) -> None:
    """SQS Developer Guide, "Using dead-letter queues": "When the ReceiveCount for a message
    exceeds the maxReceiveCount for a queue, Amazon SQS moves the message to the dead-letter
    queue". 5 receives, each of a run that failed (the message left, visible again at once here
    instead of after 720 s), then the record in the stack's failed requests' queue."""
    stack = deployer.deploy("cmstoken-failing", SHARED)
    lambdas = server_client("lambda")
    rotator = stack.physical_id("RotatorFunction")
    (mapping,) = lambdas.list_event_source_mappings(FunctionName=rotator)["EventSourceMappings"]
    lambdas.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
    answer = server_client("events").put_events(Entries=[request("default")])
    assert answer["FailedEntryCount"] == 0
    sqs = server_client("sqs")
    queue = stack.physical_id("RefreshRequestQueue")
    failed = stack.physical_id("FailedRefreshRequestQueue")
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "720"
    redrive = json.loads(attributes["RedrivePolicy"])
    assert int(redrive["maxReceiveCount"]) == 5
    failed_arn = sqs.get_queue_attributes(QueueUrl=failed, AttributeNames=["QueueArn"])
    assert redrive["deadLetterTargetArn"] == failed_arn["Attributes"]["QueueArn"]
    for _ in range(5):  # each run failed: nothing deletes the message
        (message,) = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"]
        assert RotationRequest.from_event(json.loads(message["Body"])).forced
    assert sqs.receive_message(QueueUrl=queue, VisibilityTimeout=0).get("Messages", []) == []
    (recorded,) = sqs.receive_message(QueueUrl=failed)["Messages"]
    assert RotationRequest.from_event(json.loads(recorded["Body"])).forced
    # The rules' undelivered requests go to a queue of their own, not the rotation failures'.
    undelivered = sqs.get_queue_attributes(
        QueueUrl=stack.physical_id("UndeliveredRefreshRequestQueue"), AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    events = server_client("events")
    configs = [
        target["DeadLetterConfig"]
        for rule in events.list_rules(EventBusName="default")["Rules"]
        for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
        if target["Arn"] == attributes["QueueArn"]
    ]
    assert configs == [{"Arn": undelivered}]
