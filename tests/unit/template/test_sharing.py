"""Sharing the service token with other accounts and Regions (issue 22, the stack's side): the
SAM-transformed template resolved for each combination of the sharing parameters, its secret
policy, key policy and bus policy written out in full, the refresh credential untouched by all
of them, and, all of them empty, the single-account stack exactly as it was
(docs/organisation.md). Who may then read what is tests/unit/template/test_sharing_access.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from template_model import (
    PHYSICAL,
    SERVICE_TOKEN_KEY_ARN,
    SERVICE_TOKEN_SECRET_ARN,
    SHARING,
    Resolver,
    broken_rules,
    parameter_values,
    resolved_stack,
    source,
    transformed,
)

ROOT = Path(__file__).resolve().parents[3]
SNAPSHOT = ROOT / "tests" / "data" / "single-account-stack.json"

ACCOUNTS = "111111111111,222222222222"
ORGANISATION = "o-a1b2c3d4e5"
UNITS = "o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/*,o-a1b2c3d4e5/r-ab12/ou-ab12-22222222/"
REGIONS = "eu-west-1,us-west-2"
GIVEN_KEY = "arn:aws:kms:us-east-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab"
SECRET = SERVICE_TOKEN_SECRET_ARN
CREATED_KEY = SERVICE_TOKEN_KEY_ARN

NEW_PARAMETERS = {
    "ConsumerAccountIds": "CommaDelimitedList",
    "ConsumerOrganizationId": "String",
    "ConsumerOrganizationalUnitPaths": "CommaDelimitedList",
    "ServiceTokenKmsKeyArn": "String",
    "ReplicaRegions": "CommaDelimitedList",
}
NEW_OUTPUTS = {
    "ServiceTokenKeyArn": "UseServiceTokenKey",
    "RefreshRequestBusArn": "ShareAcrossAccounts",
    "ServiceTokenReplicaRegions": "HasReplicaRegions",
}
# The combinations the issue asks for, and the pairs between.
COMBINATIONS: dict[str, dict[str, str]] = {
    "no consumers": {},
    "accounts": {"ConsumerAccountIds": ACCOUNTS},
    "organisation": {"ConsumerOrganizationId": ORGANISATION},
    "organisation with OU paths": {
        "ConsumerOrganizationId": ORGANISATION,
        "ConsumerOrganizationalUnitPaths": UNITS,
    },
    "accounts and organisation": {
        "ConsumerAccountIds": ACCOUNTS,
        "ConsumerOrganizationId": ORGANISATION,
    },
    "replicas": {"ReplicaRegions": REGIONS},
    "accounts and replicas": {"ConsumerAccountIds": ACCOUNTS, "ReplicaRegions": REGIONS},
    "accounts, given key": {"ConsumerAccountIds": ACCOUNTS, "ServiceTokenKmsKeyArn": GIVEN_KEY},
    "organisation, replicas, given key": {
        "ConsumerOrganizationId": ORGANISATION,
        "ReplicaRegions": REGIONS,
        "ServiceTokenKmsKeyArn": GIVEN_KEY,
    },
}
OTHER_OPTIONS = {  # every other optional resource on
    "AlarmTopicKmsKey": "create",
    "KmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
    "AlarmEmail": "ops@example.com",
    "DeployExampleConsumer": "true",
    "OneClickReauthorization": "true",
    "RefreshCredentialAdministrators": "arn:aws:iam::123456789012:role/administrator",
}


def resolver(**parameters: str) -> Resolver:
    return Resolver({**parameter_values(**parameters), **PHYSICAL})


# --- the parameters ----------------------------------------------------------------------


def test_the_sharing_parameters_are_empty_by_default() -> None:
    parameters = source()["Parameters"]
    for name, kind in NEW_PARAMETERS.items():
        assert parameters[name]["Type"] == kind, name
        assert parameters[name]["Default"] == "", name


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("ConsumerAccountIds", "111111111111", True),
        ("ConsumerAccountIds", "11111111111", False),  # 11 digits
        ("ConsumerAccountIds", " 111111111111", False),  # a space after a comma
        ("ConsumerOrganizationId", ORGANISATION, True),
        ("ConsumerOrganizationId", "o-ABC1234567", False),
        ("ConsumerOrganizationId", "r-ab12", False),
        ("ConsumerOrganizationalUnitPaths", "o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/", True),
        ("ConsumerOrganizationalUnitPaths", "o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/*", True),
        (
            "ConsumerOrganizationalUnitPaths",
            "o-a1b2c3d4e5/r-ab12/ou-ab12-1/ou-cd34-22222222/",
            False,
        ),
        (
            "ConsumerOrganizationalUnitPaths",
            "o-a1b2c3d4e5/r-ab12/",
            False,
        ),  # no OU: the organisation
        ("ConsumerOrganizationalUnitPaths", "ou-ab12-11111111", False),
        ("ServiceTokenKmsKeyArn", GIVEN_KEY, True),
        ("ServiceTokenKmsKeyArn", "alias/aws/secretsmanager", False),
        ("ReplicaRegions", "eu-west-1", True),
        ("ReplicaRegions", "eu-west-1,us-west-2,ap-southeast-2,eu-central-1,us-gov-west-1", True),
        ("ReplicaRegions", "eusc-de-east-1", True),  # the European Sovereign Cloud's
    ],
)
def test_each_parameter_refuses_what_is_not_its_kind(name: str, value: str, accepted: bool) -> None:
    """A CommaDelimitedList's pattern holds for each item, a String's for the whole value
    (CloudFormation User Guide, "Parameters syntax", AllowedPattern). ReplicaRegions is a list
    so that a Rule can refuse the stack's own Region in it; more than five Regions and an empty
    item are refused too (test_parameter_refusals.py)."""
    declaration = source()["Parameters"][name]
    items = value.split(",") if declaration["Type"] == "CommaDelimitedList" else [value]
    matched = all(re.fullmatch(declaration["AllowedPattern"], item) for item in items)
    assert matched is accepted


@pytest.mark.parametrize(
    ("parameters", "refused"),
    [
        ({"ConsumerOrganizationalUnitPaths": UNITS}, ["OrganizationalUnitsNeedTheOrganization"]),
        ({"ConsumerAccountIds": "111111111111,"}, ["ConsumerAccountIdsHaveNoEmptyItem"]),
        (
            {
                "ConsumerOrganizationId": ORGANISATION,
                "ConsumerOrganizationalUnitPaths": UNITS + ",",
            },
            ["OrganizationalUnitPathsHaveNoEmptyItem"],
        ),
        ({"ServiceTokenKmsKeyArn": GIVEN_KEY}, ["ServiceTokenKeyOnlyWhenShared"]),
        ({"ReplicaRegions": "eu-west-1,"}, ["ReplicaRegionsHaveNoEmptyItem"]),
        ({"ReplicaRegions": "eu-west-1,us-east-1"}, ["ReplicaRegionsLeaveOutTheStacksRegion"]),
    ],
)
def test_rules_refuse_combinations_that_mean_nothing(
    parameters: dict[str, str], refused: list[str]
) -> None:
    assert broken_rules(parameter_values(**parameters)) == refused


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_rules_accept_every_combination_that_means_something(combination: str) -> None:
    assert broken_rules(parameter_values(**COMBINATIONS[combination])) == []


# --- all empty: the single-account stack as it was -------------------------------------------


@pytest.mark.parametrize("others", ["defaults", "every other option"])
def test_all_empty_the_stack_is_the_single_account_stack_before_sharing(others: str) -> None:
    """With every sharing parameter empty the stack CloudFormation creates (every resource and
    output, resolved) is exactly the stack of the template before issue 22: SNAPSHOT is this
    function's output for template.yaml at 8df4015, at the defaults and with every other optional
    resource on. A later change that alters the single-account stack on purpose writes it again
    (``stack`` for both parameter sets, ``json.dump(..., indent=1, sort_keys=True)``)."""
    parameters = {} if others == "defaults" else OTHER_OPTIONS
    expected = json.loads(SNAPSHOT.read_text())[others]
    assert resolved_stack(Resolver(parameter_values(**parameters))) == expected
    # Control: the comparison sees a shared stack.
    shared = parameter_values(**parameters, ConsumerAccountIds=ACCOUNTS)
    assert resolved_stack(Resolver(shared)) != expected


def test_every_sharing_resource_and_output_is_under_its_condition() -> None:
    found = transformed()
    for name, (kind, condition) in SHARING.items():
        assert found["Resources"][name]["Type"] == kind, name
        assert found["Resources"][name]["Condition"] == condition, name
    for name, condition in NEW_OUTPUTS.items():
        assert found["Outputs"][name]["Condition"] == condition, name
    empty = resolved_stack(resolver())
    assert not set(SHARING) & set(empty["Resources"])
    assert not set(NEW_OUTPUTS) & set(empty["Outputs"])


# --- the refresh credential never changes ----------------------------------------------------

REFRESH_CREDENTIAL = ("RefreshCredentialSecret", "RefreshCredentialSecretPolicy")


@pytest.mark.parametrize("others", [{}, OTHER_OPTIONS], ids=["defaults", "every other option"])
@pytest.mark.parametrize("combination", COMBINATIONS)
def test_no_combination_changes_the_refresh_credential_or_its_policy(
    combination: str, others: dict[str, str]
) -> None:
    """Its secret (key, no replica) and its resource policy resolve exactly as without sharing,
    whatever is shared; no sharing resource names it."""
    alone = resolved_stack(resolver(**others))["Resources"]
    shared = resolved_stack(resolver(**others, **COMBINATIONS[combination]))["Resources"]
    for name in REFRESH_CREDENTIAL:
        assert shared[name] == alone[name], name
    assert "ReplicaRegions" not in shared["RefreshCredentialSecret"]["Properties"]
    for name in set(SHARING) & set(shared):
        assert "<RefreshCredentialSecret>" not in json.dumps(shared[name]), name
    # Control: a change to the refresh credential is seen.
    changed = resolved_stack(resolver(**{**others, "KmsKeyArn": GIVEN_KEY}))["Resources"]
    assert changed["RefreshCredentialSecret"] != alone["RefreshCredentialSecret"]


# --- the service token secret's policy -------------------------------------------------------

READ = ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"]
NOT_THIS_ACCOUNT = {"StringNotEquals": {"aws:PrincipalAccount": "123456789012"}}
PATHS = {"ForAnyValue:StringLike": {"aws:PrincipalOrgPaths": UNITS.split(",")}}
ACCOUNTS_READ = {
    "Sid": "ConsumerAccountsReadTheServiceToken",
    "Effect": "Allow",
    "Principal": {"AWS": ["111111111111", "222222222222"]},
    "Action": READ,
    "Resource": "*",
}
ORGANISATION_READS: dict[str, Any] = {
    "Sid": "TheOrganizationReadsTheServiceToken",
    "Effect": "Allow",
    "Principal": "*",
    "Action": READ,
    "Resource": "*",
    "Condition": {"StringEquals": {"aws:PrincipalOrgID": ORGANISATION}, **NOT_THIS_ACCOUNT},
}
UNITS_READ = {
    **ORGANISATION_READS,
    "Sid": "TheOrganizationalUnitsReadTheServiceToken",
    "Condition": {**ORGANISATION_READS["Condition"], **PATHS},
}
SECRET_POLICIES = {
    "accounts": [ACCOUNTS_READ],
    "organisation": [ORGANISATION_READS],
    "organisation with OU paths": [UNITS_READ],
    "accounts and organisation": [ACCOUNTS_READ, ORGANISATION_READS],
    "accounts and replicas": [ACCOUNTS_READ],
    "accounts, given key": [ACCOUNTS_READ],
    "organisation, replicas, given key": [ORGANISATION_READS],
}


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_the_service_token_secret_policy_is_exactly(combination: str) -> None:
    """Only the listed accounts and the organisation (its OUs) read, only
    ``GetSecretValue`` and ``DescribeSecret``; public policies are blocked. The accounts are
    principals (an account principal delegates to that account's IAM policies: IAM User Guide,
    "AWS JSON policy elements: Principal", AWS account principals); the organisation needs a
    wildcard principal narrowed by ``aws:PrincipalOrgID`` ("Use this key to compare the
    identifier of the organization in AWS Organizations to which the requesting principal
    belongs", "AWS global condition context keys"), and this account's principals are left out:
    in their own account a resource policy's Allow alone would let any of them read."""
    values = resolver(**COMBINATIONS[combination])
    found = resolved_stack(values)["Resources"]
    if combination not in SECRET_POLICIES:
        assert "ServiceTokenSecretPolicy" not in found
        return
    assert found["ServiceTokenSecretPolicy"]["Properties"] == {
        "SecretId": SECRET,
        "BlockPublicPolicy": True,
        "ResourcePolicy": {"Version": "2012-10-17", "Statement": SECRET_POLICIES[combination]},
    }


# --- the key ---------------------------------------------------------------------------------

SECRETS_MANAGER_HERE = {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}
THIS_SECRET = {
    "StringLike": {
        "kms:EncryptionContext:SecretARN": (
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken-prod/service-token-??????"
        )
    }
}
ADMINISTER = {
    "Sid": "TheAccountAdministersTheKey",
    "Effect": "Allow",
    "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
    "Action": "kms:*",
    "Resource": "*",
}
ACCOUNTS_DECRYPT = {
    "Sid": "ConsumerAccountsDecryptTheServiceTokenThroughSecretsManager",
    "Effect": "Allow",
    "Principal": {"AWS": ["111111111111", "222222222222"]},
    "Action": "kms:Decrypt",
    "Resource": "*",
    "Condition": {"StringEquals": SECRETS_MANAGER_HERE, **THIS_SECRET},
}
ORGANISATION_DECRYPTS: dict[str, Any] = {
    "Sid": "TheOrganizationDecryptsTheServiceTokenThroughSecretsManager",
    "Effect": "Allow",
    "Principal": "*",
    "Action": "kms:Decrypt",
    "Resource": "*",
    "Condition": {
        "StringEquals": {"aws:PrincipalOrgID": ORGANISATION, **SECRETS_MANAGER_HERE},
        **NOT_THIS_ACCOUNT,
        **THIS_SECRET,
    },
}
UNITS_DECRYPT = {
    **ORGANISATION_DECRYPTS,
    "Sid": "TheOrganizationalUnitsDecryptTheServiceTokenThroughSecretsManager",
    "Condition": {**ORGANISATION_DECRYPTS["Condition"], **PATHS},
}
KEY_POLICIES = {  # the stack's own key: only without ServiceTokenKmsKeyArn
    "accounts": [ADMINISTER, ACCOUNTS_DECRYPT],
    "organisation": [ADMINISTER, ORGANISATION_DECRYPTS],
    "organisation with OU paths": [ADMINISTER, UNITS_DECRYPT],
    "accounts and organisation": [ADMINISTER, ACCOUNTS_DECRYPT, ORGANISATION_DECRYPTS],
    "replicas": [ADMINISTER],
    "accounts and replicas": [ADMINISTER, ACCOUNTS_DECRYPT],
}


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_the_service_token_key_policy_is_exactly(combination: str) -> None:
    """The account administers the key (the default key policy: "Allows access to the AWS account
    and enables IAM policies", AWS KMS Developer Guide, "Default key policy"); consumers elsewhere
    may only ``kms:Decrypt``, only through Secrets Manager in this Region (``kms:ViaService``)
    and only this secret's versions (Secrets Manager's encryption context holds ``SecretARN``:
    Secrets Manager User Guide, "Secret encryption and decryption", encryption context).
    ``kms:DescribeKey`` is not granted: GetSecretValue needs only Decrypt ("Permissions for the
    KMS key")."""
    found = resolved_stack(resolver(**COMBINATIONS[combination]))["Resources"]
    if combination not in KEY_POLICIES:
        assert "ServiceTokenKey" not in found
        assert "ServiceTokenKeyAlias" not in found
        return
    assert found["ServiceTokenKey"]["Properties"] == {
        "Description": (
            "Encrypts the shared service token secret of stack cmstoken-prod and its replicas"
        ),
        "EnableKeyRotation": True,
        "MultiRegion": True,
        "KeyPolicy": {"Version": "2012-10-17", "Statement": KEY_POLICIES[combination]},
    }
    assert found["ServiceTokenKeyAlias"]["Properties"] == {
        "AliasName": "alias/cmstoken-prod-service-token",
        "TargetKeyId": "<ServiceTokenKey>",
    }


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_the_service_token_uses_its_own_key_when_it_leaves_the_account_or_region(
    combination: str,
) -> None:
    """Another account cannot decrypt a secret encrypted with ``aws/secretsmanager`` ("you can't
    use the AWS managed key (aws/secretsmanager) for cross-account access", Secrets Manager User
    Guide, "Access AWS Secrets Manager secrets from a different account"), so a shared service
    token has a customer managed key: the given one, or the stack's. KmsKeyArn stays the refresh
    credential's alone."""
    parameters = {**COMBINATIONS[combination], "KmsKeyArn": OTHER_OPTIONS["KmsKeyArn"]}
    found = resolved_stack(resolver(**parameters))
    key = found["Resources"]["ServiceTokenSecret"]["Properties"]["KmsKeyId"]
    outputs = found["Outputs"]
    if combination == "no consumers":
        assert key == OTHER_OPTIONS["KmsKeyArn"]
        assert "ServiceTokenKeyArn" not in outputs
        return
    expected = GIVEN_KEY if "given key" in combination else CREATED_KEY
    assert key == expected
    assert outputs["ServiceTokenKeyArn"]["Value"] == expected
    refresh = found["Resources"]["RefreshCredentialSecret"]["Properties"]["KmsKeyId"]
    assert refresh == OTHER_OPTIONS["KmsKeyArn"]


def test_the_functions_write_with_the_service_token_key_and_consumers_here_decrypt_with_it() -> (
    None
):
    """The writers need ``kms:GenerateDataKey`` (a new version's data key) and ``kms:Decrypt``
    (Secrets Manager User Guide, "Secret encryption and decryption": PutSecretValue calls
    GenerateDataKey; GetSecretValue calls Decrypt); consumers of this account only Decrypt.
    Both through Secrets Manager in this Region; with KmsKeyArn set, consumers no longer get its
    use: it encrypts only the refresh credential."""
    parameters = {"ConsumerAccountIds": ACCOUNTS, "KmsKeyArn": OTHER_OPTIONS["KmsKeyArn"]}
    found = resolved_stack(resolver(**parameters))["Resources"]
    assert found["ServiceTokenKeyUse"]["Properties"] == {
        "PolicyName": "write-the-service-token-with-its-key",
        "Roles": ["<RotatorRole>", "<BootstrapRole>"],
        "PolicyDocument": {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "UseTheServiceTokenKeyThroughSecretsManager",
                    "Effect": "Allow",
                    "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                    "Resource": CREATED_KEY,
                    "Condition": {"StringEquals": SECRETS_MANAGER_HERE},
                }
            ],
        },
    }
    consumer = found["ConsumerPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert consumer == [
        {"Sid": "ReadTheServiceToken", "Effect": "Allow", "Action": READ, "Resource": SECRET},
        {
            "Sid": "DecryptTheServiceTokenThroughSecretsManager",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": CREATED_KEY,
            "Condition": {"StringEquals": SECRETS_MANAGER_HERE},
        },
    ]


