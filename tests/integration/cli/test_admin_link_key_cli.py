"""cmstoken-admin rotate-link-key as an operator runs it: the console script in a subprocess,
against moto's server (AWS_ENDPOINT_URL), on a stack whose output names the link signing key
secret and on one with one-click re-authorization off. The key never reaches the terminal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import boto3
import pytest

from support import isolated_aws_env, run_admin

pytestmark = pytest.mark.integration

REGION = "eu-west-1"


@pytest.fixture
def aws_env(moto_server: str, tmp_path: Path) -> dict[str, str]:
    """Credentials, moto's endpoint and a region; no AWS configuration files."""
    return isolated_aws_env(tmp_path, AWS_REGION=REGION)


def deploy(name: str, one_click: str, secret_arn: str) -> None:
    """A stack in moto's server whose output LinkSigningKeySecretArn exists only when its
    parameter OneClickReauthorization is "true", as in template.yaml."""
    template = {
        "Parameters": {"OneClickReauthorization": {"Type": "String", "Default": "false"}},
        "Conditions": {
            "OneClickEnabled": {"Fn::Equals": [{"Ref": "OneClickReauthorization"}, "true"]}
        },
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {
            "BootstrapFunctionName": {"Value": f"{name}-bootstrap"},
            "RotatorFunctionName": {"Value": f"{name}-rotator"},
            "LinkSigningKeySecretArn": {"Condition": "OneClickEnabled", "Value": secret_arn},
        },
    }
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "OneClickReauthorization", "ParameterValue": one_click}],
    )


def test_rotate_link_key_over_the_wire(aws_env: dict[str, str]) -> None:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    first = secrets.get_random_password(PasswordLength=64, ExcludePunctuation=True)
    arn = secrets.create_secret(Name="on/link-signing-key", SecretString=first["RandomPassword"])[
        "ARN"
    ]
    deploy("on", "true", arn)
    deploy("off", "false", arn)

    def current() -> str:
        return str(secrets.get_secret_value(SecretId=arn)["SecretString"])

    before = current()
    off = run_admin("--stack", "off", "rotate-link-key", env=aws_env)
    assert (off.returncode, off.stdout, "Traceback" in off.stderr) == (2, "", False)
    assert off.stderr == (
        "cmstoken-admin: stack 'off' has one-click re-authorization off "
        '(OneClickReauthorization is "false"), so no link signing key: nothing to rotate\n'
    )
    assert current() == before  # control for the rotation below: nothing was written
    on = run_admin("--stack", "on", "rotate-link-key", env=aws_env)
    after = current()
    assert (on.returncode, on.stdout) == (0, "")
    assert on.stderr == (
        "rotated the link signing key of stack 'on' (account 123456789012, region eu-west-1): "
        "every re-authorization link sent before now is void; the next notice carries a new "
        "link\n"
    )
    assert after != before
    assert re.fullmatch(r"[A-Za-z0-9]{64}", after)
    assert after not in on.stdout + on.stderr
    versions = secrets.list_secret_version_ids(SecretId=arn)["Versions"]
    assert sorted(stage for v in versions for stage in v["VersionStages"]) == [
        "AWSCURRENT",
        "AWSPREVIOUS",
    ]
