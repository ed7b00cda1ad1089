"""Deletion says what it costs (issue 20, item 9): deleting a stack keeps the refresh credential
(DeletionPolicy: Retain, with its resource policy) and deletes the service token, and every
command docs/upgrade-and-teardown.md shows works: run with the AWS CLI against moto's server,
in the document's order, and checked against the CLI's service model (botocore's, from which
the AWS CLI makes its commands) even where no AWS CLI is installed.

moto's CloudFormation honours ``DeletionPolicy: Retain`` for the resources it creates (shown
below), but creates no secret; ``lifecycle`` applies CloudFormation's documented handling of the
two secrets and the policy (see its docstring for the AWS documents).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest
from samtranslator.yaml_helper import yaml_parse

from deployment import ROOT, DeployError, server_client
from lifecycle import Lifecycle, Stack
from support import block, check_aws_command

pytestmark = [
    pytest.mark.integration,
    # moto warns about each resource type it skips (deployment lists them).
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
]

TEMPLATE = ROOT / "template.yaml"
DOCUMENT = ROOT / "docs" / "upgrade-and-teardown.md"
OLD, NEW = "cmstoken", "cmstoken-next"
# The document's code blocks, in the order the test runs them.
BLOCKS = ("delete-stack", "adopt", "delete-kept", "restore-kept", "delete-kept-now")
CREDENTIAL = {
    "refresh_token": "v1.teardown-test-refresh-token",
    "client_id": "teardown-test-client",
    "issuer_url": "https://auth.example.invalid",
    "status": "active",
    "authorized_at": "2026-11-20T08:00:00Z",
    "refreshed_at": "2026-11-24T04:00:00Z",
    "reauthorize_by": "2026-12-20T08:00:00Z",
}
TOKEN = {"token": "eyJ.e30.", "token_type": "Bearer", "expires_at": "2026-11-25T04:00:00Z"}
OFFERED = {
    "ServiceBaseUrl": "https://cms.example.invalid",
    "DeployExampleConsumer": "true",
    "AlarmTopicKmsKey": "create",
    "RefreshCredentialAdministrators": "arn:aws:iam::123456789012:role/administrator",
}


@pytest.fixture
def lifecycle(moto_server: str) -> Lifecycle:
    return Lifecycle.open(
        server_client, "cmstoken-teardown-artifacts", boto3.session.Session().region_name
    )


def bootstrapped(lifecycle: Lifecycle, name: str, template: Any = TEMPLATE) -> Stack:
    """A stack whose two secrets hold what a bootstrap writes."""
    stack = lifecycle.create(name, template, OFFERED)
    secrets = server_client("secretsmanager")
    for logical_id, document in (
        ("RefreshCredentialSecret", CREDENTIAL),
        ("ServiceTokenSecret", TOKEN),
    ):
        secrets.put_secret_value(
            SecretId=stack.secret_arn(logical_id), SecretString=json.dumps(document)
        )
    return stack


# --- the commands the document shows ---------------------------------------------------------


def commands(text: str) -> list[list[str]]:
    """Each command of a shell block, as words: continuation lines joined, pipelines split."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        for part in line.split("|"):
            if part.strip():
                found.append(shlex.split(part))
    return found


def inline_commands(text: str) -> list[list[str]]:
    """The commands the document shows inline (`aws ...`, `cmstoken-admin ...`)."""
    spans = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
    return [shlex.split(span) for span in spans if span.split()[0] in ("aws", "cmstoken-admin")]


def concrete(text: str) -> str:
    """The document's placeholders replaced by this test's stack names."""
    return re.sub(r"\bNEW\b", NEW, re.sub(r"\bNAME\b", OLD, text))


def test_every_command_the_document_shows_is_one_the_tools_take() -> None:
    """Every AWS CLI command (checked against botocore's model of the service, which the AWS
    CLI's commands are made from) and every `cmstoken-admin` command (parsed by its own
    parser); every code block is one the test below runs."""
    from cmstoken.cli.admin.command import parse_args

    text = DOCUMENT.read_text()
    marked = re.findall(r"<!-- teardown: ([a-z-]+) -->", text)
    assert tuple(marked) == BLOCKS
    assert text.count("```sh") == len(BLOCKS)
    shown = [words for name in BLOCKS for words in commands(block(f"teardown: {name}"))]
    shown += inline_commands(text)
    assert len(shown) >= 8
    for words in shown:
        if words[0] == "aws":
            check_aws_command(words)
        else:
            parse_args(words[1:])


