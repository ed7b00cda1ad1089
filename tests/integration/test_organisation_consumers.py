"""consumer.yaml deployed into moto's CloudFormation on moto's server, and the StackSet commands
of docs/organisation-consumers.md run as written with the AWS CLI against it (issue 22).

The managed policy each deployment creates is read back from IAM in the account it was deployed
to and compared with the policy the issue asks for (tests/consumer_template.py).

What moto does not do, and so these runs do not show:
- an ``Fn::If`` choosing ``AWS::NoValue`` inside a list leaves a null there, which IAM refuses
  (CloudFormation removes the item): with every input given, no item is left out and the file
  deploys as it is; for the other combinations the test removes those items first
  (``deployment.without_novalue_items``), as CloudFormation would;
- ``CreateStackSet``'s ``AutoDeployment`` and ``Capabilities``, and ``CreateStackInstances``'s
  ``OperationPreferences`` are accepted and ignored (moto 5.2 ``create_stack_set``'s docstring);
  the AWS CLI parses them, and tests/unit/test_organisation_consumers_docs.py holds them to
  botocore's model;
- ``ActivateOrganizationsAccess`` is not implemented: its command is checked against botocore's
  model only.
moto does deploy a service-managed StackSet's instances to the accounts of the organisational
unit it is given (and only those), which is what the runs check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

import consumer_template
from accounts import account_session
from consumer_template import FIVE_REGIONS, expected_document, parameters
from deployment import without_novalue_items
from support import block, run_shell

pytestmark = pytest.mark.integration

POLICY = "cmstoken-service-token-reader"
EVERY_INPUT: dict[str, Any] = {"bus": True, "regions": FIVE_REGIONS}
AWS_CLI = pytest.mark.skipif(shutil.which("aws") is None, reason="needs the AWS CLI on PATH")


def policy_in(session: Any, account: str) -> dict[str, Any] | None:
    """The managed policy's document in ``account``, or ``None`` when there is none."""
    iam = session.client("iam")
    arn = f"arn:aws:iam::{account}:policy/{POLICY}"
    try:
        version = iam.get_policy(PolicyArn=arn)["Policy"]["DefaultVersionId"]
    except iam.exceptions.NoSuchEntityException:
        return None
    document: dict[str, Any] = iam.get_policy_version(PolicyArn=arn, VersionId=version)[
        "PolicyVersion"
    ]["Document"]
    return document


def deploy(session: Any, body: str, values: dict[str, str]) -> dict[str, Any]:
    cloudformation = session.client("cloudformation")
    cloudformation.create_stack(
        StackName="cmstoken-consumer",
        TemplateBody=body,
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
        Capabilities=["CAPABILITY_NAMED_IAM"],
    )
    stack: dict[str, Any] = cloudformation.describe_stacks(StackName="cmstoken-consumer")["Stacks"][
        0
    ]
    return stack


def test_the_file_deploys_as_it_is_with_every_input(moto_server: str) -> None:
    account = "222233334444"
    session = account_session(account)
    stack = deploy(session, consumer_template.TEMPLATE.read_text(), parameters(**EVERY_INPUT))
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    (output,) = stack["Outputs"]
    assert output["OutputKey"] == "ConsumerPolicyArn"
    assert output["OutputValue"] == f"arn:aws:iam::{account}:policy/{POLICY}"
    assert policy_in(session, account) == expected_document(**EVERY_INPUT)


@pytest.mark.parametrize(
    "inputs",
    [{}, {"bus": True}, {"regions": ("us-east-1", "eu-central-1")}],
    ids=["secret and key", "bus", "two replicas"],
)
def test_each_combination_deploys_with_its_policy(moto_server: str, inputs: dict[str, Any]) -> None:
    account = "333344445555"
    session = account_session(account)
    values = parameters(**inputs)
    template = without_novalue_items(
        consumer_template.template(), consumer_template.resolver(values, account)
    )
    assert deploy(session, json.dumps(template), values)["StackStatus"] == "CREATE_COMPLETE"
    assert policy_in(session, account) == expected_document(**inputs)


# --- the StackSet, as docs/organisation-consumers.md runs it ---------------------------------


def organisation() -> tuple[str, str, str]:
    """An organisation in moto (this session's account manages it): a unit with one account,
    and one account outside it. The unit's id, its account, the other account."""
    org = boto3.client("organizations")
    org.create_organization(FeatureSet="ALL")
    root = org.list_roots()["Roots"][0]["Id"]
    unit = org.create_organizational_unit(ParentId=root, Name="consumers")["OrganizationalUnit"]
    inside = org.create_account(AccountName="prod", Email="prod@example.com")
    outside = org.create_account(AccountName="sandbox", Email="sandbox@example.com")
    member = inside["CreateAccountStatus"]["AccountId"]
    org.move_account(AccountId=member, SourceParentId=root, DestinationParentId=unit["Id"])
    return unit["Id"], member, outside["CreateAccountStatus"]["AccountId"]


def run_blocks(directory: Path, env: dict[str, str], *markers: str) -> str:
    """The documentation's blocks, in one bash, from a directory holding consumer.yaml (as a
    checkout does); standard output."""
    shutil.copy(consumer_template.TEMPLATE, directory / "consumer.yaml")
    return run_shell("\n".join(block(marker) for marker in markers), directory, env)


def cli_env(endpoint: str, **values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "AWS_EC2_METADATA_DISABLED": "true",
            "SERVICE_TOKEN_SECRET_ARN": consumer_template.SECRET_ARN,
            "SERVICE_TOKEN_KEY_ARN": consumer_template.KEY_ARN,
            "REFRESH_REQUEST_BUS_ARN": consumer_template.BUS_ARN,
            "REPLICA_REGIONS": ",".join(FIVE_REGIONS),
        }
    )
    env.update(values)
    return env


@AWS_CLI
def test_the_stack_set_reaches_the_units_accounts_only(moto_server: str, tmp_path: Path) -> None:
    unit, member, outside = organisation()
    env = cli_env(moto_server, CONSUMER_OU=unit, CONSUMER_REGION="us-east-1")
    out = run_blocks(tmp_path, env, "stackset: create", "stackset: instances")
    assert json.loads(out[: out.rindex("}") + 1])["StackSetId"].startswith("cmstoken-consumer:")
    assert out.splitlines()[-1] == "SUCCEEDED", "the operation's status"
    assert policy_in(account_session(member), member) == expected_document(**EVERY_INPUT)
    assert policy_in(account_session(outside), outside) is None, "not in the unit"
    management = boto3.client("sts").get_caller_identity()["Account"]
    assert policy_in(boto3.Session(), management) is None, "nor in the managing account"


@AWS_CLI
def test_one_account_takes_the_same_template_and_parameters(
    moto_server: str, tmp_path: Path
) -> None:
    account = "444455556666"
    credentials = account_session(account).get_credentials()
    env = cli_env(
        moto_server,
        AWS_ACCESS_KEY_ID=credentials.access_key,
        AWS_SECRET_ACCESS_KEY=credentials.secret_key,
        AWS_SESSION_TOKEN=credentials.token,
    )
    script = block("stackset: create")
    parameters_only = script[: script.index("aws cloudformation")]
    (tmp_path / "write-parameters.sh").write_text(parameters_only)
    subprocess.run(["bash", "write-parameters.sh"], cwd=tmp_path, env=env, check=True, timeout=30)
    run_blocks(tmp_path, env, "stackset: one-account")
    assert policy_in(account_session(account), account) == expected_document(**EVERY_INPUT)
