"""docs/organisation.md against the template: the parameters it lists are the template's sharing
parameters in their order, the outputs it names exist, the key statements it prints are the
ones the stack's own key holds (and, in a replica's Region, the same with that Region), and its
command is an operation of the AWS CLI."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import template_model
from support import check_aws_command

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
        "ReplicaRegions",
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


def test_the_command_is_an_operation_of_the_aws_cli() -> None:
    lines = [
        shlex.split(line)
        for block in re.findall(r"```sh\n(.*?)```", TEXT, re.DOTALL)
        for line in block.splitlines()
        if line.strip()
    ]
    (replicate,) = lines
    check_aws_command(replicate)
    assert replicate[:3] == ["aws", "kms", "replicate-key"]
    assert replicate[replicate.index("--policy") + 1] == "file://replica-key-policy.json"


def test_the_replica_limit_is_the_templates() -> None:
    pattern = template_model.source()["Parameters"]["ReplicaRegions"]["AllowedPattern"]
    places = int(re.search(r"\{0,(\d)\}", pattern).group(1)) + 1  # type: ignore[union-attr]
    assert f"up to {places} comma-separated Regions" in TEXT
    assert f"more\nthan {places} replica Regions" in TEXT
    conditions = template_model.source()["Conditions"]
    assert {f"HasReplicaRegion{n}" for n in range(2, places + 1)} <= set(conditions)
    assert f"HasReplicaRegion{places + 1}" not in conditions


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
