"""cmstoken-admin as a user runs it: the console script in a subprocess, against moto's server
(through AWS_ENDPOINT_URL), with the region from the environment as the AWS CLI takes it. Each
AWS error ends in one line on standard error, never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest

from support import isolated_aws_env, run_admin

pytestmark = pytest.mark.integration


@pytest.fixture
def aws_env(moto_server: str, tmp_path: Path) -> dict[str, str]:
    """Credentials and moto's endpoint, no region, no AWS configuration files."""
    return isolated_aws_env(tmp_path)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line the command printed on standard error (no traceback, nothing else)."""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_aws_region_is_honoured_and_stack_may_follow_the_command(aws_env: dict[str, str]) -> None:
    result = run_admin("status", "--stack", "nope", env={**aws_env, "AWS_REGION": "eu-west-1"})
    assert result.returncode == 1
    assert one_line(result).startswith(
        "cmstoken-admin: stack 'nope' not found in account 123456789012, region eu-west-1"
    )


def test_no_region_is_a_usage_error_that_says_how_to_set_one(aws_env: dict[str, str]) -> None:
    result = run_admin("--stack", "nope", "status", env=aws_env)
    assert result.returncode == 2
    assert one_line(result) == (
        "cmstoken-admin: no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), "
        "or set a region in your AWS profile (aws configure set region eu-west-1)"
    )


def test_an_empty_region_is_a_usage_error_not_the_environments_region(
    aws_env: dict[str, str],
) -> None:
    """``--region ''`` used to fall back to AWS_REGION or the profile's (us-east-1 here)."""
    result = run_admin(
        "--stack", "nope", "--region", "", "status", env={**aws_env, "AWS_REGION": "us-east-1"}
    )
    assert result.returncode == 2
    assert one_line(result) == (
        "cmstoken-admin: argument --region: empty; name a region (for example --region eu-west-1)"
    )


def test_a_region_the_endpoint_does_not_have_is_named_in_one_line(
    aws_env: dict[str, str],
) -> None:
    """moto's server (as the local stack's) answers a region it has no backend for with an
    HTML error page: that is one line naming the region, not an 'unexpected error'."""
    result = run_admin("--stack", "cmstoken-local", "--region", "mars-1", "status", env=aws_env)
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith("cmstoken-admin: region 'mars-1' is unknown or unreachable: http://"), (
        line
    )
    assert "answered cloudformation:DescribeStacks with something that is not an AWS answer" in line
    assert "unexpected" not in line


def test_an_unknown_region_names_the_endpoint_it_could_not_reach(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The endpoint of an unknown region cannot be reached: botocore's error for it (tests reach
    no outside address, not even its name server), with no endpoint variable set (one that
    is set is named instead: test_admin_first_hour)."""
    from botocore.exceptions import EndpointConnectionError

    from cmstoken.cli.admin.errors import Call, Where, explain

    for name in [name for name in os.environ if name.startswith("AWS_ENDPOINT_URL")]:
        monkeypatch.delenv(name)
    endpoint = "https://cloudformation.nowhere-9.amazonaws.com/"
    error = explain(
        EndpointConnectionError(endpoint_url=endpoint),
        Call("cloudformation:DescribeStacks", "stack 's'", Where("nowhere-9")),
    )
    assert error.exit_status == 1
    assert str(error) == (
        f"cloudformation:DescribeStacks on stack 's': cannot reach {endpoint} (region "
        "nowhere-9); 'nowhere-9' is not a region this AWS SDK knows: check --region, and your "
        "network or proxy"
    )


def deploy_outputs(name: str, outputs: dict[str, str]) -> None:
    """A stack in moto's server with these outputs (moto cannot run the template's functions)."""
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    client = boto3.client("cloudformation", region_name="eu-west-1")
    client.create_stack(StackName=name, TemplateBody=json.dumps(template))


FUNCTIONS = {"BootstrapFunctionName": "gone-bootstrap", "RotatorFunctionName": "gone-rotator"}
ROTATOR_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:gone-rotator"


def test_functions_that_do_not_exist(aws_env: dict[str, str]) -> None:
    deploy_outputs("gone", FUNCTIONS)
    env = {**aws_env, "AWS_REGION": "eu-west-1"}
    result = run_admin("--stack", "gone", "rotate", env=env)
    assert result.returncode == 1
    assert one_line(result) == (
        f"cmstoken-admin: {ROTATOR_ARN} not found (lambda:InvokeFunction, account "
        "123456789012, region eu-west-1): stack 'gone' names it in its output "
        "RotatorFunctionName but it does not exist: check the stack (aws cloudformation "
        "describe-stack-events --stack-name gone --region eu-west-1) or deploy it again"
    )


class DenyingLambda(BaseHTTPRequestHandler):
    """Lambda's answer to a principal without lambda:InvokeFunction, as AWS sends it."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        function = self.path.split("/")[3]
        arn = f"arn:aws:lambda:eu-west-1:123456789012:function:{function}"
        body = json.dumps(
            {
                "Type": "User",
                "message": "User: arn:aws:iam::123456789012:user/operator is not authorized to "
                f"perform: lambda:InvokeFunction on resource: {arn} because no identity-based "
                "policy allows the lambda:InvokeFunction action",
            }
        ).encode()
        self.send_response(403)
        self.send_header("x-amzn-ErrorType", "AccessDeniedException")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def denying_lambda() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DenyingLambda)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_invoke_denied_over_the_wire(aws_env: dict[str, str], denying_lambda: str) -> None:
    deploy_outputs("gone", FUNCTIONS)
    env = {**aws_env, "AWS_REGION": "eu-west-1", "AWS_ENDPOINT_URL_LAMBDA": denying_lambda}
    result = run_admin("--stack", "gone", "rotate", env=env)
    assert result.returncode == 1
    assert one_line(result) == (
        f"cmstoken-admin: lambda:InvokeFunction denied on {ROTATOR_ARN} (account 123456789012, "
        f"region eu-west-1): grant lambda:InvokeFunction on {ROTATOR_ARN} to "
        "arn:aws:iam::123456789012:user/operator"
    )


def test_a_missing_stack_option_is_a_usage_error(aws_env: dict[str, str]) -> None:
    result = run_admin("status", env=aws_env)
    assert result.returncode == 2
    assert "--stack" in result.stderr


def test_every_bootstrap_flag_has_help_text(aws_env: dict[str, str]) -> None:
    result = run_admin("bootstrap", "--help", env=aws_env)
    assert result.returncode == 0
    text = result.stdout
    for flag in (
        "--stack",
        "--region",
        "--free-trial",
        "--no-free-trial",
        "--no-qr",
        "--new-identity",
    ):
        entry = re.search(rf"^  {flag}\b[^\n]*(\n {{6,}}[^\n]+)*", text, re.M)
        assert entry is not None, flag
        described = entry.group(0)[len(f"  {flag}") :].strip()
        assert len(described.split()) >= 3, f"{flag} has no help text: {entry.group(0)!r}"
