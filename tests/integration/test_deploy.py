"""The SAM-built template deployed through CloudFormation, twice, side by side in one account and
Region, on moto's server (issue 8); then the deployed functions run with the configuration they
were deployed with.

The build is `make build`'s (``.aws-sam/build``; `make test` builds before it runs the tests).
Its function and layer directories are zipped and uploaded to S3, the template is transformed by
aws-sam-translator and created as two stacks through CloudFormation's API, with every optional
resource switched on. moto's CloudFormation cannot create every resource type: ``deployment``
describes what it does instead, and each type it skips, or creates under a name other than the
template's, is listed here with the template assertions that cover it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest

from cmsemu import Emulator
from deployment import (
    NAMESPACES,
    ROOT,
    Artifacts,
    DeployedStack,
    Deployer,
    built_template,
    code_sha256,
    sam_transform,
    server_client,
    stack_names,
)
from lambda_process import Invocation, invoke
from support import emitted_metrics, load_event

pytestmark = [
    pytest.mark.integration,
    # moto warns about each resource type it skips; the test lists them instead.
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
]

STACKS = ("cmstoken-blue", "cmstoken-green")
BUCKET = "cmstoken-deploy-artifacts"
# An https address (the template's AllowedPattern) in a top-level domain reserved never to
# resolve (RFC 2606): a function that tried to reach it would fail, and the audit shows it.
SERVICE_BASE_URL = "https://cms.example.invalid"
# Values offered for the template's parameters: the required base URL, and every optional
# resource switched on (one-click re-authorization too: tests/integration/test_deploy_one_click.py
# looks at what it adds). Offers for parameters the template no longer declares are dropped.
OFFERED = {
    "ServiceBaseUrl": SERVICE_BASE_URL,
    "DeployExampleConsumer": "true",
    "AlarmEmail": "ops@example.com",
    "AlarmTopicKmsKey": "create",
    "OneClickReauthorization": "true",
}

TEMPLATE_TESTS = "tests/unit/template/test_template.py"
RULES_TESTS = "tests/unit/template/test_template_rules.py"
NAMES_RULE = f"{RULES_TESTS}::test_names_in_shared_namespaces_carry_the_stack_name"
ONE_CLICK_TESTS = "tests/unit/template/test_one_click.py"
IAM_TESTS = "tests/unit/template/test_iam_roles.py"
# Resource types moto's CloudFormation does not create (it has no model for them), each with
# the template assertions that cover it instead: its configuration, and the name rule that keeps
# two stacks apart. A type moto learns to create, or a new type it cannot, fails the test below.
NOT_CREATED_BY_MOTO: dict[str, tuple[str, ...]] = {
    "AWS::SecretsManager::Secret": (
        f"{TEMPLATE_TESTS}::test_both_secrets_are_created_empty",
        f"{ONE_CLICK_TESTS}::test_the_signing_key_is_generated_and_goes_with_the_stack",
        NAMES_RULE,
    ),
    "AWS::SecretsManager::ResourcePolicy": (
        f"{TEMPLATE_TESTS}::test_only_the_products_functions_may_read_the_refresh_credential",
        f"{ONE_CLICK_TESTS}::test_the_signing_keys_policy_denies_reading_to_all_but_the_links_role",
        f"{RULES_TESTS}::test_resource_policies_name_their_resource",
    ),
    "AWS::Scheduler::Schedule": (
        f"{TEMPLATE_TESTS}::test_the_schedule_retries_and_dead_letters",
        f"{ONE_CLICK_TESTS}::test_the_daily_reminder_asks_the_links_function_to_remind",
        NAMES_RULE,
        f"{RULES_TESTS}::test_the_schedule_name_fits_for_a_stack_name_of_56_characters",
    ),
    "AWS::Lambda::EventInvokeConfig": (
        f"{TEMPLATE_TESTS}::test_failed_asynchronous_invocations_go_to_the_dead_letter_queue",
        f"{ONE_CLICK_TESTS}::test_the_bootstraps_asynchronous_outcomes_go_to_the_links_function_unretried",
    ),
    "AWS::Lambda::Url": (
        f"{ONE_CLICK_TESTS}::test_the_function_url_is_public_buffered_and_without_cors",
    ),
    "AWS::Lambda::Alias": (
        f"{ONE_CLICK_TESTS}::test_the_links_reach_the_bootstrap_only_through_its_alias",
    ),
    "AWS::IAM::RolePolicy": (
        f"{IAM_TESTS}::test_each_role_policy_grants_exactly_its_table",
        f"{ONE_CLICK_TESTS}::test_the_links_role_grants_exactly_its_contract",
        f"{ONE_CLICK_TESTS}::test_the_bootstrap_may_invoke_only_the_links_function",
    ),
    "AWS::SQS::QueuePolicy": (
        f"{RULES_TESTS}::test_resource_policies_name_their_resource",
        f"{TEMPLATE_TESTS}::test_the_dead_letter_queue_admits_only_the_refresh_rules_dead_letters",
        f"{IAM_TESTS}::test_each_resource_policy_is_exactly_its_table",
    ),
    "AWS::SNS::TopicPolicy": (f"{RULES_TESTS}::test_alarm_topics_are_deliverable",),
    "AWS::SNS::Subscription": (f"{TEMPLATE_TESTS}::test_the_email_subscription_is_optional",),
    "AWS::CloudWatch::Alarm": (
        f"{TEMPLATE_TESTS}::test_every_alarm_notifies_the_topic_and_says_what_to_do",
        f"{RULES_TESTS}::test_alarm_windows_stay_within_cloudwatch_limits",
        NAMES_RULE,
    ),
    "AWS::CloudWatch::CompositeAlarm": (
        f"{RULES_TESTS}::test_every_alarm_can_say_its_incident_ended",
        NAMES_RULE,
    ),
}
# Named types moto creates under a name other than the template's (and so cannot show to be
# unique): the layer gets a generated name, LayerName ignored, and no physical id.
RENAMED_BY_MOTO: dict[str, tuple[str, ...]] = {
    "AWS::Lambda::LayerVersion": (NAMES_RULE,),
}


@dataclass
class Deployment:
    stacks: list[DeployedStack]
    artifacts: Artifacts
    endpoint: str

    def configuration(self, stack: DeployedStack, logical_id: str) -> dict[str, Any]:
        """The deployed function's configuration, as Lambda reports it."""
        name = stack.physical_id(logical_id)
        return dict(boto3.client("lambda").get_function_configuration(FunctionName=name))

    def code(self, stack: DeployedStack, logical_id: str) -> tuple[bytes, list[bytes]]:
        """The deployed function's zip (found by the CodeSha256 Lambda reports) and its layers'
        zips (from the template: moto does not attach layers, see ``deployment``)."""
        digest = self.configuration(stack, logical_id)["CodeSha256"]
        (code,) = [a for a in self.artifacts.by_key.values() if code_sha256(a) == digest]
        resources = stack.template["Resources"]
        layers = [
            self.artifacts.by_key[resources[layer["Ref"]]["Properties"]["Content"]["S3Key"]]
            for layer in resources[logical_id]["Properties"].get("Layers", [])
        ]
        return code, layers

    def run(
        self,
        stack: DeployedStack,
        logical_id: str,
        event: Any,
        workdir: Path,
        environment: dict[str, str] | None = None,
    ) -> tuple[Invocation, dict[str, Any]]:
        """Invoke a deployed function in a fresh interpreter with its deployed environment."""
        configuration = self.configuration(stack, logical_id)
        code, layers = self.code(stack, logical_id)
        invocation = invoke(
            configuration,
            code,
            layers,
            event,
            workdir=workdir,
            aws_endpoint=self.endpoint,
            environment=environment,
        )
        return invocation, configuration


