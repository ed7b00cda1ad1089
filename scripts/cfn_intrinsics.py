"""A CloudFormation template read as CloudFormation reads it, and its intrinsic functions
evaluated for one set of parameter values: what CloudFormation would hand each resource, for
the properties a reader evaluates (``make cost`` and the template's tests)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse


def load_template(path: Path) -> dict[str, Any]:
    """The template with its short tags (``!Ref``, ``!Sub``, ...) in their long forms."""
    template: dict[str, Any] = yaml_parse(path.read_text(encoding="utf-8"))
    return template


def parameter_values(template: Mapping[str, Any], **overrides: Any) -> dict[str, str]:
    """Every parameter that has a default, as CloudFormation passes it (a string), and
    ``overrides``."""
    values = {
        name: str(parameter["Default"])
        for name, parameter in template.get("Parameters", {}).items()
        if "Default" in parameter
    }
    values.update({name: str(value) for name, value in overrides.items()})
    return values


class TemplateError(ValueError):
    """An intrinsic function CloudFormation cannot evaluate for these values: it fails the stack
    operation with "Template error: " and this message (e.g. Template Reference, "Fn::Select":
    an index out of bounds "will result in a stack error"). In a condition, before any resource
    is created or changed (User Guide, "Conditions": all conditions are evaluated first)."""


class Resolver:
    """Resolves the intrinsic functions the template uses (``Ref``, ``Fn::Sub``, ``Fn::If``,
    ``Fn::FindInMap``, ``Fn::Equals``, ``Fn::Not``, ``Fn::Or``, ``Fn::And``, ``Fn::GetAtt``,
    ``Fn::Split``, ``Fn::Join``, ``Fn::Select``) for one set of parameter (and pseudo
    parameter) values. ``Ref`` of a ``CommaDelimitedList`` parameter is its list of items (an
    empty value is one empty item: "" split at commas). ``Ref``/``Fn::GetAtt`` of a resource give
    the value given for ``LogicalId``/``LogicalId.Attribute``, else a readable placeholder
    (``<LogicalId>``, ``<LogicalId.Attribute>``)."""

    def __init__(self, template: Mapping[str, Any], values: Mapping[str, str]) -> None:
        self.template = template
        self.values: dict[str, str] = dict(values)
        self.lists = {
            name
            for name, parameter in template.get("Parameters", {}).items()
            if parameter.get("Type") == "CommaDelimitedList"
        }
        self.mappings: Mapping[str, Any] = template.get("Mappings", {})
        self.conditions: dict[str, bool] = {}
        for name in template.get("Conditions", {}):
            self._condition(name)

    def _condition(self, name: str) -> bool:
        """A condition's value; one that names another (``Condition``) has it evaluated first."""
        if name not in self.conditions:
            self.conditions[name] = bool(self.resolve(self.template["Conditions"][name]))
        return self.conditions[name]

    def present(self, resource: Mapping[str, Any]) -> bool:
        """Whether CloudFormation creates the resource under these parameters."""
        return "Condition" not in resource or self.conditions[resource["Condition"]]

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        """The resources of one type that the stack creates, by logical id."""
        return {
            name: resource
            for name, resource in self.template["Resources"].items()
            if resource["Type"] == kind and self.present(resource)
        }

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
            if argument in self.lists:
                return self.values[argument].split(",")
            return self.values.get(argument, f"<{argument}>")
        if function == "Condition":
            return self._condition(argument)
        if function == "Fn::GetAtt":
            name = ".".join(argument)
            return self.values.get(name, f"<{name}>")
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
        if function == "Fn::Select":
            index, items = (self.resolve(item) for item in argument)
            if not 0 <= int(index) < len(items):
                raise TemplateError(f"Fn::Select cannot select nonexistent value at index {index}")
            return items[int(index)]
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
                out.append(self.values.get(name, f"<{name}>"))
            else:
                out.append(str(self.values.get(name, f"<{name}>")))
        out.append(rest)
        return "".join(out)


_NO_VALUE = object()


def _is_intrinsic(key: str) -> bool:
    return key in ("Ref", "Condition") or key.startswith("Fn::")
