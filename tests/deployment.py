"""Deploying the SAM-built template into moto's CloudFormation on moto's server, as `sam deploy`
does it: every built function and layer directory zipped and uploaded to S3, the template
transformed by aws-sam-translator and uploaded, then ``CreateStack``.

What moto's CloudFormation (5.2) does with a template, read from ``moto/cloudformation/parsing.py``
and checked by the deploy test:

- It creates only the resource types it has a model for (``CloudFormationModel`` subclasses);
  any other type is skipped with a warning, and ``DescribeStackResources`` lists it with no
  logical id, type or physical id.
- A ``Ref`` to a skipped resource resolves to nothing: the property disappears (an IAM policy
  loses its ``Resource`` and the whole ``CreateStack`` fails as a malformed policy); an
  ``Fn::GetAtt`` to one fails the stack. :class:`Deployer` therefore gives each reference to a
  resource moto cannot create the value CloudFormation would: a secret is created by the test
  under its template name, through Secrets Manager on moto's server (``Ref`` is its ARN; a name
  another stack holds fails as CreateSecret fails it), empty, or holding a value Secrets Manager
  generates when the template has ``GenerateSecretString``; other types get a placeholder name
  and ARN that say ``not-created-by-moto``.
- ``Fn::If`` choosing ``AWS::NoValue`` inside a list leaves a null item where CloudFormation
  removes the item; :func:`without_novalue_items` removes it first.
- ``AWS::Lambda::LayerVersion`` is created under a generated name (``LayerName`` is ignored)
  with no physical id, so a ``Ref`` to it yields no ARN and the functions get no layer.
- It checks no ``Rules``, and an ``Fn::Select`` past the end of its list in a condition is an
  ``IndexError`` (a 500), where CloudFormation refuses both before it creates anything
  (``template_model.refusals``): :class:`Deployer` checks them first, and creates nothing when
  they refuse.
- Functions are created without their ``Architectures``, ``Tracing`` and ``LoggingConfig``
  (moto reports x86_64 and PassThrough); reserved concurrency, environment, role, rule targets
  and permissions are kept. The template assertions cover what moto leaves out.
"""

from __future__ import annotations

import ast
import base64
import copy
import hashlib
import io
import json
import os
import re
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

import cfn_intrinsics
from template_model import NAMELESS, Resolver, refusals

ROOT = Path(__file__).resolve().parents[1]
SOURCE_TEMPLATE = ROOT / "template.yaml"
# `make build`'s output; DEPLOY_TEST_BUILD_DIR names another (`sam build --build-dir DIR`).
BUILD_DIR = Path(os.environ.get("DEPLOY_TEST_BUILD_DIR") or ROOT / ".aws-sam" / "build")
ARTIFACT_PROPERTIES = ("CodeUri", "ContentUri")
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
PLACEHOLDER = "not-created-by-moto"
NO_VALUE = {"Ref": "AWS::NoValue"}

Clients = Callable[[str], Any]


class BuildError(AssertionError):
    """The SAM build is missing or older than template.yaml."""


class DeployError(AssertionError):
    """A stack could not be created, or did not reach CREATE_COMPLETE."""


# --- the build ---------------------------------------------------------------------------


def built_template(build_dir: Path = BUILD_DIR, source: Path = SOURCE_TEMPLATE) -> dict[str, Any]:
    """``sam build``'s template; it must exist and match ``template.yaml`` but for the artifact
    paths and the metadata that ``sam build`` rewrites."""
    path = build_dir / "template.yaml"
    if not path.is_file():
        raise BuildError(f"{path} does not exist: run `make build` first")
    built = yaml_parse(path.read_text())
    differences = template_differences(yaml_parse(source.read_text()), built)
    if differences:
        raise BuildError(
            f"{path} was built from another {source.name} (they differ in "
            f"{', '.join(differences)}): run `make build` again"
        )
    return built  # type: ignore[no-any-return]


