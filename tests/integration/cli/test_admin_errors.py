"""cmstoken-admin's AWS errors: a failed DescribeStacks or Invoke ends in ONE line naming the
action, the resource, the account and region, and what to do, with the exit status the help
text promises; never a traceback. The stack is moto's (in-process); refusals moto cannot
produce are injected with a botocore event hook on the command's session."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from moto import mock_aws

from cmstoken.cli.admin import command as admin
from cmstoken.cli.admin import stack as admin_aws
from cmstoken.cli.admin.command import main

pytestmark = pytest.mark.integration

ACCOUNT, REGION = "123456789012", "us-east-1"
ROTATOR = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:tokens-rotator"
STACK_ARN = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/tokens/*"
WHERE = f"(account {ACCOUNT}, region {REGION})"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:user/operator"


@pytest.fixture
def deployed(aws_credentials: None) -> Iterator[None]:
    """A stack "tokens" whose outputs name functions that do not exist (moto cannot run the
    template's functions)."""
    with mock_aws():
        outputs = {
            "BootstrapFunctionName": "tokens-bootstrap",
            "BootstrapFunctionArn": ROTATOR.replace("rotator", "bootstrap"),
            "RotatorFunctionName": "tokens-rotator",
            "RotatorFunctionArn": ROTATOR,
        }
        template = {
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {key: {"Value": value} for key, value in outputs.items()},
        }
        boto3.client("cloudformation").create_stack(
            StackName="tokens", TemplateBody=json.dumps(template)
        )
        yield


def hook(monkeypatch: pytest.MonkeyPatch, event: str, handler: Callable[..., Any]) -> None:
    """Register ``handler`` for ``event`` on the session main() opens."""
    opened = admin_aws.open_session

    def open_session(region: str | None, profile: str | None = None) -> Any:
        session = opened(region, profile)
        session.events.register(event, handler)
        return session

    monkeypatch.setattr(admin, "open_session", open_session)


def raising(error: Exception) -> Callable[..., None]:
    def raise_it(**_: Any) -> None:
        raise error

    return raise_it


def refusal(code: str, message: str, operation: str, **extra: Any) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": message}, **extra}
    return ClientError(response, operation)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """main()'s exit status and its one line on standard error (nothing else is printed)."""
    code = main(["--stack", "tokens", *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return code, err.rstrip("\n")


def test_a_function_that_does_not_exist(deployed: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "rotate") == (
        1,
        f"cmstoken-admin: {ROTATOR} not found (lambda:InvokeFunction, account {ACCOUNT}, "
        f"region {REGION}): stack 'tokens' names it in its output RotatorFunctionName but it "
        "does not exist: check the stack (aws cloudformation describe-stack-events "
        f"--stack-name tokens --region {REGION}) or deploy it again",
    )


def test_invoke_denied_names_the_permission_to_grant(
    deployed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    message = (
        f"User: {OPERATOR} is not authorized to perform: lambda:InvokeFunction on resource: "
        f"{ROTATOR} because no identity-based policy allows the lambda:InvokeFunction action"
    )
    denied = refusal("AccessDeniedException", message, "Invoke")
    hook(monkeypatch, "before-call.lambda.Invoke", raising(denied))
    assert run(capsys, "rotate") == (
        1,
        f"cmstoken-admin: lambda:InvokeFunction denied on {ROTATOR} {WHERE}: grant "
        f"lambda:InvokeFunction on {ROTATOR} to {OPERATOR}",
    )


def test_an_explicit_deny_is_not_fixed_by_a_grant(
    deployed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    message = (
        f"User: {OPERATOR} is not authorized to perform: lambda:InvokeFunction on resource: "
        f"{ROTATOR} with an explicit deny in a service control policy"
    )
    denied = refusal("AccessDeniedException", message, "Invoke")
    hook(monkeypatch, "before-call.lambda.Invoke", raising(denied))
    code, line = run(capsys, "rotate")
    assert code == 1
    assert line.endswith(
        "an explicit deny in a service control policy blocks it; ask whoever administers it "
        f"to allow lambda:InvokeFunction on {ROTATOR} to {OPERATOR}"
    )


@pytest.mark.parametrize("account_in_message", [True, False], ids=["from-message", "from-sts"])
def test_describe_stacks_denied(
    deployed: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    account_in_message: bool,
) -> None:
    message = (
        f"User: {OPERATOR} is not authorized to perform: cloudformation:DescribeStacks on "
        f"resource: {STACK_ARN} because no identity-based policy allows it"
        if account_in_message
        else "Access Denied"
    )
    denied = refusal("AccessDenied", message, "DescribeStacks")
    hook(monkeypatch, "before-call.cloudformation.DescribeStacks", raising(denied))
    who = f" to {OPERATOR}" if account_in_message else ""
    assert run(capsys, "status") == (
        1,
        f"cmstoken-admin: cloudformation:DescribeStacks denied on {STACK_ARN} {WHERE}: grant "
        f"cloudformation:DescribeStacks on {STACK_ARN}{who}",
    )


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            refusal("ExpiredTokenException", "The security token included has expired", "Invoke"),
            f"lambda:InvokeFunction on {ROTATOR} {WHERE}: AWS refused your credentials "
            "(ExpiredTokenException): renew them (aws sso login, aws configure, or new AWS_* "
            "variables) and retry",
        ),
        (
            refusal(
                "TooManyRequestsException",
                "Rate Exceeded.",
                "Invoke",
                Reason="ReservedFunctionConcurrentInvocationLimitExceeded",
            ),
            f"lambda:InvokeFunction on {ROTATOR} {WHERE}: the function is already running (its "
            "reserved concurrency is in use): retry in a minute",
        ),
        (
            ReadTimeoutError(endpoint_url="https://lambda.us-east-1.amazonaws.com/"),
            f"lambda:InvokeFunction on {ROTATOR} {WHERE}: sent, but no answer came "
            "(ReadTimeoutError): the function may still be running: see `cmstoken-admin --stack "
            "tokens status` before running it again",
        ),
        (
            EndpointConnectionError(endpoint_url="https://lambda.us-east-1.amazonaws.com/x"),
            f"lambda:InvokeFunction on {ROTATOR}: cannot reach "
            f"https://lambda.us-east-1.amazonaws.com/x {WHERE}: check --region, and your network "
            "or proxy",
        ),
    ],
    ids=["expired-credentials", "reserved-concurrency", "read-timeout", "unreachable"],
)
def test_other_invoke_failures(
    deployed: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: Exception,
    expected: str,
) -> None:
    hook(monkeypatch, "before-call.lambda.Invoke", raising(error))
    assert run(capsys, "rotate") == (1, f"cmstoken-admin: {expected}")


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(
    deployed: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hook(monkeypatch, "before-call.lambda.Invoke", raising(RuntimeError("boom")))
    line = (
        "cmstoken-admin: unexpected error: RuntimeError: boom (rerun with --debug for the "
        "traceback, and report it)"
    )
    assert run(capsys, "rotate") == (1, line)
    assert main(["--stack", "tokens", "rotate", "--debug"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert err.splitlines()[-1] == line


def test_the_help_text_promises_these_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["status", "--help"], ["rotate", "--help"], ["bootstrap", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert "Exit status: 0 success (status: healthy); 1 failure" in text, argv
        assert "2 usage error (a missing or malformed option, no AWS region" in text, argv


def test_the_readme_shows_a_line_as_printed(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from support import documentation

    readme = documentation()
    example = re.search(r"what to do, for example\n\n```text\n(.*?)\n```", readme, re.S)
    assert example is not None
    function = "tokens-BootstrapFunction-1A2B3C"
    function_arn = f"arn:aws:lambda:eu-west-1:{ACCOUNT}:function:{function}"
    with mock_aws():
        outputs = {"BootstrapFunctionName": function, "BootstrapFunctionArn": function_arn}
        outputs["RotatorFunctionName"] = "tokens-RotatorFunction-4D5E6F"
        template = {
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {key: {"Value": value} for key, value in outputs.items()},
        }
        boto3.client("cloudformation", region_name="eu-west-1").create_stack(
            StackName="tokens", TemplateBody=json.dumps(template)
        )
        message = f"User: {OPERATOR} is not authorized to perform: lambda:InvokeFunction"
        denied = refusal("AccessDeniedException", message, "Invoke")
        hook(monkeypatch, "before-call.lambda.Invoke", raising(denied))
        assert run(capsys, "--region", "eu-west-1", "bootstrap") == (1, example.group(1))
