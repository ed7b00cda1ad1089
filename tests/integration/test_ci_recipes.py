"""docs/consume-ci.md run as a user pastes it, against moto's server and the emulator: the
GitHub workflow's ``run:`` steps with the environment its actions set, the GitLab job's
``script:``, the script ``ci/cms-api.sh`` they call, and the role's deployment.

What stands in for the CI:
- ``actions/checkout``: the script saved as the page says, in the job's working directory;
  ``aws-actions/configure-aws-credentials``: ``AssumeRoleWithWebIdentity`` on moto for the
  ``role-to-assume``, then the variables the action exports (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``, ``AWS_DEFAULT_REGION``:
  src/helpers.ts of v6.2.3); ``${{ vars.NAME }}`` replaced by the repository variables.
- A ``run:`` step with ``shell: bash`` runs as ``bash --noprofile --norc -eo pipefail`` (GitHub's
  "Workflow syntax", ``jobs.<job_id>.steps[*].shell``), standard output and error in one stream
  as the runner logs them. The runner reads workflow commands on both
  (actions/runner, src/Runner.Worker/Handlers/ScriptHandler.cs: each stream through an
  ``OutputManager`` with the ``ActionCommandManager``): an ``::add-mask::`` line is a command,
  not a log line.
- GitLab's runner: the ``script`` lines in one ``sh -e``, after the ``id_tokens`` token is put in
  its variable (moto does not verify the token's signature or the role's trust policy: the
  trust policy's conditions are held in tests/unit/template/test_ci_role_template.py).

moto (5.2) leaves out, for ci-role.yaml: ``AWS::IAM::OIDCProvider`` (no CloudFormation model:
the resource is skipped and a ``Ref`` to it is empty), a role's ``ManagedPolicyArns`` (its
``Role.create_from_cloudformation_json`` attaches none) and, after ``aws cloudformation
deploy``'s change set, the stack's outputs; the tests check what it keeps and say what it drops.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

import ci_role_template as ci
import eventbridge_stub
import template_model
from cmstoken.core.redaction import fingerprint
from deployment import without_novalue_items
from eventbridge_stub import StubEventBridge
from harness import SERVICE_SECRET, Stack, refresh_request_queue
from support import JWT_SHAPE, killed_if_running, recipe
from wakeable_sleep import wakeable_sleep

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not all(shutil.which(tool) for tool in ("aws", "jq", "curl", "sha256sum")),
        reason="needs the AWS CLI, jq, curl and sha256sum on PATH",
    ),
]

SCRIPT = "ci/cms-api.sh"  # where the page saves it; the workflow and the job call it there
REGION = "us-east-1"
FAKE_OIDC_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJyZXBvOm9jdG8tb3JnL29jdG8tcmVwbyJ9.c2ln"
RUN_TIMEOUT = 90


# --- the job's working directory and environment ------------------------------------------


def checkout(directory: Path) -> Path:
    """A repository holding the script as the page says to save it, executable."""
    (directory / "ci").mkdir(parents=True, exist_ok=True)
    (directory / SCRIPT).write_text(recipe("ci-cms-api"))
    subprocess.run(["chmod", "+x", SCRIPT], cwd=directory, check=True)
    return directory


def base_env(directory: Path, endpoint: str) -> dict[str, str]:
    """A runner's environment: no AWS settings of this machine, moto's server for every AWS
    call, no configuration files."""
    env = {name: os.environ[name] for name in ("PATH", "LANG", "PYENV_ROOT") if name in os.environ}
    env.update(
        HOME=str(directory),
        AWS_ENDPOINT_URL=endpoint,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def trust_role(values: dict[str, str] | None = None) -> str:
    """The role ci-role.yaml makes (its trust policy as CloudFormation resolves it), created
    through IAM on moto; its ARN."""
    iam = boto3.client("iam")
    policy = ci.trust_policy(values or ci.parameters("github"))
    role = iam.create_role(RoleName="cmstoken-ci", AssumeRolePolicyDocument=json.dumps(policy))
    arn: str = role["Role"]["Arn"]
    return arn


def secret_arn(stack: Stack) -> str:
    arn: str = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    return arn


def publish_refreshed(stack: Stack, seconds_ago: float, **fields: Any) -> None:
    """The published document as refreshed ``seconds_ago`` by this machine's clock (the
    script's ``jq now``), with ``fields`` changed."""
    text = stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    document = json.loads(text)
    document["refreshed_at"] = time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago)
    )
    document.update(fields)
    stack.secretsmanager.put_secret_value(
        SecretId=SERVICE_SECRET, SecretString=json.dumps(document)
    )


