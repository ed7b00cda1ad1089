"""What the kept local stack (`make demo KEEP=1`) adds to moto so that every path the
documents show runs there as in a deployed stack: the refresh requests' rule, queue and dead
letter queues, and the rotator's dead letter queue, named as template.yaml names them; a pump
that does what the rotator's SQS event source mapping does; and the template's alarms, whose
states follow the metrics the local functions emit (the project's alarm model,
tests/cloudwatch_alarms.py and tests/composite_alarms.py)."""

from __future__ import annotations

import json
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]
REFRESH_REQUESTED = "Service Token Refresh Requested"
# The rotator's SQS event source mapping (template.yaml, Events.RefreshRequests).
BATCH_SIZE = 10
# What an alarm's properties in the template give PutMetricAlarm as they are.
ALARM_KEYS: tuple[str, ...] = ("MetricName", "Dimensions", "Statistic", "Period")
ALARM_KEYS += ("EvaluationPeriods", "DatapointsToAlarm", "ComparisonOperator", "TreatMissingData")


def queue_names(stack: str) -> dict[str, str]:
    """The stack's queues by output key; the rotator's has no QueueName in the template, so
    it is named as CloudFormation names one (stack, logical id, a suffix)."""
    return {
        "RefreshRequestQueueUrl": f"{stack}-refresh-requests.fifo",
        "FailedRefreshRequestQueueUrl": f"{stack}-failed-requests.fifo",
        "UndeliveredRefreshRequestQueueUrl": f"{stack}-undelivered-requests",
        "RotationDeadLetterQueueUrl": f"{stack}-RotationDeadLetterQueue-LOCAL",
    }


def create_refresh_requests(stack: str, account: str) -> dict[str, str]:
    """The queues and the rule ``RefreshRequestedRule`` as the template makes them (its
    pattern, its target's group, input and dead letter queue); the queues' URLs by output
    key."""
    import boto3

    sqs: Any = boto3.client("sqs")
    names = queue_names(stack)

    def create(key: str, **attributes: str) -> str:
        url: str = sqs.create_queue(QueueName=names[key], Attributes=attributes)["QueueUrl"]
        return url

    def arn(url: str) -> str:
        found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return str(found["Attributes"]["QueueArn"])

    failed = create("FailedRefreshRequestQueueUrl", FifoQueue="true")
    undelivered = create("UndeliveredRefreshRequestQueueUrl")
    redrive = {"deadLetterTargetArn": arn(failed), "maxReceiveCount": "5"}
    requests = create(
        "RefreshRequestQueueUrl",
        FifoQueue="true",
        ContentBasedDeduplication="true",
        VisibilityTimeout="720",
        RedrivePolicy=json.dumps(redrive),
    )
    rotation = create("RotationDeadLetterQueueUrl")
    events: Any = boto3.client("events")
    rule = f"{stack}-RefreshRequestedRule-LOCAL"
    pattern = {"account": [account], "detail-type": [REFRESH_REQUESTED]}
    events.put_rule(Name=rule, EventPattern=json.dumps(pattern))
    coalesced = json.dumps({"detail-type": REFRESH_REQUESTED, "source": "cmstoken.coalesced"})
    target = {
        "Id": "coalesce",
        "Arn": arn(requests),
        "SqsParameters": {"MessageGroupId": "refresh-requests"},
        "InputTransformer": {"InputTemplate": coalesced},
        "RetryPolicy": {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600},
        "DeadLetterConfig": {"Arn": arn(undelivered)},
    }
    events.put_targets(Rule=rule, Targets=[target])
    return {
        "RefreshRequestQueueUrl": requests,
        "FailedRefreshRequestQueueUrl": failed,
        "UndeliveredRefreshRequestQueueUrl": undelivered,
        "RotationDeadLetterQueueUrl": rotation,
    }


class Background(ABC):
    """A daemon thread that runs ``_run`` from ``start`` on; ``stop`` sets ``stopping``, which
    ``_run`` waits on, and waits for the thread to end."""

    def __init__(self, name: str | None = None) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()

    @abstractmethod
    def _run(self) -> None: ...


class RefreshRequestPump(Background):
    """The rotator's SQS event source mapping: polls the requests' queue and invokes the
    rotator with each batch (``{"Records": [...]}``, as Lambda shapes an SQS event); a batch
    whose run fails stays in the queue, visible again after the queue's visibility timeout, and
    SQS moves it to the failed requests' queue after 5 receives."""

    def __init__(self, invoker: Any, function: str, queue_url: str, region: str) -> None:
        import boto3

        super().__init__("refresh-requests")
        self.invoker = invoker
        self.function = function
        self.queue_url = queue_url
        self.region = region
        self.sqs = boto3.client("sqs")
        self.arn = str(
            self.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
        )

    def _run(self) -> None:
        while not self.stopping.wait(1.0):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 -- the next poll tries again, as the mapping does
                print(f"refresh requests: {type(exc).__name__}: {exc}", file=sys.stderr)

    def poll(self) -> int:
        """One receive and, when it brought messages, one invocation: how many it brought."""
        from cmstoken.cli.admin.errors import AdminError

        received = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=BATCH_SIZE,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not received:
            return 0
        try:
            self.invoker.invoke(self.function, {"Records": [self.record(m) for m in received]})
        except AdminError:
            return len(received)  # left in the queue: received again later, as Lambda leaves it
        self.sqs.delete_message_batch(
            QueueUrl=self.queue_url,
            Entries=[
                {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
                for index, message in enumerate(received)
            ],
        )
        return len(received)

    def record(self, message: Mapping[str, Any]) -> dict[str, Any]:
        """One message as an SQS event's record."""
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": message.get("MessageAttributes", {}),
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.arn,
            "awsRegion": self.region,
        }