@pytest.fixture
def deployment(moto_server: str) -> Deployment:
    """Both stacks, created from `make build`'s output on moto's server."""
    built = built_template()  # fails, saying to run `make build`, when missing or stale
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    artifacts = Artifacts(s3, BUCKET)
    transformed = sam_transform(artifacts.package(built))
    deployer = Deployer(
        clients=server_client,
        transformed=transformed,
        bucket=BUCKET,
        region=boto3.session.Session().region_name,
        account_id=boto3.client("sts").get_caller_identity()["Account"],
    )
    stacks = [deployer.deploy(name, OFFERED) for name in STACKS]
    return Deployment(stacks=stacks, artifacts=artifacts, endpoint=moto_server)


def test_two_stacks_in_one_region_claim_no_name_in_common(deployment: Deployment) -> None:
    """Both stacks reach CREATE_COMPLETE, and no name in a namespace they share is claimed by
    both: not a name the template sets (resolved for each stack, whether or not moto could
    create the resource), nor a name read back from the service. Shared namespaces (see
    ``deployment.NAMESPACES`` for each AWS document): EventBridge Scheduler schedule names are
    unique within a schedule group; Lambda layer and function names, secret names, log group
    names, KMS alias names, queue, topic and alarm names are unique per account and Region;
    CloudWatch dashboards and IAM names are global to the account."""
    blue, green = deployment.stacks
    assert (blue.status, green.status) == ("CREATE_COMPLETE", "CREATE_COMPLETE")
    names = {stack.name: stack_names(stack, server_client) for stack in deployment.stacks}
    for stack in deployment.stacks:
        found = names[stack.name]
        assert not found.unclassified, (
            f"{stack.name}: resource types with no namespace in deployment.NAMESPACES or "
            f"NAMELESS: {found.unclassified}"
        )
        claimed = {
            (claim.logical_id, claim.source) for claims in found.claims.values() for claim in claims
        }
        for logical_id, resource in stack.present().items():
            kind = resource["Type"]
            # The two names the review found shared must be set, and compared, here.
            if kind in ("AWS::Scheduler::Schedule", "AWS::Lambda::LayerVersion"):
                assert (logical_id, "template") in claimed, f"{stack.name}: {logical_id}"
            # Every other named resource moto created is compared under its deployed name.
            created = kind in NAMESPACES and logical_id in stack.created()
            if created and logical_id not in found.renamed_by_moto:
                assert (logical_id, "deployed") in claimed, f"{stack.name}: {logical_id}"
    shared = sorted(set(names[blue.name].claims) & set(names[green.name].claims))
    assert not shared, "names claimed by both stacks:\n" + "\n".join(
        f"  {namespace}: {name!r} ({blue.name}: {names[blue.name].claims[(namespace, name)]}; "
        f"{green.name}: {names[green.name].claims[(namespace, name)]})"
        for namespace, name in shared
    )


