"""A stack's life on moto's CloudFormation: created from a template, updated to another template or
other parameter values, deleted; and what CloudFormation does meanwhile to the two secrets and the
refresh credential's resource policy, which moto's CloudFormation does not create (issue 20,
items 8 and 9).

``deployment`` creates each stack as in the deploy test: moto creates what it can (functions,
roles, queues, ...), and each secret is created under its template name through Secrets Manager
(empty, or holding a generated value: the link signing key), a stand-in whose ARN every reference
receives. moto's CloudFormation updates and deletes
what it created, but it never sees the secrets, so this module does to them, around each
``UpdateStack`` and ``DeleteStack``, what CloudFormation's documents say it does:

- An update keeps a resource whose logical id and type stay and whose condition still holds. It
  replaces the resource when one of its type's create-only properties changes ("Update
  behaviors of stack resources", CloudFormation User Guide); the create-only properties are read
  from the type's resource provider schema as cfn-lint ships it (for
  ``AWS::SecretsManager::Secret``: ``Name``; for ``AWS::SecretsManager::ResourcePolicy``:
  ``SecretId``). A replacement creates the new resource first and deletes the old one once the
  update is done, unless ``UpdateReplacePolicy`` is ``Retain`` ("UpdateReplacePolicy
  attribute"). Any other change is made in place: the secret's ``Description`` and ``KmsKeyId``
  with UpdateSecret, the policy with PutResourcePolicy.
- A resource that the new template drops, or whose condition turns false, is deleted once the
  update is done, and every resource when the stack is deleted, unless its ``DeletionPolicy`` is
  ``Retain`` ("DeletionPolicy attribute": the policy "also applies to stack update operations
  that lead to resources being deleted from stacks").
- CloudFormation deletes a secret without a recovery window: DeleteSecret with
  ``ForceDeleteWithoutRecovery`` (aws-cloudformation/cloudformation-coverage-roadmap#1999,
  citing the User Guide's "DeletionPolicy attribute": "the default deletionpolicy for an
  AWS::SecretsManager::Secret resource is force-delete-without-recovery"; the resource's schema
  has no recovery window to set). Such a secret cannot be restored (Secrets Manager API
  Reference, DeleteSecret: "you have no opportunity to recover the secret").
- A deleted resource policy leaves its secret with DeleteResourcePolicy.

An update's parameter values are those ``sam deploy`` sends: sam CLI's
``DeployContext.merge_parameters`` (each parameter of the new template: the override given, else
the stack's previous value), less the previous values of parameters the stack does not have
(``Deployer.create_changeset``), so those take their defaults; a value for a parameter the new
template does not declare is dropped.
"""

from __future__ import annotations

import copy
import io
import json
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from samtranslator.yaml_helper import yaml_parse

from deployment import (
    ARTIFACT_PROPERTIES,
    CAPABILITIES,
    Clients,
    DeployedStack,
    Deployer,
    DeployError,
    StandIn,
    constraint_problem,
    describe_deployed,
    moto_can_create,
    placeholder,
    pseudo_parameters,
    sam_transform,
    secret_stand_in,
    settled,
    stack_parameters,
    substitute,
    upload_template,
    without_novalue_items,
)
from template_model import Resolver, refusals

SECRET = "AWS::SecretsManager::Secret"
POLICY = "AWS::SecretsManager::ResourcePolicy"
# What UpdateSecret changes in place (the other properties the template may set are Name, which
# replaces, and none).
IN_PLACE = ("Description", "KmsKeyId")
CODE_KEY = "code/placeholder.zip"
# Each template file's text, transformed with its code in a bucket, once in a test process (the
# parse and the transform take about a third of a second): (text, bucket) -> the template.
_TRANSFORMED: dict[tuple[str, str], dict[str, Any]] = {}


@cache
def create_only_properties(resource_type: str) -> tuple[str, ...]:
    """The properties whose change replaces a resource of the type: ``createOnlyProperties`` of
    its resource provider schema (the CloudFormation registry's, as cfn-lint ships it)."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER  # type: ignore[import-untyped]

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
    return tuple(path.removeprefix("/properties/") for path in schema["createOnlyProperties"])


def replaces(resource_type: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether an update from ``before`` to ``after`` (resolved properties) replaces it."""
    names = create_only_properties(resource_type)
    return any(before.get(name) != after.get(name) for name in names)


