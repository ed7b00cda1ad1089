"""docs/deploy.md says what deploying takes, as the template and SAM CLI have it: the stack
parameters' table is every parameter of template.yaml with its default; every `sam deploy` shown
(README.md's quickstart included) and the sample samconfig.toml are ones that `sam deploy`
accepts and runs without a prompt, with the one required parameter; the capabilities named are
the ones the template needs and the Serverless Application Repository asks to acknowledge; the
deployer's permissions name every service the stack holds resources in."""

from __future__ import annotations

import re
import shlex
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import template_model
from support import DOCUMENTS, section, table

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


# --- the stack parameters -------------------------------------------------------------------


def test_the_stack_parameters_table_is_every_template_parameter_with_its_default() -> None:
    parameters = template_model.source()["Parameters"]
    rows = table("stack-parameters")
    assert [row[0] for row in rows] == [f"`{name}`" for name in parameters]
    for name, default, _ in rows:
        value = parameters[name.strip("`")].get("Default")
        if value is None:
            assert default == "(required)", name
        elif value == "":
            assert default == "empty", name
        else:
            assert default.strip("`") == str(value), name


# --- sam deploy -----------------------------------------------------------------------------


def code_blocks(text: str, language: str) -> Iterator[str]:
    """The fenced code blocks of one language, dedented (a block may sit in a list item)."""
    body: list[str] = []
    inside, kind = False, ""
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence and not inside:
            inside, kind, body = True, fence.group(2), []
        elif fence:
            inside = False
            if kind == language:
                yield textwrap.dedent("\n".join(body))
        elif inside:
            body.append(line)


def sam_deploy_commands() -> Iterator[tuple[Path, list[str]]]:
    """Every `sam deploy` command line of the documentation's shell blocks, as arguments, with
    the document that shows it."""
    for path in DOCUMENTS:
        for script in code_blocks(path.read_text(), "sh"):
            for line in script.replace("\\\n", " ").splitlines():
                if "sam deploy" not in line:
                    continue
                words = shlex.split(line, comments=True)
                if words[:2] == [".venv/bin/sam", "deploy"]:
                    yield path, words[2:]


def sam_deploy(arguments: list[str]) -> dict[str, Any]:
    """The options `sam deploy` would run with (its own command line and config file parser);
    nothing is deployed."""
    from samcli.commands.deploy.command import cli  # type: ignore[import-untyped]

    context = cli.make_context("deploy", arguments)
    return dict(context.params)


def check_parameter_overrides(overrides: dict[str, str], *, first_deploy: bool = True) -> None:
    """Only the template's parameters; for a first deploy, the required one too (an update
    keeps the values it does not pass)."""
    parameters = template_model.source()["Parameters"]
    required = {name for name, spec in parameters.items() if "Default" not in spec}
    assert required == {"ServiceBaseUrl"}
    assert set(overrides) <= set(parameters)
    for name, value in overrides.items():  # CloudFormation checks each item of a list
        spec = parameters[name]
        items = value.split(",") if spec["Type"] == "CommaDelimitedList" else [value]
        pattern = spec.get("AllowedPattern")
        assert pattern is None or all(re.fullmatch(pattern, item) for item in items), name
        assert "AllowedValues" not in spec or value in spec["AllowedValues"], name
    if first_deploy:
        assert required <= set(overrides)
        assert overrides["ServiceBaseUrl"].startswith("https://")


def test_every_sam_deploy_shown_is_accepted_and_needs_no_prompt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shutil.copy(ROOT / "template.yaml", tmp_path / "template.yaml")
    monkeypatch.chdir(tmp_path)  # no samconfig.toml of the checkout's adds options
    commands = list(sam_deploy_commands())
    first_deploys = {ROOT / "README.md", DOCS / "deploy.md"}  # the quickstart's and deploy.md's
    assert {path for path, _ in commands} >= first_deploys
    for path, arguments in commands:
        options = sam_deploy(arguments)
        assert tuple(options["capabilities"]) == ("CAPABILITY_IAM",), path
        assert options["confirm_changeset"] is False, path
        assert options["guided"] is False, path
        first_deploy = path in first_deploys
        check_parameter_overrides(options["parameter_overrides"] or {}, first_deploy=first_deploy)
        if first_deploy:
            assert options["stack_name"] == "cmstoken"  # the quickstart reads cmstoken/...
            assert options["resolve_s3"] is True


