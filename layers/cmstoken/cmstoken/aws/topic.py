"""SNS adapter: publishing one message, with a body per kind of subscriber, to the stack's
topic. ``ClientError`` codes and botocore failures become ``TopicError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from cmstoken.aws import clients
from cmstoken.core.errors import TopicError

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient


class Topic:
    """The topic ``arn``. The boto3 client is created on first use (it honours
    ``AWS_ENDPOINT_URL``); tests may inject one."""

    def __init__(self, arn: str, client: SNSClient | None = None) -> None:
        self.arn = arn
        self._client = client

    @property
    def client(self) -> SNSClient:
        if self._client is None:
            self._client = clients.client("sns")
        return self._client

    def publish(self, *, subject: str, message: str, structure: str | None = "json") -> str:
        """Publish; ``message`` is, with ``structure="json"``, a JSON object of one body per
        protocol (``default`` required). Returns SNS's message id."""
        request = {"TopicArn": self.arn, "Subject": subject, "Message": message}
        if structure is not None:
            request["MessageStructure"] = structure
        try:
            return self.client.publish(**request)["MessageId"]  # type: ignore[arg-type]
        except (ClientError, BotoCoreError) as exc:
            code, _ = clients.failure(exc)
            raise TopicError(f"cannot publish to {self.arn}: {code}", code=code) from exc
