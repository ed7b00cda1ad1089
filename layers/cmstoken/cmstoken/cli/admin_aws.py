"""``cmstoken-admin``'s side of AWS: the session and its region, the deployed stack as its
outputs describe it, the Lambda invoker, and every AWS error turned into one line.

That line names the action (the IAM action, such as ``lambda:InvokeFunction``), the resource
(an ARN when it is known), the account and region, and what to do about it; its exit status is
2 for what the operator must fix on the command line or in the configuration (no region, a
malformed region, an unknown profile) and 1 otherwise. No traceback: botocore's ``ClientError``
and ``BotoCoreError`` are caught where each call is made.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from cmstoken.core.redaction import printable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
BOOTSTRAP_OUTPUT = "BootstrapFunctionName"
ROTATOR_OUTPUT = "RotatorFunctionName"
ARN_OUTPUTS = {BOOTSTRAP_OUTPUT: "BootstrapFunctionArn", ROTATOR_OUTPUT: "RotatorFunctionArn"}
NO_REGION = (
    "no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or set a region "
    "in your AWS profile (aws configure set region eu-west-1)"
)
_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError"}
_CREDENTIALS_REFUSED = {
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "InvalidSignatureException",
    "InvalidAccessKeyId",
    "AuthFailure",
}
_THROTTLED = {
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
}
_NOT_FOUND = {"ResourceNotFoundException", "NotFoundException", "ResourceNotFound"}


class AdminError(Exception):
    """A failure to report to the operator in one line (made printable). ``short`` is the gist
    (``lambda:InvokeFunction denied``) for a report that degrades a line instead of failing."""

    def __init__(
        self, message: str, *, exit_status: int = EXIT_FAILED, short: str | None = None
    ) -> None:
        super().__init__(printable(message))
        self.exit_status = exit_status
        self.short = printable(short or message)


class Invoker(Protocol):
    """Invokes a function synchronously and returns its JSON result."""

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """The function's result; ``AdminError`` when the function raised."""
        ...


@dataclass(frozen=True)
class StackFunctions:
    """The functions of one deployed stack."""

    bootstrap: str
    rotator: str


@dataclass(frozen=True)
class Where:
    """The account (when known) and region an AWS call went to."""

    region: str | None
    account: str | None = None

    def __str__(self) -> str:
        parts = [f"account {self.account}" if self.account else "", f"region {self.region}"]
        return ", ".join(part for part in parts if part)


@dataclass(frozen=True)
class Call:
    """One AWS call, as an error message names it: ``missing`` says what to do when the
    resource does not exist, ``unanswered`` when the call was sent but not answered."""

    action: str
    resource: str
    where: Where
    missing: str = "check the name, the account and the region"
    unanswered: str = "retry"


@dataclass(frozen=True)
class DeployedStack:
    """A stack as ``DescribeStacks`` describes it."""

    name: str
    stack_id: str
    region: str
    account: str | None
    outputs: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, str] = field(default_factory=dict)
    created_at: float | None = None

    @property
    def where(self) -> Where:
        return Where(self.region, self.account)

    @property
    def functions(self) -> StackFunctions:
        return StackFunctions(self.outputs[BOOTSTRAP_OUTPUT], self.outputs[ROTATOR_OUTPUT])

    def function_arn(self, function: str) -> str:
        """The ARN of one of the stack's functions (from its outputs), else ``function``."""
        for name_output, arn_output in ARN_OUTPUTS.items():
            if self.outputs.get(name_output) == function and arn_output in self.outputs:
                return self.outputs[arn_output]
        if self.account and not function.startswith("arn:"):
            partition = self.stack_id.split(":")[1] if self.stack_id.startswith("arn:") else "aws"
            return f"arn:{partition}:lambda:{self.region}:{self.account}:function:{function}"
        return function

    def output_naming(self, function: str) -> str:
        """The output that names ``function`` (for messages)."""
        names = [key for key in ARN_OUTPUTS if self.outputs.get(key) == function]
        return names[0] if names else "output"

    def number(self, parameter: str, default: float) -> float:
        """A numeric stack parameter, or ``default`` when absent or not a number."""
        try:
            return float(self.parameters[parameter])
        except (KeyError, ValueError):
            return default


