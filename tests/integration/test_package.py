"""`make package` as a user runs it, against moto's S3 on 127.0.0.1: the build's code is
uploaded, the packaged template names the uploaded objects and validates, and CloudFormation
(moto's) creates a stack from it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest
from samtranslator.yaml_helper import yaml_parse

from deployment import ROOT, Deployer, built_template, sam_transform

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
]

BUCKET = "cmstoken-releases"
PACKAGED = ROOT / ".aws-sam" / "packaged.yaml"
ARTIFACTS = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}


def make_package(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # -o build: reuse the build `make test` made (the deploy test checks it is current).
    return subprocess.run(
        ["make", "-s", "-o", "build", "package", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def packaged(moto_server: str) -> dict[str, Any]:
    built_template()  # fails, saying to run `make build`, when missing or stale
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    PACKAGED.unlink(missing_ok=True)
    result = make_package(f"BUCKET={BUCKET}", "PREFIX=v1", env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    return yaml_parse(PACKAGED.read_text())  # type: ignore[no-any-return]


def test_a_bucket_is_required() -> None:
    result = make_package(env=dict(os.environ))
    assert result.returncode != 0
    assert "usage: make package BUCKET=" in result.stderr


def test_the_packaged_template_names_uploaded_objects(packaged: dict[str, Any]) -> None:
    s3 = boto3.client("s3")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    named = 0
    for name, resource in packaged["Resources"].items():
        prop = ARTIFACTS.get(resource["Type"])
        if prop is None:
            continue
        location = resource["Properties"][prop]
        assert isinstance(location, str), (name, location)
        assert location.startswith(f"s3://{BUCKET}/v1/"), (name, location)
        assert location.removeprefix(f"s3://{BUCKET}/") in keys, (name, location)
        named += 1
    assert named >= 3  # the rotator, the bootstrap, the layer (and the example consumer)
    assert packaged["Metadata"]["AWS::ServerlessRepo::Application"]["SemanticVersion"]


def test_the_packaged_template_validates(packaged: dict[str, Any], tmp_path: Path) -> None:
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0"}
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sam"), "validate", "--lint", "-t", str(PACKAGED)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cloudformation_creates_a_stack_from_the_packaged_template(
    packaged: dict[str, Any],
) -> None:
    deployer = Deployer(
        clients=lambda service: boto3.client(service),  # type: ignore[call-overload]
        transformed=sam_transform(packaged),
        bucket=BUCKET,
        region=boto3.session.Session().region_name,
        account_id=boto3.client("sts").get_caller_identity()["Account"],
    )
    stack = deployer.deploy("cmstoken-packaged", {"ServiceBaseUrl": "https://cms.example.invalid"})
    assert stack.status == "CREATE_COMPLETE"
    functions = boto3.client("lambda").list_functions()["Functions"]
    assert len([f for f in functions if "cmstoken-packaged" in f["FunctionName"]]) >= 2
    assert stack.outputs["Version"] == packaged["Outputs"]["Version"]["Value"]
