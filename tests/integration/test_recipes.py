"""The documentation's consumer recipes, run or checked against a local stack so that they stay
true.

Every recipe is read from the documentation itself (the code block after ``<!-- recipe: NAME -->``
in README.md or docs/*.md):
the shell recipes run against moto's server and the emulator, the External Secrets manifests
are validated against the CRDs of the ESO version the documentation names (vendored under
``tests/data/external-secrets``), the Terraform recipe is formatted as ``terraform fmt`` wants,
and the ECS task definitions register with the documented command against moto's server.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import boto3
import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

import eventbridge_stub
import template_model
from cmstoken.core.errors import ReauthorizationRequiredError
from eventbridge_stub import StubEventBridge
from harness import SERVICE_SECRET, Stack, refresh_request_queue
from support import block, documentation, killed_if_running, recipe, tool_works
from wakeable_sleep import wakeable_sleep

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "data" / "external-secrets"
ESO_VERSION = "v2.9.0"  # the CRDs vendored under tests/data/external-secrets


def curl_version() -> tuple[int, ...]:
    if not tool_works("curl", "--version"):
        return (0,)
    first = subprocess.run(
        ["curl", "--version"], capture_output=True, text=True, check=False
    ).stdout.split()
    return tuple(int(part) for part in first[1].split(".")[:2])


SHELL_TOOLS = pytest.mark.skipif(
    not (tool_works("aws", "--version") and tool_works("jq", "--version"))
    or curl_version() < (7, 76),
    reason="needs the AWS CLI, jq and curl 7.76 or later (--fail-with-body) on PATH",
)


def template_default(name: str) -> int:
    return int(template_model.source()["Parameters"][name]["Default"])


def published_document(stack: Stack) -> dict[str, Any]:
    text = stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    document: dict[str, Any] = json.loads(text)
    return document


# --- AWS CLI, jq and curl -------------------------------------------------------------------


@pytest.fixture
def logged_tools(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH on which curl, jq and aws log their arguments (what ``ps`` shows) before running
    the real program."""
    shims = tmp_path / "bin"
    shims.mkdir()
    log = tmp_path / "argv.log"
    for tool in ("curl", "jq", "aws"):
        real = shutil.which(tool)
        assert real is not None
        shim = shims / tool
        shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "{tool} $*" >> "{log}"\nexec "{real}" "$@"\n')
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}, log


def run_shell(script: str, env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,
    )


@SHELL_TOOLS
def test_the_quickstarts_one_line_prints_the_published_token(server_stack: Stack) -> None:
    """The README's quickstart reads the stack `cmstoken`'s token secret by its name."""
    server_stack.seed()
    script = recipe("read-token")
    assert f"--secret-id {SERVICE_SECRET} " in script  # the stack name `cmstoken`'s secret
    result = run_shell(script, dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == server_stack.service_document().token


@SHELL_TOOLS
def test_the_aws_cli_recipe_lists_projects_without_the_token_on_a_command_line(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path]
) -> None:
    env, log = logged_tools
    server_stack.seed()
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    result = run_shell(recipe("aws-cli"), {**env, "SECRET_ARN": arn})
    assert result.returncode == 0, result.stderr
    projects = json.loads(result.stdout)["data"]
    assert projects[0]["projectId"].startswith("prj_")
    # one read of the secret, and the token in no program's arguments
    argv = log.read_text()
    assert argv.count("get-secret-value") == 1
    assert "curl " in argv
    assert server_stack.service_document().token not in argv
    assert server_stack.emulator.counts["projects"] == 1


@SHELL_TOOLS
@pytest.mark.parametrize("field", ["token", "api_url"])
def test_the_aws_cli_recipe_fails_on_a_missing_field_without_calling_the_api(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path], field: str
) -> None:
    env, _ = logged_tools
    server_stack.seed()
    document = published_document(server_stack)
    document[field] = None
    server_stack.secretsmanager.put_secret_value(
        SecretId=SERVICE_SECRET, SecretString=json.dumps(document)
    )
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    result = run_shell(recipe("aws-cli"), {**env, "SECRET_ARN": arn})
    assert result.returncode != 0
    assert server_stack.emulator.counts["projects"] == 0
    assert "null" not in result.stdout


@SHELL_TOOLS
def test_the_aws_cli_recipe_shows_the_apis_error_body_and_fails(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path]
) -> None:
    env, _ = logged_tools
    server_stack.seed()
    server_stack.emulator.inject("projects", "status", status=500, description="broken backend")
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    result = run_shell(recipe("aws-cli"), {**env, "SECRET_ARN": arn})
    assert result.returncode == 22, result.stderr  # curl's "HTTP error"
    error = json.loads(result.stdout)["error"]
    assert error["status"] == 500
    assert "500" in result.stderr


@SHELL_TOOLS
def test_the_refresh_request_recipe_waits_out_the_debounce_then_for_the_new_token(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """The recipe's event matches the stack's rule (delivered here to a queue, as EventBridge
    would to the rotator), is sent only once the debounce interval has passed, and the recipe
    returns once the rotator has published a new token (its next read of the secret then, not
    at the end of its 5 s step: ``wakeable_sleep``)."""
    env, _ = logged_tools
    env, rotator_ran = wakeable_sleep(env, tmp_path)
    stack = server_stack
    stack.seed()
    # the rule as the template writes it, in this (moto's) account, targeting a queue
    rule = template_model.source()["Resources"]["RefreshRequestedRule"]["Properties"]
    pattern = copy.deepcopy(rule["EventPattern"])
    pattern["account"] = ["123456789012"]
    sqs, queue = refresh_request_queue(pattern=pattern)

    # the published token was refreshed (by this machine's clock) 597 s ago: 3 s to wait
    document = published_document(stack)
    before = time.time() - 597
    document["refreshed_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(before))
    stack.secretsmanager.put_secret_value(
        SecretId=SERVICE_SECRET, SecretString=json.dumps(document)
    )
    arn = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    started = time.monotonic()
    process = start_refresh_request(env, arn)
    with killed_if_running(process):
        messages = wait_for_refresh_request(sqs, queue, started)
        assert time.monotonic() - started >= 2, "the request did not wait out the debounce"
        event = json.loads(messages[0]["Body"])
        assert event["source"] == "cmstoken.consumer"
        assert event["detail-type"] == "Service Token Refresh Requested"
        # the rotator's own debounce (the emulator's clock): past it, the event forces a refresh
        stack.emulator.advance(template_default("MinRefreshIntervalSeconds") + 1)
        old_token = stack.service_document().token
        assert stack.invoke("rotator", event)["outcome"] == "rotated"
        rotator_ran.touch()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "New service token published." in err
    assert stack.service_document().token != old_token
    assert stack.published_token_works()


# The refresh request's other paths. Every run is bounded: a recipe that waits forever fails
# the test by its timeout instead of hanging it.
RECIPE_TIMEOUT = 75  # under pytest-timeout's 120 s, so that the recipe's own timeout reports it


def publish_refreshed(stack: Stack, seconds_ago: float, **fields: Any) -> str:
    """Rewrite the published document as refreshed ``seconds_ago`` by this machine's clock
    (the recipe's ``date``), with ``fields`` changed; returns the secret's ARN."""
    document = published_document(stack)
    document["refreshed_at"] = time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago)
    )
    document.update(fields)
    stack.secretsmanager.put_secret_value(
        SecretId=SERVICE_SECRET, SecretString=json.dumps(document)
    )
    arn: str = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    return arn


