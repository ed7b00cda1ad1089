"""Who may read the shared service token, decrypt it, ask for a refresh, and read the refresh
credential: the template's resolved policies evaluated with ``iam_evaluation`` (the documented
subset of AWS's policy evaluation they use; moto evaluates none of it). Each consumer also has
the identity policy its own account gives it (what consumer.yaml grants). Controls show that a
widened policy is caught."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from iam_evaluation import Principal, Request, allowed
from template_model import (
    SERVICE_TOKEN_KEY_ARN,
    SERVICE_TOKEN_SECRET_ARN,
    resolved_resources,
)

HERE = "123456789012"  # the stack's account (template_model's pseudo parameters)
LISTED = "111111111111"
ORGANISATION = "o-a1b2c3d4e5"
UNIT = "o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/"
REFRESH_CREDENTIAL = (
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken-prod/refresh-credential-XyZ123"
)
BUS = "arn:aws:events:us-east-1:123456789012:event-bus/cmstoken-prod-refresh-requests"
THROUGH_SECRETS_MANAGER = {
    "kms:ViaService": "secretsmanager.us-east-1.amazonaws.com",
    "kms:EncryptionContext:SecretARN": SERVICE_TOKEN_SECRET_ARN,
}

# Principals: a role in a listed account, one in an account of the organisation inside the
# OU, one outside it, one in an unrelated account, and one of the stack's own account.
# aws:PrincipalOrgPaths is the path of OUs down to the principal's account: "o-a1b2c3d4e5/r-ab12/
# ou-ab12-11111111/ou-ab12-22222222/" ("AWS global condition context keys").
CONSUMER = Principal(f"arn:aws:iam::{LISTED}:role/consumer")
IN_THE_UNIT = Principal("arn:aws:iam::333333333333:role/consumer", ORGANISATION, (UNIT,))
ELSEWHERE_IN_THE_ORGANISATION = Principal(
    "arn:aws:iam::444444444444:role/consumer",
    ORGANISATION,
    ("o-a1b2c3d4e5/r-ab12/ou-ab12-99999999/",),
)
STRANGER = Principal("arn:aws:iam::555555555555:role/consumer", "o-zzzzzzzzzz", ())
LOCAL = Principal(f"arn:aws:iam::{HERE}:role/some-workload", ORGANISATION, (UNIT,))
ROTATOR = Principal(f"arn:aws:iam::{HERE}:role/cmstoken-prod-RotatorRole-ABC")

# What each consumer's own account grants it (consumer.yaml's policy: read the remote secret,
# decrypt through Secrets Manager, request refreshes); broad on purpose, so that the stack's
# policies are what decide.
CONSUMER_IDENTITY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": "*",
        },
        {"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "*"},
        {"Effect": "Allow", "Action": "events:PutEvents", "Resource": "*"},
    ],
}
COMBINATIONS = {
    "accounts": {"ConsumerAccountIds": LISTED},
    "organisation": {"ConsumerOrganizationId": ORGANISATION},
    "organisation's unit": {
        "ConsumerOrganizationId": ORGANISATION,
        "ConsumerOrganizationalUnitPaths": UNIT,
    },
}
# Who may read under each combination (everybody else may not).
READERS = {
    "accounts": {CONSUMER},
    "organisation": {IN_THE_UNIT, ELSEWHERE_IN_THE_ORGANISATION},
    "organisation's unit": {IN_THE_UNIT},
}
ELSEWHERE = [CONSUMER, IN_THE_UNIT, ELSEWHERE_IN_THE_ORGANISATION, STRANGER]


def reads_the_token(who: Principal, found: dict[str, Any], identity: list[Any]) -> bool:
    """GetSecretValue on the service token secret and, as Secrets Manager does with the
    caller's permissions, kms:Decrypt of its key through Secrets Manager."""
    secret_policy = found.get("ServiceTokenSecretPolicy", {}).get("Properties", {})
    read = Request(who, "secretsmanager:GetSecretValue", SERVICE_TOKEN_SECRET_ARN)
    decrypt = Request(who, "kms:Decrypt", SERVICE_TOKEN_KEY_ARN, THROUGH_SECRETS_MANAGER)
    key_policy = found["ServiceTokenKey"]["Properties"]["KeyPolicy"]
    return allowed(read, identity, secret_policy.get("ResourcePolicy"), HERE) and allowed(
        decrypt, identity, key_policy, HERE, key_policy=True
    )


