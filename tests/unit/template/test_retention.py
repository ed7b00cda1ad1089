"""What template.yaml keeps when the stack is deleted or a resource replaced (issue 20, items 8 and
9): the refresh credential and its resource policy are retained in both cases, the service token
is not, and no update can replace either secret by a parameter change. The reasons are in the
template's comment and docs/upgrade-and-teardown.md, whose table must say what the template says.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lifecycle import create_only_properties
from template_model import source, transformed

DOCUMENT = Path(__file__).resolve().parents[3] / "docs" / "upgrade-and-teardown.md"
# (DeletionPolicy, UpdateReplacePolicy) of each resource that holds or guards a secret.
POLICIES = {
    "RefreshCredentialSecret": ("Retain", "Retain"),
    "RefreshCredentialSecretPolicy": ("Retain", "Retain"),
    "ServiceTokenSecret": ("Delete", "Delete"),
}


@pytest.mark.parametrize("template", [source, transformed], ids=["source", "transformed"])
@pytest.mark.parametrize("logical_id", POLICIES)
def test_each_secret_states_its_deletion_and_replacement_policies(
    template: Any, logical_id: str
) -> None:
    """As written, and as the SAM transform hands them to CloudFormation; unconditionally (a
    condition turning false would delete the resource)."""
    resource = template()["Resources"][logical_id]
    deletion, replacement = POLICIES[logical_id]
    assert resource["DeletionPolicy"] == deletion
    assert resource["UpdateReplacePolicy"] == replacement
    assert "Condition" not in resource


def test_nothing_else_is_kept_when_the_stack_goes() -> None:
    """A kept resource costs until someone deletes it: only the credential and its policy."""
    kept = {
        logical_id
        for logical_id, resource in transformed()["Resources"].items()
        if "Retain" in (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy"))
    }
    assert kept == {"RefreshCredentialSecret", "RefreshCredentialSecretPolicy"}


def test_the_policy_follows_its_retained_secret() -> None:
    policy = source()["Resources"]["RefreshCredentialSecretPolicy"]["Properties"]
    assert policy["SecretId"] == {"Ref": "RefreshCredentialSecret"}


def test_only_a_new_name_replaces_a_secret_and_no_parameter_is_in_the_names() -> None:
    """``Name`` is the one create-only property of AWS::SecretsManager::Secret (its resource
    provider schema, as cfn-lint ships it), and each name is the stack's name and a constant:
    no parameter change after deploy can replace a secret."""
    assert create_only_properties("AWS::SecretsManager::Secret") == ("Name",)
    resources = source()["Resources"]
    for logical_id, suffix in (
        ("RefreshCredentialSecret", "refresh-credential"),
        ("ServiceTokenSecret", "service-token"),
    ):
        properties = resources[logical_id]["Properties"]
        assert properties["Name"] == {"Fn::Sub": "${AWS::StackName}/" + suffix}
        # ReplicaRegions (the service token's) is updated in place: CloudFormation adds and
        # removes replicas (ReplicateSecretToRegions, RemoveRegionsFromReplication).
        updatable = {"Description", "KmsKeyId", "ReplicaRegions"}
        assert set(properties) - {"Name"} <= updatable, "UpdateSecret in place"


def test_the_document_says_what_the_template_says() -> None:
    rows = re.findall(
        r"^\| `(\w+)`[^|]*\| `(\w+)` \| `(\w+)` \|", DOCUMENT.read_text(), flags=re.MULTILINE
    )
    assert {logical_id: (deletion, replacement) for logical_id, deletion, replacement in rows} == (
        POLICIES
    )