def start_refresh_request(env: dict[str, str], arn: str) -> subprocess.Popen[str]:
    """The documentation's refresh-request recipe, running in the background."""
    return subprocess.Popen(
        ["bash", "-c", recipe("refresh-request")],
        env={**env, "SECRET_ARN": arn},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_refresh_request(sqs: Any, queue: str, started: float) -> list[Any]:
    """Wait (at most 30 s from ``started``) for the request to reach the rule's target; the
    messages that arrived."""
    messages: list[Any] = []
    while not messages and time.monotonic() - started < 30:
        messages = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get("Messages", [])
    assert messages, "no refresh request reached the rule's target"
    return messages


def run_refresh_request(env: dict[str, str], **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", recipe("refresh-request")],
        env={**env, **variables},
        capture_output=True,
        text=True,
        timeout=RECIPE_TIMEOUT,
        check=False,
    )


@pytest.fixture
def refusing_eventbridge() -> Iterator[StubEventBridge]:
    """EventBridge refusing the entry as it does for a role not allowed the event's source."""
    with eventbridge_stub.refusing_eventbridge() as stub:
        yield stub


@SHELL_TOOLS
def test_the_refresh_request_recipe_stops_on_a_refused_entry(
    server_stack: Stack,
    logged_tools: tuple[dict[str, str], Path],
    refusing_eventbridge: StubEventBridge,
) -> None:
    env, _ = logged_tools
    server_stack.seed()
    arn = publish_refreshed(server_stack, 3600)
    result = run_refresh_request(
        env, SECRET_ARN=arn, AWS_ENDPOINT_URL_EVENTBRIDGE=refusing_eventbridge.url
    )
    assert result.returncode == 1, result.stderr
    assert (
        "Refresh request refused: NotAuthorizedForSourceException: Not authorized for the source."
        in result.stderr
    )
    assert "waiting" not in result.stderr
    [entry] = refusing_eventbridge.entries
    assert entry["Source"] == "cmstoken.consumer"
    assert entry["DetailType"] == "Service Token Refresh Requested"


@SHELL_TOOLS
def test_the_refresh_request_recipe_gives_up_at_its_deadline(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path]
) -> None:
    """The event is published (moto's EventBridge takes it: FailedEntryCount 0) but no rotator
    answers: the recipe says so at REFRESH_WAIT_SECONDS and exits 2."""
    env, _ = logged_tools
    sqs, queue = refresh_request_queue()
    server_stack.seed()
    arn = publish_refreshed(server_stack, 3600)
    started = time.monotonic()
    result = run_refresh_request(env, SECRET_ARN=arn, REFRESH_WAIT_SECONDS="6")
    assert result.returncode == 2, result.stderr
    # The recipe counts whole seconds (date +%s): it gives up 5 to 6 s after it started.
    assert time.monotonic() - started > 5
    assert "Refresh requested; waiting up to 6 s for the new token." in result.stderr
    assert "No new token within 6 s: see the rotator's log group" in result.stderr
    assert "published" not in result.stderr
    assert sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get("Messages")


@SHELL_TOOLS
def test_the_refresh_request_recipe_says_not_bootstrapped_and_asks_nothing(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path]
) -> None:
    """The stack's secret exists with no value; GetSecretValue answers ResourceNotFoundException
    as for a missing secret (moto with HTTP 404, AWS with the 400 its API reference documents,
    https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html: the
    AWS CLI prints the code either way), and DescribeSecret tells the two apart."""
    env, log = logged_tools
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    result = run_refresh_request(env, SECRET_ARN=arn)
    assert result.returncode == 1, result.stderr
    assert "ResourceNotFoundException" in result.stderr  # the AWS CLI's own error
    assert "Not bootstrapped: the secret exists but has no value yet" in result.stderr
    assert "Cannot read" not in result.stderr
    assert "put-events" not in log.read_text()


@SHELL_TOOLS
@pytest.mark.parametrize("wrong", ["mistyped ARN", "other region", "other account"])
def test_the_refresh_request_recipe_names_a_wrong_arn_or_region_and_asks_nothing(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path], wrong: str
) -> None:
    env, log = logged_tools
    server_stack.seed()
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    variables = {"SECRET_ARN": arn}
    if wrong == "mistyped ARN":
        variables["SECRET_ARN"] = arn[:-1] + ("A" if arn[-1] != "A" else "B")
    elif wrong == "other region":
        variables["AWS_DEFAULT_REGION"] = "eu-west-1"
        env = {name: value for name, value in env.items() if name != "AWS_REGION"}
    else:
        variables["SECRET_ARN"] = arn.replace(":123456789012:", ":210987654321:")
    result = run_refresh_request(env, **variables)
    assert result.returncode == 1, result.stderr
    assert "ResourceNotFoundException" in result.stderr
    assert "Cannot read SECRET_ARN: ResourceNotFoundException means a wrong ARN or region" in (
        result.stderr
    )
    assert "Not bootstrapped" not in result.stderr
    assert "put-events" not in log.read_text()


@SHELL_TOOLS
def test_the_refresh_request_recipe_asks_nothing_when_reauthorization_is_required(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path]
) -> None:
    env, log = logged_tools
    server_stack.seed()
    arn = publish_refreshed(server_stack, 3600, credential_status="reauthorization_required")
    result = run_refresh_request(env, SECRET_ARN=arn)
    assert result.returncode == 1, result.stderr
    assert "The stack's credential needs reauthorization: run the bootstrap." in result.stderr
    assert "put-events" not in log.read_text()