@pytest.mark.parametrize("combination", COMBINATIONS)
@pytest.mark.parametrize("who", ELSEWHERE, ids=lambda p: p.arn.split(":")[4])
def test_only_the_shared_principals_read_and_decrypt_the_service_token(
    combination: str, who: Principal
) -> None:
    """Access from another account needs both the secret's resource policy and the caller's
    identity policy, and the key's policy too ("To allow users in one account to access secrets
    in another account, you must allow access both in a resource policy and in an identity
    policy ... You must also allow the identity to use the KMS key", Secrets Manager User Guide,
    "Access AWS Secrets Manager secrets from a different account"). ``aws:PrincipalOrgID`` is
    the organisation of the requesting principal's account ("AWS global condition context
    keys"), ``aws:PrincipalOrgPaths`` its path of OUs. (This account's principals:
    test_this_accounts_principals_read_only_with_their_own_iam_policies.)"""
    found = resolved_resources(**COMBINATIONS[combination])
    assert reads_the_token(who, found, [CONSUMER_IDENTITY]) is (who in READERS[combination])
    # Without its own account's permission, nobody elsewhere reads.
    assert not reads_the_token(who, found, [])


def test_this_accounts_principals_read_only_with_their_own_iam_policies() -> None:
    """Within one account an Allow in the identity policy suffices ("Policy evaluation logic"),
    as before sharing: ConsumerPolicy, or any policy allowing GetSecretValue and the key's use.
    The organisation's statements leave this account out, or a resource policy's Allow would
    let every role here read without any IAM permission."""
    found = resolved_resources(ConsumerOrganizationId=ORGANISATION)
    consumer_policy = found["ConsumerPolicy"]["Properties"]["PolicyDocument"]
    assert reads_the_token(LOCAL, found, [consumer_policy])
    assert not reads_the_token(LOCAL, found, [])
    # The functions write with the key through Secrets Manager (ServiceTokenKeyUse).
    writes = found["ServiceTokenKeyUse"]["Properties"]["PolicyDocument"]
    key_policy = found["ServiceTokenKey"]["Properties"]["KeyPolicy"]
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        use = Request(ROTATOR, action, SERVICE_TOKEN_KEY_ARN, THROUGH_SECRETS_MANAGER)
        assert allowed(use, [writes], key_policy, HERE, key_policy=True)
    # ... and nobody decrypts other than through Secrets Manager.
    direct = Request(CONSUMER, "kms:Decrypt", SERVICE_TOKEN_KEY_ARN)
    shared = resolved_resources(ConsumerAccountIds=LISTED)
    key = shared["ServiceTokenKey"]["Properties"]["KeyPolicy"]
    assert not allowed(direct, [CONSUMER_IDENTITY], key, HERE, key_policy=True)


def test_the_key_decrypts_only_this_secrets_versions_for_consumers() -> None:
    """Secrets Manager names the secret in the encryption context of each KMS request
    (Secrets Manager User Guide, "Secret encryption and decryption"): another secret encrypted
    with the same key stays out of the consumers' reach."""
    key = resolved_resources(ConsumerAccountIds=LISTED)["ServiceTokenKey"]["Properties"][
        "KeyPolicy"
    ]
    other = {**THROUGH_SECRETS_MANAGER, "kms:EncryptionContext:SecretARN": REFRESH_CREDENTIAL}
    request = Request(CONSUMER, "kms:Decrypt", SERVICE_TOKEN_KEY_ARN, other)
    assert not allowed(request, [CONSUMER_IDENTITY], key, HERE, key_policy=True)


# The AWS managed key's policy as AWS documents such keys: any principal, but only of the owning
# account and only through the service (AWS KMS Developer Guide, "AWS managed keys"; its policy
# cannot be changed). Secrets Manager: "you can't use the AWS managed key (aws/secretsmanager) for
# cross-account access" ("Access AWS Secrets Manager secrets from a different account").
AWS_SECRETSMANAGER_KEY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": ["kms:Encrypt", "kms:Decrypt", "kms:GenerateDataKey*", "kms:DescribeKey"],
            "Resource": "*",
            "Condition": {
                "StringEquals": {
                    "kms:CallerAccount": HERE,
                    "kms:ViaService": "secretsmanager.us-east-1.amazonaws.com",
                }
            },
        }
    ],
}


def test_aws_secretsmanager_cannot_be_shared_so_a_shared_token_has_a_key_of_its_own() -> None:
    found = resolved_resources(ConsumerAccountIds=LISTED)
    managed = {**found, "ServiceTokenKey": {"Properties": {"KeyPolicy": AWS_SECRETSMANAGER_KEY}}}
    context = {**THROUGH_SECRETS_MANAGER, "kms:CallerAccount": LISTED}
    decrypt = Request(CONSUMER, "kms:Decrypt", SERVICE_TOKEN_KEY_ARN, context)
    assert not allowed(decrypt, [CONSUMER_IDENTITY], AWS_SECRETSMANAGER_KEY, HERE, key_policy=True)
    assert not reads_the_token(CONSUMER, managed, [CONSUMER_IDENTITY])
    assert found["ServiceTokenSecret"]["Properties"]["KmsKeyId"] == SERVICE_TOKEN_KEY_ARN


