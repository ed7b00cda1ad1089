"""The part of AWS's policy evaluation that the template's sharing policies use, for tests that
ask who may read the service token (moto evaluates none of it).

No library from the registries fits: principalmapper (1.1.5, and its patched fork) does not
import on Python 3.10 and later (``collections.Mapping``), iam-ape expands an account's
permissions without evaluating conditions, and policyuniverse parses policies without deciding
requests. So this evaluates exactly what the statements here use, as the IAM User Guide states
it ("Policy evaluation logic", "Cross-account policy evaluation logic", "IAM JSON policy
elements: Condition operators", "AWS global condition context keys") and the AWS KMS Developer
Guide for keys ("Key policies in AWS KMS"):

- an explicit Deny in any policy wins; otherwise access needs an Allow;
- within one account an Allow in the identity policy or in the resource policy suffices, but a
  resource policy that names only the account (its root) delegates to the identity policies;
  across accounts both the resource policy and the caller's identity policy must allow;
- a KMS key's policy must allow: directly, or by naming the key's account, which lets that
  account's identity policies decide ("Unless the key policy explicitly allows it, you cannot
  use IAM policies to allow access to a KMS key");
- Principal: ``"*"``, ``{"AWS": ...}`` with account ids, account (root) ARNs or role ARNs;
  ``{"Federated": ...}`` with an OIDC provider's ARN, which a web identity (the caller of
  ``sts:AssumeRoleWithWebIdentity``, its ``Principal`` the provider) matches ("IAM JSON policy
  elements: Principal", "Federated user principals"); ``{"Service": ...}`` never matches the
  IAM principals modelled here;
- Resource: a role's trust policy has none; it applies to the role it is attached to;
- Action and Resource: ``*`` and ``?`` wildcards, actions case-insensitive;
- conditions: StringEquals, StringNotEquals, StringLike, ArnEquals, ArnNotEquals, ArnLike, and
  the ForAnyValue:/ForAllValues: prefixes; keys case-insensitive; every operator and key of a
  block must hold, any value of a key's list may match; a missing key fails every operator but
  the negated ones (StringNotEquals, ArnNotEquals) and ForAllValues:.

Anything else (NotAction, NotPrincipal, NotResource, other operators, policy variables, SCPs,
session policies, permission boundaries) raises, so a statement this model cannot read fails
the test instead of being misread."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Policy = Mapping[str, Any]


@dataclass(frozen=True)
class Principal:
    """An IAM role of some account, and where that account sits in AWS Organizations; or a web
    identity, by the ARN of the account's OIDC provider that issued its token (its claims are
    the request's condition keys)."""

    arn: str
    org_id: str | None = None
    org_paths: tuple[str, ...] = ()

    @property
    def account(self) -> str:
        return self.arn.split(":")[4]


@dataclass(frozen=True)
class Request:
    """One API call: who makes it, the action, the resource's ARN, and the request's own
    condition keys (``kms:ViaService``, ``events:source``, ...)."""

    principal: Principal
    action: str
    resource: str
    keys: Mapping[str, str | Sequence[str]] = field(default_factory=dict)

    def context(self) -> dict[str, list[str]]:
        """Every condition key of the request, lower-cased, each with its list of values."""
        context: dict[str, list[str]] = {
            "aws:principalarn": [self.principal.arn],
            "aws:principalaccount": [self.principal.account],
        }
        if self.principal.org_id:
            context["aws:principalorgid"] = [self.principal.org_id]
            context["aws:principalorgpaths"] = list(self.principal.org_paths)
        for key, value in self.keys.items():
            context[key.lower()] = [value] if isinstance(value, str) else list(value)
        return context


def allowed(
    request: Request,
    identity: Iterable[Policy],
    resource_policy: Policy | None,
    resource_account: str,
    *,
    key_policy: bool = False,
) -> bool:
    """Whether AWS allows the request, given the caller's identity policies and the resource's
    policy (``key_policy``: the resource is a KMS key, whose policy must allow)."""
    identity = list(identity)
    resource = [resource_policy] if resource_policy else []
    if any(_matches(s, request, True) for p in resource for s in _effect(p, "Deny")):
        return False
    if any(_matches(s, request, False) for p in identity for s in _effect(p, "Deny")):
        return False
    by_identity = any(_matches(s, request, False) for p in identity for s in _effect(p, "Allow"))
    grants = [s for p in resource for s in _effect(p, "Allow") if _matches(s, request, True)]
    named = any(not _names_only_the_account(s, request.principal) for s in grants)
    delegated = any(_names_only_the_account(s, request.principal) for s in grants)
    if key_policy:
        return named or (delegated and by_identity)
    if request.principal.account == resource_account:
        return by_identity or named
    return by_identity and bool(grants)