@SHELL_TOOLS
def test_the_refresh_request_recipe_stops_when_the_rotator_meets_a_refused_credential(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """The rotator runs on the request and meets invalid_grant: it marks the published document
    and no new token can come; the recipe says so (at its next read of the secret:
    ``wakeable_sleep``) instead of waiting out its deadline."""
    env, _ = logged_tools
    env, rotator_ran = wakeable_sleep(env, tmp_path)
    stack = server_stack
    sqs, queue = refresh_request_queue()
    stack.seed()
    arn = publish_refreshed(stack, 3600)
    started = time.monotonic()
    process = start_refresh_request(env, arn)
    with killed_if_running(process):
        messages = wait_for_refresh_request(sqs, queue, started)
        stack.emulator.revoke_family(stack.newest_refresh_token())
        stack.emulator.advance(template_default("MinRefreshIntervalSeconds") + 1)
        with pytest.raises(ReauthorizationRequiredError):
            stack.invoke("rotator", json.loads(messages[0]["Body"]))
        rotator_ran.touch()
        _, err = process.communicate(timeout=RECIPE_TIMEOUT)
    assert process.returncode == 1, err
    assert "The identity provider refused the stack's credential: run the bootstrap." in err


@SHELL_TOOLS
def test_a_failed_read_while_waiting_is_not_taken_for_a_new_token(
    server_stack: Stack, logged_tools: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """Once the request is sent, every read of the secret is throttled (an ``aws`` in front of
    the real one fails get-secret-value as the AWS CLI does): the recipe keeps waiting and
    gives up at its deadline, it never reports a token that it did not read."""
    env, _ = logged_tools
    server_stack.seed()
    arn = publish_refreshed(server_stack, 3600)
    faults = tmp_path / "faults"
    faults.mkdir()
    sent = tmp_path / "put-events-sent"
    real = shutil.which("aws", path=env["PATH"])
    assert real is not None
    shim = faults / "aws"
    shim.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f'  *put-events*) touch "{sent}" ;;\n'
        f'  *get-secret-value*) if [ -e "{sent}" ]; then\n'
        '    echo "An error occurred (ThrottlingException) when calling the GetSecretValue'
        ' operation: Rate exceeded" >&2; exit 255; fi ;;\n'
        "esac\n"
        f'exec "{real}" "$@"\n'
    )
    shim.chmod(0o755)
    env = {**env, "PATH": f"{faults}{os.pathsep}{env['PATH']}"}
    result = run_refresh_request(env, SECRET_ARN=arn, REFRESH_WAIT_SECONDS="7")
    assert sent.exists()
    assert result.returncode == 2, result.stderr
    assert "ThrottlingException" in result.stderr
    assert "No new token within 7 s" in result.stderr
    assert "published" not in result.stderr


# --- ECS ------------------------------------------------------------------------------------

# SECRET_ARN:json-key:version-stage:version-id, the secret's full ARN (with its 6-character
# suffix) first; stage and id empty for AWSCURRENT.
VALUE_FROM = re.compile(
    r"^(?P<arn>arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:(?P<name>[\w/+=.@-]+)"
    r"-[A-Za-z0-9]{6}):(?P<key>[^:]+):(?P<stage>[^:]*):(?P<version>[^:]*)$"
)
SECRET_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$")
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")


def test_the_recommended_ecs_task_reads_the_secret_through_its_task_role(stack: Stack) -> None:
    stack.seed()
    definition = json.loads(recipe("ecs"))
    assert ROLE_ARN.match(definition["taskRoleArn"])
    (container,) = definition["containerDefinitions"]
    assert "secrets" not in container  # nothing injected: the token is read at run time
    environment = {item["name"]: item["value"] for item in container["environment"]}
    arn = environment["CMS_TOKEN_SECRET_ARN"]  # the Python helper's variable in the docs
    assert "CMS_TOKEN_SECRET_ARN" in recipe_python_helper()
    assert SECRET_ARN.match(arn)
    assert VALUE_FROM.match(f"{arn}:token::")
    assert arn.split(":secret:")[1].rsplit("-", 1)[0] == SERVICE_SECRET


def recipe_python_helper() -> str:
    return block("consumer-helper: python")


def test_the_injecting_ecs_task_names_existing_json_keys_in_the_documented_syntax(
    stack: Stack,
) -> None:
    stack.seed()
    definition = json.loads(recipe("ecs-secrets"))
    assert ROLE_ARN.match(definition["executionRoleArn"])  # ECS resolves `secrets` with it
    (container,) = definition["containerDefinitions"]
    document = published_document(stack)
    real_arn = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    names = set()
    for secret in container["secrets"]:
        match = VALUE_FROM.match(secret["valueFrom"])
        assert match, secret["valueFrom"]
        assert (match["stage"], match["version"]) == ("", "")  # AWSCURRENT
        assert match["name"] == SERVICE_SECRET
        assert isinstance(document[match["key"]], str)
        names.add(secret["name"])
        # what ECS does: the secret by its full ARN, then the JSON key
        resolved = json.loads(
            stack.secretsmanager.get_secret_value(SecretId=real_arn)["SecretString"]
        )[match["key"]]
        assert resolved == document[match["key"]]
    assert names == {"CMS_TOKEN", "CMS_API_URL"}


def test_the_ecs_text_states_the_injected_tokens_lifetime_from_the_template_defaults() -> None:
    least = template_default("RefreshMarginSeconds") - 60 * template_default(
        "RotationIntervalMinutes"
    )
    text = " ".join(documentation().split())
    assert f"between about {least // 3600} h" in text
    assert "task execution role" in text
    assert "Fargate platform version 1.4.0 or later" in text
    assert "container agent 1.37.0 or later" in text


# Registering the task definitions: the command the document shows, run as it is against
# moto's server, and AWS's rules for Fargate that moto does not enforce.

ECS_RECIPES = ["ecs", "ecs-secrets"]
ECS_REGISTER = "aws ecs register-task-definition --cli-input-json file://task-definition.json"
ECS_REGION = "eu-west-1"  # the region of the recipes' ARNs
# the fields that make the definitions registrable on Fargate; without them, the old recipes
FARGATE_FIELDS = ("requiresCompatibilities", "networkMode", "cpu", "memory")
# Fargate's task sizes: the CPU units, and the memory values (MiB) allowed with them
FARGATE_TASK_SIZES: dict[int, tuple[int, ...]] = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4096 + 1, 1024)),
    1024: tuple(range(2048, 8192 + 1, 1024)),
    2048: tuple(range(4096, 16384 + 1, 1024)),
    4096: tuple(range(8192, 30720 + 1, 1024)),
    8192: tuple(range(16384, 61440 + 1, 4096)),
    16384: tuple(range(32768, 122880 + 1, 8192)),
}
AWS_CLI = pytest.mark.skipif(not tool_works("aws", "--version"), reason="needs the AWS CLI")