def template_differences(source: dict[str, Any], built: dict[str, Any]) -> list[str]:
    """The sections and resources in which two templates differ, once the artifact paths (code,
    license, readme) and ``sam build``'s ``SamResourceId`` metadata are left out."""

    def normal(template: dict[str, Any]) -> dict[str, Any]:
        # Plain dicts, compared regardless of key order: once SAM CLI is imported (the deploy
        # docs' test imports it), yaml_parse returns OrderedDicts, which compare in order, and
        # sam build writes a resource's Metadata keys sorted.
        template = json.loads(json.dumps(template))
        # sam build rewrites the application's license and readme paths, as it does code paths.
        application = (template.get("Metadata") or {}).get("AWS::ServerlessRepo::Application")
        if isinstance(application, dict):
            for key in ("LicenseUrl", "ReadmeUrl"):
                application.pop(key, None)
        for resource in (template.get("Resources") or {}).values():
            for key in ARTIFACT_PROPERTIES:
                resource.get("Properties", {}).pop(key, None)
            metadata = resource.get("Metadata")
            if isinstance(metadata, dict):
                metadata.pop("SamResourceId", None)
                if not metadata:
                    del resource["Metadata"]
        return template

    source, built = normal(source), normal(built)
    found = []
    for section in sorted(set(source) | set(built)):
        if section == "Resources":
            mine, theirs = source.get(section) or {}, built.get(section) or {}
            found += [
                f"Resources.{name}"
                for name in sorted(set(mine) | set(theirs))
                if mine.get(name) != theirs.get(name)
            ]
        elif source.get(section) != built.get(section):
            found.append(section)
    return found


def zip_directory(directory: Path) -> bytes:
    """The directory's files (precompiled bytecode included) in a zip, paths relative to it:
    Lambda unpacks a function's zip into /var/task and a layer's into /opt."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def code_sha256(archive: bytes) -> str:
    """A zip's digest as Lambda reports it (``CodeSha256``: base64 of the SHA-256)."""
    return base64.b64encode(hashlib.sha256(archive).digest()).decode()


@dataclass
class Artifacts:
    """The built directories, zipped and uploaded to one bucket (as `sam deploy` packages)."""

    s3: Any
    bucket: str
    build_dir: Path = BUILD_DIR
    by_key: dict[str, bytes] = field(default_factory=dict)

    def package(self, template: dict[str, Any]) -> dict[str, Any]:
        """A copy of the template whose local ``CodeUri``/``ContentUri`` point at uploaded zips."""
        template = copy.deepcopy(template)
        for name, resource in template["Resources"].items():
            properties = resource.get("Properties", {})
            for key in ARTIFACT_PROPERTIES:
                location = properties.get(key)
                if not isinstance(location, str) or location.startswith("s3://"):
                    continue
                directory = self.build_dir / location
                if not directory.is_dir():
                    raise BuildError(f"{name}.{key}: {directory} is not a built directory")
                archive = zip_directory(directory)
                object_key = f"{location}-{hashlib.sha256(archive).hexdigest()[:16]}.zip"
                self.s3.put_object(Bucket=self.bucket, Key=object_key, Body=archive)
                self.by_key[object_key] = archive
                properties[key] = f"s3://{self.bucket}/{object_key}"
        return template


class _NoManagedPolicies:
    """The translator's managed-policy loader: the template names no AWS managed policy."""

    def load(self) -> dict[str, str]:
        return {}


def sam_transform(template: dict[str, Any]) -> dict[str, Any]:
    """The template after the ``AWS::Serverless-2016-10-31`` transform (needs a region)."""
    return transform(copy.deepcopy(template), {}, _NoManagedPolicies())  # type: ignore[no-any-return]


# --- parameters -------------------------------------------------------------------------


