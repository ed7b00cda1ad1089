"""docs/organisation.md against the template: the parameters it lists are the template's sharing
parameters in their order, the outputs it names exist, the key statements it prints are the
ones the stack's own key holds (and, in a replica's Region, the same with that Region), the
replica key policy files its commands write are the stack's key's policy with each replica's
Region (after a change of sharing too), its commands are operations of the AWS CLI, and the
refusals and limits it states are the template's. tests/integration/test_replica_key_policies.py
runs those commands with the AWS CLI against moto's KMS."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

import template_model
from support import block, check_aws_command, table

DOC = Path(__file__).resolve().parents[2] / "docs" / "organisation.md"
TEXT = DOC.read_text()
SHARING_PARAMETERS = [
    "ConsumerAccountIds",
    "ConsumerOrganizationId",
    "ConsumerOrganizationalUnitPaths",
    "ServiceTokenKmsKeyArn",
    "ReplicaRegions",
]
# The document's example: stack cmstoken-prod in us-east-1 of 123456789012 (template_model's
# pseudo parameters), shared with two accounts and an organisation.
EXAMPLE = {
    "ConsumerAccountIds": "111111111111,222222222222",
    "ConsumerOrganizationId": "o-a1b2c3d4e5",
}


def json_after(marker: str) -> Any:
    block = TEXT.split(f"<!-- {marker} -->", 1)[1]
    found = re.search(r"```json\n(.*?)```", block, re.DOTALL)
    assert found is not None, marker
    return json.loads(found.group(1))


def consumer_key_statements() -> list[dict[str, Any]]:
    values = template_model.Resolver(template_model.parameter_values(**EXAMPLE))
    key = values.resolve(template_model.transformed()["Resources"]["ServiceTokenKey"])
    administer, *consumers = key["Properties"]["KeyPolicy"]["Statement"]
    assert administer["Sid"] == "TheAccountAdministersTheKey"
    return consumers  # type: ignore[no-any-return]


def test_the_parameter_table_is_the_templates_sharing_parameters_in_order() -> None:
    table = TEXT.split("<!-- sharing-parameters -->", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    declared = list(template_model.source()["Parameters"])
    assert listed == SHARING_PARAMETERS
    assert [name for name in declared if name in listed] == listed
    for name in SHARING_PARAMETERS:
        assert template_model.source()["Parameters"][name]["Default"] == ""


def test_the_outputs_named_exist() -> None:
    outputs = template_model.source()["Outputs"]
    named = set(re.findall(r"`(\w+(?:Arn|Regions))`", TEXT))
    for name in (
        "ServiceTokenSecretArn",
        "ServiceTokenKeyArn",
        "RefreshRequestBusArn",
        "ServiceTokenReplicaRegions",
    ):
        assert name in named
        assert name in outputs


def test_the_statements_for_a_given_key_are_the_stacks_own_keys() -> None:
    assert json_after("given-key-statements") == consumer_key_statements()


def test_the_replica_key_statements_are_the_same_in_the_replicas_region() -> None:
    """A replica key's policy is its own (AWS KMS API Reference, ReplicateKey: "All other
    properties of a replica key can differ, including its key policy"), so the document gives
    the consumers' statements with the replica's Region: Secrets Manager there, its secret ARN."""
    primary = json.dumps(consumer_key_statements())
    assert json_after("replica-key-statements") == json.loads(
        primary.replace("us-east-1", "eu-west-1")
    )


def aws_commands() -> list[list[str]]:
    """Every ``aws`` command of the document's shell blocks (continuations joined, a loop's body
    and a redirection's target included), as words."""
    found = []
    for script in re.findall(r"```sh\n(.*?)```", TEXT, re.DOTALL):
        for line in script.replace("\\\n", " ").splitlines():
            words = shlex.split(line)
            if words and words[0] == "aws":
                found.append(words)
    return found


def test_the_commands_are_operations_of_the_aws_cli() -> None:
    commands = aws_commands()
    for words in commands:
        check_aws_command(words)
    assert [words[1:3] for words in commands] == [
        ["kms", "get-key-policy"],
        ["kms", "replicate-key"],
        ["kms", "put-key-policy"],
    ]
    _, replicate, put = commands
    assert replicate[replicate.index("--policy") + 1] == "file://replica-key-policy-$region.json"
    assert put[put.index("--policy") + 1] == "file://replica-key-policy-$region.json"
    assert put[put.index("--region") + 1] == "$region"
    with pytest.raises(AssertionError):  # the control: a misspelt option is caught
        check_aws_command([*put[:3], "--key", "x", "--policy", "{}"])


def replica_policy_files(tmp_path: Path, primary: dict[str, Any], regions: str) -> dict[str, Any]:
    """The policy files the replica-key-policy-files block writes, run in bash with an ``aws``
    that answers GetKeyPolicy with ``primary`` as the AWS CLI prints it (``--query Policy
    --output text``: the policy document's text); by Region."""
    fake = tmp_path / "bin" / "aws"
    fake.parent.mkdir(parents=True)
    (tmp_path / "primary.json").write_text(json.dumps(primary, indent=2))
    fake.write_text(f'#!/bin/sh\n[ "$2" = get-key-policy ] && cat {tmp_path / "primary.json"}\n')
    fake.chmod(0o755)
    env = {
        "PATH": f"{fake.parent}:/usr/bin:/bin",
        "SERVICE_TOKEN_KEY_ARN": template_model.SERVICE_TOKEN_KEY_ARN,
        "REPLICA_REGIONS": regions,
    }
    script = "set -euo pipefail\n" + block("replica-key-policy-files")
    subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, check=True, timeout=30)
    return {
        region: json.loads((tmp_path / f"replica-key-policy-{region}.json").read_text())
        for region in regions.split(",")
    }


