"""Upgrades keep the credential (issue 20, item 8): an update of a stack from an earlier template
to template.yaml, or a change of any parameter after deploy, replaces neither secret. A replaced
secret is a deleted credential, and a deleted refresh credential needs a person in a browser.

The earlier templates are kept in tests/data/releases (each release's template as released, and
the template as it stood on main before the first release). Each is created on moto's
CloudFormation, both secrets are written, and the stack is updated to template.yaml as
`sam deploy` updates it; both secrets must then be the same resources (same ARN) holding the
same value and version, still named by the functions' environment and the stack's outputs.
Every parameter of template.yaml (the deploy guide lists them all, none fixed at deploy) is then
changed after deploy, one update at a time. moto's CloudFormation does not create secrets:
``lifecycle`` does to them what CloudFormation's documents say it does, and the last tests show
that it does see a secret an update would replace or drop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from samtranslator.yaml_helper import yaml_parse

from deployment import ROOT, DeployError, server_client
from lifecycle import Lifecycle, Stack
from template_model import source

pytestmark = [
    pytest.mark.integration,
    # moto warns about each resource type it skips (deployment lists them).
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
    pytest.mark.filterwarnings("ignore:Unable to delete .*:UserWarning"),
]

TEMPLATE = ROOT / "template.yaml"
RELEASES = ROOT / "tests" / "data" / "releases"
KEPT = sorted(RELEASES.glob("*/template.yaml"))
SECRETS = ("RefreshCredentialSecret", "ServiceTokenSecret")
OUTPUTS = {
    "RefreshCredentialSecret": "RefreshCredentialSecretArn",
    "ServiceTokenSecret": "ServiceTokenSecretArn",
}
BASE_URL = "https://cms.example.invalid"
# A deploy with the defaults, and one with every optional resource switched on (as the deploy
# test deploys); values for parameters a template does not declare are dropped.
OFFERS = {
    "defaults": {"ServiceBaseUrl": BASE_URL},
    "everything on": {
        "ServiceBaseUrl": BASE_URL,
        "DeployExampleConsumer": "true",
        "AlarmEmail": "ops@example.com",
        "AlarmTopicKmsKey": "create",
    },
}
# What the two secrets hold once bootstrapped (SPEC section 3; made-up values).
DOCUMENTS = {
    "RefreshCredentialSecret": {
        "refresh_token": "v1.upgrade-test-refresh-token",
        "client_id": "upgrade-test-client",
        "issuer_url": "https://auth.example.invalid",
        "status": "active",
        "authorized_at": "2026-11-20T08:00:00Z",
        "refreshed_at": "2026-11-24T04:00:00Z",
        "reauthorize_by": "2026-12-20T08:00:00Z",
    },
    "ServiceTokenSecret": {
        "token": "eyJhbGciOiJub25lIn0.eyJleHAiOjE3OTU2MDAwMDB9.",
        "token_type": "Bearer",
        "expires_at": "2026-11-25T04:00:00Z",
        "api_url": f"{BASE_URL}/api",
    },
}
# Values to change each free-form parameter to after deploy, in order ({kms}: a KMS key's ARN;
# {mrk}: a multi-Region key's, which replicas need: CloudFormation refuses a single-Region key
# with them).
# The others take every other allowed value, or their minimum and maximum, then their default.
FREE_FORM = {
    "ServiceBaseUrl": ("https://cms-2.example.invalid/v2", BASE_URL),
    "KmsKeyArn": ("{kms}", ""),
    "RefreshCredentialAdministrators": (
        "arn:aws:iam::123456789012:role/deployer,arn:aws:iam::123456789012:user/operator",
        "",
    ),
    "AlarmTopicKmsKey": ("create", "{kms}", ""),
    "AlarmEmail": ("ops@example.com", ""),
    "ConsumerAccountIds": ("111111111111,222222222222", ""),
    "ConsumerOrganizationId": ("o-a1b2c3d4e5", ""),
    "ConsumerOrganizationalUnitPaths": ("o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/*", ""),
    "ServiceTokenKmsKeyArn": ("{kms}", ""),
    "ReplicaRegions": ("eu-west-1,us-west-2", ""),
}
# Parameters given with others: those the template's Rules refuse alone, and the sharing ones
# with a key of the account's, because moto's CloudFormation cannot create the stack's own
# (ServiceTokenKey and its alias) in an update (it resolves the alias's Ref to the new key to
# nothing: KeyError 'TargetKeyId'); tests/integration/test_deploy_sharing.py creates that key.
# A companion is given with each value, and set back to empty with the empty value.
TOGETHER = {
    "ConsumerAccountIds": {"ServiceTokenKmsKeyArn": "{kms}"},
    "ConsumerOrganizationId": {"ServiceTokenKmsKeyArn": "{kms}"},
    "ConsumerOrganizationalUnitPaths": {
        "ConsumerOrganizationId": "o-a1b2c3d4e5",
        "ServiceTokenKmsKeyArn": "{kms}",
    },
    "ServiceTokenKmsKeyArn": {"ConsumerAccountIds": "111111111111"},
    "ReplicaRegions": {"ServiceTokenKmsKeyArn": "{mrk}"},
}
# A multi-Region key's ARN as AWS forms it (mrk- and 32 hexadecimal digits; moto's CreateKey gives
# mrk- and a UUID, which the parameter's pattern refuses): the stand-in secret takes any key id.
MULTI_REGION_KEY = "arn:aws:kms:{region}:123456789012:key/mrk-0123456789abcdef0123456789abcdef"


@pytest.fixture
def lifecycle(moto_server: str) -> Lifecycle:
    return Lifecycle.open(
        server_client, "cmstoken-upgrade-artifacts", boto3.session.Session().region_name
    )


@dataclass(frozen=True)
class Held:
    """A secret as a reader finds it."""

    arn: str
    value: str
    version: str


def write_both_secrets(stack: Stack) -> dict[str, Held]:
    """Both secrets written as a bootstrap writes them; what they hold."""
    secrets = server_client("secretsmanager")
    held = {}
    for logical_id in SECRETS:
        arn = stack.secret_arn(logical_id)
        value = json.dumps(DOCUMENTS[logical_id])
        version = secrets.put_secret_value(SecretId=arn, SecretString=value)["VersionId"]
        held[logical_id] = Held(arn, value, version)
    return held


def assert_both_secrets_kept(stack: Stack, before: dict[str, Held]) -> None:
    """The stack still holds both secrets: no replacement, the same ARNs in its references (the
    functions' environment, the outputs), each secret readable at that ARN with the same value
    and version."""
    assert stack.deployed.status == "UPDATE_COMPLETE"
    changed = [f for f in stack.fates if f.logical_id in SECRETS and f.what != "kept"]
    assert not changed, f"{stack.name}: the update did this to the secrets: {changed}"
    secrets = server_client("secretsmanager")
    for logical_id, held in before.items():
        assert stack.secret_arn(logical_id) == held.arn, logical_id
        found = secrets.get_secret_value(SecretId=held.arn)
        assert Held(found["ARN"], found["SecretString"], found["VersionId"]) == held, logical_id
        output = stack.deployed.outputs.get(OUTPUTS[logical_id])
        assert output in (None, held.arn), (logical_id, output)
    for function in ("RotatorFunction", "BootstrapFunction"):
        name = stack.deployed.physical_id(function)
        configuration = server_client("lambda").get_function_configuration(FunctionName=name)
        variables = configuration["Environment"]["Variables"]
        assert variables["REFRESH_SECRET_ID"] == before["RefreshCredentialSecret"].arn
        assert variables["SERVICE_TOKEN_SECRET_ID"] == before["ServiceTokenSecret"].arn


def release(path: Path) -> str:
    return path.parent.name


def test_every_release_keeps_its_template() -> None:
    """Each release CHANGELOG.md names has its template, as released, in releases/VERSION/;
    every other folder there holds main's template before a release (pre-VERSION-COMMIT)."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    released = set(re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M))
    folders = {path.parent.name: path for path in KEPT}
    assert released <= set(folders), f"no template kept for {sorted(released - set(folders))}"
    for name, path in folders.items():
        if name in released:
            metadata = yaml_parse(path.read_text())["Metadata"]
            assert metadata["AWS::ServerlessRepo::Application"]["SemanticVersion"] == name
        else:
            assert re.fullmatch(r"pre-\d+\.\d+\.\d+-[0-9a-f]{7,40}", name), name
    assert (RELEASES / "README.md").is_file()
    assert {path.name for path in RELEASES.iterdir() if path.is_dir()} == set(folders)


@pytest.mark.parametrize("offer", OFFERS, ids=str)
@pytest.mark.parametrize("earlier", KEPT, ids=release)
def test_an_update_from_an_earlier_template_keeps_both_secrets(
    lifecycle: Lifecycle, earlier: Path, offer: str
) -> None:
    """Created from the earlier template, both secrets written, updated to template.yaml with
    the same parameter overrides (as a samconfig.toml gives them again): both secrets kept."""
    stack = lifecycle.create("cmstoken", earlier, OFFERS[offer])
    held = write_both_secrets(stack)
    updated = lifecycle.update(stack, TEMPLATE, OFFERS[offer])
    assert_both_secrets_kept(updated, held)


def changes(name: str, declaration: dict[str, Any]) -> list[str]:
    """The values a parameter is changed to after deploy, one update each, ending at its
    default (or the value deployed), no value twice in a row."""
    default = str(declaration.get("Default", BASE_URL))
    if name in FREE_FORM:
        wanted = list(FREE_FORM[name])
    elif "AllowedValues" in declaration:
        wanted = [str(v) for v in declaration["AllowedValues"] if str(v) != default] + [default]
    elif declaration["Type"] == "Number":
        wanted = [str(declaration["MinValue"]), str(declaration["MaxValue"]), default]
    else:
        wanted = []
    values: list[str] = []
    for value in wanted:
        if value != (values[-1] if values else default):
            values.append(value)
    return values


PARAMETERS = source()["Parameters"]


def test_every_parameter_has_values_to_change_to() -> None:
    """A new free-form parameter must be given values in FREE_FORM."""
    for name, declaration in PARAMETERS.items():
        assert changes(name, declaration), name


@pytest.mark.parametrize("name", PARAMETERS)
def test_a_parameter_change_after_deploy_keeps_both_secrets(
    lifecycle: Lifecycle, name: str
) -> None:
    """Each value in turn, only this parameter given (`sam deploy --parameter-overrides`; with
    its TOGETHER companions), the others kept from the stack; both secrets kept by every
    update."""
    stack = lifecycle.create("cmstoken", TEMPLATE, OFFERS["defaults"])
    held = write_both_secrets(stack)
    key = server_client("kms").create_key(Description="cmstoken upgrade test")["KeyMetadata"]["Arn"]
    for value in changes(name, PARAMETERS[name]):
        companions = {
            other: given if value else "" for other, given in TOGETHER.get(name, {}).items()
        }
        overrides = {**companions, name: value}
        mrk = MULTI_REGION_KEY.format(region=lifecycle.region)
        stack = lifecycle.update(
            stack,
            TEMPLATE,
            {
                other: given.replace("{kms}", key).replace("{mrk}", mrk)
                for other, given in overrides.items()
            },
        )
        value = value.replace("{kms}", key)
        assert stack.parameters[name] == value
        assert_both_secrets_kept(stack, held)


def schedule_expression(stack: Stack) -> str:
    (schedule,) = [
        resource
        for resource in stack.deployed.present().values()
        if resource["Type"] == "AWS::Scheduler::Schedule"
    ]
    return str(stack.deployed.resolver.resolve(schedule["Properties"]["ScheduleExpression"]))


def test_an_update_from_before_0_1_0_takes_the_interval_not_the_old_schedule(
    lifecycle: Lifecycle,
) -> None:
    """Before 0.1.0 the schedule was `RotationSchedule` (a Scheduler expression); it became
    `RotationIntervalMinutes`. `sam deploy` drops a value for a parameter the template no longer
    declares and sends no previous value for a new one, so a samconfig.toml that still says
    `RotationSchedule=rate(15 minutes)` updates the schedule to the default, every 60 minutes,
    until `RotationIntervalMinutes=15` is given (docs/upgrade-and-teardown.md)."""
    (before_0_1_0,) = [path for path in KEPT if release(path).startswith("pre-0.1.0-")]
    samconfig = {"ServiceBaseUrl": BASE_URL, "RotationSchedule": "rate(15 minutes)"}
    stack = lifecycle.create("cmstoken", before_0_1_0, samconfig)
    assert schedule_expression(stack) == "rate(15 minutes)"
    held = write_both_secrets(stack)
    updated = lifecycle.update(stack, TEMPLATE, samconfig)
    assert "RotationSchedule" not in updated.parameters
    assert schedule_expression(updated) == "rate(60 minutes)"
    fixed = lifecycle.update(updated, TEMPLATE, {**samconfig, "RotationIntervalMinutes": "15"})
    assert schedule_expression(fixed) == "rate(15 minutes)"
    assert_both_secrets_kept(fixed, held)


# --- the check sees what it looks for ------------------------------------------------------


def edited(change: Any) -> dict[str, Any]:
    """template.yaml, parsed, with ``change`` applied to its resources."""
    template: dict[str, Any] = yaml_parse(TEMPLATE.read_text())
    change(template["Resources"])
    return template


@pytest.fixture
def deployed(lifecycle: Lifecycle) -> tuple[Stack, dict[str, Held]]:
    stack = lifecycle.create("cmstoken", TEMPLATE, OFFERS["defaults"])
    return stack, write_both_secrets(stack)


def test_a_new_secret_name_would_replace_both_secrets_and_keep_only_the_credential(
    lifecycle: Lifecycle, deployed: tuple[Stack, dict[str, Held]]
) -> None:
    """A template that renamed the secrets would replace them (Name is their create-only
    property): the stack would point at new, empty secrets. UpdateReplacePolicy keeps the old
    refresh credential, with its value, outside the stack; the old service token is deleted."""
    stack, held = deployed

    def rename(resources: dict[str, Any]) -> None:
        for logical_id in SECRETS:
            name = resources[logical_id]["Properties"]["Name"]
            resources[logical_id]["Properties"]["Name"] = {"Fn::Sub": name["Fn::Sub"] + "-v2"}

    updated = lifecycle.update(stack, edited(rename), {})
    assert updated.fates_of("replaced") == set(SECRETS)
    assert updated.fates_of("retained") == {
        "RefreshCredentialSecret",
        "RefreshCredentialSecretPolicy",
    }
    assert updated.fates_of("deleted") == {"ServiceTokenSecret"}
    with pytest.raises(AssertionError, match="the update did this to the secrets"):
        assert_both_secrets_kept(updated, held)
    secrets = server_client("secretsmanager")
    kept = held["RefreshCredentialSecret"]
    assert secrets.get_secret_value(SecretId=kept.arn)["SecretString"] == kept.value
    assert (
        "OnlyTheProductsFunctions"
        in secrets.get_resource_policy(SecretId=kept.arn)["ResourcePolicy"]
    )
    with pytest.raises(secrets.exceptions.ResourceNotFoundException):
        secrets.describe_secret(SecretId=held["ServiceTokenSecret"].arn)


def test_a_renamed_logical_id_would_fail_the_update_and_keep_the_credential(
    lifecycle: Lifecycle, deployed: tuple[Stack, dict[str, Held]]
) -> None:
    """A template that renamed the refresh credential's logical id would drop one secret and
    create another under the same name: CloudFormation creates first, the name is taken, the
    update fails (and rolls back); the credential stays where it was."""
    stack, held = deployed
    renamed = re.sub(r"\bRefreshCredentialSecret\b", "RefreshSecret", TEMPLATE.read_text())
    with pytest.raises(DeployError, match="RefreshSecret"):
        lifecycle.update(stack, yaml_parse(renamed), {})
    kept = held["RefreshCredentialSecret"]
    assert (
        server_client("secretsmanager").get_secret_value(SecretId=kept.arn)["SecretString"]
        == kept.value
    )
