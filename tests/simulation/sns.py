"""SNS in memory: ``publish`` to a topic as the links' topic adapter (``cmstoken.aws.topic``)
calls it, with SNS's checks of the request.

``SnsModel`` stands in for a boto3 ``sns`` client: ``create_topic`` and ``publish``. A publish
to a missing topic is ``NotFound``; with ``MessageStructure="json"`` the message must be a JSON
object of strings with a ``default`` body (``InvalidParameter`` otherwise); a subject must be
1 to 99 printable ASCII characters ("less than 100 characters long", no line breaks or
control characters: the SNS Publish API reference). ``published`` keeps what was sent, in
order. Every call runs through ``interceptor`` as ``("sns", "Publish:<topic name>")``.
``tests/integration/test_simulation_links_conformance.py`` keeps it equal to moto's server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from botocore.exceptions import ClientError

from simulation.interception import Interceptor, direct

# The methods keep boto3's parameter names (TopicArn, ...): callers pass them as keywords.
# ruff: noqa: N803

ACCOUNT, REGION = "123456789012", "us-east-1"


@dataclass(frozen=True)
class Published:
    topic: str
    subject: str | None
    message: str
    structure: str | None

    def body(self, protocol: str) -> str:
        """What a subscriber of ``protocol`` receives."""
        if self.structure != "json":
            return self.message
        bodies = json.loads(self.message)
        return str(bodies.get(protocol, bodies["default"]))


def _invalid(code: str, message: str, status: int = 400) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "Publish")


class SnsModel:
    def __init__(self, interceptor: Interceptor = direct) -> None:
        self.interceptor = interceptor
        self.topics: set[str] = set()
        self.published: list[Published] = []

    def create_topic(self, *, Name: str) -> dict[str, Any]:
        arn = f"arn:aws:sns:{REGION}:{ACCOUNT}:{Name}"
        self.topics.add(arn)
        return {"TopicArn": arn}

    def publish(
        self,
        *,
        TopicArn: str,
        Message: str,
        Subject: str | None = None,
        MessageStructure: str | None = None,
    ) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            if TopicArn not in self.topics:
                raise _invalid("NotFound", "Topic does not exist", 404)
            if Subject is not None and not (
                0 < len(Subject) < 100 and all(32 <= ord(c) < 127 for c in Subject)
            ):
                raise _invalid("InvalidParameter", "Invalid parameter: Subject")
            if MessageStructure == "json":
                _check_structure(Message)
            self.published.append(Published(TopicArn, Subject, Message, MessageStructure))
            return {"MessageId": f"{len(self.published):08d}-0000-4000-8000-000000000000"}

        answer = self.interceptor("sns", f"Publish:{TopicArn.rpartition(':')[2]}", act)
        return cast(dict[str, Any], answer)


def _check_structure(message: str) -> None:
    try:
        bodies = json.loads(message)
    except ValueError:
        bodies = None
    if not isinstance(bodies, dict) or not all(isinstance(v, str) for v in bodies.values()):
        raise _invalid(
            "InvalidParameter",
            "Invalid parameter: Message Structure - JSON message body failed to parse",
        )
    if "default" not in bodies:
        raise _invalid(
            "InvalidParameter",
            "Invalid parameter: Message Structure - No default entry in JSON message body",
        )