class LocalAlarms:
    """The template's alarms for one stack (its metric alarms, and the composite alarm as a
    metric alarm of the same name: moto has no PutCompositeAlarm), named ``STACK-LOGICAL-LOCAL``;
    :meth:`update` evaluates them on the datapoints :meth:`record` was given since
    :meth:`create`, with the project's alarm model, and sets each changed state in moto."""

    def __init__(self, stack: str, namespace: str, interval_minutes: int) -> None:
        if str(ROOT / "tests") not in sys.path:
            sys.path.append(str(ROOT / "tests"))
        from template_model import Resolver, of_type, parameter_values, transformed

        resources = transformed()["Resources"]
        resolver = Resolver(parameter_values(RotationIntervalMinutes=str(interval_minutes)))
        self.stack = stack
        self.namespace = namespace
        self.metric: dict[str, dict[str, Any]] = {
            name: {**resolver.resolve(resource["Properties"]), "Namespace": namespace}
            for name, resource in of_type(resources, "AWS::CloudWatch::Alarm").items()
            if resolver.present(resource)
        }
        self.composite: dict[str, str] = {
            name: resolver.resolve(resource["Properties"])["AlarmRule"]
            for name, resource in of_type(resources, "AWS::CloudWatch::CompositeAlarm").items()
            if resolver.present(resource)
        }
        self.points: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self.states: dict[str, str] = {}
        self.start = time.time()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="alarms", daemon=True)

    def name(self, logical: str) -> str:
        return f"{self.stack}-{logical}-LOCAL"

    def create(self, topic: str) -> None:
        """Each alarm in moto, as the template defines it, its actions on ``topic``."""
        import boto3

        cloudwatch = boto3.client("cloudwatch")
        for logical in [*self.metric, *self.composite]:
            properties = self.metric.get(logical) or self.metric["RotationFailingAlarm"]
            actions = [topic] if properties.get("AlarmActions") else []  # not the heartbeat
            cloudwatch.put_metric_alarm(
                AlarmName=self.name(logical),
                Namespace=self.namespace,
                Threshold=float(properties["Threshold"]),
                AlarmActions=actions,
                OKActions=actions,
                **{key: properties[key] for key in ALARM_KEYS if key in properties},
            )
            cloudwatch.set_alarm_state(  # as CloudWatch creates one (moto says OK)
                AlarmName=self.name(logical),
                StateValue="INSUFFICIENT_DATA",
                StateReason="Unchecked: Initial alarm creation",
            )
        self.start = time.time()

    def record(self, namespace: str, metric: str, stamp: float, value: float) -> None:
        if namespace == self.namespace:
            with self.lock:
                self.points[metric].append((stamp, value))

    def start_updating(self, every: float = 10.0) -> LocalAlarms:
        self.every = every
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join()

    def _run(self) -> None:
        while not self.stopping.wait(self.every):
            try:
                self.update()
            except Exception as exc:  # noqa: BLE001 -- the next evaluation tries again
                print(f"alarms: {type(exc).__name__}: {exc}", file=sys.stderr)

    def evaluated(self, now: float) -> dict[str, str]:
        """Each alarm's state at ``now`` by logical id (INSUFFICIENT_DATA before any change)."""
        from cloudwatch_alarms import AlarmSpec, evaluate
        from composite_alarms import evaluate_composite

        with self.lock:
            points = {metric: list(values) for metric, values in self.points.items()}
        changes = {
            name: evaluate(
                AlarmSpec.from_properties(name, properties),
                points.get(properties["MetricName"], []),
                start=self.start,
                end=now,
            )
            for name, properties in self.metric.items()
        }
        children = {f"<{name}>": transitions for name, transitions in changes.items()}
        for name, rule in self.composite.items():
            changes[name] = evaluate_composite(rule, children, start=self.start)
        return {name: (c[-1].new if c else "INSUFFICIENT_DATA") for name, c in changes.items()}

    def update(self, now: float | None = None) -> dict[str, str]:
        """Evaluate at ``now`` (the time by default), and set in moto each state that changed
        (SetAlarmState)."""
        import boto3

        cloudwatch = boto3.client("cloudwatch")
        states = self.evaluated(time.time() if now is None else now)
        for logical, state in states.items():
            if self.states.get(logical, "INSUFFICIENT_DATA") != state:
                cloudwatch.set_alarm_state(
                    AlarmName=self.name(logical),
                    StateValue=state,
                    StateReason=f"local evaluation of the template's {logical} (tests' model)",
                )
        self.states = states
        return states