def logged_aws(directory: Path, env: dict[str, str]) -> tuple[dict[str, str], Path]:
    """``env`` with an ``aws`` first on PATH that logs its arguments, then runs the real one."""
    shims = directory / "shims"
    shims.mkdir()
    log = directory / "aws.log"
    real = shutil.which("aws", path=env["PATH"])
    assert real is not None
    (shims / "aws").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{real}" "$@"\n')
    (shims / "aws").chmod(0o755)
    log.touch()
    return {**env, "PATH": f"{shims}{os.pathsep}{env['PATH']}"}, log


# --- GitHub Actions ---------------------------------------------------------------------


def github_steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = yaml.safe_load(recipe("github-actions"))["jobs"]["projects"][
        "steps"
    ]
    return steps


def expand(value: str, variables: dict[str, str]) -> str:
    """``${{ vars.NAME }}`` replaced by the repository variable (the only expressions the
    workflow has)."""
    expanded = re.sub(r"\$\{\{ vars\.(\w+) \}\}", lambda m: variables[m[1]], value)
    assert "${{" not in expanded, expanded
    return expanded


def configure_aws_credentials(step: dict[str, Any], variables: dict[str, str]) -> dict[str, str]:
    """What aws-actions/configure-aws-credentials exports after assuming ``role-to-assume``
    with the job's OIDC token."""
    inputs = {name: expand(str(value), variables) for name, value in step["with"].items()}
    assert set(inputs) == {"role-to-assume", "aws-region"}
    credentials = boto3.client(
        "sts", region_name=inputs["aws-region"]
    ).assume_role_with_web_identity(
        RoleArn=inputs["role-to-assume"],
        RoleSessionName="GitHubActions",
        WebIdentityToken=FAKE_OIDC_TOKEN,
    )["Credentials"]
    return {
        "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
        "AWS_SESSION_TOKEN": credentials["SessionToken"],
        "AWS_REGION": inputs["aws-region"],
        "AWS_DEFAULT_REGION": inputs["aws-region"],
    }


def start_github_job(
    directory: Path, endpoint: str, variables: dict[str, str], runner_path: str | None = None
) -> subprocess.Popen[str]:
    """The workflow's steps up to its ``run:`` step, which is started (standard error into
    standard output, as the runner logs them). ``runner_path``: the runner's PATH, when the
    test puts a stand-in for a tool first on it."""
    env = {**base_env(directory, endpoint), "GITHUB_ACTIONS": "true", "CI": "true"}
    if runner_path is not None:
        env["PATH"] = runner_path
    checkout_step, credentials_step, run_step = github_steps()
    assert checkout_step["uses"].startswith("actions/checkout@")
    checkout(directory)
    assert credentials_step["uses"].startswith("aws-actions/configure-aws-credentials@")
    env.update(configure_aws_credentials(credentials_step, variables))
    env.update({name: expand(value, variables) for name, value in run_step["env"].items()})
    assert run_step["shell"] == "bash"
    (directory / "step.sh").write_text(run_step["run"])
    return subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(directory / "step.sh")],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def github_log(output: str) -> tuple[list[str], set[str]]:
    """The step's log as the runner shows it, and the values masked: the runner takes
    ``::add-mask::VALUE`` lines as commands and prints them not."""
    masks = {
        line[len("::add-mask::") :]
        for line in output.splitlines()
        if line.startswith("::add-mask::")
    }
    shown = [line for line in output.splitlines() if not line.startswith("::add-mask::")]
    return shown, masks