def task_definition_problems(definition: dict[str, Any]) -> list[str]:
    """What ``RegisterTaskDefinition`` refuses in ``definition``, by AWS's documented rules
    (moto's server enforces only the first; it registers a Fargate definition without a task
    size, with an invalid one, or with another network mode, which it then describes as
    ``awsvpc``):

    - a container with neither ``memory`` nor ``memoryReservation`` needs a task-level
      ``memory`` (Amazon ECS API Reference, ContainerDefinition, ``memoryReservation``: "If a
      task-level memory value is not specified, you must specify a non-zero integer for one or
      both of memory or memoryReservation in a container definition",
      https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDefinition.html);
    - with ``FARGATE`` in ``requiresCompatibilities``, the network mode must be ``awsvpc``, and
      the task-level ``cpu`` and ``memory`` are required and must be one of the valid
      combinations (Amazon ECS Developer Guide, "Amazon ECS task definition parameters for
      Fargate", sections "Network mode" and "Task size",
      https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task_definition_parameters.html;
      the table of valid CPU and memory values in "Troubleshoot Amazon ECS task definition
      invalid CPU or memory errors",
      https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-cpu-memory-error.html;
      and the API Reference, RegisterTaskDefinition, ``cpu``, ``memory`` and ``networkMode``,
      https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_RegisterTaskDefinition.html).

    Both are strings in the API (the AWS CLI refuses numbers); only the CPU-unit and MiB forms
    (``"256"``, ``"512"``) are accepted here, not ``"1 vCPU"`` or ``"1 GB"``."""
    problems = []
    for container in definition["containerDefinitions"]:
        if not ({"memory", "memoryReservation"} & container.keys() or "memory" in definition):
            problems.append(
                f"container {container['name']!r}: at least one of 'memory' or "
                "'memoryReservation' must be specified (no task-level memory)"
            )
    if "FARGATE" not in definition.get("requiresCompatibilities", []):
        return problems
    if definition.get("networkMode") != "awsvpc":
        problems.append(
            f"Fargate needs networkMode 'awsvpc', not {definition.get('networkMode')!r}"
        )
    cpu, memory = definition.get("cpu"), definition.get("memory")
    if not (
        isinstance(cpu, str) and isinstance(memory, str) and cpu.isdigit() and memory.isdigit()
    ):
        problems.append(
            f"Fargate needs task-level cpu and memory as strings of digits: {cpu!r}, {memory!r}"
        )
    elif int(memory) not in FARGATE_TASK_SIZES.get(int(cpu), ()):
        problems.append(f"cpu {cpu} with memory {memory} is not a Fargate task size")
    return problems


def old_task_definition(name: str) -> dict[str, Any]:
    """The recipe as it was before it was made registrable: without the Fargate fields."""
    definition: dict[str, Any] = json.loads(recipe(name))
    return {key: value for key, value in definition.items() if key not in FARGATE_FIELDS}


def register_task_definition(
    text: str, directory: Path, endpoint: str
) -> subprocess.CompletedProcess[str]:
    """Write ``text`` to task-definition.json in ``directory`` and run the documented command
    there, as it is (``run_ecs_recipe``)."""
    (directory / "task-definition.json").write_text(text)
    script = recipe("ecs-register")
    assert script.splitlines() == [ECS_REGISTER]
    return run_ecs_recipe(script, directory, endpoint)