def test_the_sample_samconfig_is_what_sam_deploy_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shutil.copy(ROOT / "template.yaml", tmp_path / "template.yaml")
    shutil.copy(ROOT / "samconfig.toml.example", tmp_path / "samconfig.toml")
    monkeypatch.chdir(tmp_path)
    options = sam_deploy([])  # as `sam deploy` with no options reads ./samconfig.toml
    assert options["stack_name"] == "cmstoken"
    assert options["resolve_s3"] is True
    assert tuple(options["capabilities"]) == ("CAPABILITY_IAM",)
    assert options["confirm_changeset"] is False
    assert options["fail_on_empty_changeset"] is False
    check_parameter_overrides(options["parameter_overrides"])
    example = (ROOT / "samconfig.toml.example").read_text()
    shown = (DOCS / "deploy.md").read_text()
    assert f"```toml\n{example}```" in shown  # shown as committed


# What the Serverless Application Repository asks to acknowledge, per resource type ("Application
# Capabilities: IAM Roles, Resource Policies, and Nested Applications", its developer guide).
SAR_IAM = {"AWS::IAM::Group", "AWS::IAM::InstanceProfile", "AWS::IAM::Policy", "AWS::IAM::Role"}
SAR_RESOURCE_POLICY = {
    "AWS::Lambda::LayerVersionPermission",
    "AWS::Lambda::Permission",
    "AWS::Events::EventBusPolicy",
    "AWS::IAM::Policy",
    "AWS::ApplicationAutoScaling::ScalingPolicy",
    "AWS::S3::BucketPolicy",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::TopicPolicy",
}
NAME_PROPERTIES = {"RoleName", "ManagedPolicyName", "GroupName", "UserName", "InstanceProfileName"}
ROLE_POLICY = {"AWS::IAM::RolePolicy"}


def deploy_section(heading: str) -> str:
    return " ".join(section(heading).split())


def test_the_capabilities_named_are_the_ones_the_template_needs() -> None:
    resources = template_model.transformed()["Resources"]
    types = {resource["Type"] for resource in resources.values()}
    text = deploy_section("Capabilities and the deployer's permissions")
    # CAPABILITY_IAM: IAM resources, none with a custom name; no nested application.
    assert types & SAR_IAM
    assert "AWS::IAM::ManagedPolicy" in types
    for resource in resources.values():
        if resource["Type"].startswith("AWS::IAM::"):
            # An AWS::IAM::RolePolicy's RoleName names the role it is put on, not a new name.
            names = NAME_PROPERTIES - ({"RoleName"} if resource["Type"] in ROLE_POLICY else set())
            assert not names & set(resource.get("Properties", {}))
    assert "AWS::Serverless::Application" not in template_model.source()["Resources"]
    assert "**`CAPABILITY_IAM`**" in text
    # CAPABILITY_RESOURCE_POLICY: the repository's list, as the template holds it.
    named = re.search(r"names `CAPABILITY_RESOURCE_POLICY` for (.*?), and `CAPABILITY_IAM`", text)
    assert named is not None
    assert set(re.findall(r"`(AWS::[\w:]+)`", named.group(1))) == types & SAR_RESOURCE_POLICY


def test_the_deployers_permissions_name_every_service_the_stack_holds() -> None:
    types = {resource["Type"] for resource in template_model.transformed()["Resources"].values()}
    services = {kind.split("::")[1].lower() for kind in types}
    listed = {row[0].strip("`") for row in table("deploy-permissions")}
    assert listed == services | {"cloudformation", "s3"}