def assert_no_token(shown: list[str], tokens: list[str]) -> None:
    """No token in the log (named by fingerprint when one is), nor anything shaped like one."""
    text = "\n".join(shown)
    leaked = [fingerprint(token) for token in tokens if token in text]
    assert leaked == [], "service tokens reached the log"
    assert JWT_SHAPE.search(text) is None, "a JWT reached the log"


def test_the_github_job_gets_a_new_token_when_the_api_refuses_its_own(
    server_stack: Stack, tmp_path: Path
) -> None:
    """The API refuses the published token (a 401): the step reads the secret again (the same
    token), sends the refresh request that the stack's rule takes, and once the rotator has
    published a new token, calls again with it (at its next read of the secret, not at the end
    of its 5 s step: ``wakeable_sleep``). No token reaches the log; both are masked before any
    use."""
    stack = server_stack
    stack.seed()
    publish_refreshed(stack, 3600)  # past the debounce by this machine's clock
    rule = template_model.source()["Resources"]["RefreshRequestedRule"]["Properties"]
    sqs, queue = refresh_request_queue(
        pattern={**rule["EventPattern"], "account": ["123456789012"]}
    )
    old = stack.service_document().token
    stack.emulator.inject("projects", "status", status=401)
    variables = {
        "CMS_ROLE_ARN": trust_role(),
        "CMS_REGION": REGION,
        "CMS_TOKEN_SECRET_ARN": secret_arn(stack),
    }
    runner, rotator_ran = wakeable_sleep(base_env(tmp_path, ""), tmp_path)
    job = start_github_job(
        tmp_path, os.environ["AWS_ENDPOINT_URL"], variables, runner_path=runner["PATH"]
    )
    with killed_if_running(job):
        messages: list[Any] = []
        started = time.monotonic()
        while not messages and time.monotonic() - started < 45 and job.poll() is None:
            messages = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get("Messages", [])
        assert messages, "no refresh request reached the stack's rule"
        event = json.loads(messages[0]["Body"])
        assert event["source"] == "cmstoken.consumer"
        assert event["detail-type"] == "Service Token Refresh Requested"
        detail = event["detail"]
        assert detail["reason"] == "refused"
        assert detail["secret_id"] == variables["CMS_TOKEN_SECRET_ARN"]
        assert detail["token_fingerprint"] == fingerprint(old)
        stack.emulator.advance(600 + 1)  # the rotator's own debounce, on the emulator's clock
        assert stack.invoke("rotator", event)["outcome"] == "rotated"
        rotator_ran.touch()
        output, _ = job.communicate(timeout=RUN_TIMEOUT)
    new = stack.service_document().token
    assert new != old
    assert job.returncode == 0, output
    shown, masks = github_log(output)
    assert shown[-1] == "Emulated Project"  # the step's jq, on the API's answer
    assert "HTTP 401: refresh requested; waiting up to 180 s for a new token." in shown
    assert "New token published." in shown
    assert {old, new} <= masks
    assert_no_token(shown, [old, new])
    # the refused call, the rotator's verification of the new token, the call with it
    assert stack.emulator.counts["projects"] == 3


def test_a_refused_fresh_token_fails_the_step_without_asking(
    server_stack: Stack, tmp_path: Path
) -> None:
    """Refreshed 30 s ago: the rotator would skip a request (min_refresh_interval_seconds), so
    the script says when one can work and asks nothing, as the helper's ``refresh_debounced``;
    its exit status fails the step through the pipe into jq (``shell: bash``: pipefail)."""
    stack = server_stack
    stack.seed()
    publish_refreshed(stack, 30)
    stack.emulator.inject("projects", "status", status=401)
    variables = {
        "CMS_ROLE_ARN": trust_role(),
        "CMS_REGION": REGION,
        "CMS_TOKEN_SECRET_ARN": secret_arn(stack),
    }
    job = start_github_job(tmp_path, os.environ["AWS_ENDPOINT_URL"], variables)
    output, _ = job.communicate(timeout=RUN_TIMEOUT)
    assert job.returncode == 1, output
    shown, _ = github_log(output)
    ready = stack.service_document().refreshed_at
    assert ready is not None
    ready_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ready + 600))
    assert any(f"no refresh can come before {ready_at}. Not asking" in line for line in shown), (
        shown
    )
    assert_no_token(shown, [stack.service_document().token])


