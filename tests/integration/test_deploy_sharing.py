"""The SAM-built template with the service token shared with two accounts and an organisation,
deployed through CloudFormation on moto's server as the deploy test deploys it (``deployment``;
issue 22, the stack's side).

What moto's CloudFormation creates of it is checked against the stack's own resources: the key
holds the key policy the template gives it, with this stack's names; the functions' roles carry
the key's use; the consumer policy names the key; the bus is the stack's, and its rule hands
refresh requests to the rotator with the dead letter queue. What moto does not create or apply is
listed with the template assertions that cover it: the secret's resource policy (no model), the
secrets themselves (``deployment`` stands them in, without replicas: replicas are not deployed
here), the bus's ``Policy`` and the key's ``MultiRegion`` (moto's models ignore both). moto's KMS
API cannot read a key its CloudFormation created, so that key is read from moto's backend."""

from __future__ import annotations

import json
import re

import pytest

from deployment import (
    Deployer,
    DeployError,
    policy_statements,
    server_client,
    server_deployer,
)
from support import defined_tests
from template_model import SHARING

pytestmark = [
    pytest.mark.integration,
    # moto warns about each resource type it skips; the test lists them instead.
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
]

BUCKET = "cmstoken-sharing-artifacts"
ACCOUNTS = "111111111111,222222222222"
ORGANISATION = "o-a1b2c3d4e5"
SHARED = {
    "ServiceBaseUrl": "https://cms.example.invalid",
    "ConsumerAccountIds": ACCOUNTS,
    "ConsumerOrganizationId": ORGANISATION,
}
SHARING_TESTS = "tests/unit/template/test_sharing.py"
# Sharing's resources and properties moto does not create or apply, with the template assertions
# that cover each.
NOT_CREATED_BY_MOTO = {"ServiceTokenSecretPolicy": "AWS::SecretsManager::ResourcePolicy"}
IGNORED_BY_MOTO = {
    "ServiceTokenSecretPolicy": "test_the_service_token_secret_policy_is_exactly",
    "RefreshRequestBus.Policy": "test_the_refresh_request_bus_policy_is_exactly",
    "ServiceTokenKey.MultiRegion": "test_the_service_token_key_policy_is_exactly",
    "ServiceTokenSecret.ReplicaRegions": (
        "test_each_replica_region_gets_the_replica_of_the_key_and_consumers_here_read_it"
    ),
}


@pytest.fixture
def deployer(moto_server: str) -> Deployer:
    """Creates stacks from `make build`'s output on moto's server."""
    return server_deployer(BUCKET)


def test_what_moto_ignores_is_covered_by_template_assertions() -> None:
    assert set(IGNORED_BY_MOTO.values()) <= defined_tests(SHARING_TESTS)


