"""ci-role.yaml as the tests read it: the template, its parameters, the trust policy
CloudFormation would create for them, and whether IAM lets a CI job's OIDC token assume the role
(tests/iam_evaluation.py, the token's claims as the request's condition keys)."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import cfn_intrinsics
from iam_evaluation import Principal, Request, allowed

TEMPLATE = Path(__file__).resolve().parents[1] / "ci-role.yaml"
ACCOUNT = "123456789012"
CONSUMER_POLICY_ARN = f"arn:aws:iam::{ACCOUNT}:policy/cmstoken-ConsumerPolicy-0A1B2C3D4E5F"
REFRESH_POLICY_ARN = f"arn:aws:iam::{ACCOUNT}:policy/cmstoken-ConsumerRefreshRequestPolicy-0A1B2C"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/cmstoken-ci-Role-0A1B2C3D4E5F"
# The issuers' hosts: IAM names an OIDC provider, and its condition keys, after its URL without
# https:// (IAM User Guide, "Available keys for AWS OIDC federation").
HOSTS = {"github": "token.actions.githubusercontent.com", "gitlab": "gitlab.com"}
# The aud each CI puts in its token: aws-actions/configure-aws-credentials asks GitHub for
# sts.amazonaws.com (its `audience` input's default); GitLab's is what the job's id_tokens say.
AUDIENCES = {"github": "sts.amazonaws.com", "gitlab": "https://gitlab.com"}


def provider_arn(provider: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:oidc-provider/{HOSTS[provider]}"


@cache
def _loaded() -> dict[str, Any]:
    return cfn_intrinsics.load_template(TEMPLATE)


def template() -> dict[str, Any]:
    """The template (a copy of it, read once)."""
    return copy.deepcopy(_loaded())


def parameters(provider: str = "github", **overrides: str) -> dict[str, str]:
    """Every parameter's value for one pipeline (the rest at their defaults)."""
    repository = "octo-org/octo-repo" if provider == "github" else "mygroup/myproject"
    values = {
        "Provider": provider,
        "Repository": repository,
        "ConsumerPolicyArn": CONSUMER_POLICY_ARN,
        "RefreshRequestPolicyArn": REFRESH_POLICY_ARN,
        **overrides,
    }
    return cfn_intrinsics.parameter_values(template(), **values)


def resolver(values: dict[str, str]) -> cfn_intrinsics.Resolver:
    """The template's intrinsic functions as a stack in ``ACCOUNT`` resolves them; ``Ref`` of
    the OIDC provider is its ARN (CloudFormation's return value for AWS::IAM::OIDCProvider)."""
    pseudo = {
        "AWS::AccountId": ACCOUNT,
        "AWS::Region": "eu-west-1",
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": "cmstoken-ci",
        "OidcProvider": provider_arn(values["Provider"]),
    }
    return cfn_intrinsics.Resolver(template(), {**pseudo, **values})


def role_properties(values: dict[str, str]) -> dict[str, Any]:
    """The role's properties CloudFormation would create for ``values``."""
    resolved = resolver(values)
    properties: dict[str, Any] = resolved.resolve(
        resolved.template["Resources"]["Role"]["Properties"]
    )
    return properties


def trust_policy(values: dict[str, str]) -> dict[str, Any]:
    document: dict[str, Any] = role_properties(values)["AssumeRolePolicyDocument"]
    return document


def assumes(policy: dict[str, Any], provider: str, sub: str, aud: str | None = None) -> bool:
    """Whether IAM lets a web identity from ``provider`` (its token's ``sub`` and ``aud``
    claims) assume a role with the trust ``policy``: ``sts:AssumeRoleWithWebIdentity`` needs
    the trust policy's Allow, as it has no identity policy of its own."""
    host = HOSTS[provider]
    request = Request(
        principal=Principal(provider_arn(provider)),
        action="sts:AssumeRoleWithWebIdentity",
        resource=ROLE_ARN,
        keys={f"{host}:sub": sub, f"{host}:aud": aud or AUDIENCES[provider]},
    )
    return allowed(request, [], policy, ACCOUNT)