def parameter_values(template: Mapping[str, Any], offered: Mapping[str, str]) -> dict[str, str]:
    """Every parameter's value: offered, else its default. Each is checked against its
    constraints as CloudFormation checks them (moto does not), and offers for parameters the
    template does not declare are dropped, so that a caller may offer values for optional
    features that come and go."""
    values: dict[str, str] = {}
    problems = []
    for name, declaration in (template.get("Parameters") or {}).items():
        value = offered.get(name, declaration.get("Default"))
        if value is None:
            problems.append(f"{name}: required, and the deploy test offers no value for it")
            continue
        values[name] = str(value)
        problem = constraint_problem(declaration, str(value))
        if problem:
            problems.append(f"{name}={value!r}: {problem}")
    if problems:
        raise DeployError("parameters: " + "; ".join(problems))
    return values


def constraint_problem(declaration: Mapping[str, Any], value: str) -> str | None:
    """The first constraint of a parameter declaration that the value breaks (CloudFormation
    User Guide, "Parameters syntax": AllowedPattern, AllowedValues, Min/MaxValue, Min/MaxLength)."""
    allowed = declaration.get("AllowedValues")
    if allowed is not None and value not in [str(item) for item in allowed]:
        return f"not one of {allowed}"
    pattern = declaration.get("AllowedPattern")
    # "When applied to a parameter of type CommaDelimitedList, the pattern must match each value
    # in the list" (the same page, AllowedPattern).
    items = value.split(",") if declaration.get("Type") == "CommaDelimitedList" else [value]
    if pattern is not None and any(re.fullmatch(pattern, item) is None for item in items):
        return f"does not match {pattern}"
    if declaration.get("Type") == "Number":
        number = float(value)
        if "MinValue" in declaration and number < float(declaration["MinValue"]):
            return f"below {declaration['MinValue']}"
        if "MaxValue" in declaration and number > float(declaration["MaxValue"]):
            return f"above {declaration['MaxValue']}"
    if "MinLength" in declaration and len(value) < int(declaration["MinLength"]):
        return f"shorter than {declaration['MinLength']}"
    if "MaxLength" in declaration and len(value) > int(declaration["MaxLength"]):
        return f"longer than {declaration['MaxLength']}"
    return None


# --- what moto cannot create, and what stands in for it ----------------------------------


def moto_can_create(resource_type: str) -> bool:
    """Whether moto's CloudFormation has a model for the type (it skips any other type)."""
    from moto.cloudformation.parsing import NULL_MODELS, get_model_map

    if resource_type.startswith("Custom::"):
        return True
    return resource_type not in NULL_MODELS and resource_type in get_model_map()


@dataclass
class StandIn:
    """The values CloudFormation would give references to a resource moto cannot create."""

    logical_id: str
    resource_type: str
    ref: str
    attributes: dict[str, str]


def placeholder(resolver: Resolver, logical_id: str, resource_type: str) -> StandIn:
    name = f"{resolver.values['AWS::StackName']}-{logical_id}-{PLACEHOLDER}"
    service = resource_type.split("::")[1].lower()
    region, account = resolver.values["AWS::Region"], resolver.values["AWS::AccountId"]
    arn = f"arn:aws:{service}:{region}:{account}:{logical_id.lower()}:{name}"
    return StandIn(logical_id, resource_type, name, {"Arn": arn})


def secret_stand_in(
    clients: Clients, resolver: Resolver, logical_id: str, resource: Any
) -> StandIn:
    """The secret created by the template's name: the functions read it. Empty, or, with
    ``GenerateSecretString``, holding a value GetRandomPassword makes with its settings, as
    CloudFormation has Secrets Manager generate one (GenerateSecretString's properties are
    GetRandomPassword's, CloudFormation Template Reference). ``Ref`` of an
    ``AWS::SecretsManager::Secret`` is its ARN (CloudFormation Template Reference)."""
    # Only what the stand-in is made of (its replicas, ReplicaRegions, are not stood in).
    made_of = ("Name", "Description", "GenerateSecretString")
    given = resource.get("Properties", {})
    properties = {key: resolver.resolve(given[key]) for key in made_of if key in given}
    name = properties.get("Name") or placeholder(resolver, logical_id, resource["Type"]).ref
    arguments = {"Name": name}
    if "Description" in properties:
        arguments["Description"] = properties["Description"]
    try:
        secrets = clients("secretsmanager")
        generate = properties.get("GenerateSecretString")
        if generate is not None:
            if set(generate) & {"SecretStringTemplate", "GenerateStringKey"}:
                raise NotImplementedError(f"{logical_id}: a generated JSON secret is not modelled")
            arguments["SecretString"] = secrets.get_random_password(**generate)["RandomPassword"]
        arn = secrets.create_secret(**arguments)["ARN"]
    except ClientError as error:
        stack = resolver.values["AWS::StackName"]
        raise DeployError(f"stack {stack}: {logical_id} (secret {name!r}): {error}") from error
    return StandIn(logical_id, resource["Type"], arn, {"Id": arn})