def _effect(policy: Policy, effect: str) -> list[Mapping[str, Any]]:
    statements = policy["Statement"]
    statements = statements if isinstance(statements, list) else [statements]
    for statement in statements:
        unsupported = set(statement) - {
            "Sid",
            "Effect",
            "Principal",
            "Action",
            "Resource",
            "Condition",
        }
        if unsupported:
            raise NotImplementedError(f"policy elements not modelled: {sorted(unsupported)}")
    return [s for s in statements if s["Effect"] == effect]


def _listed(value: str | Sequence[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _matches(statement: Mapping[str, Any], request: Request, resource_policy: bool) -> bool:
    if resource_policy and not _principal_matches(statement["Principal"], request.principal):
        return False
    actions = _listed(statement["Action"])
    if not any(fnmatch.fnmatchcase(request.action.lower(), a.lower()) for a in actions):
        return False
    if "Resource" not in statement:
        if not resource_policy:
            raise NotImplementedError("an identity policy statement without Resource")
    elif not any(_glob(pattern, request.resource) for pattern in _listed(statement["Resource"])):
        return False
    return _conditions_hold(statement.get("Condition", {}), request.context())


def _principal_matches(principal: Any, who: Principal) -> bool:
    if principal == "*":
        return True
    if set(principal) - {"AWS", "Service", "Federated"}:
        raise NotImplementedError(f"principal not modelled: {principal}")
    if any(p == who.arn for p in _listed(principal.get("Federated", []))):
        return True
    return any(_one_principal(p, who) for p in _listed(principal.get("AWS", [])))


def _one_principal(principal: str, who: Principal) -> bool:
    if principal == "*":
        return True
    if re.fullmatch(r"[0-9]{12}", principal):
        return principal == who.account
    if re.fullmatch(r"arn:aws[a-z-]*:iam::[0-9]{12}:root", principal):
        return principal.split(":")[4] == who.account
    return principal == who.arn


def _names_only_the_account(statement: Mapping[str, Any], who: Principal) -> bool:
    """Whether the statement matched the principal only by naming its account (its root)."""
    principal = statement["Principal"]
    if principal == "*":
        return False
    named = [*_listed(principal.get("AWS", [])), *_listed(principal.get("Federated", []))]
    return not any(p == who.arn or p == "*" for p in named)


def _glob(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _equal(value: str, wanted: str) -> bool:
    return value == wanted


def _like(value: str, wanted: str) -> bool:
    return _glob(wanted, value)


# ArnEquals and ArnLike both read * and ? as wildcards (IAM User Guide, "Amazon Resource Name
# (ARN) condition operators").
_OPERATORS = {"stringequals": _equal, "stringlike": _like, "arnequals": _like, "arnlike": _like}
_NEGATED = {"stringnotequals": "stringequals", "arnnotequals": "arnequals"}


def _conditions_hold(block: Mapping[str, Mapping[str, Any]], context: dict[str, list[str]]) -> bool:
    return all(
        _condition_holds(operator, key, _listed(wanted), context.get(key.lower()))
        for operator, keys in block.items()
        for key, wanted in keys.items()
    )


def _condition_holds(operator: str, key: str, wanted: list[str], values: list[str] | None) -> bool:
    prefix, _, name = operator.lower().rpartition(":")
    if prefix not in ("", "foranyvalue", "forallvalues") or (
        name not in _OPERATORS and name not in _NEGATED
    ):
        raise NotImplementedError(f"condition operator not modelled: {operator}")
    negated = name in _NEGATED
    test = _OPERATORS[_NEGATED.get(name, name)]

    def one(value: str) -> bool:
        hit = any(test(value, w) for w in wanted)
        return not hit if negated else hit

    if prefix == "forallvalues":
        return all(one(value) for value in values or [])
    if not values:
        return negated
    if prefix == "foranyvalue" or len(values) == 1:
        return any(one(value) for value in values)
    raise NotImplementedError(
        f"{key} has several values: use a ForAnyValue:/ForAllValues: operator"
    )
