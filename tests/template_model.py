"""template.yaml as the tests read it: the source, the SAM-transformed resources, and a resolver
of CloudFormation's intrinsic functions for one set of parameter values (what CloudFormation
would hand each resource, for the properties the tests evaluate)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from samtranslator.translator.transform import transform

import cfn_intrinsics

TEMPLATE = Path(__file__).resolve().parents[1] / "template.yaml"
PSEUDO = {
    "AWS::AccountId": "123456789012",
    "AWS::Region": "us-east-1",
    "AWS::Partition": "aws",
    "AWS::StackName": "cmstoken-prod",
    "AWS::URLSuffix": "amazonaws.com",
}

# Resource types with no name of their own in a namespace stacks share: attachments to a named
# resource (an alias's name is its function's), or ids AWS generates.
NAMELESS = frozenset(
    {
        "AWS::KMS::Key",
        "AWS::Lambda::Alias",
        "AWS::Lambda::EventSourceMapping",
        "AWS::Lambda::Permission",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::Lambda::Url",
        "AWS::IAM::RolePolicy",
        "AWS::IAM::Policy",
        "AWS::SecretsManager::ResourcePolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SNS::Subscription",
        "AWS::SQS::QueuePolicy",
    }
)


# Every resource that sharing the service token with other accounts and Regions adds
# (docs/organisation.md): its type and the condition it is under.
SHARING = {
    "ServiceTokenKey": ("AWS::KMS::Key", "CreateServiceTokenKey"),
    "ServiceTokenKeyAlias": ("AWS::KMS::Alias", "CreateServiceTokenKey"),
    "ServiceTokenSecretPolicy": ("AWS::SecretsManager::ResourcePolicy", "ShareAcrossAccounts"),
    "ServiceTokenKeyUse": ("AWS::IAM::Policy", "UseServiceTokenKey"),
    "RefreshRequestBus": ("AWS::Events::EventBus", "ShareAcrossAccounts"),
    "RemoteRefreshRequestedRule": ("AWS::Events::Rule", "ShareAcrossAccounts"),
}


# What CloudFormation returns for the references the sharing statements take apart: Ref of a
# secret is its ARN (with Secrets Manager's six random characters), a key's Arn attribute.
SERVICE_TOKEN_SECRET_ARN = (
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken-prod/service-token-AbCdEf"
)
SERVICE_TOKEN_KEY_ARN = (
    "arn:aws:kms:us-east-1:123456789012:key/mrk-0123456789abcdef0123456789abcdef"
)
PHYSICAL = {
    "ServiceTokenSecret": SERVICE_TOKEN_SECRET_ARN,
    "ServiceTokenKey.Arn": SERVICE_TOKEN_KEY_ARN,
}


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


@cache
def source() -> dict[str, Any]:
    """template.yaml as written."""
    return cfn_intrinsics.load_template(TEMPLATE)


@cache
def transformed() -> dict[str, Any]:
    """template.yaml after the SAM transform (code locations replaced by a placeholder)."""
    template = cfn_intrinsics.load_template(TEMPLATE)
    for resource in template["Resources"].values():
        for key in ("CodeUri", "ContentUri"):
            if key in resource.get("Properties", {}):
                resource["Properties"][key] = "s3://bucket/key"
    saved = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = PSEUDO["AWS::Region"]
    try:
        return transform(template, {}, _NoManagedPolicies())  # type: ignore[no-any-return]
    finally:
        if saved is None:
            del os.environ["AWS_DEFAULT_REGION"]
        else:
            os.environ["AWS_DEFAULT_REGION"] = saved


def of_type(resources: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The resources of one CloudFormation type, by logical id."""
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def statements(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every statement, with the branches of an ``Fn::If`` (true and false) both included."""
    for statement in document["Statement"]:
        if "Fn::If" in statement:
            for branch in statement["Fn::If"][1:]:
                if isinstance(branch, dict) and "Effect" in branch:
                    yield branch
        else:
            yield statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def parameter_values(**overrides: Any) -> dict[str, str]:
    """Every parameter's value as CloudFormation passes it (a string): the defaults, a
    placeholder for the required base URL, and ``overrides``."""
    return cfn_intrinsics.parameter_values(
        source(), **{"ServiceBaseUrl": "https://api.example.com", **overrides}
    )


class Resolver(cfn_intrinsics.Resolver):
    """The transformed template's (or ``template``'s) intrinsic functions for ``parameters``
    and this module's pseudo parameters."""

    def __init__(self, parameters: Mapping[str, str], template: Mapping[str, Any] | None = None):
        super().__init__(
            template if template is not None else transformed(), {**PSEUDO, **parameters}
        )