def test_moto_creates_every_type_but_those_listed_with_their_template_assertions(
    deployment: Deployment,
) -> None:
    """The resource types moto did not create, and the named types it created under another
    name than the template's, are exactly those listed above with the template assertions
    that cover them."""
    not_created = {kind for stack in deployment.stacks for kind in stack.not_created().values()}
    renamed = {
        kind
        for stack in deployment.stacks
        for kind in stack_names(stack, server_client).renamed_by_moto.values()
    }
    for found, listed, what in (
        (not_created, NOT_CREATED_BY_MOTO, "not created by moto"),
        (renamed, RENAMED_BY_MOTO, "created by moto under another name"),
    ):
        assert found == set(listed), (
            f"resource types {what}: {sorted(found)}; listed: {sorted(listed)}. "
            f"List each new one with the template assertions that cover it: "
            f"{sorted(found - set(listed))}; drop each one moto now handles, the deploy test "
            f"covers it: {sorted(set(listed) - found)}"
        )


def _covering_module(path: str) -> Any:
    """A test module of tests/unit, loaded under a name of its own."""
    name = "_covering_" + Path(path).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs, as importlib's recipe does: a dataclass in it looks its
        # module up there.
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_every_listed_type_names_template_assertions_that_exist() -> None:
    missing = []
    for resource_type, node_ids in {**NOT_CREATED_BY_MOTO, **RENAMED_BY_MOTO}.items():
        assert node_ids, resource_type
        for node_id in node_ids:
            path, _, function = node_id.partition("::")
            test = getattr(_covering_module(path), function, None)
            if not (function.startswith("test_") and callable(test)):
                missing.append(f"{resource_type}: {node_id}")
    assert not missing, "template assertions not found:\n  " + "\n  ".join(missing)


def product_namespaces(stack: DeployedStack) -> set[str]:
    """The metric namespaces of the stack's alarms on its own metrics (resolved for the stack;
    moto creates no alarm, the template says where they look)."""
    found = set()
    for resource in stack.present().values():
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            namespace = stack.resolver.resolve(resource["Properties"]).get("Namespace")
            if namespace and not namespace.startswith("AWS/"):
                found.add(namespace)
    return found


def metric_documents(stdout: str) -> list[dict[str, Any]]:
    """The embedded-metric-format documents a run printed."""
    documents = []
    for line in stdout.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            documents.append(json.loads(line))
    return documents


def assert_ran_from_its_packages(run: Invocation, workdir: Path) -> None:
    """The handler came from the function's zip, the library and its dependencies (those the
    run imported: requests waits for an upstream call) from the layer's."""
    layer = str(workdir / "opt" / "python")
    assert run.modules["app"] == str(workdir / "task" / "app.py")
    assert str(run.modules["cmstoken"]).startswith(layer), run.modules
    assert str(run.modules["aws_lambda_powertools"]).startswith(layer), run.modules
    assert run.modules["requests"] is None or run.modules["requests"].startswith(layer)


def assert_uses_its_own_secrets(stack: DeployedStack, variables: dict[str, Any]) -> None:
    """The secret variables name this stack's secrets."""
    own = {stand_in.ref for stand_in in stack.stand_ins.values()}
    for variable in ("REFRESH_SECRET_ID", "SERVICE_TOKEN_SECRET_ID"):
        arn = boto3.client("secretsmanager").describe_secret(SecretId=variables[variable])["ARN"]
        assert arn in own, (stack.name, variable, variables[variable])