# --- GitLab CI --------------------------------------------------------------------------


def test_the_gitlab_job_assumes_the_role_and_lists_the_projects(
    server_stack: Stack, tmp_path: Path
) -> None:
    """The job's script as GitLab's runner runs it: the ID token in ``CMS_OIDC_TOKEN``, no AWS
    credentials until the AWS CLI assumes the role from its web-identity settings (a token
    file, never the token on a command line). A line added after the job's asks STS whose
    credentials those were."""
    stack = server_stack
    stack.seed()
    job = yaml.safe_load(recipe("gitlab-ci"))["cms"]
    assert "AWS_ACCESS_KEY_ID" not in recipe("gitlab-ci")
    role = trust_role(ci.parameters("gitlab"))
    env = base_env(checkout(tmp_path), os.environ["AWS_ENDPOINT_URL"])
    env.update(job["variables"])
    env.update(
        AWS_ROLE_ARN=role,
        CMS_TOKEN_SECRET_ARN=secret_arn(stack),
        AWS_DEFAULT_REGION=REGION,
        CMS_OIDC_TOKEN=FAKE_OIDC_TOKEN,
        CI_PROJECT_ID="4242",
        CI_JOB_ID="777",
        GITLAB_CI="true",
    )
    env, log = logged_aws(tmp_path, env)
    whose = "aws sts get-caller-identity --query Arn --output text"
    ran = subprocess.run(
        ["sh", "-e", "-c", "\n".join([*job["script"], whose])],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout
    *_, projects, caller = ran.stdout.splitlines()
    assert projects == "Emulated Project"
    assert caller.endswith(":assumed-role/cmstoken-ci/gitlab-4242-777"), caller
    assert json.loads((tmp_path / "projects.json").read_text())["data"][0]["projectId"]
    calls = log.read_text().splitlines()
    assert calls[0].startswith("secretsmanager get-secret-value")
    assert not [call for call in calls if FAKE_OIDC_TOKEN in call]
    assert_no_token(ran.stdout.splitlines(), [stack.service_document().token])
    assert FAKE_OIDC_TOKEN not in ran.stdout
    assert "::add-mask::" not in ran.stdout  # GitLab has no such command: nothing prints it


# --- the script's other paths -------------------------------------------------------------


def run_script(
    directory: Path, env: dict[str, str], *arguments: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(directory / SCRIPT), *arguments],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def script_env(stack: Stack, directory: Path, **extra: str) -> tuple[dict[str, str], Path]:
    checkout(directory)
    env = base_env(directory, os.environ["AWS_ENDPOINT_URL"])
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        CMS_TOKEN_SECRET_ARN=secret_arn(stack),
        **extra,
    )
    return logged_aws(directory, env)


def test_a_token_replaced_meanwhile_is_used_without_asking(
    server_stack: Stack, tmp_path: Path
) -> None:
    """The first read returns a token that the API no longer takes (the secret rotated between
    the read and the call): the second read has another, and the call is made with it."""
    stack = server_stack
    stack.seed()
    env, log = script_env(stack, tmp_path)
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    )
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({**document, "token": "eyJ.stale.token"}))
    first = tmp_path / "first-read-done"
    shims = Path(env["PATH"].split(os.pathsep)[0])
    real = (shims / "aws").read_text()
    (shims / "aws").write_text(
        real.replace(
            "exec ",
            f'case "$*" in *get-secret-value*) if [ ! -e "{first}" ]; then touch "{first}";'
            f' cat "{stale}"; exit 0; fi ;; esac\nexec ',
        )
    )
    result = run_script(tmp_path, env, "GET", "/v3/projects")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["data"][0]["projectName"] == "Emulated Project"
    calls = log.read_text()
    assert calls.count("get-secret-value") == 2
    assert "put-events" not in calls
    assert stack.emulator.counts["projects"] == 2