def stack_key_policy(**sharing: str) -> dict[str, Any]:
    values = template_model.Resolver(template_model.parameter_values(**sharing))
    key = values.resolve(template_model.transformed()["Resources"]["ServiceTokenKey"])
    return key["Properties"]["KeyPolicy"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "sharing",
    [
        EXAMPLE,
        {"ConsumerAccountIds": "333333333333"},
        {
            "ConsumerOrganizationId": "o-a1b2c3d4e5",
            "ConsumerOrganizationalUnitPaths": "o-a1b2c3d4e5/r-ab12/ou-ab12-11111111/*",
        },
    ],
    ids=["the example", "another account", "organisational units"],
)
def test_the_replica_key_policy_files_are_the_stacks_key_policy_in_each_region(
    tmp_path: Path, sharing: dict[str, str]
) -> None:
    """The block writes, for each replica Region, the stack's key's policy with that Region in
    Secrets Manager's endpoint and the secret's ARN: what the replica key needs (its policy is its
    own: ReplicateKey), for every sharing the stack may have; the listing above the block is the
    example's (test_the_replica_key_statements_are_the_same_in_the_replicas_region)."""
    primary = stack_key_policy(**sharing)
    files = replica_policy_files(tmp_path, primary, "eu-west-1,ap-southeast-2")
    for region, written in files.items():
        assert written == json.loads(json.dumps(primary).replace("us-east-1", region))
        assert written != primary  # the control: the Region did change
        assert "us-east-1" not in json.dumps(written)
    if sharing == EXAMPLE:  # the listing above the block
        assert files["eu-west-1"]["Statement"][1:] == json_after("replica-key-statements")


def test_a_change_of_sharing_changes_the_replica_key_policy_files(tmp_path: Path) -> None:
    """After an update of the sharing parameters the same block writes the new policy: the
    replica keys, which CloudFormation leaves alone, get what the stack's key got."""
    before = replica_policy_files(tmp_path / "before", stack_key_policy(**EXAMPLE), "eu-west-1")
    after = replica_policy_files(
        tmp_path / "after", stack_key_policy(ConsumerAccountIds="333333333333"), "eu-west-1"
    )
    (_, accounts_before, _) = before["eu-west-1"]["Statement"]
    (_, accounts_after) = after["eu-west-1"]["Statement"]
    assert accounts_before["Principal"] == {"AWS": ["111111111111", "222222222222"]}
    assert accounts_after["Principal"] == {"AWS": ["333333333333"]}


def test_the_template_error_refusals_are_the_templates() -> None:
    """The two refusals no rule can make fail with the template errors the table quotes, for
    the causes it gives (template_model.refusals; test_parameter_refusals.py for the documents)."""
    rows = table("template-error-refusals")
    errors = [row[0].strip("`") for row in rows]
    single_region = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    six = "eu-west-1,eu-west-2,eu-west-3,eu-central-1,eu-north-1,eu-south-1"
    assert errors == [
        *template_model.refusals(
            template_model.parameter_values(
                ServiceTokenKmsKeyArn=single_region, ReplicaRegions="eu-west-1"
            )
        ),
        *template_model.refusals(template_model.parameter_values(ReplicaRegions=six)),
    ]


def test_the_replica_limit_is_the_templates() -> None:
    """Five replica places (the first under HasReplicaRegions, the others HasReplicaRegion2..5);
    a sixth Region is refused (test_the_template_error_refusals_are_the_templates)."""
    conditions = template_model.source()["Conditions"]
    places = 1 + len([name for name in conditions if re.fullmatch(r"HasReplicaRegion\d", name)])
    assert places == 5
    assert f"up to {places} comma-separated Regions other than the stack's own" in TEXT
    assert f"lists more than {places} Regions (the template has {places} replica places)" in TEXT
    six = ",".join(f"eu-west-{n}" for n in range(1, places + 2))
    assert template_model.refusals(template_model.parameter_values(ReplicaRegions=six))


def test_the_security_table_has_every_new_principal() -> None:
    """docs/security.md's table names the consumers elsewhere (each sharing parameter), the
    functions' use of the key, and EventBridge's rule on the stack's bus."""
    security = (DOC.parent / "security.md").read_text()
    table = security.split("| who | can | cannot |", 1)[1].split("\n\n", 1)[0]
    for name in ("ConsumerAccountIds", "ConsumerOrganizationId", "ConsumerOrganizationalUnitPaths"):
        assert f"`{name}`" in table
    bus = template_model.source()["Resources"]["RefreshRequestBus"]["Properties"]["Name"]
    assert bus == {"Fn::Sub": "${AWS::StackName}-refresh-requests"}
    assert "`NAME-refresh-requests`" in table
    assert "when the service token is shared or replicated" in table
    assert "EventBridge (the rules on the default bus and on `NAME-refresh-requests`)" in table
    queue = template_model.source()["Resources"]["RefreshRequestQueue"]["Properties"]
    assert queue["QueueName"] == {"Fn::Sub": "${AWS::StackName}-refresh-requests.fifo"}
    assert "`NAME-refresh-requests.fifo`" in table