def explain(exc: Exception, call: Call) -> AdminError:
    """One line for a failed AWS call: what was refused, where, and what to do."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        return _client_error(exc, call)
    if isinstance(exc, BotoCoreError):
        return _botocore_error(exc, call)
    return AdminError(f"{call.action} on {call.resource} failed ({call.where}): {exc}")


def _client_error(exc: Any, call: Call) -> AdminError:
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    what = f"{call.action} on {call.resource} ({call.where})"
    if code in _DENIED:
        principal = re.search(r"User: (arn:\S+) is not authorized", message)
        who = f" to {principal.group(1)}" if principal else ""
        explicit = re.search(r"explicit deny in an? ([\w -]*?policy)", message)
        advice = (
            f"an explicit deny in a {explicit.group(1)} blocks it; ask whoever administers it "
            f"to allow {call.action} on {call.resource}{who}"
            if explicit
            else f"grant {call.action} on {call.resource}{who}"
        )
        return AdminError(
            f"{call.action} denied on {call.resource} ({call.where}): {advice}",
            short=f"{call.action} denied",
        )
    if code in _CREDENTIALS_REFUSED:
        return AdminError(
            f"{what}: AWS refused your credentials ({code}): renew them (aws sso login, aws "
            "configure, or new AWS_* variables) and retry",
            short=f"credentials refused ({code})",
        )
    if code in _THROTTLED:
        busy = "ConcurrentInvocationLimitExceeded" in str(exc.response.get("Reason", ""))
        advice = (
            "the function is already running (its reserved concurrency is in use): retry in a "
            "minute"
            if busy
            else "throttled: wait a little and retry"
        )
        return AdminError(f"{what}: {advice}", short=f"{call.action} throttled")
    if code in _NOT_FOUND or "does not exist" in message:
        return AdminError(
            f"{call.resource} not found ({call.action}, {call.where}): {call.missing}",
            short=f"{call.resource} not found",
        )
    return AdminError(
        f"{what} failed: {code or 'error'}: {message or exc}", short=f"{call.action}: {code}"
    )


def _botocore_error(exc: Any, call: Call) -> AdminError:
    from botocore import exceptions as e

    if isinstance(exc, e.NoRegionError):
        return AdminError(NO_REGION, exit_status=EXIT_USAGE)
    if isinstance(exc, e.InvalidRegionError | e.ProfileNotFound):
        return AdminError(f"{exc}: check --region, AWS_REGION and AWS_PROFILE", exit_status=2)
    if isinstance(exc, e.NoCredentialsError | e.PartialCredentialsError):
        return AdminError(
            f"no AWS credentials found ({call.action}, {call.where}): configure them (aws "
            "configure, aws sso login, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY) and retry",
            short="no AWS credentials",
        )
    if isinstance(exc, e.SSOError | e.TokenRetrievalError):
        return AdminError(
            f"your AWS SSO session is missing or expired ({call.action}, {call.where}): run "
            "aws sso login (with your profile) and retry",
            short="AWS SSO session expired",
        )
    if isinstance(exc, e.CredentialRetrievalError):
        return AdminError(
            f"could not get AWS credentials for {call.action} ({call.where}): {exc}",
            short="no AWS credentials",
        )
    if isinstance(exc, e.ConnectionError):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url", "the endpoint")
        return AdminError(
            f"{call.action} on {call.resource}: cannot reach {endpoint} ({call.where})"
            f"{_unknown_region(call.where.region)}: check --region, and your network or proxy",
            short=f"cannot reach {endpoint}",
        )
    if isinstance(exc, e.ReadTimeoutError | e.ConnectionClosedError):
        return AdminError(
            f"{call.action} on {call.resource} ({call.where}): sent, but no answer came "
            f"({type(exc).__name__}): {call.unanswered}",
            short=f"{call.action}: no answer",
        )
    return AdminError(f"{call.action} on {call.resource} failed ({call.where}): {exc}")


def _unknown_region(region: str | None) -> str:
    """A note when ``region`` is none that this botocore knows (it may be newer than it)."""
    if not region or os.environ.get("AWS_ENDPOINT_URL"):
        return ""
    import boto3

    session = boto3.Session(region_name=region)
    known = {
        name
        for partition in session.get_available_partitions()
        for name in session.get_available_regions("cloudformation", partition)
    }
    return "" if region in known else f"; {region!r} is not a region this AWS SDK knows"


# --- the session and the stack ----------------------------------------------------------------


def open_session(region: str | None) -> Any:
    """A boto3 session with a region, as the AWS CLI picks it (``--region``, ``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, the profile's); ``AdminError`` (exit 2) without a usable one."""
    import boto3
    from botocore import exceptions as e
    from botocore.utils import validate_region_name

    try:
        # boto3 reads AWS_DEFAULT_REGION but not AWS_REGION, which the AWS CLI honours.
        session = boto3.Session(region_name=region or os.environ.get("AWS_REGION") or None)
        if not session.region_name:
            raise AdminError(NO_REGION, exit_status=EXIT_USAGE)
        validate_region_name(session.region_name)
    except (e.InvalidRegionError, e.ProfileNotFound) as exc:
        raise AdminError(
            f"{exc}: check --region, AWS_REGION and AWS_PROFILE", exit_status=EXIT_USAGE
        ) from exc
    return session


def caller_account(session: Any, region: str) -> str | None:
    """The caller's account (sts:GetCallerIdentity, which needs no permission), or ``None``
    when it cannot be had quickly; only to name the account in a message."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        config = Config(connect_timeout=3, read_timeout=5, retries={"total_max_attempts": 1})
        session = session or boto3.Session(region_name=region)
        identity = session.client("sts", config=config).get_caller_identity()
    except (BotoCoreError, ClientError):
        return None
    account = identity.get("Account")
    return str(account) if account else None


def locate(stack: str, cloudformation: Any, *, session: Any = None) -> DeployedStack:
    """The stack, from ``DescribeStacks``: its outputs name the functions."""
    from botocore.exceptions import BotoCoreError, ClientError

    region = str(cloudformation.meta.region_name)
    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        message = str(exc.response.get("Error", {}).get("Message", ""))
        account = _account_in(message) or caller_account(session, region)
        where = Where(region, account)
        if "does not exist" in message:
            raise AdminError(
                f"stack {stack!r} not found in {where} (cloudformation:DescribeStacks): check "
                f"--stack and --region (aws cloudformation list-stacks --region {region})",
                short=f"stack {stack!r} not found",
            ) from exc
        resource = f"arn:aws:cloudformation:{region}:{account or '*'}:stack/{stack}/*"
        raise explain(exc, Call("cloudformation:DescribeStacks", resource, where)) from exc
    except BotoCoreError as exc:
        call = Call("cloudformation:DescribeStacks", f"stack {stack!r}", Where(region))
        raise explain(exc, call) from exc
    described = stacks[0]
    stack_id = str(described.get("StackId", ""))
    arn = stack_id.split(":")
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    missing = [key for key in (BOOTSTRAP_OUTPUT, ROTATOR_OUTPUT) if key not in outputs]
    if missing:
        raise AdminError(
            f"stack {stack!r} has no output {', '.join(missing)}: is it this product's stack?"
        )
    created = described.get("CreationTime")
    return DeployedStack(
        name=str(described.get("StackName", stack)),
        stack_id=stack_id,
        region=arn[3] if len(arn) > 4 and arn[3] else region,
        account=arn[4] if len(arn) > 4 and arn[4] else None,
        outputs=outputs,
        parameters={
            p["ParameterKey"]: p.get("ParameterValue", "") for p in described.get("Parameters", [])
        },
        created_at=created.timestamp() if created is not None else None,
    )


def _account_in(message: str) -> str | None:
    found = re.search(r"arn:aws[\w-]*:[\w-]+:[\w-]*:(\d{12}):", message)
    return found.group(1) if found else None


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
