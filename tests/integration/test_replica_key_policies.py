"""The replica keys' policies after a change of sharing (issue 29, item 9): docs/organisation.md's
commands, run as written with the AWS CLI against moto's KMS on its server, put the stack's key's
new policy, with each replica's Region, on each replica key; CloudFormation, which updates only
the key in the stack's Region, leaves the replicas' policies as they were.

The stack's key is made here through KMS (moto's KMS API cannot read a key its CloudFormation
created: test_deploy_sharing.py), multi-Region, with the policy template.yaml gives
ServiceTokenKey for the sharing parameters; the stack's update is what CloudFormation does to
that key, a new policy on it. moto's ReplicateKey copies the primary's policy, ignores its
``Policy`` and finds no key by its ARN (moto 5 ``replicate_key``): the replicas are made here by
key id, and the document's replicate command is checked against the CLI's model only
(tests/unit/test_organisation_docs.py), its policy files with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import boto3
import pytest

import template_model
from support import block, isolated_aws_env, run_shell

pytestmark = pytest.mark.integration

REPLICAS = ("eu-west-1", "ap-southeast-2")
BEFORE = {
    "ConsumerAccountIds": "111111111111,222222222222",
    "ConsumerOrganizationId": "o-a1b2c3d4e5",
}
AFTER = {"ConsumerAccountIds": "333333333333"}


def stack_key_policy(**sharing: str) -> dict[str, Any]:
    """ServiceTokenKey's policy for these sharing parameters (stack cmstoken-prod in us-east-1 of
    123456789012, moto's default account)."""
    values = template_model.Resolver(template_model.parameter_values(**sharing))
    key = values.resolve(template_model.transformed()["Resources"]["ServiceTokenKey"])
    return key["Properties"]["KeyPolicy"]  # type: ignore[no-any-return]


def in_region(policy: dict[str, Any], region: str) -> dict[str, Any]:
    """The policy a replica in ``region`` needs: the same, with Secrets Manager's Region there."""
    return json.loads(json.dumps(policy).replace(template_model.PSEUDO["AWS::Region"], region))  # type: ignore[no-any-return]


def policy_of(arn: str) -> dict[str, Any]:
    region = arn.split(":")[3]
    kms = boto3.client("kms", region_name=region)
    return json.loads(kms.get_key_policy(KeyId=arn, PolicyName="default")["Policy"])  # type: ignore[no-any-return]


def run_blocks(directory: Path, env: dict[str, str], *markers: str) -> None:
    run_shell("\n".join(block(marker) for marker in markers), directory, env)


def test_the_documented_commands_put_the_new_policy_on_each_replica_key(
    moto_server: str, tmp_path: Path
) -> None:
    if shutil.which("aws") is None:
        pytest.skip("no AWS CLI on PATH (the commands are checked against its model elsewhere)")
    region = template_model.PSEUDO["AWS::Region"]
    kms = boto3.client("kms", region_name=region)
    key = kms.create_key(MultiRegion=True, Policy=json.dumps(stack_key_policy(**BEFORE)))
    arn = key["KeyMetadata"]["Arn"]
    assert arn.startswith(f"arn:aws:kms:{region}:123456789012:key/mrk-")
    env = isolated_aws_env(
        tmp_path,
        AWS_DEFAULT_REGION=region,
        SERVICE_TOKEN_KEY_ARN=arn,
        REPLICA_REGIONS=",".join(REPLICAS),
    )
    # The replicas (moto's ReplicateKey takes a key id only, and copies the primary's policy).
    for replica_region in REPLICAS:
        kms.replicate_key(KeyId=key["KeyMetadata"]["KeyId"], ReplicaRegion=replica_region)
    replicas = [arn.replace(f":{region}:", f":{r}:") for r in REPLICAS]
    assert kms.describe_key(KeyId=arn)["KeyMetadata"]["MultiRegion"] is True
    for replica in replicas:
        assert policy_of(replica)["Statement"]  # it exists, in its Region

    # The update: CloudFormation puts the new policy on the stack's key, and on it only.
    kms.put_key_policy(
        KeyId=arn, PolicyName="default", Policy=json.dumps(stack_key_policy(**AFTER))
    )
    for replica, replica_region in zip(replicas, REPLICAS, strict=True):
        assert policy_of(replica) != in_region(stack_key_policy(**AFTER), replica_region)

    run_blocks(tmp_path, env, "replica-key-policy-files", "replica-key-policies")
    assert policy_of(arn) == stack_key_policy(**AFTER)
    for replica, replica_region in zip(replicas, REPLICAS, strict=True):
        assert policy_of(replica) == in_region(stack_key_policy(**AFTER), replica_region)
        (_, accounts) = policy_of(replica)["Statement"]
        assert accounts["Principal"] == {"AWS": ["333333333333"]}
        assert accounts["Condition"]["StringEquals"] == {
            "kms:ViaService": f"secretsmanager.{replica_region}.amazonaws.com"
        }
