"""The README's consumer recipes, run or checked against a local stack so that they stay true."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import SERVICE_SECRET, Stack

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def recipe(name: str) -> str:
    """The code block that follows ``<!-- recipe: name -->`` in the README."""
    found = re.search(
        rf"<!-- recipe: {re.escape(name)} -->\s*```\w*\n(.*?)```", README.read_text(), re.DOTALL
    )
    assert found, f"README has no recipe {name!r}"
    return found.group(1)


def tool_works(*command: str) -> bool:
    if shutil.which(command[0]) is None:
        return False
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(
    not (tool_works("aws", "--version") and tool_works("jq", "--version")),
    reason="needs the AWS CLI and jq on PATH",
)
def test_the_aws_cli_recipe_lists_projects(server_stack: Stack) -> None:
    server_stack.seed()
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", recipe("aws-cli")],
        env={**os.environ, "SECRET_ARN": arn},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    projects = json.loads(result.stdout)["data"]
    assert projects[0]["projectId"].startswith("prj_")


def test_the_ecs_recipe_names_an_existing_json_key(stack: Stack) -> None:
    stack.seed()
    definition = json.loads(recipe("ecs"))
    (secret,) = definition["containerDefinitions"][0]["secrets"]
    arn, key, stage, version = secret["valueFrom"].rsplit(":", 3)
    assert arn.startswith("arn:aws:secretsmanager:")
    assert (stage, version) == ("", "")
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    )
    assert isinstance(document[key], str)


def test_the_external_secrets_recipe_reads_the_token_property(stack: Stack) -> None:
    stack.seed()
    manifest = yaml.safe_load(recipe("external-secrets"))
    assert manifest["kind"] == "ExternalSecret"
    (entry,) = manifest["spec"]["data"]
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    )
    assert isinstance(document[entry["remoteRef"]["property"]], str)
    assert manifest["spec"]["refreshInterval"] == "1h"


def test_the_terraform_recipe_is_well_formed_and_uses_existing_fields(stack: Stack) -> None:
    stack.seed()
    snippet = recipe("terraform")
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    )
    for field in re.findall(r"local\.cms\.(\w+)", snippet):
        assert field in document
    if tool_works("terraform", "version"):
        formatted = subprocess.run(
            ["terraform", "fmt", "-check", "-"],
            input=snippet,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert formatted.returncode == 0, formatted.stdout + formatted.stderr