STAND_INS: dict[str, Callable[[Clients, Resolver, str, Any], StandIn]] = {
    "AWS::SecretsManager::Secret": secret_stand_in,
}


def substitute(node: Any, values: Mapping[str, StandIn]) -> Any:
    """The fragment with every reference to a stand-in (``Ref``, ``Fn::GetAtt``, a ``${...}``
    of ``Fn::Sub``) replaced by the stand-in's value."""
    if isinstance(node, list):
        return [substitute(item, values) for item in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in values:
        return values[node["Ref"]].ref
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        logical_id, attribute = target if isinstance(target, list) else target.split(".", 1)
        if logical_id in values:
            return values[logical_id].attributes.get(attribute, values[logical_id].ref)
    if set(node) == {"Fn::Sub"}:
        argument = node["Fn::Sub"]
        text, variables = (argument, {}) if isinstance(argument, str) else argument

        def replace(match: re.Match[str]) -> str:
            logical_id, _, attribute = match.group(1).partition(".")
            if logical_id in variables or logical_id not in values:
                return match.group(0)
            stand_in = values[logical_id]
            return stand_in.attributes.get(attribute, stand_in.ref) if attribute else stand_in.ref

        text = re.sub(r"\$\{([^}!][^}]*)\}", replace, text)
        if isinstance(argument, str):
            return {"Fn::Sub": text}
        return {"Fn::Sub": [text, substitute(variables, values)]}
    return {key: substitute(value, values) for key, value in node.items()}


def without_novalue_items(node: Any, resolver: cfn_intrinsics.Resolver) -> Any:
    """The fragment without the list items that are an ``Fn::If`` choosing ``AWS::NoValue``,
    which CloudFormation removes ("AWS::NoValue: Removes the corresponding resource property
    when specified as a return value in the Fn::If intrinsic function", CloudFormation
    Template Reference, "Pseudo parameters"); moto keeps them as nulls."""
    if isinstance(node, dict) and set(node) == {"Fn::If"}:
        condition, *branches = node["Fn::If"]
        return {"Fn::If": [condition, *(without_novalue_items(b, resolver) for b in branches)]}
    if isinstance(node, dict):
        return {key: without_novalue_items(value, resolver) for key, value in node.items()}
    if not isinstance(node, list):
        return node
    kept = []
    for item in node:
        chosen = item
        while isinstance(chosen, dict) and set(chosen) == {"Fn::If"}:  # an Fn::If in a branch too
            condition, when_true, when_false = chosen["Fn::If"]
            chosen = when_true if resolver.conditions[condition] else when_false
        if chosen == NO_VALUE:
            continue
        kept.append(without_novalue_items(item, resolver))
    return kept


# --- deploying ----------------------------------------------------------------------------


@dataclass
class DeployedStack:
    name: str
    resolver: Resolver  # the intrinsic functions as CloudFormation resolves them in this stack
    template: dict[str, Any]  # what CreateStack was given
    stand_ins: dict[str, StandIn]
    resources: list[dict[str, Any]]  # DescribeStackResources
    outputs: dict[str, str]
    status: str

    def present(self) -> dict[str, dict[str, Any]]:
        """The resources CloudFormation creates in this stack (their condition holds)."""
        return {
            name: resource
            for name, resource in self.template["Resources"].items()
            if self.resolver.present(resource)
        }

    def created(self) -> dict[str, dict[str, Any]]:
        """The resources moto's stack holds, by logical id."""
        return {r["LogicalResourceId"]: r for r in self.resources if r.get("LogicalResourceId")}

    def not_created(self) -> dict[str, str]:
        """Resources CloudFormation would create that moto's stack does not hold: type by id."""
        created = self.created()
        return {n: r["Type"] for n, r in self.present().items() if n not in created}

    def physical_id(self, logical_id: str) -> str:
        return str(self.created()[logical_id]["PhysicalResourceId"])


@dataclass
class Deployer:
    """Creates stacks from one transformed template through CloudFormation's API."""

    clients: Clients
    transformed: dict[str, Any]
    bucket: str
    region: str
    account_id: str
    timeout: float = 30.0

    def deploy(self, stack_name: str, offered: Mapping[str, str]) -> DeployedStack:
        _parse_each_template_once()  # in moto's server, which runs in this process
        values = parameter_values(self.transformed, offered)
        pseudo = pseudo_parameters(stack_name, self.region, self.account_id)
        # moto checks neither the Rules nor the conditions' errors; CloudFormation checks both
        # before it creates anything (template_model.refusals), and so nothing is made here.
        refused = refusals({**values, **pseudo}, self.transformed)
        if refused:
            raise DeployError(f"stack {stack_name}: refused before any resource: {refused}")
        resolver = Resolver({**values, **pseudo}, self.transformed)
        stand_ins = {}
        for logical_id, resource in self.transformed["Resources"].items():
            if resolver.present(resource) and not moto_can_create(resource["Type"]):
                make = STAND_INS.get(resource["Type"])
                stand_ins[logical_id] = (
                    make(self.clients, resolver, logical_id, resource)
                    if make
                    else placeholder(resolver, logical_id, resource["Type"])
                )
        template = without_novalue_items(substitute(self.transformed, stand_ins), resolver)
        self._create(stack_name, template, values)
        return describe_deployed(self.clients, stack_name, resolver, template, stand_ins)

    def _create(self, stack_name: str, template: dict[str, Any], values: Mapping[str, str]) -> None:
        """``CreateStack`` with the template in S3, then wait until the stack is no longer in
        progress."""
        cloudformation = self.clients("cloudformation")
        try:
            cloudformation.create_stack(
                StackName=stack_name,
                TemplateURL=upload_template(
                    self.clients, self.bucket, self.region, stack_name, template
                ),
                Parameters=stack_parameters(values),
                Capabilities=CAPABILITIES,
            )
        except Exception as error:  # moto may answer a crash with a 500, a service's error as JSON
            raise DeployError(f"stack {stack_name}: CreateStack failed: {error}") from error
        stack = settled(cloudformation, stack_name, self.timeout)
        status = str(stack["StackStatus"])
        if status != "CREATE_COMPLETE":
            events = cloudformation.describe_stack_events(StackName=stack_name)["StackEvents"]
            failures = [
                f"{e['LogicalResourceId']}: {e.get('ResourceStatusReason')}"
                for e in events
                if e["ResourceStatus"].endswith("FAILED")
            ]
            raise DeployError(
                f"stack {stack_name} is {status} ({stack.get('StackStatusReason')}); "
                f"failed resources: {failures or 'none reported'}"
            )


def pseudo_parameters(stack_name: str, region: str, account_id: str) -> dict[str, str]:
    """The pseudo parameters a stack's template resolves against."""
    return {"AWS::StackName": stack_name, "AWS::Region": region, "AWS::AccountId": account_id}


def stack_parameters(values: Mapping[str, str]) -> list[dict[str, str]]:
    """Parameter values as CreateStack and UpdateStack take them."""
    return [{"ParameterKey": key, "ParameterValue": value} for key, value in values.items()]


def upload_template(
    clients: Clients, bucket: str, region: str, stack_name: str, template: Mapping[str, Any]
) -> str:
    """The template in S3, and its URL: `sam deploy` passes a template over the 51,200-byte body
    limit this way."""
    body = json.dumps(template).encode()
    key = f"templates/{stack_name}-{hashlib.sha256(body).hexdigest()[:16]}.json"
    clients("s3").put_object(Bucket=bucket, Key=key, Body=body)
    return f"https://s3.{region}.amazonaws.com/{bucket}/{key}"


def settled(cloudformation: Any, stack: str, timeout: float) -> dict[str, Any]:
    """The stack's description once it is no longer in progress (or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while True:
        description: dict[str, Any] = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
        if not str(description["StackStatus"]).endswith("_IN_PROGRESS"):
            return description
        if time.monotonic() > deadline:
            return description
        time.sleep(0.1)


def describe_deployed(
    clients: Clients,
    stack_name: str,
    resolver: Resolver,
    template: dict[str, Any],
    stand_ins: dict[str, StandIn],
) -> DeployedStack:
    """The stack as CloudFormation describes it now, with what the test stood in for."""
    cloudformation = clients("cloudformation")
    stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
    resources = cloudformation.describe_stack_resources(StackName=stack_name)
    return DeployedStack(
        name=stack_name,
        resolver=resolver,
        template=template,
        stand_ins=stand_ins,
        resources=resources["StackResources"],
        outputs={o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])},
        status=str(stack["StackStatus"]),
    )


# --- names in shared namespaces ------------------------------------------------------------


def _log_group_name(clients: Clients, physical_id: str) -> str:
    groups = clients("logs").describe_log_groups(logGroupNamePrefix=physical_id)["logGroups"]
    (name,) = [g["logGroupName"] for g in groups if g["logGroupName"] == physical_id]
    return str(name)


def _alias_name(clients: Clients, physical_id: str) -> str:
    aliases = clients("kms").list_aliases()["Aliases"]
    (name,) = [a["AliasName"] for a in aliases if a["AliasName"] == physical_id]
    return str(name)


@dataclass(frozen=True)
class Namespace:
    """Where a resource type's names must be unique, the template property that sets a name
    (CloudFormation generates a unique one when it is left out), and how to read a deployed
    resource's name back from its service, given its physical id."""

    label: str
    name_property: str
    read_name: Callable[[Clients, str], str]


NAMESPACES: dict[str, Namespace] = {
    # "Schedule names must be unique within a schedule group" (EventBridge Scheduler API
    # Reference, CreateSchedule); the schedule group is set apart below.
    "AWS::Scheduler::Schedule": Namespace(
        "EventBridge Scheduler schedules in group",
        "Name",
        lambda c, pid: c("scheduler").get_schedule(Name=pid)["Name"],
    ),
    # "The name or Amazon Resource Name (ARN) of the layer" identifies it in the account and
    # Region; PublishLayerVersion adds a version to an existing name (Lambda API Reference).
    "AWS::Lambda::LayerVersion": Namespace(
        "Lambda layers of the account and Region",
        "LayerName",
        lambda c, pid: c("lambda").get_layer_version_by_arn(Arn=pid)["LayerArn"].split(":")[-1],
    ),
    # "The secret name must be unique within the same AWS Region" (Secrets Manager API
    # Reference, CreateSecret).
    "AWS::SecretsManager::Secret": Namespace(
        "secrets of the account and Region",
        "Name",
        lambda c, pid: c("secretsmanager").describe_secret(SecretId=pid)["Name"],
    ),
    # "Log group names must be unique within a Region for an AWS account" (CloudWatch Logs API
    # Reference, CreateLogGroup).
    "AWS::Logs::LogGroup": Namespace(
        "log groups of the account and Region", "LogGroupName", _log_group_name
    ),
    # "All dashboards in your account are global, not region-specific" (CloudWatch API
    # Reference, PutDashboard).
    "AWS::CloudWatch::Dashboard": Namespace(
        "CloudWatch dashboards of the account (all Regions)",
        "DashboardName",
        lambda c, pid: c("cloudwatch").get_dashboard(DashboardName=pid)["DashboardName"],
    ),
    # "The alias name must be unique in the account and Region" (KMS API Reference, CreateAlias).
    "AWS::KMS::Alias": Namespace("KMS aliases of the account and Region", "AliasName", _alias_name),
    # Function names are unique in the account and Region (Lambda API Reference, CreateFunction).
    "AWS::Lambda::Function": Namespace(
        "Lambda functions of the account and Region",
        "FunctionName",
        lambda c, pid: c("lambda").get_function_configuration(FunctionName=pid)["FunctionName"],
    ),
    # IAM names are unique in the account, IAM being global (IAM User Guide, "IAM identifiers").
    "AWS::IAM::Role": Namespace(
        "IAM roles of the account",
        "RoleName",
        lambda c, pid: c("iam").get_role(RoleName=pid)["Role"]["RoleName"],
    ),
    "AWS::IAM::ManagedPolicy": Namespace(
        "IAM managed policies of the account",
        "ManagedPolicyName",
        lambda c, pid: c("iam").get_policy(PolicyArn=pid)["Policy"]["PolicyName"],
    ),
    # Queue names are unique in the account and Region (SQS API Reference, CreateQueue).
    "AWS::SQS::Queue": Namespace(
        "SQS queues of the account and Region",
        "QueueName",
        lambda c, pid: (
            c("sqs")
            .get_queue_attributes(QueueUrl=pid, AttributeNames=["QueueArn"])["Attributes"][
                "QueueArn"
            ]
            .split(":")[-1]
        ),
    ),
    # Topic names are unique in the account and Region (SNS API Reference, CreateTopic).
    "AWS::SNS::Topic": Namespace(
        "SNS topics of the account and Region",
        "TopicName",
        lambda c, pid: (
            c("sns").get_topic_attributes(TopicArn=pid)["Attributes"]["TopicArn"].split(":")[-1]
        ),
    ),
    # Rule names are unique on their event bus (EventBridge API Reference, PutRule).
    "AWS::Events::Rule": Namespace(
        "EventBridge rules on the bus",
        "Name",
        lambda c, pid: c("events").describe_rule(Name=pid)["Name"],
    ),
    # Alarm names are unique in the account and Region (CloudWatch API Reference,
    # PutMetricAlarm: "The name for the alarm. This name must be unique within the Region").
    "AWS::CloudWatch::Alarm": Namespace(
        "CloudWatch alarms of the account and Region",
        "AlarmName",
        lambda c, pid: c("cloudwatch").describe_alarms(AlarmNames=[pid])["MetricAlarms"][0][
            "AlarmName"
        ],
    ),
    "AWS::CloudWatch::CompositeAlarm": Namespace(
        "CloudWatch alarms of the account and Region",
        "AlarmName",
        lambda c, pid: c("cloudwatch").describe_alarms(
            AlarmNames=[pid], AlarmTypes=["CompositeAlarm"]
        )["CompositeAlarms"][0]["AlarmName"],
    ),
    # "Table names must be unique within each Region" for an account (DynamoDB API Reference,
    # CreateTable, TableName).
    "AWS::DynamoDB::Table": Namespace(
        "DynamoDB tables of the account and Region",
        "TableName",
        lambda c, pid: c("dynamodb").describe_table(TableName=pid)["Table"]["TableName"],
    ),
}


def namespace_of(resource_type: str, properties: Mapping[str, Any]) -> str:
    label = NAMESPACES[resource_type].label
    if resource_type == "AWS::Scheduler::Schedule":
        return f"{label} {properties.get('GroupName', 'default')}"
    if resource_type == "AWS::Events::Rule":
        return f"{label} {properties.get('EventBusName', 'default')}"
    return label


@dataclass
class Claim:
    """A name a stack holds in a shared namespace, and where it comes from."""

    logical_id: str
    source: str  # "template" (the name the template sets) or "deployed" (read back)


@dataclass
class Names:
    """The names one stack claims, by (namespace, name); and the named resources moto created
    whose deployed name could not be read back as the template sets it."""

    claims: dict[tuple[str, str], list[Claim]] = field(default_factory=dict)
    renamed_by_moto: dict[str, str] = field(default_factory=dict)  # logical id -> type
    unclassified: dict[str, str] = field(default_factory=dict)  # logical id -> type

    def claim(self, namespace: str, name: str, claim: Claim) -> None:
        self.claims.setdefault((namespace, name), []).append(claim)


def stack_names(stack: DeployedStack, clients: Clients) -> Names:
    """Every name the stack holds in a shared namespace: the names the template sets (resolved
    in this stack, whether or not moto could create the resource) and the names read back from
    the services for every named resource moto created (generated names included)."""
    names = Names()
    created = stack.created()
    for logical_id, resource in stack.present().items():
        kind = resource["Type"]
        if kind in NAMELESS:
            continue
        if kind not in NAMESPACES:
            names.unclassified[logical_id] = kind
            continue
        properties = stack.resolver.resolve(resource.get("Properties", {}))
        namespace = namespace_of(kind, properties)
        wanted = properties.get(NAMESPACES[kind].name_property)
        if wanted is not None:
            names.claim(namespace, str(wanted), Claim(logical_id, "template"))
        if logical_id not in created:
            continue
        physical_id = created[logical_id].get("PhysicalResourceId")
        try:
            deployed = NAMESPACES[kind].read_name(clients, physical_id) if physical_id else None
        except (ClientError, BotoCoreError, ValueError, KeyError, IndexError):
            deployed = None
        if deployed is None or (wanted is not None and deployed != wanted):
            names.renamed_by_moto[logical_id] = kind
        if deployed is not None:
            names.claim(namespace, deployed, Claim(logical_id, "deployed"))
    return names


def policy_statements(document: Any) -> list[dict[str, Any]]:
    """A policy document's statements, as moto's CloudFormation stored it: an inline policy may
    be the Python text of the mapping (str(dict)), which moto returns as it is (AWS returns the
    document)."""
    parsed = ast.literal_eval(document) if isinstance(document, str) else document
    found: list[dict[str, Any]] = parsed["Statement"]
    return found


def server_client(service: str) -> Any:
    """A client of moto's server (``AWS_ENDPOINT_URL``, set by the ``moto_server`` fixture)."""
    return boto3.client(service)  # type: ignore[call-overload]


def _parse_each_template_once() -> None:
    """moto's CloudFormation parses a stack's template text (our JSON) with PyYAML's pure-Python
    loader at each CreateStack and UpdateStack, about half a second for this template; the parse
    is a pure function of the text, so each text is parsed once in a process and moto gets a
    deep copy of that parse (its own to change, as before)."""
    from moto.cloudformation.models import Stack

    parse = vars(Stack)["parse_template"].__func__
    if getattr(parse, "parses_once", False):
        return
    parsed: dict[str, Any] = {}

    def parse_template(template: str) -> dict[str, Any]:
        if template not in parsed:
            parsed[template] = parse(template)
        found: dict[str, Any] = copy.deepcopy(parsed[template])
        return found

    parse_template.parses_once = True  # type: ignore[attr-defined]
    Stack.parse_template = staticmethod(parse_template)  # type: ignore[method-assign]


def server_deployer(bucket: str) -> Deployer:
    """A ``Deployer`` of `make build`'s output (packaged into ``bucket``, which it creates) on
    moto's server; it fails, saying to run `make build`, when the build is missing or stale."""
    built = built_template()
    s3 = server_client("s3")
    s3.create_bucket(Bucket=bucket)
    return Deployer(
        clients=server_client,
        transformed=sam_transform(Artifacts(s3, bucket).package(built)),
        bucket=bucket,
        region=boto3.session.Session().region_name,
        account_id=server_client("sts").get_caller_identity()["Account"],
    )
