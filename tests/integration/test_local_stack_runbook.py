"""Every runbook command of docs/operate.md (its ``<!-- recipe: ... -->`` blocks, ``NAME`` the
local stack's) and docs/consume.md's refresh request, run in bash against the local stack of
`make demo KEEP=1`, as a new user runs them after `. .venv/local-stack.env`. A command that
cannot run there as written has a note beside it (``*On the local stack:*``), and only those
do; the note's way does run. The local stack's alarms follow the metrics (scripts/local_aws.py).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import kept_demo, killed_if_running, recipe
from wakeable_sleep import wakeable_sleep

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
NOTE = "*On the local stack:*"
# The demo's rotator takes a forced refresh 5 s after the last one (MIN_REFRESH_INTERVAL_SECONDS)
# rather than 600 s, so that the refresh request's wait is short.
MIN_REFRESH = "5"


# The note's way for the AWS CLI v1 (v2 takes the address from AWS_ENDPOINT_URL already).
AWS_SQS = 'aws --endpoint-url "$AWS_ENDPOINT_URL" sqs'


def operate_recipes() -> dict[str, str]:
    """docs/operate.md's recipes: the note for the local stack that follows each (in the text
    after its block, up to the next recipe or heading), or ``""``."""
    text = (ROOT / "docs" / "operate.md").read_text()
    found = re.findall(
        r"<!-- recipe: ([\w-]+) -->\n```sh\n.*?```\n(.*?)(?=<!-- recipe:|^#|\Z)", text, re.S | re.M
    )
    return {name: after[after.index(NOTE) :] if NOTE in after else "" for name, after in found}


def aws_cli_major() -> int:
    ran = subprocess.run(["aws", "--version"], capture_output=True, text=True, check=False)
    found = re.match(r"aws-cli/(\d+)", ran.stdout + ran.stderr)
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="module")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """`make demo KEEP=1` serving until the module's tests end: a folder laid out as a
    checkout's (its .venv/bin is this interpreter's, its .venv/local-stack.env the demo's) and a
    user's shell environment (no AWS settings, the system's PATH)."""
    folder = tmp_path_factory.mktemp("checkout")
    with kept_demo(folder, MIN_REFRESH_INTERVAL_SECONDS=MIN_REFRESH) as (process, _, env_file):
        assert env_file.exists(), (folder / "demo.err").read_text()
        shell = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        shell["PATH"] = f"{Path(shutil.which('aws') or '/usr/bin/aws').parent}:/usr/bin:/bin"
        yield folder, shell
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0


def on_the_local_stack(
    script: str, folder: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``script`` in bash after sourcing the local stack's file, with ``pipefail`` (a pipeline
    fails when any of its commands does)."""
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", f". .venv/local-stack.env\n{script}"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def one_attempt(line: str) -> dict[str, str]:
    """For a line the AWS CLI v1 sends to AWS (``aws sqs``, see ``AWS_SQS``), where this machine
    may reach no one: one attempt, not five with back-off (12 s a line, the same failure)."""
    return {"AWS_MAX_ATTEMPTS": "1"} if "aws sqs" in line else {}


def run_lines(
    script: str, folder: Path, env: dict[str, str], ran_before: dict[str, str | None]
) -> list[str]:
    """Each line of ``script`` in its own bash after sourcing the local stack's file: the
    lines that did not run (a failed status; a ``grep`` that found nothing is no failure).
    A line that another runbook shows too (``cmstoken-admin --stack NAME rotate``, in four)
    runs once: ``ran_before`` holds each line run, with its failure (``None``: it ran)."""
    failed = []
    for line in script.replace("NAME", "cmstoken-local").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line not in ran_before:
            ran = on_the_local_stack(line, folder, {**env, **one_attempt(line)})
            found_nothing = ran.returncode == 1 and "| grep" in line and not ran.stderr
            ran_before[line] = (
                f"{line}\n  -> {ran.returncode}: {ran.stderr.strip()[-300:]}"
                if ran.returncode != 0 and not found_nothing
                else None
            )
        failure = ran_before[line]
        if failure is not None:
            failed.append(failure)
    return failed


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("aws") is None, reason="needs the AWS CLI")
def test_every_runbook_command_runs_on_the_local_stack_or_has_a_note(
    local_stack: tuple[Path, dict[str, str]],
) -> None:
    folder, env = local_stack
    recipes = operate_recipes()
    assert {"admin-logs", "alarm-rotator-silent", "refresh-request-queues"} <= set(recipes)
    ran: dict[str, str | None] = {}
    failures = {name: run_lines(recipe(name), folder, env, ran) for name in recipes}
    could_not = {name for name, failed in failures.items() if failed}
    noted = {name for name, note in recipes.items() if note}
    # Notes on what the AWS CLI v1 does (SQS calls to AWS in us-east-1); v2 runs those commands.
    cli = {name for name in noted if "--endpoint-url" in recipes[name]}
    expected = noted if aws_cli_major() == 1 else noted - cli
    assert could_not == expected, {name: failures[name] for name in could_not ^ expected}
    assert "rotate-link-key" in noted  # the kept stack has no one-click re-authorization
    (refused,) = failures["rotate-link-key"]
    assert "has one-click re-authorization off" in refused, refused
    for name in cli & could_not:  # the note's way runs
        script = recipe(name).replace("aws sqs", AWS_SQS)
        assert run_lines(script, folder, env, ran) == [], name


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("aws") is None, reason="needs the AWS CLI")
def test_a_refresh_request_reaches_the_rotator_and_a_new_token_comes(
    local_stack: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """docs/consume.md's refresh request: the event goes through the rule and the queue to the
    rotator, which publishes a new token (it printed "No new token within 40 s" before)."""
    folder, env = local_stack
    rotated = "rotator refresh request: rotated"
    before = (folder / "demo.err").read_text().count(rotated)
    # The recipe's wait for the new token reads the secret as soon as the demo says that its
    # rotator has run on the request, not at the end of its 5 s step (wakeable_sleep).
    env, rotator_ran = wakeable_sleep(env, tmp_path)
    time.sleep(int(MIN_REFRESH))  # past the debounce of the demo's last refresh
    process = subprocess.Popen(  # a pasted recipe, as an interactive shell runs it: no pipefail
        ["bash", "-c", f". .venv/local-stack.env\n{recipe('refresh-request')}"],
        cwd=folder,
        env={
            **env,
            "SECRET_ARN": "cmstoken-local/service-token",
            "MIN_REFRESH_INTERVAL_SECONDS": MIN_REFRESH,
            "REFRESH_WAIT_SECONDS": "40",
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with killed_if_running(process):
        while process.poll() is None:
            if (folder / "demo.err").read_text().count(rotated) > before:
                rotator_ran.touch()
                break
            time.sleep(0.1)
        _, stderr = process.communicate(timeout=240)
    assert process.returncode == 0, stderr
    assert "New service token published." in stderr
    err = (folder / "demo.err").read_text()
    assert re.search(r"rotator refresh request: (rotated|skipped)", err), err[-2000:]
    # docs/operate.md's note: the undelivered requests' queue stays empty on the local stack.
    depth = recipe("refresh-request-queues").splitlines()[0].replace("NAME", "cmstoken-local")
    assert "UndeliveredRefreshRequestQueueUrl" in depth
    ran = on_the_local_stack(depth.replace("aws sqs", AWS_SQS) + " --output text", folder, env)
    assert (ran.returncode, ran.stdout.split()) == (0, ["ATTRIBUTES", "0"]), ran.stderr
