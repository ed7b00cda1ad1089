"""How ``cmstoken-admin`` invokes the stack's functions: the ``Invoker`` interface, through the
Lambda API (``LambdaInvoker``) or in-process (``LocalInvoker``: tests and the local demo run
the handlers with this same code)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, Protocol

from cmstoken.cli.admin.errors import AdminError, Call, Where, explain
from cmstoken.cli.admin.stack import DeployedStack


class Invoker(Protocol):
    """Invokes a function synchronously and returns its JSON result."""

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """The function's result; ``AdminError`` when the function raised."""
        ...


class LambdaInvoker:
    """Invokes deployed functions through the Lambda API; an AWS error of the call itself
    becomes one line naming the function's ARN (``stack`` knows it)."""

    def __init__(self, client: Any, stack: DeployedStack | None = None) -> None:
        self.client = client
        self.stack = stack

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """Invoke ``function`` with ``payload`` (RequestResponse) and decode its result."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.invoke(
                FunctionName=function,
                InvocationType="RequestResponse",
                Payload=json.dumps(payload).encode(),
            )
            raw = answer["Payload"].read()
        except (BotoCoreError, ClientError) as exc:
            raise explain(exc, self._call(function)) from exc
        try:
            body = json.loads(raw or b"null")
        except ValueError as exc:
            raise AdminError(f"{function} answered something that is not JSON") from exc
        if answer.get("FunctionError"):
            message = body.get("errorMessage") if isinstance(body, dict) else None
            kind = body.get("errorType") if isinstance(body, dict) else None
            raise AdminError(f"{function} failed: {kind or 'error'}: {message or body}")
        return body

    def _call(self, function: str) -> Call:
        stack = self.stack
        if stack is None:
            return Call("lambda:InvokeFunction", function, Where(self.client.meta.region_name))
        return Call(
            "lambda:InvokeFunction",
            stack.function_arn(function),
            stack.where,
            missing=f"stack {stack.name!r} names it in its output {stack.output_naming(function)}"
            f" but it does not exist: check the stack (aws cloudformation describe-stack-events "
            f"--stack-name {stack.name} --region {stack.region}) or deploy it again",
            unanswered=f"the function may still be running: see `cmstoken-admin --stack "
            f"{stack.name} status` before running it again",
        )


class LocalInvoker:
    """Runs handlers in-process, by function name (``name:alias`` for an alias: the context's
    ``invoked_function_arn`` is then qualified, as Lambda's), with a Lambda-like context (its
    ARN in ``region`` and ``account``)."""

    def __init__(
        self,
        handlers: Mapping[str, Callable[[Any, Any], Any]],
        *,
        timeout_seconds: Mapping[str, float],
        clock: Callable[[], float] = time.monotonic,
        region: str = "local",
        account: str = "000000000000",
    ) -> None:
        self.handlers = handlers
        self.timeout_seconds = timeout_seconds
        self.clock = clock
        self.arn_prefix = f"arn:aws:lambda:{region}:{account}:function:"

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """Call the handler; an exception it raises becomes ``AdminError`` as in Lambda."""
        name = function.partition(":")[0]
        ends = self.clock() + self.timeout_seconds[name]
        context = SimpleNamespace(
            function_name=name,
            function_version="$LATEST",
            memory_limit_in_mb=256,
            invoked_function_arn=self.arn_prefix + function,
            aws_request_id=f"local-{time.monotonic_ns()}",
            get_remaining_time_in_millis=lambda: int(max(0.0, ends - self.clock()) * 1000),
        )
        try:
            return self.handlers[name](dict(payload), context)
        except Exception as exc:
            raise AdminError(f"{function} failed: {type(exc).__name__}: {exc}") from exc