def test_a_deployed_rotator_finds_its_stack_not_bootstrapped_and_calls_no_one(
    deployment: Deployment, tmp_path: Path
) -> None:
    """Each stack's rotator, run in a fresh interpreter with the environment read back from its
    deployed configuration (SERVICE_BASE_URL stays the deployed https address), finds its own
    secrets empty: it fails as not bootstrapped (SPEC section 3), having looked up and
    connected to no host but moto's server, and reports the failure under the deployed
    POWERTOOLS_METRICS_NAMESPACE, which is the namespace its alarms watch."""
    for stack in deployment.stacks:
        workdir = tmp_path / stack.name
        run, configuration = deployment.run(
            stack, "RotatorFunction", load_event("rotator-scheduled"), workdir
        )
        variables = configuration["Environment"]["Variables"]
        assert run.error_type == "NotBootstrappedError", (run.error_message, run.stderr[-3000:])
        assert "bootstrap" in str(run.error_message)
        assert set(run.hosts) == {"127.0.0.1"}, run.hosts  # moto only (and seen: audited)
        assert urlparse(variables["SERVICE_BASE_URL"]).hostname not in run.hosts
        assert variables["SERVICE_BASE_URL"] == SERVICE_BASE_URL
        assert_ran_from_its_packages(run, workdir)
        assert_uses_its_own_secrets(stack, variables)
        documents = metric_documents(run.stdout)
        namespaces = {
            directive["Namespace"]
            for document in documents
            for directive in document["_aws"]["CloudWatchMetrics"]
        }
        assert namespaces == {variables["POWERTOOLS_METRICS_NAMESPACE"]}, run.stdout[-3000:]
        assert namespaces == product_namespaces(stack)
        metrics = emitted_metrics(run.stdout)
        assert metrics["NotBootstrapped"] == [1]
        assert metrics["RotationSucceeded"] == [0]


def test_a_deployed_bootstrap_reports_no_credential(deployment: Deployment, tmp_path: Path) -> None:
    """Each stack's bootstrap function, run with its deployed environment, reports its stack's
    credential absent and nothing pending, from moto alone."""
    for stack in deployment.stacks:
        workdir = tmp_path / stack.name
        run, configuration = deployment.run(
            stack, "BootstrapFunction", load_event("bootstrap-status"), workdir
        )
        assert run.error_type is None, (run.error_type, run.error_message, run.stderr[-3000:])
        assert run.result["credential"]["status"] == "absent"
        assert run.result["pending"] is None
        assert set(run.hosts) == {"127.0.0.1"}, run.hosts  # moto only (and seen: audited)
        assert_ran_from_its_packages(run, workdir)
        assert_uses_its_own_secrets(stack, configuration["Environment"]["Variables"])


def test_a_deployed_stack_authorizes_and_rotates_against_the_emulator(
    deployment: Deployment, emulator: Emulator, tmp_path: Path
) -> None:
    """The lifecycle with the deployed functions, each run in a fresh interpreter with its
    deployed environment but for one variable: SERVICE_BASE_URL is overridden to the emulator's
    http://127.0.0.1 address (the template admits https only; the library admits http for
    loopback hosts). Bootstrap start, approval, poll, then a scheduled rotation in one stack;
    the other stack's secrets stay empty. The emulator answers polls after 1 s and issues
    service tokens for 3 h, inside the deployed 6 h refresh margin, so the scheduled run is due."""
    emulator.config.poll_interval = 1
    emulator.config.service_token_lifetime = 3 * 3600
    blue, green = deployment.stacks
    upstream = {"SERVICE_BASE_URL": emulator.base_url}
    runs: list[Invocation] = []

    def run(logical_id: str, event: Any) -> Any:
        invocation, _ = deployment.run(
            blue, logical_id, event, tmp_path / f"run-{len(runs)}", environment=upstream
        )
        runs.append(invocation)
        assert invocation.error_type is None, (invocation.error_message, invocation.stderr)
        return invocation.result

    started = run("BootstrapFunction", load_event("bootstrap-start"))
    assert started["status"] == "pending"
    emulator.approve(started["user_code"])
    assert run("BootstrapFunction", load_event("bootstrap-poll"))["status"] == "authorized"
    rotated = run("RotatorFunction", load_event("rotator-scheduled"))
    assert rotated["outcome"] == "rotated"
    assert {host for invocation in runs for host in invocation.hosts} <= {"127.0.0.1"}
    assert emulator.counts["refresh"] == 1

    secrets = boto3.client("secretsmanager")
    published = secrets.get_secret_value(SecretId=blue.outputs["ServiceTokenSecretArn"])
    assert emulator.service_token_valid(json.loads(published["SecretString"])["token"])
    for output in ("RefreshCredentialSecretArn", "ServiceTokenSecretArn"):
        with pytest.raises(secrets.exceptions.ResourceNotFoundException):
            secrets.get_secret_value(SecretId=green.outputs[output])
