"""Running a deployed function's handler as Lambda's Python runtime runs it: a fresh interpreter
(a cold start: the handler module and the library are imported under the function's own
environment, which Powertools reads once, at import), the function's zip unpacked as the task
root and its layers' zips under /opt, the function's environment variables as the only
configuration, and an invocation context with the function's name, memory and deadline.

Lambda's runtime puts the task root first on ``sys.path``, then the layer paths ``/opt/python``
and ``/opt/python/lib/python3.13/site-packages`` (Lambda Developer Guide, "Packaging your layer
content", layer paths for each runtime). boto3 comes from the test's environment, as it comes
from the runtime's in Lambda. Environment variable values are strings in Lambda; moto keeps the
numbers CloudFormation passed, so they are turned into strings here. The test points the AWS
SDK at moto's server (``AWS_ENDPOINT_URL``) with dummy credentials: the only variables the
function's configuration does not supply. An audit hook records every host the process looks up
or connects to.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNNER = r"""
import json, sys, time

task_root, opt, handler_name, event_json, context_json, report_path = sys.argv[1:7]
site = f"{opt}/python/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
sys.path[:0] = [task_root, opt + "/python", site]
hosts = []


def audit(event, args):
    if event == "socket.getaddrinfo":
        hosts.append(str(args[0]))
    elif event == "socket.connect" and isinstance(args[1], tuple):
        hosts.append(str(args[1][0]))


sys.addaudithook(audit)
started = time.monotonic()
details = json.loads(context_json)


class Context:
    function_name = details["function_name"]
    function_version = "$LATEST"
    invoked_function_arn = details["invoked_function_arn"]
    memory_limit_in_mb = details["memory_limit_in_mb"]
    aws_request_id = details["aws_request_id"]
    log_group_name = details["log_group_name"]
    log_stream_name = details["log_stream_name"]

    def get_remaining_time_in_millis(self):
        return int(details["timeout_ms"] - (time.monotonic() - started) * 1000)


module_name, _, function_name = handler_name.rpartition(".")
report = {}
try:
    module = __import__(module_name)
    report["result"] = getattr(module, function_name)(json.loads(event_json), Context())
except Exception as exc:
    report["errorType"] = type(exc).__name__
    report["errorMessage"] = str(exc)
report["modules"] = {
    name: getattr(sys.modules.get(name), "__file__", None)
    for name in (module_name, "cmstoken", "requests", "aws_lambda_powertools", "boto3")
}
report["hosts"] = hosts
with open(report_path, "w") as out:
    json.dump(report, out, default=str)
"""


@dataclass
class Invocation:
    """What one invocation returned or raised, printed, imported and contacted."""

    result: Any
    error_type: str | None
    error_message: str | None
    stdout: str
    stderr: str
    modules: dict[str, str | None]
    hosts: list[str]


def unpack(archive: bytes, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
        zipped.extractall(directory)
    return directory


def invoke(
    configuration: Mapping[str, Any],
    code: bytes,
    layers: list[bytes],
    event: Any,
    *,
    workdir: Path,
    aws_endpoint: str,
    environment: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> Invocation:
    """Invoke the function described by ``configuration`` (Lambda's GetFunctionConfiguration
    answer) with its code and layer zips; ``environment`` overrides variables (tests only)."""
    task_root = unpack(code, workdir / "task")
    opt = workdir / "opt"
    opt.mkdir(parents=True, exist_ok=True)
    for layer in layers:  # in order: a later layer's files replace an earlier one's
        unpack(layer, opt)
    name = configuration["FunctionName"]
    region = configuration["FunctionArn"].split(":")[3]
    log_group = (configuration.get("LoggingConfig") or {}).get("LogGroup", f"/aws/lambda/{name}")
    variables = (configuration.get("Environment") or {}).get("Variables") or {}
    env = {key: str(value) for key, value in variables.items()}
    env.update(environment or {})
    env.update(
        {
            # What the Lambda runtime sets (Lambda Developer Guide, "Defined runtime
            # environment variables").
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(configuration.get("MemorySize", 128)),
            "AWS_LAMBDA_LOG_GROUP_NAME": log_group,
            "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/22/[$LATEST]deploytest",
            "LAMBDA_TASK_ROOT": str(task_root),
            "_HANDLER": configuration["Handler"],
            "TZ": ":UTC",
            # The test's account: moto's server, dummy credentials, no configuration files.
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
    )
    context = {
        "function_name": name,
        "invoked_function_arn": configuration["FunctionArn"],
        "memory_limit_in_mb": configuration.get("MemorySize", 128),
        "aws_request_id": str(uuid.uuid4()),
        "log_group_name": log_group,
        "log_stream_name": env["AWS_LAMBDA_LOG_STREAM_NAME"],
        "timeout_ms": int(configuration.get("Timeout", 3)) * 1000,
    }
    report_path = workdir / "report.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-I",  # no PYTHON* variables, no user site, no script directory on sys.path
            "-B",  # the task root is read-only in Lambda: no bytecode written
            "-c",
            RUNNER,
            str(task_root),
            str(opt),
            configuration["Handler"],
            json.dumps(event),
            json.dumps(context),
            str(report_path),
        ],
        env=env,
        cwd=task_root,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if not report_path.exists():
        raise AssertionError(
            f"{name} did not report (exit {completed.returncode}): {completed.stderr[-2000:]}"
        )
    report = json.loads(report_path.read_text())
    return Invocation(
        result=report.get("result"),
        error_type=report.get("errorType"),
        error_message=report.get("errorMessage"),
        stdout=completed.stdout,
        stderr=completed.stderr,
        modules=report["modules"],
        hosts=report["hosts"],
    )