# --- replicas --------------------------------------------------------------------------------


def replica_key(region: str, key: str = CREATED_KEY) -> str:
    """A multi-Region key's replica: the same key id in another Region (AWS KMS API Reference,
    ReplicateKey: primary and replicas "have the same key ID and key material")."""
    return key.replace(":us-east-1:", f":{region}:")


@pytest.mark.parametrize(
    "regions",
    ["eu-west-1", REGIONS, "eu-west-1,us-west-2,ap-southeast-2,eu-central-1,sa-east-1"],
    ids=["one", "two", "five"],
)
@pytest.mark.parametrize("key", ["", GIVEN_KEY], ids=["the stack's key", "given key"])
def test_each_replica_region_gets_the_replica_of_the_key_and_consumers_here_read_it(
    regions: str, key: str
) -> None:
    """Secrets Manager replicates the secret's value and metadata "such as tags and resource
    policies", and the replica's ARN "is the same as the primary secret except for the Region"
    (Secrets Manager User Guide, "Replicate AWS Secrets Manager secrets across Regions"); each
    replica is encrypted with the key given for its Region (ReplicaRegionType, KmsKeyId), here the
    key's multi-Region replica there. ConsumerPolicy and the writers' policy name every replica
    and replica key; the writers may encrypt with the replica keys, through Secrets Manager,
    which re-encrypts a new version for each replica ("Troubleshoot AWS Secrets Manager
    replication": kms:Encrypt and kms:GenerateDataKey on the replica's key)."""
    parameters = {"ReplicaRegions": regions, "ServiceTokenKmsKeyArn": key}
    found = resolved_stack(resolver(**parameters))
    primary = key or CREATED_KEY
    listed = regions.split(",")
    secret = found["Resources"]["ServiceTokenSecret"]["Properties"]
    assert secret["KmsKeyId"] == primary
    assert secret["ReplicaRegions"] == [
        {"Region": region, "KmsKeyId": replica_key(region, primary)} for region in listed
    ]
    endpoints = [f"secretsmanager.{r}.amazonaws.com" for r in ["us-east-1", *listed]]
    consumer = found["Resources"]["ConsumerPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert consumer == [
        {
            "Sid": "ReadTheServiceToken",
            "Effect": "Allow",
            "Action": READ,
            "Resource": [SECRET, *(SECRET.replace(":us-east-1:", f":{r}:") for r in listed)],
        },
        {
            "Sid": "DecryptTheServiceTokenThroughSecretsManager",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": [primary, *(replica_key(r, primary) for r in listed)],
            "Condition": {"StringEquals": {"kms:ViaService": endpoints}},
        },
    ]
    writers = found["Resources"]["ServiceTokenKeyUse"]["Properties"]["PolicyDocument"]
    assert writers["Statement"][1] == {
        "Sid": "EncryptTheReplicasThroughSecretsManager",
        "Effect": "Allow",
        "Action": ["kms:Encrypt", "kms:GenerateDataKey"],
        "Resource": [replica_key(r, primary) for r in listed],
        "Condition": {"StringEquals": {"kms:ViaService": endpoints}},
    }
    assert found["Outputs"]["ServiceTokenReplicaRegions"]["Value"] == regions
    # Replicas alone share with no other account: no secret policy, bus or foreign principal.
    assert "ServiceTokenSecretPolicy" not in found["Resources"]
    assert "RefreshRequestBus" not in found["Resources"]