def test_a_credential_needing_reauthorization_is_said_and_nothing_asked(
    server_stack: Stack, tmp_path: Path
) -> None:
    stack = server_stack
    stack.seed()
    publish_refreshed(stack, 3600, credential_status="reauthorization_required")
    stack.emulator.inject("projects", "status", status=403)
    env, log = script_env(stack, tmp_path)
    result = run_script(tmp_path, env, "GET", "/v3/projects")
    assert result.returncode == 1, result.stderr
    assert "The stack's credential needs reauthorization: run its bootstrap." in result.stderr
    assert "put-events" not in log.read_text()


def test_no_new_token_in_time_ends_with_status_2(server_stack: Stack, tmp_path: Path) -> None:
    """The request is taken (moto's EventBridge: FailedEntryCount 0) but no rotator answers:
    the script gives up at CMS_REFRESH_WAIT_SECONDS, having polled the secret meanwhile."""
    stack = server_stack
    stack.seed()
    publish_refreshed(stack, 3600)
    stack.emulator.inject("projects", "status", status=401)
    env, log = script_env(stack, tmp_path, CMS_REFRESH_WAIT_SECONDS="3")
    started = time.monotonic()
    result = run_script(tmp_path, env, "GET", "/v3/projects")
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - started >= 3
    assert "No new token within 3 s: see the stack's rotator log." in result.stderr
    calls = log.read_text()
    assert calls.count("put-events") == 1
    assert calls.count("get-secret-value") >= 3  # the read, the re-read, and a poll
    assert result.stdout == ""


@pytest.fixture
def refusing_eventbridge() -> Iterator[StubEventBridge]:
    with eventbridge_stub.refusing_eventbridge() as stub:
        yield stub


def test_a_refused_refresh_request_is_said_and_not_waited_for(
    server_stack: Stack, tmp_path: Path, refusing_eventbridge: StubEventBridge
) -> None:
    stack = server_stack
    stack.seed()
    publish_refreshed(stack, 3600)
    stack.emulator.inject("projects", "status", status=401)
    port = refusing_eventbridge.server_address[1]
    env, _ = script_env(
        stack,
        tmp_path,
        AWS_ENDPOINT_URL_EVENTBRIDGE=f"http://127.0.0.1:{port}",
        CMS_EVENT_BUS="arn:aws:events:us-east-1:210987654321:event-bus/cmstoken-refresh-requests",
    )
    result = run_script(tmp_path, env, "GET", "/v3/projects")
    assert result.returncode == 1, result.stderr
    assert (
        "Refresh request refused: NotAuthorizedForSourceException: Not authorized for the source."
        in (result.stderr)
    )
    assert "waiting" not in result.stderr
    [entry] = refusing_eventbridge.entries
    assert entry["EventBusName"] == env["CMS_EVENT_BUS"]
    assert (entry["Source"], entry["DetailType"]) == (
        "cmstoken.consumer",
        "Service Token Refresh Requested",
    )
    assert stack.service_document().token not in entry["Detail"]


# --- the role ---------------------------------------------------------------------------


def main_stack_stand_in(stack: Stack) -> dict[str, Any]:
    """The cmstoken stack's two consumer policies, as template.yaml writes them for this
    secret, and the outputs that name them (moto cannot deploy the SAM template itself)."""
    resolver = template_model.Resolver(
        {**template_model.parameter_values(), "ServiceTokenSecret": secret_arn(stack)},
        template_model.source(),
    )
    resources = template_model.source()["Resources"]
    names = ("ConsumerPolicy", "ConsumerRefreshRequestPolicy")
    return {
        "Resources": {name: resolver.resolve(resources[name]) for name in names},
        "Outputs": {f"{name}Arn": {"Value": {"Ref": name}} for name in names},
    }