def run_block(name: str, tmp_path: Path) -> str:
    """The document's block, with this test's stack names, in bash with the AWS CLI against
    moto's server (the environment's endpoint and dummy credentials; no user configuration)."""
    environment = {
        **os.environ,
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_PAGER": "",
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", concrete(block(f"teardown: {name}"))],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert result.returncode == 0, (name, result.stdout[-2000:], result.stderr[-2000:])
    return result.stdout


def test_the_documented_teardown_keeps_the_credential_until_it_is_adopted_or_deleted(
    lifecycle: Lifecycle, tmp_path: Path
) -> None:
    """Delete the stack with the document's commands: the refresh credential stays, with its
    value and policy, and holds its name; the service token is gone for good. Adopt the kept
    credential in a new stack, then delete the kept copy with a recovery window, restore it,
    and delete it at once."""
    if shutil.which("aws") is None:
        pytest.skip("no AWS CLI on PATH (the commands are checked against its model above)")
    secrets = server_client("secretsmanager")
    old = bootstrapped(lifecycle, OLD)
    credential, token = (
        old.secret_arn("RefreshCredentialSecret"),
        old.secret_arn("ServiceTokenSecret"),
    )

    fates = lifecycle.delete(old, run=lambda: run_block("delete-stack", tmp_path))
    retained = {fate.logical_id for fate in fates if fate.what == "retained"}
    deleted = {fate.logical_id for fate in fates if fate.what == "deleted"}
    assert retained == {"RefreshCredentialSecret", "RefreshCredentialSecretPolicy"}
    assert deleted == {"ServiceTokenSecret"}
    assert json.loads(secrets.get_secret_value(SecretId=credential)["SecretString"]) == CREDENTIAL
    policy = json.loads(secrets.get_resource_policy(SecretId=credential)["ResourcePolicy"])
    assert "OnlyTheProductsFunctionsReadTheRefreshCredential" in json.dumps(policy)
    with pytest.raises(secrets.exceptions.ResourceNotFoundException):
        secrets.describe_secret(SecretId=token)
    with pytest.raises(secrets.exceptions.ResourceNotFoundException):
        secrets.restore_secret(SecretId=token)
    assert server_client("lambda").list_functions()["Functions"] == []
    with pytest.raises(DeployError, match="already exists"):
        lifecycle.create(OLD, TEMPLATE, OFFERED)

    new = lifecycle.create(NEW, TEMPLATE, OFFERED)
    run_block("adopt", tmp_path)
    adopted = secrets.get_secret_value(SecretId=new.secret_arn("RefreshCredentialSecret"))
    assert json.loads(adopted["SecretString"]) == CREDENTIAL
    assert "ResourcePolicy" not in secrets.get_resource_policy(SecretId=credential)

    run_block("delete-kept", tmp_path)
    assert "DeletedDate" in secrets.describe_secret(SecretId=credential)
    with pytest.raises(secrets.exceptions.InvalidRequestException):
        secrets.get_secret_value(SecretId=credential)
    run_block("restore-kept", tmp_path)
    assert "DeletedDate" not in secrets.describe_secret(SecretId=credential)
    assert json.loads(secrets.get_secret_value(SecretId=credential)["SecretString"]) == CREDENTIAL
    run_block("delete-kept-now", tmp_path)
    with pytest.raises(secrets.exceptions.ResourceNotFoundException):
        secrets.describe_secret(SecretId=credential)


def test_without_retain_the_deletion_would_destroy_the_credential_at_once(
    lifecycle: Lifecycle,
) -> None:
    """What the DeletionPolicy saves: CloudFormation deletes an AWS::SecretsManager::Secret
    with ForceDeleteWithoutRecovery (aws-cloudformation/cloudformation-coverage-roadmap#1999,
    citing the CloudFormation User Guide's "DeletionPolicy attribute": "the default
    deletionpolicy for an AWS::SecretsManager::Secret resource is
    force-delete-without-recovery"), and such a secret "is permanently lost" with no
    opportunity to recover it (Secrets Manager API Reference, DeleteSecret,
    ForceDeleteWithoutRecovery). Without the policy the stack's deletion leaves nothing to
    restore: only a new device authorization, by a person in a browser, would do."""
    template = yaml_parse(TEMPLATE.read_text())
    for logical_id in ("RefreshCredentialSecret", "RefreshCredentialSecretPolicy"):
        del template["Resources"][logical_id]["DeletionPolicy"]
    stack = bootstrapped(lifecycle, OLD, template)
    credential = stack.secret_arn("RefreshCredentialSecret")
    fates = lifecycle.delete(stack)
    assert {fate.logical_id for fate in fates if fate.what == "retained"} == set()
    secrets = server_client("secretsmanager")
    with pytest.raises(secrets.exceptions.ResourceNotFoundException):
        secrets.restore_secret(SecretId=credential)
    assert secrets.list_secrets(IncludePlannedDeletion=True)["SecretList"] == []


def test_moto_keeps_what_it_created_under_deletion_policy_retain(moto_server: str) -> None:
    """moto's CloudFormation honours DeletionPolicy: Retain on DeleteStack for a type it
    creates (a queue here), as CloudFormation does: the reason the secrets' handling above is
    applied by the test is only that moto creates no secret."""
    template = {
        "Resources": {
            "Kept": {"Type": "AWS::SQS::Queue", "DeletionPolicy": "Retain"},
            "Deleted": {"Type": "AWS::SQS::Queue"},
        }
    }
    cloudformation, sqs = server_client("cloudformation"), server_client("sqs")
    cloudformation.create_stack(StackName="retain-probe", TemplateBody=json.dumps(template))
    resources = cloudformation.describe_stack_resources(StackName="retain-probe")
    names = {
        r["LogicalResourceId"]: r["PhysicalResourceId"].rsplit("/", 1)[-1]
        for r in resources["StackResources"]
    }
    cloudformation.delete_stack(StackName="retain-probe")
    left = [url.rsplit("/", 1)[-1] for url in sqs.list_queues().get("QueueUrls", [])]
    assert left == [names["Kept"]]
