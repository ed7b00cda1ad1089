"""docs/organisation-consumers.md against what it describes (issue 22): every ``aws`` command is
an operation of the AWS CLI with options of its input (botocore's model), the StackSet is
service-managed with automatic deployment and its parameters file is what CreateStackSet takes
and names consumer.yaml's parameters, the ``cmstoken-admin`` line parses, the Python lines make a
provider with the stack's replicas and bus, and the names, limits and refusals stated are the
template's and the code's. tests/integration/test_organisation_consumers.py runs the StackSet
commands against moto's server."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import botocore.session
import pytest
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters

import consumer_template
from cmstoken import consumer
from cmstoken.cli.admin.command import parse_args
from cmstoken.consumer import reading
from support import block, check_aws_command, table

DOC = Path(__file__).resolve().parents[2] / "docs" / "organisation-consumers.md"
TEXT = DOC.read_text()
ENV = {
    "SERVICE_TOKEN_SECRET_ARN": consumer_template.SECRET_ARN,
    "SERVICE_TOKEN_KEY_ARN": consumer_template.KEY_ARN,
    "REFRESH_REQUEST_BUS_ARN": consumer_template.BUS_ARN,
    "REPLICA_REGIONS": "us-east-1,eu-central-1",
}


def commands(program: str) -> list[list[str]]:
    """Every command line that runs ``program``: in the shell blocks (continuations joined, a
    ``NAME=$(...)`` unwrapped) and in inline code."""
    lines = []
    for script in re.findall(r"```sh\n(.*?)```", TEXT, re.DOTALL):
        lines += script.replace("\\\n", " ").splitlines()
    prose = re.sub(r"```.*?```", "", TEXT, flags=re.DOTALL)
    lines += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    found = []
    for line in lines:
        wrapped = re.fullmatch(r"\s*\w+=\$\((.*)\)\s*", line)
        words = shlex.split(wrapped.group(1) if wrapped else line)
        if words and words[0] == program:
            found.append(words)
    return found


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_every_aws_command_is_an_operation_with_its_options() -> None:
    found = commands("aws")
    assert [words[2] for words in found] == [
        "activate-organizations-access",
        "create-stack-set",
        "create-stack-instances",
        "describe-stack-set-operation",
        "create-stack",
        "get-secret-value",
        "describe-stacks",  # inline, in the prose
        "describe-secret",  # inline: what check-consumer's replica line advises
    ]
    for words in found:
        check_aws_command(words)


def test_a_misspelt_option_is_caught() -> None:
    """The control: check_aws_command refuses an option the operation does not have."""
    (create,) = [words for words in commands("aws") if words[2] == "create-stack-set"]
    with pytest.raises(AssertionError, match="--auto-deploy is no option"):
        check_aws_command([*create, "--auto-deploy", "Enabled=true"])


def test_the_stack_set_is_service_managed_and_follows_the_unit() -> None:
    (create,) = [words for words in commands("aws") if words[2] == "create-stack-set"]
    assert option(create, "--permission-model") == "SERVICE_MANAGED"
    assert option(create, "--auto-deployment") == (
        "Enabled=true,RetainStacksOnAccountRemoval=false"
    )
    assert option(create, "--template-body") == "file://consumer.yaml"
    assert option(create, "--capabilities") == "CAPABILITY_NAMED_IAM"
    (instances,) = [w for w in commands("aws") if w[2] == "create-stack-instances"]
    assert option(instances, "--deployment-targets") == "OrganizationalUnitIds=$CONSUMER_OU"
    assert option(instances, "--regions") == "$CONSUMER_REGION", "one region: IAM is global"


def parameters_file(tmp_path: Path) -> list[dict[str, str]]:
    """The parameters file the create block writes, with ENV's values."""
    script = block("stackset: create")
    heredoc = script[: script.index("aws cloudformation")]
    subprocess.run(
        ["bash", "-c", heredoc], cwd=tmp_path, env={**os.environ, **ENV}, check=True, timeout=30
    )
    written: list[dict[str, str]] = json.loads((tmp_path / "consumer-parameters.json").read_text())
    return written


