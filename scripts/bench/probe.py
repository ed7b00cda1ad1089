"""One cold start: the probe script a fresh interpreter runs (the floor, a handler's first
invocation or an import), the subjects it is run for, and ``run_probe``, which times it from
spawning to its first result."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from local_stack import SERVICE_SECRET

from .runner import RUNTIME_PYTHON, run_to_marker

MARKER = "--bench: timed import starts--"
RESULT = "--bench: result--"
MODULES = "--bench: modules--"

# Runs in a fresh interpreter: prints RESULT + the first result as soon as it has it (the parent
# stops its clock there), then MODULES + where each loaded module came from.
PROBE = f"""
import json, sys, time
started = time.monotonic()
mode, argument = sys.argv[1], sys.argv[2]
sys.stderr.write({MARKER!r} + "\\n")
sys.stderr.flush()
if mode == "floor":
    import boto3, requests
    boto3.client("secretsmanager").get_secret_value(SecretId=argument)
    result = {{}}
elif mode == "handler":
    import os
    import app

    class Context:  # what Lambda's runtime passes; the fields Powertools reads
        function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        function_version = "$LATEST"
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + function_name
        memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
        aws_request_id = "00000000-0000-4000-8000-000000000000"
        log_group_name = "/aws/lambda/" + function_name
        log_stream_name = "2026/11/22/[$LATEST]bench"

        def get_remaining_time_in_millis(self):
            timeout = float(os.environ["BENCH_TIMEOUT_SECONDS"])
            return int(max(0.0, timeout - (time.monotonic() - started)) * 1000)

    result = app.lambda_handler(json.loads(argument), Context())
else:
    __import__(argument)
    result = {{}}
sys.stdout.write("\\n" + {RESULT!r} + json.dumps(result) + "\\n")
sys.stdout.flush()
files = {{
    name: module.__file__
    for name, module in list(sys.modules.items())
    if isinstance(getattr(module, "__file__", None), str)
}}
sys.stdout.write({MODULES!r} + json.dumps(files) + "\\n")
"""


@dataclass(frozen=True)
class Subject:
    name: str
    mode: str  # floor | handler | module
    argument: str  # the secret, the event (JSON) or the module
    function: str | None = None  # a handler's function: rotator | bootstrap | links
    first: str = ""  # a handler's first invocation, in the report's words
    # Modules (or packages) a handler's first invocation has no use for: none may be loaded.
    unneeded: tuple[str, ...] = ()

    def expect(self, result: Any) -> str | None:
        """What is wrong with this subject's first result (None: it is what a cold start of
        this kind must return)."""
        if self.function == "rotator" and result.get("outcome") != "skipped":
            return f"expected a skipped no-op, got {result!r}"
        if self.function == "bootstrap":
            credential = result.get("credential") or {}
            if credential.get("status") != "active":
                return f"expected an active credential, got {result!r}"
        if self.function == "links" and not is_link_page(result):
            status = result.get("statusCode") if isinstance(result, dict) else None
            return f"expected the link's page (200, with its button), got status {status!r}"
        return None

    def with_event(self, event: Any) -> Subject:
        """This handler's subject with ``event`` as its first invocation's event."""
        return replace(self, argument=json.dumps(event))


def is_link_page(answer: Any) -> bool:
    """Whether a function URL answer is a link's page: 200, with the button that starts the
    re-authorization (its form's proof)."""
    return (
        isinstance(answer, dict)
        and answer.get("statusCode") == 200
        and 'name="proof"' in str(answer.get("body"))
    )


# What no handler's first invocation here has a use for: the upstream HTTP client (none calls
# upstream: the rotator's no-op, the bootstrap's status, a link's page) and the operator's
# commands. Besides, each has no use for the other functions' code.
UNNEEDED_BY_ALL = ("requests", "cmstoken.cli")
FLOOR = Subject("floor", "floor", SERVICE_SECRET)
ROTATOR_NOOP = Subject(
    "rotator",
    "handler",
    "{}",
    "rotator",
    "scheduled no-op",
    (*UNNEEDED_BY_ALL, "cmstoken.bootstrap", "cmstoken.links"),
)
BOOTSTRAP_STATUS = Subject(
    "bootstrap",
    "handler",
    json.dumps({"action": "status"}),
    "bootstrap",
    "status",
    (*UNNEEDED_BY_ALL, "cmstoken.links", "cmstoken.rotation"),
)
# The event, a link's page signed for the bootstrapped stack, is set once the stack is
# bootstrapped (``with_event``): cold_starts.measure_cold_starts.
LINK_PAGE = Subject(
    "links",
    "handler",
    "",
    "links",
    "GET of a link's page",
    (*UNNEEDED_BY_ALL, "cmstoken.bootstrap", "cmstoken.rotation", "cmstoken.upstream"),
)
HANDLERS = (ROTATOR_NOOP, BOOTSTRAP_STATUS, LINK_PAGE)
GET_TOKEN = Subject("get-token", "module", "cmstoken.cli.get_token")


@dataclass
class Probe:
    seconds: float
    result: Any
    modules: dict[str, str]
    stderr: str


def run_probe(subject: Subject, env: Mapping[str, str], cwd: Path, *flags: str) -> Probe:
    """One cold start: the wall-clock time from spawning the process to its result line."""
    command = [RUNTIME_PYTHON, "-S", "-P", *flags, "-c", PROBE, subject.mode, subject.argument]
    run = run_to_marker(command, env, cwd, RESULT)
    if run.seconds is None or run.line is None:
        tail = "\n".join(run.stderr.strip().splitlines()[-8:])
        raise RuntimeError(f"{subject.name}: no result (exit {run.returncode}):\n{tail}")
    result = json.loads(run.line)
    modules: dict[str, str] = {}
    for line in run.rest.splitlines():
        if line.startswith(MODULES):
            modules = json.loads(line[len(MODULES) :])
    problem = subject.expect(result)
    if problem is not None:
        raise RuntimeError(f"{subject.name}: {problem}")
    return Probe(run.seconds, result, modules, run.stderr)
