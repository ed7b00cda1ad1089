"""template.yaml as the tests read it: the source, the SAM-transformed resources, and a resolver
of CloudFormation's intrinsic functions for one set of parameter values (what CloudFormation
would hand each resource, for the properties the tests evaluate)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

TEMPLATE = Path(__file__).resolve().parents[1] / "template.yaml"
PSEUDO = {
    "AWS::AccountId": "123456789012",
    "AWS::Region": "us-east-1",
    "AWS::Partition": "aws",
    "AWS::StackName": "cmstoken-prod",
    "AWS::URLSuffix": "amazonaws.com",
}

# Resource types with no name of their own in a namespace stacks share: attachments to a named
# resource, or ids AWS generates.
NAMELESS = frozenset(
    {
        "AWS::KMS::Key",
        "AWS::Lambda::Permission",
        "AWS::Lambda::EventInvokeConfig",
        "AWS::SecretsManager::ResourcePolicy",
        "AWS::SNS::TopicPolicy",
        "AWS::SNS::Subscription",
        "AWS::SQS::QueuePolicy",
    }
)


class _NoManagedPolicies:
    def load(self) -> dict[str, str]:
        return {}


@cache
def source() -> dict[str, Any]:
    """template.yaml as written."""
    return yaml_parse(TEMPLATE.read_text())  # type: ignore[no-any-return]


@cache
def transformed() -> dict[str, Any]:
    """template.yaml after the SAM transform (code locations replaced by a placeholder)."""
    template = yaml_parse(TEMPLATE.read_text())
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
    values = {"ServiceBaseUrl": "https://api.example.com"}
    for name, parameter in source()["Parameters"].items():
        if "Default" in parameter:
            values[name] = str(parameter["Default"])
    values.update({name: str(value) for name, value in overrides.items()})
    return values


class Resolver:
    """Resolves the intrinsic functions the template uses (``Ref``, ``Fn::Sub``, ``Fn::If``,
    ``Fn::FindInMap``, ``Fn::Equals``, ``Fn::Not``, ``Fn::Or``, ``Fn::And``, ``Fn::GetAtt``,
    ``Fn::Split``, ``Fn::Join``) for
    one set of parameter values. ``Ref``/``Fn::GetAtt`` of a resource give a readable
    placeholder (``<LogicalId>``, ``<LogicalId.Attribute>``)."""

    def __init__(self, parameters: Mapping[str, str], template: Mapping[str, Any] | None = None):
        self.template = template if template is not None else transformed()
        self.values: dict[str, str] = {**PSEUDO, **parameters}
        self.mappings: Mapping[str, Any] = self.template.get("Mappings", {})
        self.conditions = {
            name: bool(self.resolve(expression))
            for name, expression in self.template.get("Conditions", {}).items()
        }

    def present(self, resource: Mapping[str, Any]) -> bool:
        """Whether CloudFormation creates the resource under these parameters."""
        return "Condition" not in resource or self.conditions[resource["Condition"]]

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [item for item in map(self.resolve, value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) != 1 or not _is_intrinsic(next(iter(value))):
            resolved = {key: self.resolve(item) for key, item in value.items()}
            return {key: item for key, item in resolved.items() if item is not _NO_VALUE}
        ((function, argument),) = value.items()
        if function == "Ref":
            if argument == "AWS::NoValue":
                return _NO_VALUE
            return self.values.get(argument, f"<{argument}>")
        if function == "Condition":
            return self.conditions[argument]
        if function == "Fn::GetAtt":
            return f"<{'.'.join(argument)}>"
        if function == "Fn::FindInMap":
            name, first, second = (self.resolve(item) for item in argument)
            return self.mappings[name][str(first)][second]
        if function == "Fn::If":
            name, when_true, when_false = argument
            return self.resolve(when_true if self.conditions[name] else when_false)
        if function == "Fn::Equals":
            left, right = (self.resolve(item) for item in argument)
            return str(left) == str(right)
        if function == "Fn::Not":
            return not self.resolve(argument[0])
        if function == "Fn::Or":
            return any(self.resolve(item) for item in argument)
        if function == "Fn::And":
            return all(self.resolve(item) for item in argument)
        if function == "Fn::Sub":
            return self._sub(argument)
        if function == "Fn::Split":
            separator, text = argument
            return str(self.resolve(text)).split(separator)
        if function == "Fn::Join":
            separator, items = argument
            return separator.join(str(item) for item in self.resolve(items))
        raise NotImplementedError(f"intrinsic function {function} is not modelled")

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        local = {name: str(self.resolve(item)) for name, item in variables.items()}
        out, rest = [], text
        while "${" in rest:
            before, _, tail = rest.partition("${")
            name, _, rest = tail.partition("}")
            out.append(before)
            if name.startswith("!"):
                out.append("${" + name[1:] + "}")
            elif name in local:
                out.append(local[name])
            elif "." in name:
                out.append(f"<{name}>")
            else:
                out.append(str(self.values.get(name, f"<{name}>")))
        out.append(rest)
        return "".join(out)


_NO_VALUE = object()


def _is_intrinsic(key: str) -> bool:
    return key in ("Ref", "Condition") or key.startswith("Fn::")
