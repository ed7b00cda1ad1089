"""``cmstoken-admin``'s session and stack: the AWS session and its region, as the AWS CLI picks
them, and the deployed stack as ``DescribeStacks`` describes it (its outputs name the
functions). Failures are ``AdminError``s, in one line (``errors``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cmstoken.cli.admin.errors import NO_REGION, AdminError, Call, Where, explain, unknown_profile
from cmstoken.cli.console import EXIT_USAGE

EMPTY_REGION = "argument --region: empty; name a region (for example --region eu-west-1)"
BOOTSTRAP_OUTPUT = "BootstrapFunctionName"
ROTATOR_OUTPUT = "RotatorFunctionName"
ARN_OUTPUTS = {BOOTSTRAP_OUTPUT: "BootstrapFunctionArn", ROTATOR_OUTPUT: "RotatorFunctionArn"}


@dataclass(frozen=True)
class StackFunctions:
    """The functions of one deployed stack."""

    bootstrap: str
    rotator: str


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


def open_session(region: str | None, profile: str | None = None) -> Any:
    """A boto3 session with a profile and a region, as the AWS CLI picks them (``--profile``,
    else ``AWS_PROFILE``; ``--region``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's);
    ``AdminError`` (exit 2) for an unknown profile or without a usable region."""
    import boto3
    from botocore import exceptions as e
    from botocore.utils import validate_region_name

    if region is not None and not region.strip():
        # An empty --region would fall back to the environment's or the profile's region.
        raise AdminError(EMPTY_REGION, exit_status=EXIT_USAGE)
    try:
        # boto3 reads AWS_DEFAULT_REGION but not AWS_REGION, which the AWS CLI honours.
        session = boto3.Session(
            profile_name=profile or None,
            region_name=region or os.environ.get("AWS_REGION") or None,
        )
        if not session.region_name:
            raise AdminError(NO_REGION, exit_status=EXIT_USAGE)
        validate_region_name(session.region_name)
    except e.ProfileNotFound as exc:
        raise AdminError(unknown_profile(exc), exit_status=EXIT_USAGE) from exc
    except e.InvalidRegionError as exc:
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
    from botocore.parsers import ResponseParserError

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
    except ResponseParserError as exc:  # not AWS's answer: an endpoint that has no such region
        raise AdminError(unreadable_region(region, cloudformation)) from exc
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


def unreadable_region(region: str, client: Any) -> str:
    """The line for a region whose endpoint answered something no AWS answer parses as (an
    emulator without that region, a proxy's error page)."""
    import boto3

    known = region in boto3.Session().get_available_regions("cloudformation")
    return (
        f"region {region!r} is {'unreachable' if known else 'unknown or unreachable'}: "
        f"{client.meta.endpoint_url} answered cloudformation:DescribeStacks with something "
        "that is not an AWS answer; check --region, AWS_REGION and AWS_PROFILE (and "
        "AWS_ENDPOINT_URL)"
    )


def _account_in(message: str) -> str | None:
    found = re.search(r"arn:aws[\w-]*:[\w-]+:[\w-]*:(\d{12}):", message)
    return found.group(1) if found else None
