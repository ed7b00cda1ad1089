"""consumer.yaml, the consumer account's template (issue 22, item 3): cfn-lint finds nothing
(and finds a planted fault), its parameters take what the stack's outputs hold and refuse the
rest, and its one managed policy holds exactly the statements each combination of inputs needs,
no wildcard anywhere."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import template_model
from cmstoken.consumer import ServiceTokenProvider
from cmstoken.core.triggers import REFRESH_REQUESTED
from consumer_template import (
    BUS_ARN,
    FIVE_REGIONS,
    KEY_ARN,
    SECRET_ARN,
    TEMPLATE,
    expected_document,
    parameters,
    policy_document,
    resolver,
    template,
)

CFN_LINT = Path(sys.executable).parent / "cfn-lint"

COMBINATIONS: dict[str, dict[str, Any]] = {  # the secret and its key, and:
    "nothing else": {},
    "with bus": {"bus": True},
    "one replica": {"regions": ("us-east-1",)},
    "two replicas": {"regions": ("us-east-1", "eu-central-1")},
    "five replicas and bus": {"bus": True, "regions": FIVE_REGIONS},
}


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CFN_LINT), str(path)],
        capture_output=True,
        text=True,
        check=False,
        env={"AWS_DEFAULT_REGION": "us-east-1", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


def test_cfn_lint_finds_nothing() -> None:
    linted = lint(TEMPLATE)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_cfn_lint_finds_a_planted_fault(tmp_path: Path) -> None:
    """The control: the same template with a reference to a parameter it lacks fails."""
    broken = tmp_path / "consumer.yaml"
    broken.write_text(TEMPLATE.read_text().replace("!Ref RefreshRequestBusArn\n", "!Ref Bus\n", 1))
    linted = lint(broken)
    assert linted.returncode != 0
    assert "Bus" in linted.stdout


@pytest.mark.parametrize("name", COMBINATIONS)
def test_the_policy_holds_exactly_what_the_combination_needs(name: str) -> None:
    inputs = COMBINATIONS[name]
    assert policy_document(parameters(**inputs)) == expected_document(**inputs)


def test_the_expectation_is_no_copy_of_the_template() -> None:
    """The control: a combination's policy differs from another's expectation."""
    assert policy_document(parameters()) != expected_document(bus=True)
    assert policy_document(parameters(regions=("us-east-1",))) != expected_document()


def test_no_statement_has_a_wildcard_or_grants_more_than_it_names() -> None:
    document = policy_document(parameters(bus=True, regions=FIVE_REGIONS))
    text = json.dumps(document)
    assert "*" not in text
    actions: set[str] = set()
    for statement in document["Statement"]:
        action = statement["Action"]
        actions.update([action] if isinstance(action, str) else action)
    assert actions == {
        "secretsmanager:GetSecretValue",
        "secretsmanager:DescribeSecret",
        "kms:Decrypt",
        "events:PutEvents",
    }
    assert all(statement["Effect"] == "Allow" for statement in document["Statement"])


def test_the_refresh_condition_is_what_the_helper_sends() -> None:
    document = policy_document(parameters(bus=True))
    (refresh,) = [s for s in document["Statement"] if s["Sid"] == "RequestServiceTokenRefresh"]
    defaults = ServiceTokenProvider.__init__.__kwdefaults__
    assert defaults is not None
    source = defaults["event_source"]
    assert refresh["Condition"]["StringEquals"] == {
        "events:source": source,
        "events:detail-type": REFRESH_REQUESTED,
    }


def test_the_policy_is_named_and_its_arn_is_the_output() -> None:
    resolved = resolver(parameters())
    (policy,) = resolved.resources("AWS::IAM::ManagedPolicy").values()
    assert resolved.resolve(policy["Properties"]["ManagedPolicyName"]) == (
        "cmstoken-service-token-reader"
    )
    outputs = template()["Outputs"]
    assert outputs == {
        "ConsumerPolicyArn": {
            "Description": outputs["ConsumerPolicyArn"]["Description"],
            "Value": {"Ref": "ConsumerPolicy"},
        }
    }
    assert list(template()["Resources"]) == ["ConsumerPolicy"]


# --- parameters -----------------------------------------------------------------------------


def allowed(parameter: str, value: str) -> bool:
    pattern = template()["Parameters"][parameter]["AllowedPattern"]
    return re.fullmatch(pattern, value) is not None


@pytest.mark.parametrize(
    ("parameter", "value", "ok"),
    [
        ("ServiceTokenSecretArn", SECRET_ARN, True),
        ("ServiceTokenSecretArn", SECRET_ARN.replace("aws:", "aws-cn:", 1), True),
        ("ServiceTokenSecretArn", SECRET_ARN.removesuffix("-AbCdEf"), False),  # partial
        ("ServiceTokenSecretArn", "cmstoken/service-token", False),
        ("ServiceTokenSecretArn", "", False),
        ("ServiceTokenKeyArn", KEY_ARN, True),
        ("ServiceTokenKeyArn", "", False),  # a shared secret always has its key
        ("ServiceTokenKeyArn", KEY_ARN.replace("key/mrk-", "alias/"), False),
        ("ServiceTokenKeyArn", KEY_ARN.replace("key/mrk-", "key/MRK-"), False),
        ("ServiceTokenKeyArn", KEY_ARN + "0", False),
        ("RefreshRequestBusArn", "", True),
        ("RefreshRequestBusArn", BUS_ARN, True),
        ("RefreshRequestBusArn", "cmstoken-refresh-requests", False),
        ("ServiceTokenReplicaRegions", "", True),
        ("ServiceTokenReplicaRegions", "us-east-1", True),
        ("ServiceTokenReplicaRegions", ",".join(FIVE_REGIONS), True),
        ("ServiceTokenReplicaRegions", ",".join((*FIVE_REGIONS, "eu-north-1")), False),  # six
        ("ServiceTokenReplicaRegions", "us-east-1, eu-central-1", False),  # a space
        ("ServiceTokenReplicaRegions", "us-east-1,", False),
        ("PolicyName", "cmstoken-service-token-reader", True),
        ("PolicyName", "no spaces", False),
    ],
)
def test_parameters_take_the_stacks_outputs_and_refuse_the_rest(
    parameter: str, value: str, ok: bool
) -> None:
    assert allowed(parameter, value) is ok


def test_the_secret_and_its_key_are_required() -> None:
    """A shared secret is always under a customer managed key: the stack shares only a secret it
    encrypts with ServiceTokenKey or ServiceTokenKmsKeyArn (its ServiceTokenKeyArn output is
    there whenever it shares), because "If the secret is in a different Amazon Web Services
    account from the credentials calling the API, then you can't use aws/secretsmanager to
    encrypt the secret, and you must create and use a customer managed KMS key" (Secrets Manager
    API Reference, CreateSecret). So the consumer policy always grants kms:Decrypt on it."""
    declared = template()["Parameters"]
    assert [name for name, spec in declared.items() if "Default" not in spec] == [
        "ServiceTokenSecretArn",
        "ServiceTokenKeyArn",
    ]
    stack = template_model.transformed()
    assert stack["Outputs"]["ServiceTokenKeyArn"]["Condition"] == "UseServiceTokenKey"
    assert {"Condition": "ShareAcrossAccounts"} in stack["Conditions"]["UseServiceTokenKey"][
        "Fn::Or"
    ]
    statements = [s["Sid"] for s in policy_document(parameters())["Statement"]]
    assert "DecryptTheServiceTokenThroughSecretsManager" in statements


def test_the_key_takes_what_the_stacks_key_parameter_takes() -> None:
    """The same key ARNs as template.yaml's ServiceTokenKmsKeyArn, which the output holds when
    given (tests/unit/template/test_parameter_refusals.py holds that pattern to AWS's forms)."""
    ours = template()["Parameters"]["ServiceTokenKeyArn"]["AllowedPattern"]
    stacks = template_model.source()["Parameters"]["ServiceTokenKmsKeyArn"]["AllowedPattern"]
    assert stacks == "^$|" + ours


def test_the_replica_slots_are_as_many_as_the_pattern_allows() -> None:
    """Five slots (Replica0..4), and the pattern allows five regions: a sixth would have no
    statement."""
    conditions = template()["Conditions"]
    slots = sorted(name for name in conditions if re.fullmatch(r"Replica\d", name))
    assert slots == [f"Replica{i}" for i in range(len(FIVE_REGIONS))]