def sam_deploy_parameters(
    template: Mapping[str, Any], previous: Mapping[str, str], overrides: Mapping[str, str]
) -> dict[str, str]:
    """The parameter values a stack holds after ``sam deploy`` of ``template`` with
    ``parameter_overrides``, from a stack that held ``previous``; each checked against its
    constraints, as CloudFormation checks them."""
    from samcli.commands.deploy.deploy_context import (  # type: ignore[import-untyped]
        DeployContext,
    )

    declared = template.get("Parameters") or {}
    values: dict[str, str] = {}
    for entry in DeployContext.merge_parameters(dict(template), dict(overrides)):
        key = entry["ParameterKey"]
        if not entry.get("UsePreviousValue"):
            values[key] = str(entry["ParameterValue"])
        elif key in previous:
            values[key] = previous[key]
        elif "Default" in declared[key]:
            values[key] = str(declared[key]["Default"])
        else:
            raise DeployError(f"parameters: {key} is new, required, and given no value")
    problems = [
        f"{key}={value!r}: {problem}"
        for key, value in values.items()
        if (problem := constraint_problem(declared[key], value))
    ]
    if problems:
        raise DeployError("parameters: " + "; ".join(problems))
    return values


def for_moto(template: Mapping[str, Any], present: Mapping[str, Any]) -> dict[str, Any]:
    """The template for moto's UpdateStack, without what moto gets wrong:

    - it also updates resources whose condition is false, and fails on their references to
      other absent resources; CloudFormation leaves them alone;
    - it records an update of a resource type it has no model for as a resource of none, and
      fails to delete that later; it never created one (``deployment``), and every reference to
      one already holds its stand-in's value, so only the types it creates stay;
    - it fails to update a function with ``Layers`` (a ``Ref`` to a layer version yields no ARN
      in moto, see ``deployment``); moto attached no layer on create either, so they go.
    """
    given: dict[str, Any] = json.loads(json.dumps(template))
    given["Resources"] = {
        logical_id: resource
        for logical_id, resource in given["Resources"].items()
        if logical_id in present and moto_can_create(resource["Type"])
    }
    for resource in given["Resources"].values():
        if resource["Type"] == "AWS::Lambda::Function":
            resource.get("Properties", {}).pop("Layers", None)
    return given


@dataclass(frozen=True)
class Fate:
    """What an operation did to a resource moto does not create: ``created``, ``kept`` (updated
    in place), ``replaced`` (a new one made), ``deleted`` or ``retained`` (left outside the stack);
    ``physical_id`` names the resource concerned (the old one when replaced, deleted or
    retained)."""

    logical_id: str
    what: str
    physical_id: str


@dataclass
class Stack:
    deployed: DeployedStack
    parameters: dict[str, str]
    fates: list[Fate] = field(default_factory=list)  # of the operation that made this state

    @property
    def name(self) -> str:
        return self.deployed.name

    def secret_arn(self, logical_id: str) -> str:
        """The ARN the stack's references to the secret receive (``Ref`` of a secret)."""
        return self.deployed.stand_ins[logical_id].ref

    def fates_of(self, what: str) -> set[str]:
        return {fate.logical_id for fate in self.fates if fate.what == what}