@pytest.mark.filterwarnings("ignore:Tried to parse AWS..IAM..OIDCProvider:UserWarning")
def test_the_documented_deploy_makes_the_role_with_the_stacks_outputs(
    server_stack: Stack, tmp_path: Path
) -> None:
    """The page's commands, as pasted, from a checkout holding ci-role.yaml, against a stack
    named cmstoken on moto. moto's change set keeps the parameters and the role's trust
    conditions; it drops the OIDC provider (and so the role's principal), the role's managed
    policies and the role stack's outputs, so the last command prints None here."""
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(
        StackName="cmstoken",
        TemplateBody=json.dumps(main_stack_stand_in(server_stack)),
        Capabilities=["CAPABILITY_IAM"],
    )
    outputs = {
        o["OutputKey"]: o["OutputValue"]
        for o in cloudformation.describe_stacks(StackName="cmstoken")["Stacks"][0]["Outputs"]
    }
    shutil.copy(ci.TEMPLATE, tmp_path / "ci-role.yaml")
    env = base_env(tmp_path, os.environ["AWS_ENDPOINT_URL"])
    env.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION
    )
    ran = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + recipe("ci-role-deploy")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "Successfully created/updated stack - cmstoken-ci-github" in ran.stdout
    assert ran.stdout.splitlines()[-1] == "None"  # moto: no outputs after a change set
    deployed = cloudformation.describe_stacks(StackName="cmstoken-ci-github")["Stacks"][0]
    given = {p["ParameterKey"]: p["ParameterValue"] for p in deployed["Parameters"]}
    assert given["ConsumerPolicyArn"] == outputs["ConsumerPolicyArn"]
    assert given["RefreshRequestPolicyArn"] == outputs["ConsumerRefreshRequestPolicyArn"]
    values = ci.parameters("github", **{k: given[k] for k in given if k in ci.parameters()})
    roles: Any = boto3.client("iam").list_roles()["Roles"]
    (role,) = roles
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    (expected,) = ci.trust_policy(values)["Statement"]
    assert statement["Condition"] == expected["Condition"]
    assert statement["Principal"] == {}  # moto: the provider it skipped


def test_the_role_deploys_for_an_account_that_has_the_provider(
    server_stack: Stack, tmp_path: Path
) -> None:
    """``CreateOidcProvider=false`` once ``aws iam list-open-id-connect-providers`` lists the
    issuer's provider: the role trusts that provider, with the resolved conditions, and its
    stack outputs its ARN."""
    iam = boto3.client("iam")
    iam.create_open_id_connect_provider(
        Url="https://gitlab.com", ClientIDList=["https://gitlab.com"]
    )
    env = base_env(tmp_path, os.environ["AWS_ENDPOINT_URL"])
    env.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION
    )
    listed = subprocess.run(
        ["aws", "iam", "list-open-id-connect-providers"],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=True,
    )
    assert json.loads(listed.stdout)["OpenIDConnectProviderList"] == [
        {"Arn": ci.provider_arn("gitlab")}
    ]
    policy = iam.create_policy(
        PolicyName="cmstoken-service-token-reader",
        PolicyDocument=json.dumps(
            main_stack_stand_in(server_stack)["Resources"]["ConsumerPolicy"]["Properties"][
                "PolicyDocument"
            ]
        ),
    )["Policy"]["Arn"]
    values = ci.parameters(
        "gitlab", CreateOidcProvider="false", ConsumerPolicyArn=policy, RefreshRequestPolicyArn=""
    )
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(
        StackName="cmstoken-ci-gitlab",
        TemplateBody=json.dumps(without_novalue_items(ci.template(), ci.resolver(values))),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    stack = cloudformation.describe_stacks(StackName="cmstoken-ci-gitlab")["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    (output,) = stack["Outputs"]
    (role,) = iam.list_roles()["Roles"]
    assert output == {
        "OutputKey": "RoleArn",
        "OutputValue": role["Arn"],
        "Description": ci.template()["Outputs"]["RoleArn"]["Description"],
    }
    assert role["AssumeRolePolicyDocument"] == ci.trust_policy(values)
    assert role["MaxSessionDuration"] == 3600