# --- refresh requests from other accounts ------------------------------------------------------

BUS = "arn:aws:events:us-east-1:123456789012:event-bus/cmstoken-prod-refresh-requests"
REQUEST = {
    "StringEquals": {"events:detail-type": "Service Token Refresh Requested"},
    "ForAllValues:StringEquals": {"events:source": "cmstoken.consumer"},
}
ACCOUNTS_REQUEST = {
    "Sid": "ConsumerAccountsRequestRefreshes",
    "Effect": "Allow",
    "Principal": {"AWS": ["111111111111", "222222222222"]},
    "Action": "events:PutEvents",
    "Resource": BUS,
    "Condition": REQUEST,
}
ORGANISATION_REQUESTS: dict[str, Any] = {
    "Sid": "TheOrganizationRequestsRefreshes",
    "Effect": "Allow",
    "Principal": "*",
    "Action": "events:PutEvents",
    "Resource": BUS,
    "Condition": {
        "StringEquals": {
            "aws:PrincipalOrgID": ORGANISATION,
            "events:detail-type": "Service Token Refresh Requested",
        },
        **NOT_THIS_ACCOUNT,
        "ForAllValues:StringEquals": {"events:source": "cmstoken.consumer"},
    },
}
UNITS_REQUEST = {
    **ORGANISATION_REQUESTS,
    "Sid": "TheOrganizationalUnitsRequestRefreshes",
    "Condition": {**ORGANISATION_REQUESTS["Condition"], **PATHS},
}
BUS_POLICIES = {
    "accounts": [ACCOUNTS_REQUEST],
    "organisation": [ORGANISATION_REQUESTS],
    "organisation with OU paths": [UNITS_REQUEST],
    "accounts and organisation": [ACCOUNTS_REQUEST, ORGANISATION_REQUESTS],
    "accounts and replicas": [ACCOUNTS_REQUEST],
    "accounts, given key": [ACCOUNTS_REQUEST],
    "organisation, replicas, given key": [ORGANISATION_REQUESTS],
}


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_the_refresh_request_bus_policy_is_exactly(combination: str) -> None:
    """A bus of the stack's own: the default bus's policy is the account's, shared by everything
    else in it. Only the consumers may put events, only refresh requests: the condition keys
    and their operators are those of EventBridge's own example (EventBridge User Guide, "Example
    policy: Send events to a custom bus in a different account": ``ForAllValues:StringEquals``
    on ``events:source``, ``StringEquals`` on ``events:detail-type``); the organisation by
    ``aws:PrincipalOrgID`` ("You can also use IAM conditions in the policy to grant permissions to
    an organization", "Permissions for event buses in Amazon EventBridge")."""
    found = resolved_stack(resolver(**COMBINATIONS[combination]))
    if combination not in BUS_POLICIES:
        for name in (
            "RefreshRequestBus",
            "RemoteRefreshRequestedRule",
        ):
            assert name not in found["Resources"]
        assert "RefreshRequestBusArn" not in found["Outputs"]
        return
    assert found["Resources"]["RefreshRequestBus"]["Properties"] == {
        "Name": "cmstoken-prod-refresh-requests",
        "Policy": {"Version": "2012-10-17", "Statement": BUS_POLICIES[combination]},
    }
    assert found["Outputs"]["RefreshRequestBusArn"]["Value"] == "<RefreshRequestBus.Arn>"