def run_ecs_recipe(script: str, directory: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    """Run a recipe's AWS CLI command in ``directory`` as it is: the AWS CLI reaches moto's
    server for ECS through AWS_ENDPOINT_URL_ECS, with dummy credentials, the recipes' region,
    no configuration or credentials files, and every other address sent to a closed port on
    127.0.0.1 as a proxy."""
    env = {name: os.environ[name] for name in ("PATH", "PYENV_ROOT", "LANG") if name in os.environ}
    env.update(
        HOME=str(directory),
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=ECS_REGION,
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL_ECS=endpoint,
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1",
    )
    return run_shell(script, env, cwd=directory)


@pytest.mark.parametrize("name", ECS_RECIPES)
def test_the_ecs_task_definitions_follow_awss_rules_for_fargate(name: str) -> None:
    """The recipes are Fargate task definitions that AWS accepts, by the rules of
    ``task_definition_problems`` (which moto does not enforce)."""
    definition = json.loads(recipe(name))
    assert definition["requiresCompatibilities"] == ["FARGATE"]  # so AWS checks them as such
    assert task_definition_problems(definition) == []


@pytest.mark.parametrize(
    ("dropped", "changed", "problem"),
    [
        (FARGATE_FIELDS, {}, "'memoryReservation'"),
        ((), {"networkMode": "bridge"}, "networkMode 'awsvpc'"),
        (("cpu",), {}, "strings of digits"),
        ((), {"cpu": 256}, "strings of digits"),
        ((), {"memory": "4096"}, "not a Fargate task size"),
        ((), {"cpu": "8192", "memory": "18432"}, "not a Fargate task size"),
    ],
    ids=["old", "bridge", "no-cpu", "number", "256-4096", "8192-18432"],
)
def test_the_ecs_rule_check_refuses_what_aws_refuses(
    dropped: tuple[str, ...], changed: dict[str, Any], problem: str
) -> None:
    """The control for the test above: the old recipes (no memory anywhere) and Fargate
    definitions that break one rule each are refused."""
    for name in ECS_RECIPES:
        definition = {k: v for k, v in json.loads(recipe(name)).items() if k not in dropped}
        definition.update(changed)
        assert any(problem in found for found in task_definition_problems(definition)), name


@AWS_CLI
@pytest.mark.parametrize("name", ECS_RECIPES)
def test_the_ecs_task_definitions_register_with_the_documented_command(
    moto_server: str, tmp_path: Path, name: str
) -> None:
    """The document's command registers the recipe as it is shown, and ECS then describes what
    the document shows: family, Fargate compatibility, network mode, task size, roles, and the
    containers' environment and secrets."""
    result = register_task_definition(recipe(name), tmp_path, moto_server)
    assert result.returncode == 0, result.stderr
    definition: dict[str, Any] = json.loads(recipe(name))
    assert set(FARGATE_FIELDS) | {"family", "executionRoleArn"} <= definition.keys()
    registered = json.loads(result.stdout)["taskDefinition"]
    ecs = boto3.client("ecs", region_name=ECS_REGION)
    described = ecs.describe_task_definition(taskDefinition=definition["family"])["taskDefinition"]
    assert described["taskDefinitionArn"] == registered["taskDefinitionArn"]
    assert (described["revision"], described["status"]) == (1, "ACTIVE")
    assert "FARGATE" in described["compatibilities"]
    for key, value in definition.items():
        if key != "containerDefinitions":
            assert described[key] == value, key
    for shown, kept in zip(
        definition["containerDefinitions"], described["containerDefinitions"], strict=True
    ):
        assert {key: kept.get(key) for key in shown} == shown


@AWS_CLI
@pytest.mark.parametrize("name", ECS_RECIPES)
def test_moto_and_the_aws_cli_refuse_the_old_ecs_task_definitions(
    moto_server: str, tmp_path: Path, name: str
) -> None:
    """What is enforced without the rule check: moto's server refuses the old recipes (no
    memory anywhere) as AWS does, and the AWS CLI refuses a task size given as numbers."""
    old = register_task_definition(json.dumps(old_task_definition(name)), tmp_path, moto_server)
    assert old.returncode == 255
    assert "At least one of 'memory' or 'memoryReservation' must be specified" in old.stderr
    numbers = {**json.loads(recipe(name)), "cpu": 256, "memory": 512}
    refused = register_task_definition(json.dumps(numbers), tmp_path, moto_server)
    assert refused.returncode == 255
    assert "Invalid type for parameter cpu" in refused.stderr
    ecs = boto3.client("ecs", region_name=ECS_REGION)
    assert ecs.list_task_definitions()["taskDefinitionArns"] == []


@AWS_CLI
def test_the_redeploy_command_starts_a_new_deployment_of_the_service(
    moto_server: str, tmp_path: Path
) -> None:
    """Pattern 3's command, as the document shows it, replaces the tasks of the service it
    names (moto gives the service's deployment a new id); a service that does not exist is
    refused, so the command is not one that succeeds whatever it names."""
    script = recipe("ecs-redeploy")
    command = shlex.split(script)
    cluster = command[command.index("--cluster") + 1]
    service = command[command.index("--service") + 1]
    ecs = boto3.client("ecs", region_name=ECS_REGION)
    ec2 = boto3.client("ec2", region_name=ECS_REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="cms-client", Description="cms", VpcId=vpc)
    ecs.create_cluster(clusterName=cluster)
    family = ecs.register_task_definition(**json.loads(recipe("ecs-secrets")))["taskDefinition"]
    ecs.create_service(
        cluster=cluster,
        serviceName=service,
        taskDefinition=family["taskDefinitionArn"],
        desiredCount=1,
        launchType="FARGATE",
        networkConfiguration={
            "awsvpcConfiguration": {"subnets": [subnet], "securityGroups": [group["GroupId"]]}
        },
    )

    def deployment() -> str:
        described = ecs.describe_services(cluster=cluster, services=[service])["services"]
        return str(described[0]["deployments"][0]["id"])

    before = deployment()
    result = run_ecs_recipe(script, tmp_path, moto_server)
    assert result.returncode == 0, result.stderr
    assert deployment() != before
    missing = run_ecs_recipe(script.replace(service, "no-such-service"), tmp_path, moto_server)
    assert missing.returncode == 255
    assert "ServiceNotFoundException" in missing.stderr


# --- External Secrets Operator --------------------------------------------------------------


@cache
def crd(kind: str) -> dict[str, Any]:
    plural = {
        "ExternalSecret": "externalsecrets",
        "SecretStore": "secretstores",
        "ClusterSecretStore": "clustersecretstores",
    }[kind]
    text = (CRDS / f"external-secrets.io_{plural}.yaml").read_text()
    # libyaml's safe loader where PyYAML has it: the same document, in a tenth of the 2 s the
    # pure-Python one takes on the two 690 kB CRDs
    if yaml.__with_libyaml__:
        document: dict[str, Any] = yaml.load(text, Loader=yaml.CSafeLoader)
    else:
        document = yaml.safe_load(text)
    assert document["spec"]["names"]["kind"] == kind
    return document


def closed(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the API server would drop them (strict
    field validation, kubectl's default): objects with ``properties`` and neither
    ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields``."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {key: closed(value) for key, value in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


def validate(manifest: dict[str, Any]) -> None:
    """Validate like the API server with the vendored CRDs: the version must be served, and
    the object must match that version's schema."""
    group, version = manifest["apiVersion"].split("/")
    definition = crd(manifest["kind"])
    assert definition["spec"]["group"] == group
    versions = {entry["name"]: entry for entry in definition["spec"]["versions"]}
    assert versions[version]["served"], f"{manifest['apiVersion']} is not served"
    schema = closed(versions[version]["schema"]["openAPIV3Schema"])
    jsonschema.validate(manifest, schema, cls=jsonschema.Draft7Validator)


def manifests(name: str) -> dict[str, dict[str, Any]]:
    documents = [doc for doc in yaml.safe_load_all(recipe(name)) if doc]
    by_kind = {doc["kind"]: doc for doc in documents}
    assert len(by_kind) == len(documents)
    return by_kind


def go_duration_seconds(text: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    assert parts, f"not a Go duration: {text}"
    assert "".join(n + u for n, u in parts) == text, f"not a Go duration: {text}"
    return sum(float(number) * units[unit] for number, unit in parts)


def test_the_vendored_crds_are_the_named_version_and_no_longer_serve_v1beta1() -> None:
    assert f"ESO v{ESO_VERSION[1:]}" in documentation()
    notes = (CRDS / "README.md").read_text()
    assert f"tag `{ESO_VERSION}`" in notes
    assert "Apache License" in (CRDS / "LICENSE").read_text()
    for kind in ("ExternalSecret", "SecretStore", "ClusterSecretStore"):
        served = {v["name"]: v["served"] for v in crd(kind)["spec"]["versions"]}
        assert served == {"v1": True, "v1beta1": False}
    assert crd("ClusterSecretStore")["spec"]["scope"] == "Cluster"


def test_the_external_secrets_manifests_validate_against_the_crds(stack: Stack) -> None:
    stack.seed()
    found = manifests("external-secrets")
    assert set(found) == {"ServiceAccount", "SecretStore", "ExternalSecret"}
    account, store = found["ServiceAccount"], found["SecretStore"]
    external = found["ExternalSecret"]
    for manifest in (store, external):
        assert manifest["apiVersion"] == "external-secrets.io/v1"
        validate(manifest)
    namespace = account["metadata"]["namespace"]
    assert store["metadata"]["namespace"] == external["metadata"]["namespace"] == namespace

    # the store: Secrets Manager in a region, as the IRSA service account
    assert account["apiVersion"] == "v1"
    assert ROLE_ARN.match(account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"])
    aws = store["spec"]["provider"]["aws"]
    assert aws["service"] == "SecretsManager"
    assert re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", aws["region"])
    assert aws["auth"]["jwt"]["serviceAccountRef"]["name"] == account["metadata"]["name"]

    # the external secret: the store, the published document's fields, a safe interval
    spec = external["spec"]
    assert spec["secretStoreRef"] == {"kind": "SecretStore", "name": store["metadata"]["name"]}
    document = published_document(stack)
    for entry in spec["data"]:
        assert entry["remoteRef"]["key"] == SERVICE_SECRET
        assert isinstance(document[entry["remoteRef"]["property"]], str)
    assert {entry["secretKey"] for entry in spec["data"]} >= {"token"}
    assert spec.get("refreshPolicy", "Periodic") == "Periodic"
    assert go_duration_seconds(spec["refreshInterval"]) > 0
    assert "syncWindows" not in spec
    assert worst_copy_age(spec) < age_limit()


def age_limit() -> int:
    """What the published token has left, at least: the margin less one schedule period."""
    return template_default("RefreshMarginSeconds") - 60 * template_default(
        "RotationIntervalMinutes"
    )


def worst_copy_age(spec: dict[str, Any]) -> float:
    """The oldest the synced copy gets, in seconds, by the documentation's rule: one
    ``refreshInterval``; with ``syncWindows``, two of them plus the longest time the windows
    block syncs (a window can open just as a sync is due, and ESO syncs at its next check after
    the window ends, at most one ``refreshInterval`` later by ESO's docs). A ``deny`` block
    counts its longest window (for windows that neither overlap nor touch, as the manifests
    checked here); an ``allow`` block blocks all the time outside its windows, so it counts
    as unbounded."""
    interval = go_duration_seconds(spec["refreshInterval"])
    windows = spec.get("syncWindows")
    if not windows:
        return interval
    if windows["kind"] == "allow":
        return float("inf")
    longest = max(go_duration_seconds(window["duration"]) for window in windows["windows"])
    return 2 * interval + longest


def eso_copy_refusals(
    stack: Stack,
    refresh_interval: int,
    *,
    deny_window: int = 0,
    retry_after_blocked: int | None = None,
) -> list[int]:
    """Thirty hours, minute by minute, of the stack's hourly rotator (checking in the last minute
    of each hour, the worst phase) and of ESO copying the published token every
    ``refresh_interval`` seconds, its sync falling in the very minute of the rotation, just
    before it (the worst phase again). Returns the minutes at which the copy held a token the
    API refuses; checks on the way that the published token always had at least the margin less
    one period left (the ECS text's "about 5 h").

    With ``deny_window`` seconds, a ``syncWindows`` deny window opens when the next sync after
    that copy is due (the worst phase for it) and blocks every check until it ends, its end
    included, as ESO's ``isWithinSyncWindow`` does. After a blocked check ESO checks again
    ``retry_after_blocked`` seconds later: ``refresh_interval`` by ESO's docs ("the controller
    still requeues at refreshInterval regardless of whether a sync was blocked"), 7 minutes
    at most in the v2.9.0 controller (a blocked check requeues through its rate limiter, whose
    longest delay is 7 minutes)."""
    stack.seed()
    margin = template_default("RefreshMarginSeconds")
    period = template_default("RotationIntervalMinutes")
    interval = refresh_interval // 60
    retry = (retry_after_blocked or refresh_interval) // 60
    document = stack.service_document()
    lifetime = document.expires_at - stack.clock.now()
    checks = range(period - 1, 30 * 60, period)
    rotation = next(minute for minute in checks if lifetime - 60 * minute <= margin)
    opens = rotation + interval
    window = range(opens, opens + deny_window // 60 + 1) if deny_window else range(0)
    due = rotation % interval or interval
    copied, refused = document.token, []
    for minute in range(1, 30 * 60):
        stack.emulator.advance(60)
        if minute == due and minute in window:
            due += retry
        elif minute == due:
            copied = document.token
            due += interval
        if minute in checks:
            outcome = stack.invoke("rotator", {})["outcome"]
            assert outcome == ("rotated" if minute == rotation else "skipped"), minute
            # Read again after each run, its only writer (not each minute: 1,800 reads).
            document = stack.service_document()
        left = document.expires_at - stack.clock.now()
        assert left >= margin - 60 * period, minute
        if not stack.emulator.service_token_valid(copied):
            refused.append(minute)
    return refused


def test_the_recipes_refresh_interval_keeps_the_synced_token_working(stack: Stack) -> None:
    spec = manifests("external-secrets")["ExternalSecret"]["spec"]
    assert eso_copy_refusals(stack, int(go_duration_seconds(spec["refreshInterval"]))) == []


@pytest.mark.parametrize(("minutes_past_the_limit", "works"), [(-1, True), (15, False)])
def test_the_refresh_interval_rule_is_the_limit(
    stack: Stack, minutes_past_the_limit: int, works: bool
) -> None:
    """Just under the margin less one period, the copy always works; past it, the copy
    expires before the next sync (in the worst phase)."""
    refused = eso_copy_refusals(stack, age_limit() + 60 * minutes_past_the_limit)
    assert (refused == []) == works, refused


def recipe_interval() -> int:
    spec = manifests("external-secrets")["ExternalSecret"]["spec"]
    return int(go_duration_seconds(spec["refreshInterval"]))


def crd_sync_window_example() -> dict[str, str]:
    """The deny window the vendored ExternalSecret CRD gives as its example: the ``Example:``
    of each field's description (a schedule of 22:00 UTC on weekdays, a duration of 8 h)."""
    (served,) = [v for v in crd("ExternalSecret")["spec"]["versions"] if v["served"]]
    entry = served["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    fields = entry["syncWindows"]["properties"]["windows"]["items"]["properties"]
    example = {}
    for name in ("schedule", "duration"):
        found = re.search(r'Example: "([^"]+)"', fields[name]["description"])
        assert found, name
        example[name] = found[1]
    return example


def with_deny_window(duration: int) -> dict[str, Any]:
    """The recipe's ExternalSecret with a deny window of ``duration`` seconds on the CRD's
    example schedule; it validates against the CRD."""
    external = copy.deepcopy(manifests("external-secrets")["ExternalSecret"])
    hours, minutes = divmod(duration // 60, 60)
    window = {"schedule": crd_sync_window_example()["schedule"], "duration": f"{hours}h{minutes}m"}
    external["spec"]["syncWindows"] = {"kind": "deny", "windows": [window]}
    validate(external)
    return external


def test_the_crds_example_sync_window_breaks_the_refresh_interval_rule(stack: Stack) -> None:
    """The CRD's example 8 h deny window on the recipe's ExternalSecret: the rule says no, and
    the synced token expires before ESO syncs again (in the worst phase)."""
    example = go_duration_seconds(crd_sync_window_example()["duration"])
    assert example == 8 * 3600
    spec = with_deny_window(int(example))["spec"]
    assert worst_copy_age(spec) >= age_limit()
    interval = int(go_duration_seconds(spec["refreshInterval"]))
    assert eso_copy_refusals(stack, interval, deny_window=int(example))


@pytest.mark.parametrize(
    ("window_past_the_rule", "retry_after_blocked", "works"),
    [
        (-60, None, True),  # just inside the rule, ESO's docs' checks
        (-60, 7 * 60, True),  # just inside the rule, the v2.9.0 controller's retries
        (3600 - 60, 7 * 60, False),  # a window plus one interval under the limit: not enough
    ],
)
def test_a_sync_window_counts_with_two_refresh_intervals(
    stack: Stack, window_past_the_rule: int, retry_after_blocked: int | None, works: bool
) -> None:
    """With the recipe's interval, a deny window just under the rule (the limit less two
    intervals) keeps the copy working whether ESO checks again every interval (its docs) or
    within 7 minutes (its v2.9.0 controller); a window one interval longer, still under the
    limit less one interval, lets the copy expire when ESO catches up a few minutes late."""
    interval = recipe_interval()
    deny = age_limit() - 2 * interval + window_past_the_rule
    spec = with_deny_window(deny)["spec"]
    assert (worst_copy_age(spec) < age_limit()) == works
    refused = eso_copy_refusals(
        stack, interval, deny_window=deny, retry_after_blocked=retry_after_blocked
    )
    assert (refused == []) == works, refused


def test_the_pod_identity_store_validates_and_assumes_the_reader_role() -> None:
    store = manifests("external-secrets-pod-identity")["SecretStore"]
    validate(store)
    aws = store["spec"]["provider"]["aws"]
    assert aws["service"] == "SecretsManager"
    assert "auth" not in aws  # the controller's Pod Identity credentials
    assert ROLE_ARN.match(aws["role"])


def cluster_store_allows(store: dict[str, Any], namespace: str) -> bool:
    """Whether ESO lets an ExternalSecret in ``namespace`` (labelled only with its name, as the
    API server labels every namespace) use the ClusterSecretStore, as v2.9.0's
    ``shouldProcessSecret`` decides: without ``conditions``, every namespace; otherwise any
    condition whose ``namespaces`` (matched on ``kubernetes.io/metadata.name``),
    ``namespaceSelector`` labels or ``namespaceRegexes`` (unanchored: Go's
    ``regexp.MatchString``) admits it."""
    conditions = store["spec"].get("conditions") or []
    if not conditions:
        return True
    labels = {"kubernetes.io/metadata.name": namespace}
    for condition in conditions:
        selector = condition.get("namespaceSelector")
        if selector is not None:
            assert "matchExpressions" not in selector
            if all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
                return True
        if namespace in condition.get("namespaces", []):
            return True
        if any(re.search(regex, namespace) for regex in condition.get("namespaceRegexes", [])):
            return True
    return False


def cluster_store_problems(store: dict[str, Any]) -> list[str]:
    """What the documentation says a ClusterSecretStore of the token must not lack."""
    problems = []
    reference = store["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]
    if "namespace" not in reference:
        # ESO's AWS docs: "In case of a ClusterSecretStore, Be sure to provide namespace for
        # serviceAccountRef"; without it v2.9.0's credsFromServiceAccount looks for the
        # service account in the namespace of each ExternalSecret that uses the store
        problems.append("serviceAccountRef has no namespace")
    conditions = store["spec"].get("conditions") or []
    if not conditions:
        problems.append("no conditions: every namespace can copy the token")
    for condition in conditions:
        for regex in condition.get("namespaceRegexes", []):
            if not (regex.startswith("^") and regex.endswith("$")):
                problems.append(f"unanchored namespace regex {regex!r}")
    return problems


def test_the_eso_cluster_store_names_its_accounts_namespace_and_the_namespaces_served() -> None:
    found = manifests("external-secrets-cluster-store")
    assert set(found) == {"ServiceAccount", "ClusterSecretStore", "ExternalSecret"}
    account, store = found["ServiceAccount"], found["ClusterSecretStore"]
    external = found["ExternalSecret"]
    for manifest in (store, external):
        assert manifest["apiVersion"] == "external-secrets.io/v1"
        validate(manifest)
    assert "namespace" not in store["metadata"]  # cluster-scoped

    # the IRSA service account, named with its namespace
    assert ROLE_ARN.match(account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"])
    aws = store["spec"]["provider"]["aws"]
    assert aws["auth"]["jwt"]["serviceAccountRef"] == {
        "name": account["metadata"]["name"],
        "namespace": account["metadata"]["namespace"],
    }
    single = manifests("external-secrets")
    assert {k: v for k, v in aws.items() if k != "auth"} == {
        k: v for k, v in single["SecretStore"]["spec"]["provider"]["aws"].items() if k != "auth"
    }

    # only the ExternalSecret's namespace may use it, by exact name
    assert cluster_store_problems(store) == []
    assert cluster_store_allows(store, external["metadata"]["namespace"])
    for other in ("default", "myapps-dev", account["metadata"]["namespace"]):
        assert not cluster_store_allows(store, other)

    # the ExternalSecret: the single-namespace one, pointing at the cluster store by kind
    assert external["spec"]["secretStoreRef"] == {
        "kind": "ClusterSecretStore",
        "name": store["metadata"]["name"],
    }
    same = copy.deepcopy(external)
    same["spec"]["secretStoreRef"] = single["ExternalSecret"]["spec"]["secretStoreRef"]
    assert same == single["ExternalSecret"]


def without_namespace(store: dict[str, Any]) -> None:
    del store["spec"]["provider"]["aws"]["auth"]["jwt"]["serviceAccountRef"]["namespace"]


def without_conditions(store: dict[str, Any]) -> None:
    del store["spec"]["conditions"]


def with_unanchored_regex(store: dict[str, Any]) -> None:
    store["spec"]["conditions"] = [{"namespaceRegexes": ["apps"]}]


@pytest.mark.parametrize(
    ("change", "problem", "admits_myapps_dev"),
    [
        (without_namespace, "serviceAccountRef has no namespace", False),
        (without_conditions, "no conditions", True),
        (with_unanchored_regex, "unanchored namespace regex 'apps'", True),
    ],
)
def test_the_eso_cluster_store_rules_catch_what_the_crd_accepts(
    change: Any, problem: str, admits_myapps_dev: bool
) -> None:
    """The CRD requires none of these (``serviceAccountRef.namespace`` is optional, "defaults
    to the namespace of the referent"; ``conditions`` is optional), so the API server takes each
    store; the documentation's rules refuse them."""
    store = copy.deepcopy(manifests("external-secrets-cluster-store")["ClusterSecretStore"])
    change(store)
    validate(store)
    assert any(found.startswith(problem) for found in cluster_store_problems(store))
    assert cluster_store_allows(store, "myapps-dev") == admits_myapps_dev


def test_the_pod_mounts_the_synced_secret_as_a_volume_without_sub_path() -> None:
    pod = manifests("external-secrets-pod")["Pod"]
    target = manifests("external-secrets")["ExternalSecret"]["spec"]["target"]["name"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (container,) = pod["spec"]["containers"]
    assert "env" not in container
    assert "envFrom" not in container
    (mount,) = container["volumeMounts"]
    assert "subPath" not in mount
    assert "subPathExpr" not in mount
    assert volumes[mount["name"]]["secret"]["secretName"] == target


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda m: m.update(apiVersion="external-secrets.io/v1beta1"), "not served"),
        (lambda m: m["spec"]["provider"]["aws"].update(service="SecretManager"), "is not one of"),
        (lambda m: m["spec"]["provider"]["aws"].update(regoin="eu-west-1"), "regoin"),
    ],
)
def test_the_validation_refuses_what_the_api_server_refuses(change: Any, error: str) -> None:
    store = copy.deepcopy(manifests("external-secrets")["SecretStore"])
    change(store)
    with pytest.raises((AssertionError, jsonschema.ValidationError), match=error):
        validate(store)


def test_the_kubernetes_text_states_the_refresh_interval_rule() -> None:
    text = " ".join(documentation().split())
    assert (
        "`refreshInterval` must be shorter than `RefreshMarginSeconds` minus the schedule "
        "period (`RotationIntervalMinutes`)"
    ) in text
    least = template_default("RefreshMarginSeconds") - 60 * template_default(
        "RotationIntervalMinutes"
    )
    assert f"under {least // 3600} h with the defaults" in text
    assert "never see a refresh" in text
    assert "without `subPath`" in text


def test_the_kubernetes_text_states_eso_versions_sync_windows_and_the_cluster_store() -> None:
    text = " ".join(documentation().split())
    assert "External Secrets Operator 0.16 or later" in text
    assert "0.17 stopped serving `v1beta1`" in text

    # sync windows: the rule with them, and its arithmetic with the defaults and the recipe
    interval = recipe_interval()
    assert interval == 3600
    assert "`spec.syncWindows` window (ESO 2.7 and later)" in text
    assert "its length plus two `refreshInterval`s old" in text
    assert f"under {(age_limit() - 2 * interval) / 3600:g} h of `deny` window" in text
    example = go_duration_seconds(crd_sync_window_example()["duration"]) / 3600
    assert f"the CRD's example {example:g} h window lets the synced token expire" in text
    assert "Leave `syncWindows` off this ExternalSecret" in text

    # the cluster store
    assert "`serviceAccountRef` must give the service account's `namespace`" in text
    assert "system:serviceaccount:external-secrets:cms-token-reader" in text
    assert "`namespaceRegexes` are unanchored" in text


# --- Terraform ------------------------------------------------------------------------------

TERRAFORM = pytest.mark.skipif(
    not tool_works("terraform", "version"), reason="needs terraform on PATH"
)


def test_the_terraform_recipe_reads_the_token_ephemerally_and_names_its_providers(
    stack: Stack,
) -> None:
    stack.seed()
    snippet = recipe("terraform")
    document = published_document(stack)
    fields = re.findall(r"local\.cms\.(\w+)", snippet)
    assert set(fields) == {"token", "api_url"}
    for field in fields:
        assert isinstance(document[field], str)
    # never the data source: it writes the token into the state and saved plans
    assert 'ephemeral "aws_secretsmanager_secret_version" "cms"' in snippet
    assert 'data "aws_secretsmanager_secret_version"' not in snippet
    providers = dict(re.findall(r'(\w+) = \{\s*source\s*= "([^"]+)"', snippet))
    assert providers == {"aws": "hashicorp/aws", "restapi": "Mastercard/restapi"}
    # their versions, and the arguments against each provider's schema:
    # tests/unit/test_terraform_recipe.py
    used = set(re.findall(r'^(?:provider|resource) "(\w+?)(?:_\w+)?"', snippet, re.M))
    assert used <= set(providers) | {"aws"}
    outputs = re.findall(r'^output "\w+" \{(.*?)^\}', snippet, re.M | re.S)
    assert outputs
    for body in outputs:
        assert re.search(r"^\s*sensitive = true$", body, re.M)


@TERRAFORM
@pytest.mark.parametrize("name", ["terraform", "terraform-local-stack"])
def test_the_terraform_recipe_is_formatted(name: str) -> None:
    formatted = subprocess.run(
        ["terraform", "fmt", "-check", "-diff", "-"],
        input=recipe(name),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert formatted.returncode == 0, formatted.stdout + formatted.stderr


@TERRAFORM
def test_the_terraform_recipe_validates(tmp_path: Path) -> None:
    """``terraform validate`` needs the providers installed; the Terraform registry is not
    reachable from where these tests run, so this runs only with a local provider mirror
    (``terraform providers mirror DIR`` on a connected machine, then
    ``CMSTOKEN_TERRAFORM_PLUGIN_DIR=DIR``). Without one, tests/unit/test_terraform_recipe.py
    holds the recipe against the providers' schemas vendored under tests/data/terraform. The
    local stack's override file is validated beside it, as the text says to use it."""
    plugins = os.environ.get("CMSTOKEN_TERRAFORM_PLUGIN_DIR")
    if not plugins:
        pytest.skip(
            "terraform validate needs the hashicorp/aws and Mastercard/restapi providers, "
            "which cannot be downloaded here (no access to the Terraform registry); set "
            "CMSTOKEN_TERRAFORM_PLUGIN_DIR to a provider mirror to run it"
        )
    (tmp_path / "main.tf").write_text(recipe("terraform"))
    (tmp_path / "local_stack_override.tf").write_text(recipe("terraform-local-stack"))
    env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}
    for command in (
        ["terraform", "init", "-backend=false", "-input=false", f"-plugin-dir={plugins}"],
        ["terraform", "validate", "-no-color"],
    ):
        result = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stdout + result.stderr


@TERRAFORM
@pytest.mark.parametrize(
    ("extra", "refused"),
    [("", None), ('variable "port" {}\n', "Missing base variable declaration to override")],
    ids=["as-documented", "with-a-new-variable"],
)
def test_terraform_takes_the_local_stack_file_as_an_override(
    tmp_path: Path, extra: str, refused: str | None
) -> None:
    """Terraform reads the configuration before it looks for providers: with none to be found
    (an empty plugin directory, no network), ``terraform init`` gets as far as the providers
    only if the override file is one it accepts. The recipe has no ``provider "aws"`` block, and
    an override file may add a default provider configuration, but no new variable."""
    (tmp_path / "main.tf").write_text(recipe("terraform"))
    (tmp_path / "local_stack_override.tf").write_text(recipe("terraform-local-stack") + extra)
    (tmp_path / "plugins").mkdir()
    env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}
    result = subprocess.run(
        ["terraform", "init", "-backend=false", "-input=false", "-no-color", "-plugin-dir=plugins"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    if refused is None:
        assert "Finding hashicorp/aws versions" in output, output
        assert "override" not in output.lower(), output
    else:
        assert refused in output, output


def test_the_terraform_text_explains_a_refresh_between_two_applies() -> None:
    text = " ".join(documentation().split())
    assert "split into two applies" in text
    assert "`MinRefreshIntervalSeconds` (600 s)" in text
    assert template_default("MinRefreshIntervalSeconds") == 600
    assert "MIN_REFRESH_INTERVAL_SECONDS:-600" in recipe("refresh-request")