def broken_rules(
    parameters: Mapping[str, str], template: Mapping[str, Any] | None = None
) -> list[str]:
    """The template's Rules that refuse these parameter values: a rule whose RuleCondition holds
    and one of whose Assertions does not (CloudFormation User Guide, "Rules syntax"; the rule
    functions' meanings from the Template Reference, "Rule functions"). The rules take parameter
    values only, so no condition is evaluated for them."""
    found = template if template is not None else transformed()
    values = Resolver(parameters, {**found, "Conditions": {}})
    broken = []
    for name, rule in found.get("Rules", {}).items():
        if "RuleCondition" in rule and not _rule(rule["RuleCondition"], values):
            continue
        if not all(_rule(a["Assert"], values) for a in rule["Assertions"]):
            broken.append(name)
    return broken


def refusals(parameters: Mapping[str, str], template: Mapping[str, Any] | None = None) -> list[str]:
    """Why CloudFormation refuses these parameter values before it creates or changes any
    resource: each broken rule's assertion that fails, by its AssertDescription; else the template
    error that evaluating the conditions meets (every condition is evaluated before any resource:
    User Guide, "Conditions"), as CloudFormation words it; else nothing."""
    found = template if template is not None else transformed()
    values = Resolver(parameters, {**found, "Conditions": {}})
    described = [
        " ".join(assertion["AssertDescription"].split())
        for name in broken_rules(parameters, found)
        for assertion in found["Rules"][name]["Assertions"]
        if not _rule(assertion["Assert"], values)
    ]
    if described:
        return described
    try:
        Resolver(parameters, found)
    except cfn_intrinsics.TemplateError as error:
        return [f"Template error: {error}"]
    return []


def _rule(expression: Any, values: Resolver) -> Any:
    if not isinstance(expression, dict):
        return expression
    ((function, argument),) = expression.items()
    if function == "Ref":
        return values.resolve(expression)
    arguments = [_rule(item, values) for item in argument]
    if function == "Fn::Not":
        return not arguments[0]
    if function == "Fn::And":
        return all(arguments)
    if function == "Fn::Or":
        return any(arguments)
    if function == "Fn::Equals":
        return arguments[0] == arguments[1]
    if function == "Fn::Contains":  # [list of strings, string]: the string is one of them
        return arguments[1] in arguments[0]
    if function == "Fn::EachMemberEquals":  # [list of strings, string]: every one is it
        return all(item == arguments[1] for item in arguments[0])
    raise NotImplementedError(f"rule function {function} is not modelled")


def resolved_stack(values: Resolver) -> dict[str, Any]:
    """The resources and outputs CloudFormation creates under these values, resolved; the
    layer's logical id without the hash SAM appends to it."""
    template = transformed()
    found = {
        "Resources": {
            n: values.resolve(r) for n, r in template["Resources"].items() if values.present(r)
        },
        "Outputs": {
            n: values.resolve(o) for n, o in template["Outputs"].items() if values.present(o)
        },
    }
    normal: dict[str, Any] = json.loads(
        re.sub(r"SharedLayer[0-9a-f]{10}", "SharedLayer", json.dumps(found))
    )
    return normal


def resolved_resources(**parameters: str) -> dict[str, Any]:
    """The resources CloudFormation creates with these parameter values (others default),
    resolved, with the physical ids ``PHYSICAL`` stands in for."""
    found: dict[str, Any] = resolved_stack(
        Resolver({**parameter_values(**parameters), **PHYSICAL})
    )["Resources"]
    return found