@dataclass
class Lifecycle:
    """Creates, updates and deletes stacks on moto's server, as described above."""

    clients: Clients
    bucket: str
    region: str
    account_id: str
    timeout: float = 30.0
    transformed: dict[Path, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, clients: Clients, bucket: str, region: str) -> Lifecycle:
        """A lifecycle whose templates' code is one placeholder zip in ``bucket`` (created): the
        code is not what an update does to the secrets depend on."""
        s3 = clients("s3")
        s3.create_bucket(Bucket=bucket)
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as handle:
            handle.writestr("app.py", "def lambda_handler(event, context):\n    return None\n")
        s3.put_object(Bucket=bucket, Key=CODE_KEY, Body=archive.getvalue())
        account = clients("sts").get_caller_identity()["Account"]
        return cls(clients=clients, bucket=bucket, region=region, account_id=account)

    def transform(self, template: Path | Mapping[str, Any]) -> dict[str, Any]:
        """The template (a file, or a parsed one) with its code in the bucket, SAM-transformed
        (a file once: nothing here changes a transformed template; each lifecycle has its own
        copy of a file's, which is transformed once in a process)."""
        if isinstance(template, Path):
            if template not in self.transformed:
                text = template.read_text()
                if (text, self.bucket) not in _TRANSFORMED:
                    _TRANSFORMED[text, self.bucket] = self.transform(yaml_parse(text))
                self.transformed[template] = copy.deepcopy(_TRANSFORMED[text, self.bucket])
            return self.transformed[template]
        parsed = json.loads(json.dumps(template))
        for resource in parsed["Resources"].values():
            properties = resource.get("Properties", {})
            for key in ARTIFACT_PROPERTIES:
                if key in properties:
                    properties[key] = f"s3://{self.bucket}/{CODE_KEY}"
        return sam_transform(parsed)

    def create(
        self, name: str, template: Path | Mapping[str, Any], offered: Mapping[str, str]
    ) -> Stack:
        """``CreateStack``, as the deploy test does it; the refresh credential's policy is put on
        its secret as CloudFormation would."""
        transformed = self.transform(template)
        deployer = Deployer(
            clients=self.clients,
            transformed=transformed,
            bucket=self.bucket,
            region=self.region,
            account_id=self.account_id,
            timeout=self.timeout,
        )
        deployed = deployer.deploy(name, offered)
        values = {key: deployed.resolver.values[key] for key in transformed.get("Parameters", {})}
        fates = [
            Fate(logical_id, "created", stand_in.ref)
            for logical_id, stand_in in deployed.stand_ins.items()
            if stand_in.resource_type == SECRET
        ]
        for resource in deployed.present().values():
            if resource["Type"] == POLICY:
                self._put_policy(deployed.resolver, resource)
        return Stack(deployed, values, fates)

    def update(
        self,
        stack: Stack,
        template: Path | Mapping[str, Any],
        overrides: Mapping[str, str] | None = None,
    ) -> Stack:
        """``UpdateStack`` to ``template`` with ``sam deploy``'s parameter values, and the
        secrets' and their policy's fates around it."""
        transformed = self.transform(template)
        values = sam_deploy_parameters(transformed, stack.parameters, overrides or {})
        pseudo = pseudo_parameters(stack.name, self.region, self.account_id)
        refused = refusals({**values, **pseudo}, transformed)
        if refused:  # as Deployer.deploy: CloudFormation changes nothing
            raise DeployError(f"stack {stack.name}: update refused, nothing changed: {refused}")
        resolver = Resolver({**values, **pseudo}, transformed)
        present = {
            logical_id: resource
            for logical_id, resource in transformed["Resources"].items()
            if resolver.present(resource)
        }
        stand_ins, fates, leaving = self._before_update(stack, present, resolver)
        template_body = without_novalue_items(substitute(transformed, stand_ins), resolver)
        self._update_stack(stack.name, for_moto(template_body, present), values)
        fates += self._remove(leaving, replaced=True)
        dropped = {
            logical_id: resource
            for logical_id, resource in stack.deployed.present().items()
            if resource["Type"] in (SECRET, POLICY)
            and present.get(logical_id, {}).get("Type") != resource["Type"]
        }
        fates += self._remove(
            [(logical_id, resource, stack) for logical_id, resource in dropped.items()],
            replaced=False,
        )
        deployed = describe_deployed(self.clients, stack.name, resolver, template_body, stand_ins)
        return Stack(deployed, values, fates)

    def delete(self, stack: Stack, run: Callable[[], object] | None = None) -> list[Fate]:
        """``DeleteStack`` (or ``run``, which deletes the stack another way: the AWS CLI), each
        secret and policy deleted or retained by its DeletionPolicy first, as CloudFormation
        has done by the time the deletion completes."""
        cloudformation = self.clients("cloudformation")
        stack_id = cloudformation.describe_stacks(StackName=stack.name)["Stacks"][0]["StackId"]
        leaving = [
            (logical_id, resource, stack)
            for logical_id, resource in stack.deployed.present().items()
            if resource["Type"] in (SECRET, POLICY)
        ]
        fates = self._remove(leaving, replaced=False)
        if run is None:
            cloudformation.delete_stack(StackName=stack.name)
        else:
            run()
        self._wait(stack_id, "DELETE_COMPLETE")
        return fates

    # --- around an update ---------------------------------------------------------------

    def _before_update(
        self, stack: Stack, present: Mapping[str, Any], resolver: Resolver
    ) -> tuple[dict[str, StandIn], list[Fate], list[tuple[str, Any, Stack]]]:
        """The stand-ins of the new template (secrets kept, updated in place or created),
        the fates so far, and the resources a replacement leaves behind (removed after the
        update)."""
        old = stack.deployed.present()
        stand_ins: dict[str, StandIn] = {}
        fates: list[Fate] = []
        leaving: list[tuple[str, Any, Stack]] = []
        for logical_id, resource in present.items():
            kind = resource["Type"]
            if moto_can_create(kind):
                continue
            if kind != SECRET:
                stand_ins[logical_id] = placeholder(resolver, logical_id, kind)
                continue
            before = old.get(logical_id)
            after = resolver.resolve(resource.get("Properties", {}))
            if before is None or before["Type"] != kind:
                stand_ins[logical_id] = self._create_secret(resolver, logical_id, resource)
                fates.append(Fate(logical_id, "created", stand_ins[logical_id].ref))
                continue
            previous = stack.deployed.stand_ins[logical_id]
            if replaces(kind, stack.deployed.resolver.resolve(before.get("Properties", {})), after):
                stand_ins[logical_id] = self._create_secret(resolver, logical_id, resource)
                fates.append(Fate(logical_id, "replaced", previous.ref))
                leaving.append((logical_id, resource, stack))
                continue
            changes = {key: after[key] for key in IN_PLACE if key in after}
            self.clients("secretsmanager").update_secret(SecretId=previous.ref, **changes)
            stand_ins[logical_id] = previous
            fates.append(Fate(logical_id, "kept", previous.ref))
        for logical_id, resource in present.items():
            if resource["Type"] != POLICY:
                continue
            concrete = substitute(resource, stand_ins)
            before = old.get(logical_id)
            if before is not None and before["Type"] == POLICY:
                old_properties = stack.deployed.resolver.resolve(before.get("Properties", {}))
                new_properties = resolver.resolve(concrete.get("Properties", {}))
                if replaces(POLICY, old_properties, new_properties):
                    leaving.append((logical_id, resource, stack))
            self._put_policy(resolver, concrete)
        return stand_ins, fates, leaving

    def _remove(self, leaving: list[tuple[str, Any, Stack]], replaced: bool) -> list[Fate]:
        """Delete each resource that leaves the stack, or leave it in place when its policy
        (``UpdateReplacePolicy`` of the new definition when replaced, ``DeletionPolicy`` of
        the old one otherwise) is ``Retain``."""
        fates = []
        secrets = self.clients("secretsmanager")
        for logical_id, resource, stack in leaving:
            definition = resource if replaced else stack.deployed.template["Resources"][logical_id]
            policy = definition.get("UpdateReplacePolicy" if replaced else "DeletionPolicy")
            old = stack.deployed.template["Resources"][logical_id]
            if old["Type"] == SECRET:
                arn = stack.deployed.stand_ins[logical_id].ref
            else:
                arn = str(stack.deployed.resolver.resolve(old["Properties"]["SecretId"]))
            if policy == "Retain":
                fates.append(Fate(logical_id, "retained", arn))
            elif old["Type"] == SECRET:
                secrets.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
                fates.append(Fate(logical_id, "deleted", arn))
            else:
                try:
                    secrets.delete_resource_policy(SecretId=arn)
                except ClientError as error:  # its secret went first
                    if error.response["Error"]["Code"] != "ResourceNotFoundException":
                        raise
                fates.append(Fate(logical_id, "deleted", arn))
        return fates

    # --- calls -------------------------------------------------------------------------

    def _create_secret(self, resolver: Resolver, logical_id: str, resource: Any) -> StandIn:
        return secret_stand_in(self.clients, resolver, logical_id, resource)

    def _put_policy(self, resolver: Resolver, resource: Any) -> None:
        """The policy on its secret, as PutResourcePolicy takes it (the roles' ARNs stand as
        ``<RotatorRole.Arn>``: moto does not evaluate resource policies)."""
        properties = resolver.resolve(resource["Properties"])
        self.clients("secretsmanager").put_resource_policy(
            SecretId=properties["SecretId"],
            ResourcePolicy=json.dumps(properties["ResourcePolicy"]),
            BlockPublicPolicy=bool(properties.get("BlockPublicPolicy", False)),
        )

    def _update_stack(
        self, stack_name: str, template: Mapping[str, Any], values: Mapping[str, str]
    ) -> None:
        """``UpdateStack`` with the template in S3, as the deploy test creates stacks."""
        cloudformation = self.clients("cloudformation")
        stack_id = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]["StackId"]
        try:
            cloudformation.update_stack(
                StackName=stack_name,
                TemplateURL=upload_template(
                    self.clients, self.bucket, self.region, stack_name, template
                ),
                Parameters=stack_parameters(values),
                Capabilities=CAPABILITIES,
            )
        except ClientError as error:
            raise DeployError(f"stack {stack_name}: UpdateStack failed: {error}") from error
        self._wait(stack_id, "UPDATE_COMPLETE")

    def _wait(self, stack_id: str, wanted: str) -> None:
        stack = settled(self.clients("cloudformation"), stack_id, self.timeout)
        status = str(stack["StackStatus"])
        if status != wanted:
            reason = stack.get("StackStatusReason")
            raise DeployError(f"stack {stack['StackName']} is {status}, not {wanted} ({reason})")