def test_refresh_requests_on_the_bus_coalesce_as_the_default_bus_requests_do() -> None:
    """The rule on the stack's bus matches refresh requests of consumers (any account allowed to
    put them there) and sends them to the queue where they coalesce (test_refresh_requests.py)
    with RefreshRequestedRule's retries and dead letters; both queues admit that rule's messages
    (EventBridge User Guide, "Using dead-letter queues to process undelivered events"; "Amazon
    SQS permissions" for an SQS target)."""
    found = resolved_stack(resolver(ConsumerAccountIds=ACCOUNTS))["Resources"]
    rule = found["RemoteRefreshRequestedRule"]["Properties"]
    local = found["RefreshRequestedRule"]["Properties"]
    assert rule["EventBusName"] == "<RefreshRequestBus.Name>"
    assert rule["EventPattern"] == {
        "source": ["cmstoken.consumer"],
        "detail-type": ["Service Token Refresh Requested"],
    }
    assert rule["Targets"] == local["Targets"]
    assert [t["Arn"] for t in rule["Targets"]] == ["<RefreshRequestQueue.Arn>"]
    for policy, queue, sid in (
        ("UndeliveredRefreshRequestQueuePolicy", "UndeliveredRefreshRequestQueue", "Undelivered"),
        ("RefreshRequestQueuePolicy", "RefreshRequestQueue", "Requests"),
    ):
        statements = found[policy]["Properties"]["PolicyDocument"]["Statement"]
        assert statements[1] == {
            "Sid": f"RemoteRefreshRequestedRule{sid}",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": f"<{queue}.Arn>",
            "Condition": {"ArnEquals": {"aws:SourceArn": "<RemoteRefreshRequestedRule.Arn>"}},
        }
        assert len(statements) == 2
