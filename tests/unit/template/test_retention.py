"""What template.yaml keeps when the stack is deleted or a resource replaced (issue 20, items 8 and
9): the refresh credential and its resource policy are retained in both cases, the service token
is not, and no update can replace either secret by a parameter change. The key the stack makes
for a shared or replicated service token is kept too (issue 29, item 8): no parameter change
schedules the deletion of a key a version of the token may still be under. The reasons are in
the template's comments and docs/upgrade-and-teardown.md, whose table must say what the template
says.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from lifecycle import create_only_properties
from template_model import SERVICE_TOKEN_KEY_ARN, resolved_resources, source, transformed

DOCUMENT = Path(__file__).resolve().parents[3] / "docs" / "upgrade-and-teardown.md"
# (DeletionPolicy, UpdateReplacePolicy) of each resource that holds or guards a secret.
POLICIES = {
    "RefreshCredentialSecret": ("Retain", "Retain"),
    "RefreshCredentialSecretPolicy": ("Retain", "Retain"),
    "ServiceTokenSecret": ("Delete", "Delete"),
}
# The same of each key the stack makes to encrypt a secret; a key exists under a condition (the
# service token shared or replicated), so a parameter change can remove it.
KEYS = {"ServiceTokenKey": ("Retain", "Retain")}


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
    """A kept resource costs until someone deletes it: only the credential, its policy and the
    service token's key."""
    kept = {
        logical_id
        for logical_id, resource in transformed()["Resources"].items()
        if "Retain" in (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy"))
    }
    assert kept == {"RefreshCredentialSecret", "RefreshCredentialSecretPolicy", *KEYS}


@pytest.mark.parametrize("template", [source, transformed], ids=["source", "transformed"])
@pytest.mark.parametrize("logical_id", KEYS)
def test_each_key_of_a_secret_states_its_deletion_and_replacement_policies(
    template: Any, logical_id: str
) -> None:
    resource = template()["Resources"][logical_id]
    assert resource["Type"] == "AWS::KMS::Key"
    assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == KEYS[logical_id]


OWN_KEY = "arn:aws:kms:us-east-1:123456789012:key/mrk-fedcba9876543210fedcba9876543210"
SHARED = {"ConsumerAccountIds": "111111111111"}
# Parameter changes after deploy that take the stack's key out of the stack.
CHANGES = {
    "account sharing turned off": (SHARED, {}),
    "organisation sharing turned off": ({"ConsumerOrganizationId": "o-a1b2c3d4e5"}, {}),
    "replication turned off": ({"ReplicaRegions": "eu-west-1"}, {}),
    "own key given later": (SHARED, {**SHARED, "ServiceTokenKmsKeyArn": OWN_KEY}),
}


@pytest.mark.parametrize(("before", "after"), CHANGES.values(), ids=CHANGES)
def test_no_parameter_change_deletes_a_key_the_token_may_still_be_under(
    before: dict[str, str], after: dict[str, str]
) -> None:
    """What the AWS documents say happens, applied to the template's resources before and after
    the change (moto's CloudFormation creates no secret and ignores DeletionPolicy on updates;
    its KMS decrypts with a key pending deletion):

    - CloudFormation, "DeletionPolicy attribute": "If a resource has no DeletionPolicy attribute,
      AWS CloudFormation deletes the resource by default. Note that this capability also applies
      to stack update operations that lead to resources being deleted from stacks"; "Conditions
      section": "Resources that are now associated with a false condition are deleted". For an
      AWS::KMS::Key, deleting is scheduling its deletion (PendingWindowInDays, 7 to 30 days).
    - KMS, ScheduleKeyDeletion: "the key state of the KMS key changes to PendingDeletion and the
      key can't be used in any cryptographic operations" (a multi-Region primary with replicas:
      PendingReplicaDeletion, the same, "indefinitely").
    - Secrets Manager, "Change the encryption key for a secret": only the AWSCURRENT,
      AWSPENDING and AWSPREVIOUS versions are re-encrypted with the new key, and "If you don't
      have kms:Decrypt permission to the previous key ... the existing versions are not
      re-encrypted".

    So a key that encrypted the service token before the change must not be deleted by it."""
    old, new = resolved_resources(**before), resolved_resources(**after)
    removed = {
        logical_id
        for logical_id, resource in old.items()
        if resource["Type"] == "AWS::KMS::Key" and logical_id not in new
    }
    assert removed == {"ServiceTokenKey"}  # the change does take the stack's key out
    assert old["ServiceTokenSecret"]["Properties"]["KmsKeyId"] == SERVICE_TOKEN_KEY_ARN
    for logical_id in removed:
        assert old[logical_id].get("DeletionPolicy") == "Retain", f"{logical_id} deleted"


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
        POLICIES | KEYS
    )
