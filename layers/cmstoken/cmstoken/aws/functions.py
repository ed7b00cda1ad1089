"""Lambda adapter: one function of the stack called by another, synchronously (``call``, its
JSON result) or asynchronously (``send``, queued by Lambda). ``ClientError`` codes, botocore
failures and an error the function raised become ``FunctionCallError`` types."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from cmstoken.aws import clients
from cmstoken.core.errors import (
    FunctionCallError,
    FunctionFailedError,
    FunctionUnavailableError,
)

if TYPE_CHECKING:
    from mypy_boto3_lambda import LambdaClient

_TRANSIENT_CODES = frozenset(
    {"ResourceNotReadyException", "ResourceConflictException", "EC2ThrottledException"}
)


class FunctionCaller:
    """Calls ``function`` (a name or ARN). The boto3 client is created on first use (it
    honours ``AWS_ENDPOINT_URL``) with a read timeout that outlasts ``timeout`` seconds, the
    longest the function runs; tests may inject one."""

    def __init__(
        self, function: str, *, timeout: float = 60, client: LambdaClient | None = None
    ) -> None:
        self.function = function
        self.timeout = timeout
        self._client = client

    @property
    def client(self) -> LambdaClient:
        if self._client is None:
            self._client = clients.client("lambda", read_timeout=self.timeout + 10, max_attempts=1)
        return self._client

    def call(self, payload: dict[str, Any]) -> Any:
        """The function's JSON result (``RequestResponse``); ``FunctionFailedError`` when the
        function raised (its error type in the message, never its payload)."""
        answer = self._invoke(payload, "RequestResponse")
        raw = answer["Payload"].read()
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise FunctionFailedError(
                f"{self.function} answered something that is not JSON", code="NotJson"
            ) from exc
        if answer.get("FunctionError"):
            kind = body.get("errorType") if isinstance(body, dict) else None
            raise FunctionFailedError(
                f"{self.function} failed: {kind or 'error'}", code=str(kind or "Unhandled")
            )
        return body

    def send(self, payload: dict[str, Any]) -> None:
        """Queue an invocation (``Event``): Lambda runs it, and retries it, without us."""
        self._invoke(payload, "Event")

    def url(self) -> str:
        """The function's own function URL (``lambda:GetFunctionUrlConfig``)."""
        try:
            return self.client.get_function_url_config(FunctionName=self.function)["FunctionUrl"]
        except (ClientError, BotoCoreError) as exc:
            raise function_error(exc, self.function) from exc

    def _invoke(self, payload: dict[str, Any], kind: str) -> Any:
        try:
            return self.client.invoke(
                FunctionName=self.function,
                InvocationType=kind,  # type: ignore[arg-type]
                Payload=json.dumps(payload).encode(),
            )
        except (ClientError, BotoCoreError) as exc:
            raise function_error(exc, self.function) from exc


def function_error(exc: ClientError | BotoCoreError, function: str) -> FunctionCallError:
    """The ``FunctionCallError`` type of a failed invocation of ``function``."""
    code, transient = clients.failure(exc, clients.TRANSIENT_CODES | _TRANSIENT_CODES)
    kind = FunctionUnavailableError if transient else FunctionCallError
    return kind(f"cannot invoke {function}: {code}", code=code)