def test_the_parameters_file_is_what_create_stack_set_takes(tmp_path: Path) -> None:
    written = parameters_file(tmp_path)
    model = botocore.session.get_session().get_service_model("cloudformation")
    shape = model.operation_model("CreateStackSet").input_shape
    assert shape is not None
    validate_parameters({"StackSetName": "cmstoken-consumer", "Parameters": written}, shape)
    with pytest.raises(ParamValidationError):  # the control: a misspelt key is refused
        validate_parameters({"StackSetName": "x", "Parameters": [{"Key": "A"}]}, shape)
    declared = consumer_template.template()["Parameters"]
    assert {item["ParameterKey"]: item["ParameterValue"] for item in written} == {
        "ServiceTokenSecretArn": ENV["SERVICE_TOKEN_SECRET_ARN"],
        "ServiceTokenKeyArn": ENV["SERVICE_TOKEN_KEY_ARN"],
        "RefreshRequestBusArn": ENV["REFRESH_REQUEST_BUS_ARN"],
        "ServiceTokenReplicaRegions": ENV["REPLICA_REGIONS"],
    }
    assert set(declared) - {item["ParameterKey"] for item in written} == {"PolicyName"}


def test_the_check_line_parses_and_names_the_outputs() -> None:
    line = shlex.split(block("organisation-consumers: check"))
    assert line[:2] == ["cmstoken-admin", "check-consumer"]
    values = {
        "$SERVICE_TOKEN_SECRET_ARN": consumer_template.SECRET_ARN,
        "$REFRESH_CREDENTIAL_SECRET_ARN": consumer_template.SECRET_ARN.replace(
            "service-token-AbCdEf", "refresh-credential-GhIjKl"
        ),
        "$REPLICA_REGIONS": ENV["REPLICA_REGIONS"],
        "$REFRESH_REQUEST_BUS_ARN": consumer_template.BUS_ARN,
    }
    args = parse_args([values.get(word, word) for word in line[1:]])
    assert args.command == "check-consumer"
    assert args.replica_regions == ("us-east-1", "eu-central-1")
    assert args.bus_arn == consumer_template.BUS_ARN
    assert not args.send_refresh_request, "the documented line sends nothing"


def test_the_python_lines_make_a_provider_with_the_replicas_and_the_bus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CMS_TOKEN_SECRET_ARN", consumer_template.SECRET_ARN)
    monkeypatch.setenv("CMS_TOKEN_REPLICA_REGIONS", ENV["REPLICA_REGIONS"])
    monkeypatch.setenv("CMS_TOKEN_REFRESH_BUS_ARN", consumer_template.BUS_ARN)
    namespace: dict[str, object] = {}
    exec(compile(block("organisation-consumers: python"), str(DOC), "exec"), namespace)  # noqa: S102
    provider = namespace["provider"]
    assert isinstance(provider, consumer.ServiceTokenProvider)
    assert provider.replica_regions == ("us-east-1", "eu-central-1")
    assert provider.event_bus == consumer_template.BUS_ARN
    monkeypatch.delenv("CMS_TOKEN_REPLICA_REGIONS")
    monkeypatch.delenv("CMS_TOKEN_REFRESH_BUS_ARN")
    exec(compile(block("organisation-consumers: python"), str(DOC), "exec"), namespace)  # noqa: S102
    plain = namespace["provider"]
    assert isinstance(plain, consumer.ServiceTokenProvider)
    assert (plain.replica_regions, plain.event_bus) == ((), None), "unset: as before"


def test_the_refusals_are_the_helpers_reasons_with_its_fixes() -> None:
    rows = table("consumer-refusals")
    assert [row[0] for row in rows] == [
        f"`{consumer.SECRET_NOT_FOUND}`",
        f"`{consumer.ACCESS_DENIED}`",
        f"`{consumer.CANNOT_DECRYPT}`",
    ]
    source = Path(reading.__file__).read_text()
    for name in ("ConsumerAccountIds", "ConsumerOrganizationId", "ConsumerOrganizationalUnitPaths"):
        assert name in rows[1][2]
        assert name in source
    assert "aws/secretsmanager" in rows[2][2]
    assert "aws/secretsmanager cannot be shared" in " ".join(source.split())


def test_the_names_and_limits_are_the_templates() -> None:
    declared = consumer_template.template()["Parameters"]
    assert f"`{declared['PolicyName']['Default']}` by default" in TEXT
    assert "comma\nseparated, at most five" in TEXT
    assert re.fullmatch(
        declared["ServiceTokenReplicaRegions"]["AllowedPattern"], ",".join(["us-east-1"] * 5)
    )
    assert not re.fullmatch(
        declared["ServiceTokenReplicaRegions"]["AllowedPattern"], ",".join(["us-east-1"] * 6)
    )
    outputs = [row[0].strip("`") for row in table("consumer-inputs")]
    assert outputs == [
        "ServiceTokenSecretArn",
        "ServiceTokenKeyArn",
        "RefreshRequestBusArn",
        "ServiceTokenReplicaRegions",
        "RefreshCredentialSecretArn",
    ]
    assert set(outputs[:4]) <= set(declared)
    assert "ConsumerPolicyArn" in consumer_template.template()["Outputs"]