@pytest.mark.parametrize("combination", [*COMBINATIONS, "everything"])
@pytest.mark.parametrize("who", [*ELSEWHERE, LOCAL, ROTATOR], ids=lambda p: p.arn)
def test_nobody_but_the_functions_reads_the_refresh_credential(
    combination: str, who: Principal
) -> None:
    """Its policy denies GetSecretValue to every principal but the two functions' roles, and
    grants nothing to another account; an explicit Deny wins over any Allow ("Policy evaluation
    logic"), so even an identity policy allowing secretsmanager:* on * reads nothing."""
    parameters = (
        {**COMBINATIONS["organisation's unit"], "ConsumerAccountIds": LISTED}
        if combination == "everything"
        else COMBINATIONS[combination]
    )
    found = resolved_resources(**parameters)
    policy = found["RefreshCredentialSecretPolicy"]["Properties"]["ResourcePolicy"]
    concrete = copy.deepcopy(policy)
    concrete["Statement"][0]["Condition"]["ArnNotEquals"]["aws:PrincipalArn"] = [ROTATOR.arn]
    everything = {"Statement": [{"Effect": "Allow", "Action": "secretsmanager:*", "Resource": "*"}]}
    read = Request(who, "secretsmanager:GetSecretValue", REFRESH_CREDENTIAL)
    assert allowed(read, [everything], concrete, HERE) is (who == ROTATOR)


@pytest.mark.parametrize("combination", COMBINATIONS)
@pytest.mark.parametrize("who", ELSEWHERE, ids=lambda p: p.arn.split(":")[4])
def test_only_the_shared_principals_put_only_refresh_requests_on_the_bus(
    combination: str, who: Principal
) -> None:
    found = resolved_resources(**COMBINATIONS[combination])
    policy = found["RefreshRequestBus"]["Properties"]["Policy"]

    def puts(source: str, detail_type: str) -> bool:
        keys = {"events:source": [source], "events:detail-type": detail_type}
        request = Request(who, "events:PutEvents", BUS, keys)
        return allowed(request, [CONSUMER_IDENTITY], policy, HERE)

    expected = who in READERS[combination]
    assert puts("cmstoken.consumer", "Service Token Refresh Requested") is expected
    assert not puts("cmstoken.consumer", "Something Else")
    assert not puts("aws.secretsmanager", "Service Token Refresh Requested")


# --- controls: the checks see a wrong policy ---------------------------------------------------


def test_control_an_organisation_statement_without_its_condition_lets_a_stranger_read() -> None:
    found = resolved_resources(ConsumerOrganizationId=ORGANISATION)
    widened = copy.deepcopy(found)
    statement = widened["ServiceTokenSecretPolicy"]["Properties"]["ResourcePolicy"]["Statement"][0]
    del statement["Condition"]["StringEquals"]
    key = widened["ServiceTokenKey"]["Properties"]["KeyPolicy"]["Statement"][1]
    del key["Condition"]["StringEquals"]["aws:PrincipalOrgID"]
    assert not reads_the_token(STRANGER, found, [CONSUMER_IDENTITY])
    assert reads_the_token(STRANGER, widened, [CONSUMER_IDENTITY])


def test_control_without_leaving_this_account_out_any_local_role_would_read() -> None:
    found = resolved_resources(ConsumerOrganizationId=ORGANISATION)
    widened = copy.deepcopy(found)
    for statement in (
        widened["ServiceTokenSecretPolicy"]["Properties"]["ResourcePolicy"]["Statement"][0],
        widened["ServiceTokenKey"]["Properties"]["KeyPolicy"]["Statement"][1],
    ):
        del statement["Condition"]["StringNotEquals"]
    assert not reads_the_token(LOCAL, found, [])
    assert reads_the_token(LOCAL, widened, [])


def test_control_a_key_policy_without_the_consumers_keeps_them_out() -> None:
    found = resolved_resources(ConsumerAccountIds=LISTED)
    narrowed = copy.deepcopy(found)
    statements = narrowed["ServiceTokenKey"]["Properties"]["KeyPolicy"]["Statement"]
    narrowed["ServiceTokenKey"]["Properties"]["KeyPolicy"]["Statement"] = statements[:1]
    assert reads_the_token(CONSUMER, found, [CONSUMER_IDENTITY])
    assert not reads_the_token(CONSUMER, narrowed, [CONSUMER_IDENTITY])