def test_a_shared_stack_holds_its_key_its_bus_and_the_keys_use(deployer: Deployer) -> None:
    stack = deployer.deploy("cmstoken-shared", SHARED)
    assert stack.status == "CREATE_COMPLETE"
    not_created = stack.not_created()
    assert {
        name: kind for name, kind in not_created.items() if name in SHARING
    } == NOT_CREATED_BY_MOTO
    assert set(SHARING) - set(NOT_CREATED_BY_MOTO) <= set(stack.created())
    account, region = deployer.account_id, deployer.region

    # The key: the template's policy, with this stack's account, Region and secret name. moto's
    # KMS API fails on every call to a key its CloudFormation created (moto 5 keeps the KeyPolicy
    # as a mapping and json.loads it on each call): the key is read from moto's backend, which
    # the server runs in this process.
    from moto.kms.models import kms_backends

    key_id = stack.physical_id("ServiceTokenKey")
    key = kms_backends[account][region].keys[key_id]
    assert key.key_rotation_status is True
    policy = key.policy if isinstance(key.policy, dict) else json.loads(key.policy)
    administer, accounts, organisation = policy["Statement"]
    assert administer["Principal"] == {"AWS": f"arn:aws:iam::{account}:root"}
    assert accounts["Principal"] == {"AWS": ACCOUNTS.split(",")}
    assert accounts["Action"] == organisation["Action"] == "kms:Decrypt"
    assert organisation["Condition"]["StringEquals"] == {
        "aws:PrincipalOrgID": ORGANISATION,
        "kms:ViaService": f"secretsmanager.{region}.amazonaws.com",
    }
    assert organisation["Condition"]["StringNotEquals"] == {"aws:PrincipalAccount": account}
    assert accounts["Condition"]["StringLike"] == {
        "kms:EncryptionContext:SecretARN": (
            f"arn:aws:secretsmanager:{region}:{account}:secret:cmstoken-shared/service-token-??????"
        )
    }
    kms = server_client("kms")
    aliases = {a["AliasName"]: a.get("TargetKeyId") for a in kms.list_aliases()["Aliases"]}
    assert aliases["alias/cmstoken-shared-service-token"] == key_id
    outputs = stack.outputs
    assert outputs["ServiceTokenKeyArn"] == key.arn

    # The functions' roles may use it through Secrets Manager; so may the consumer policy.
    iam = server_client("iam")
    for role in ("RotatorRole", "BootstrapRole"):
        name = stack.physical_id(role)
        policies = iam.list_role_policies(RoleName=name)["PolicyNames"]
        assert "write-the-service-token-with-its-key" in policies
        document = iam.get_role_policy(
            RoleName=name, PolicyName="write-the-service-token-with-its-key"
        )["PolicyDocument"]
        (use,) = policy_statements(document)
        assert use["Resource"] == key.arn
        assert use["Action"] == ["kms:Decrypt", "kms:GenerateDataKey"]
    consumer = iam.get_policy_version(
        PolicyArn=stack.physical_id("ConsumerPolicy"), VersionId="v1"
    )["PolicyVersion"]["Document"]
    read, decrypt = policy_statements(consumer)
    assert read["Resource"] == stack.stand_ins["ServiceTokenSecret"].ref
    assert decrypt["Resource"] == key.arn

    # The bus is the stack's; its rule sends refresh requests to the queue where they coalesce.
    events = server_client("events")
    bus = events.describe_event_bus(Name="cmstoken-shared-refresh-requests")
    assert outputs["RefreshRequestBusArn"] == bus["Arn"]
    rule = events.describe_rule(
        Name=stack.physical_id("RemoteRefreshRequestedRule").split("|")[-1],
        EventBusName="cmstoken-shared-refresh-requests",
    )
    assert json.loads(rule["EventPattern"]) == {
        "source": ["cmstoken.consumer"],
        "detail-type": ["Service Token Refresh Requested"],
    }
    (target,) = events.list_targets_by_rule(
        Rule=rule["Name"], EventBusName="cmstoken-shared-refresh-requests"
    )["Targets"]
    queue = server_client("sqs").get_queue_attributes(
        QueueUrl=stack.physical_id("RefreshRequestQueue"), AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    assert target["Arn"] == queue
    assert target["SqsParameters"] == {"MessageGroupId": "refresh-requests"}
    assert target["DeadLetterConfig"]["Arn"].endswith(
        ":" + stack.physical_id("UndeliveredRefreshRequestQueue").rsplit("/", 1)[-1]
    )


# --- refused before any resource --------------------------------------------------------------

SINGLE_REGION_KEY = "key/1234abcd-12ab-34cd-56ef-1234567890ab"
MULTI_REGION_KEY = "key/mrk-1234abcd12ab34cd56ef1234567890ab"
# Each refused combination (the stack's Region and account filled in), what the refusal says,
# and the same combination mended, which deploys.
REFUSED = {
    "the stack's own Region among the replicas": (
        {"ReplicaRegions": "eu-west-1,{region}"},
        "this stack's own Region",
        {"ReplicaRegions": "eu-west-1"},
    ),
    "a single-Region key with replicas": (
        {"ReplicaRegions": "eu-west-1", "ServiceTokenKmsKeyArn": "{key}" + SINGLE_REGION_KEY},
        "Fn::Select cannot select nonexistent value at index 1",
        {"ReplicaRegions": "eu-west-1", "ServiceTokenKmsKeyArn": "{key}" + MULTI_REGION_KEY},
    ),
    "six replica Regions": (
        {"ReplicaRegions": "eu-west-1,eu-west-2,eu-west-3,eu-central-1,eu-north-1,eu-south-1"},
        "Fn::Select cannot select nonexistent value at index 5",
        {"ReplicaRegions": "eu-west-1,eu-west-2,eu-west-3,eu-central-1,eu-north-1"},
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_combination_creates_nothing_and_mended_it_deploys(
    deployer: Deployer, case: str
) -> None:
    """CloudFormation refuses these before it creates anything (template_model.refusals, and
    tests/unit/template/test_parameter_refusals.py for the AWS documents): no stack, no secret.
    The mended combination deploys, replicas named (moto's Secrets Manager does not replicate
    the stand-in secret; the template's replica properties are asserted in test_sharing.py)."""
    refused, reason, mended = REFUSED[case]
    key = f"arn:aws:kms:{deployer.region}:{deployer.account_id}:"

    def filled(values: dict[str, str]) -> dict[str, str]:
        return {
            name: value.replace("{region}", deployer.region).replace("{key}", key)
            for name, value in values.items()
        }

    with pytest.raises(DeployError, match=re.escape(reason)):
        deployer.deploy("cmstoken-refused", {**SHARED, **filled(refused)})
    cloudformation = server_client("cloudformation")
    assert not [
        s
        for s in cloudformation.list_stacks()["StackSummaries"]
        if s["StackName"] == "cmstoken-refused"
    ]
    assert not server_client("secretsmanager").list_secrets()["SecretList"]

    stack = deployer.deploy("cmstoken-mended", {**SHARED, **filled(mended)})
    assert stack.status == "CREATE_COMPLETE"
    assert stack.outputs["ServiceTokenReplicaRegions"] == filled(mended)["ReplicaRegions"]
