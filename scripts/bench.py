"""`make bench`: cold starts of the built functions, get-token against the vendor's script, AWS
and upstream calls per run, layer size.

A benchmark, not a test (it is not part of `make test`). It prints a table
``| measure | value | budget | ok |`` and a one-line summary, and exits 1 when a budget is exceeded
or a measurement could not be made (naming which). Three parts:

1. Cold starts, measured on what ships, in Lambda's layout. ``sam build`` into a temporary
   directory; the runtime's boto3 emulated by a directory of its own (boto3 and its dependencies
   at the versions requirements-dev.txt pins, precompiled as the runtime ships them). Each run is
   a fresh CPython 3.13 with no site-packages (``-S``), ``PYTHONPATH`` = the built function's
   directory (Lambda's task root), the built layer's ``python/`` (/opt/python), then the runtime's
   boto3; bytecode writes disabled and the layer and function read-only, as in Lambda; the
   environment the template gives the functions, pointed at moto's server and the emulator, plus
   what the Lambda runtime sets. Timed on the wall clock from before the process is spawned to its
   first result line: the import and the first invocation, a handler's boto3 client included.
   - floor: ``import boto3, requests``, a Secrets Manager client, one ``GetSecretValue``;
   - rotator: a scheduled no-op (``{}`` against a fresh token: ``skipped``);
   - bootstrap: ``{"action": "status"}`` against the bootstrapped secrets.
   ``BENCH_RUNS`` (15, at least 7) interleaved runs each; medians. Budget: each handler's median
   <= 1.10 x the floor's. Also: every layer module a handler loads must come from the layer's
   bytecode (a ``-v`` run), and ``get-token``'s import must load no boto3, botocore or Powertools
   module. A few ``-X importtime`` runs attribute each import to the packages that pull it in.
2. ``get-token -r -`` against the vendor's ``get-token.sh -r TOKEN``
   (``tests/data/vendor-get-token``: bash, curl, jq) renewing at the same emulator, interleaved,
   medians of ``GET_TOKEN_RUNS``; budget: their ratio <= ``GET_TOKEN_BUDGET_RATIO``. Then calls.
   The emulator and moto's server on 127.0.0.1, the stack's two secrets, a bootstrap through
   the operator command's code (approved at the emulator), then the AWS calls (botocore
   ``before-call`` hook) and upstream calls (``emulator.counts``) of a scheduled no-op check and of
   a due rotation after the clock moves 19 hours.
3. Size. The same build's SharedLayer directory, unzipped, against Lambda's 250 MB limit, and its
   deflated zip.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_stack import (
    BOOTSTRAP,
    REFRESH_SECRET,
    ROTATOR,
    SERVICE_SECRET,
    TIMEOUTS,
    ApprovingInvoker,
    EmulatorTime,
    configure_environment,
    create_secrets,
    local_servers,
)

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# The interpreter the cold starts run on: the one this venv was made from, without its packages.
RUNTIME_PYTHON = getattr(sys, "_base_executable", sys.executable)
RUNTIME_VERSION = (3, 13)  # Lambda's python3.13: the layer's bytecode is for this version only
VENV_BIN = ROOT / ".venv" / "bin"
MIN_RUNS = 7
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
IMPORTTIME_RUNS = 3
SAM_TIMEOUT_SECONDS = 300
RUN_TIMEOUT_SECONDS = 60
GET_TOKEN_RUNS = 9
# get-token -r against the vendor's script for the same job (bash, curl and jq), measured
# side by side: a ratio means the same on every machine, busy or not.
GET_TOKEN_BUDGET_RATIO = 0.8
VENDOR_GET_TOKEN = ROOT / "tests" / "data" / "vendor-get-token" / "get-token.sh"

COLD_START_BUDGET = 1.10
FORBIDDEN_IN_GET_TOKEN = ("boto3", "botocore", "aws_lambda_powertools")
# What the Lambda runtime provides besides the standard library (boto3 and its dependencies).
RUNTIME_DISTRIBUTIONS = (
    "boto3",
    "botocore",
    "jmespath",
    "python-dateutil",
    "s3transfer",
    "six",
    "urllib3",
)
NOOP_AWS_CALLS = 1
# Read the published token and the credential; claim, store the rotation, publish; announce it.
ROTATION_AWS_CALLS = {"GetSecretValue": 2, "PutSecretValue": 3, "EventBridge:PutEvents": 1}
ROTATION_UPSTREAM_CALLS = {"refresh": 1, "exchange": 1, "projects": 1}
HOURS_FORWARD = 19
LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024  # function code and all its layers, unzipped
MIB = 1024 * 1024

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


# --- the report --------------------------------------------------------------------------------


@dataclass
class Row:
    measure: str
    value: str
    budget: str
    ok: bool | None  # None: reported, no budget


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, measure: str, value: str, budget: str = "-", ok: bool | None = None) -> None:
        self.rows.append(Row(measure, value, budget, ok))
        if ok is False:
            self.failures.append(f"{measure}: {value} (budget {budget})")

    def error(self, measure: str, message: str) -> None:
        self.rows.append(Row(measure, "ERROR", "-", False))
        self.failures.append(f"{measure}: {message}")

    def table(self) -> str:
        header = ("measure", "value", "budget", "ok")
        cells = [
            (r.measure, r.value, r.budget, "-" if r.ok is None else "yes" if r.ok else "NO")
            for r in self.rows
        ]
        widths = [max(len(row[i]) for row in [header, *cells]) for i in range(4)]

        def line(values: tuple[str, ...]) -> str:
            return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(header), rule, *(line(c) for c in cells)])


# --- 1. cold starts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Lambda's file system, emulated: the built functions' directories, the built layer's
    ``python/`` directory and the runtime's boto3."""

    build: Path  # sam build's output: <LogicalId>/ per function and layer
    runtime: Path
    cwd: Path

    @property
    def layer(self) -> Path:
        return self.build / "SharedLayer" / "python"

    def function(self, name: str) -> Path:
        return self.build / f"{name.capitalize()}Function"


@dataclass(frozen=True)
class Subject:
    name: str
    mode: str  # floor | handler | module
    argument: str  # the secret, the event (JSON) or the module
    function: str | None = None  # a handler's function: rotator | bootstrap

    def expect(self, result: Any) -> str | None:
        """What is wrong with this subject's first result (None: it is what a cold start of
        this kind must return)."""
        if self.function == "rotator" and result.get("outcome") != "skipped":
            return f"expected a skipped no-op, got {result!r}"
        if self.function == "bootstrap":
            credential = result.get("credential") or {}
            if credential.get("status") != "active":
                return f"expected an active credential, got {result!r}"
        return None


FLOOR = Subject("floor", "floor", SERVICE_SECRET)
HANDLERS = (
    Subject("rotator", "handler", "{}", "rotator"),
    Subject("bootstrap", "handler", json.dumps({"action": "status"}), "bootstrap"),
)
GET_TOKEN = Subject("get-token", "module", "cmstoken.get_token")


@dataclass
class Probe:
    seconds: float
    result: Any
    modules: dict[str, str]
    stderr: str


def dev_pins() -> dict[str, str]:
    """The versions requirements-dev.txt pins, by normalized name."""
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not line.startswith("#"):
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def install_runtime(directory: Path) -> None:
    """The Lambda runtime's boto3, emulated: boto3 and its dependencies at the development pins,
    in a directory of their own, precompiled (pip's default, as the runtime ships them)."""
    pins = dev_pins()
    missing = [name for name in RUNTIME_DISTRIBUTIONS if name not in pins]
    if missing:
        raise RuntimeError(f"requirements-dev.txt pins no {', '.join(missing)}")
    completed = subprocess.run(  # noqa: S603 -- our interpreter's pip, pinned versions
        [
            PYTHON,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
            str(directory),
            *(f"{name}=={pins[name]}" for name in RUNTIME_DISTRIBUTIONS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"installing the runtime's boto3 failed:\n{completed.stderr[-2000:]}")
    shutil.rmtree(directory / "bin", ignore_errors=True)


def template_environment(function: str, local: Mapping[str, str]) -> dict[str, str]:
    """The environment template.yaml gives ``functions/<function>/`` (Globals, then the function's
    own), each variable's value from ``local`` or else the literal or parameter default it has.
    A variable the bench cannot give a value fails, so the bench follows the template."""
    import yaml

    class Tagged:
        def __init__(self, tag: str, value: Any) -> None:
            self.tag, self.value = tag, value

    class Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
        pass

    def tagged(loader: Loader, suffix: str, node: Any) -> Tagged:
        if isinstance(node, yaml.ScalarNode):
            return Tagged(suffix, loader.construct_scalar(node))
        if isinstance(node, yaml.SequenceNode):
            return Tagged(suffix, loader.construct_sequence(node, deep=True))
        return Tagged(suffix, loader.construct_mapping(node, deep=True))

    Loader.add_multi_constructor("!", tagged)
    template = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)  # noqa: S506
    parameters = template.get("Parameters") or {}

    def variables(properties: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(((properties or {}).get("Environment") or {}).get("Variables") or {})

    found = variables((template.get("Globals") or {}).get("Function"))
    for resource in (template.get("Resources") or {}).values():
        properties = resource.get("Properties") or {}
        if (
            resource.get("Type") == "AWS::Serverless::Function"
            and str(properties.get("CodeUri", "")).rstrip("/") == f"functions/{function}"
        ):
            found.update(variables(properties))
    environment = {}
    for name, value in found.items():
        if name in local:
            environment[name] = local[name]
        elif isinstance(value, bool):
            environment[name] = str(value).lower()
        elif isinstance(value, str | int | float):
            environment[name] = str(value)
        elif (
            isinstance(value, Tagged)
            and value.tag == "Ref"
            and "Default" in (parameters.get(value.value) or {})
        ):
            environment[name] = str(parameters[value.value]["Default"])
        else:
            raise RuntimeError(
                f"template.yaml sets {name} for functions/{function} in a way the bench cannot "
                "reproduce locally: give it a local value in scripts/bench.py"
            )
    return environment


def lambda_environment(
    layout: Layout, subject: Subject, emulator: Any, aws_endpoint: str
) -> dict[str, str]:
    """The whole environment of one cold start: nothing inherited from this process."""
    function = subject.function or "rotator"
    name = f"cmstoken-bench-{function}"
    env = template_environment(
        function,
        {
            "SERVICE_BASE_URL": emulator.base_url,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
            "POWERTOOLS_METRICS_NAMESPACE": "CmsToken/bench",
        },
    )
    env.update(
        {
            # What Lambda's runtime sets.
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "LAMBDA_TASK_ROOT": str(layout.function(function)),
            "_HANDLER": "app.lambda_handler",
            "TZ": ":UTC",
            "LANG": "C.UTF-8",
            # Lambda's sys.path order: the task root, the layer, then the runtime's boto3.
            "PYTHONPATH": os.pathsep.join(
                [str(layout.function(function)), str(layout.layer), str(layout.runtime)]
            ),
            "PYTHONDONTWRITEBYTECODE": "1",  # /var/task and /opt are read-only
            # moto's server, dummy credentials, no configuration files, no metadata service.
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_CONFIG_FILE": str(layout.cwd / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(layout.cwd / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "BENCH_TIMEOUT_SECONDS": str(
                TIMEOUTS[BOOTSTRAP if function == "bootstrap" else ROTATOR]
            ),
        }
    )
    return env


def run_probe(subject: Subject, env: Mapping[str, str], cwd: Path, *flags: str) -> Probe:
    """One cold start: the wall-clock time from spawning the process to its result line."""
    command = [RUNTIME_PYTHON, "-S", "-P", *flags, "-c", PROBE, subject.mode, subject.argument]
    stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 -- closed below
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: S603 -- our interpreter and probe
        command, stdout=subprocess.PIPE, stderr=stderr, env=dict(env), cwd=cwd, text=True
    )
    watchdog = threading.Timer(RUN_TIMEOUT_SECONDS, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        seconds, result = None, None
        for line in process.stdout:
            if line.startswith(RESULT):
                seconds = time.perf_counter() - started
                result = json.loads(line[len(RESULT) :])
                break
        rest = process.stdout.read()
        process.wait()
    finally:
        watchdog.cancel()
        stderr.seek(0)
        errors = stderr.read()
        stderr.close()
    if seconds is None:
        tail = "\n".join(errors.strip().splitlines()[-8:])
        raise RuntimeError(f"{subject.name}: no result (exit {process.returncode}):\n{tail}")
    modules: dict[str, str] = {}
    for line in rest.splitlines():
        if line.startswith(MODULES):
            modules = json.loads(line[len(MODULES) :])
    problem = subject.expect(result)
    if problem is not None:
        raise RuntimeError(f"{subject.name}: {problem}")
    return Probe(seconds, result, modules, errors)


@contextmanager
def read_only(*directories: Path) -> Iterator[None]:
    """The directories made read-only (as /opt and /var/task are), restored on the way out."""
    changed: list[tuple[Path, int]] = []
    try:
        for directory in directories:
            for path in [directory, *directory.rglob("*")]:
                mode = path.stat().st_mode
                changed.append((path, mode))
                path.chmod(mode & ~0o222)
        yield
    finally:
        for path, mode in reversed(changed):
            path.chmod(mode)


def files_under(directory: Path) -> set[str]:
    return {str(path) for path in directory.rglob("*")}


def measure_cold_starts(report: Report, layout: Layout, emulator: Any, aws_endpoint: str) -> None:
    if RUNS < MIN_RUNS:
        raise RuntimeError(f"BENCH_RUNS={RUNS}: the budget is a median of at least {MIN_RUNS}")
    check = subprocess.run(  # noqa: S603 -- the interpreter the cold starts use
        [RUNTIME_PYTHON, "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    wanted = ".".join(map(str, RUNTIME_VERSION))
    if check.stdout.strip() != wanted:
        raise RuntimeError(
            f"{RUNTIME_PYTHON} is Python {check.stdout.strip()}: the layer's bytecode is for "
            f"{wanted} (Lambda's python3.13); recreate .venv with Python {wanted}"
        )
    subjects = [FLOOR, *HANDLERS, GET_TOKEN]
    envs = {s.name: lambda_environment(layout, s, emulator, aws_endpoint) for s in subjects}
    shipped = [layout.build]
    before = set().union(*(files_under(d) for d in shipped))
    seconds: dict[str, list[float]] = {s.name: [] for s in subjects}
    probes: dict[str, Probe] = {}
    with read_only(*shipped):
        for subject in subjects:  # warm-up: the page cache, not timed
            run_probe(subject, envs[subject.name], layout.cwd)
        for run in range(RUNS):
            shift = run % len(subjects)  # interleaved, each subject in every position in turn
            for subject in subjects[shift:] + subjects[:shift]:
                probe = run_probe(subject, envs[subject.name], layout.cwd)
                seconds[subject.name].append(probe.seconds)
                probes[subject.name] = probe
        verbose = {s.name: run_probe(s, envs[s.name], layout.cwd, "-v") for s in HANDLERS}
        importtime = {
            s.name: [
                run_probe(s, envs[s.name], layout.cwd, "-X", "importtime")
                for _ in range(IMPORTTIME_RUNS)
            ]
            for s in [FLOOR, *HANDLERS]
        }
    written = set().union(*(files_under(d) for d in shipped)) - before
    if written:
        report.error("read-only layout", f"{len(written)} files written, e.g. {min(written)}")

    median = {name: statistics.median(values) for name, values in seconds.items()}
    floor = median["floor"]
    report.add(
        f"cold start floor: import boto3, requests + client + GetSecretValue (median of {RUNS})",
        f"{floor * 1000:.0f} ms",
    )
    for subject in HANDLERS:
        ratio = median[subject.name] / floor
        first = "scheduled no-op" if subject.function == "rotator" else "status"
        report.add(
            f"cold start functions/{subject.function} ({first}) / floor",
            f"{ratio:.2f} ({median[subject.name] * 1000:.0f} ms vs {floor * 1000:.0f} ms)",
            f"<= {COLD_START_BUDGET:.2f}",
            ratio <= COLD_START_BUDGET,
        )
    for subject in HANDLERS:
        loaded = [
            path
            for path in verbose[subject.name].modules.values()
            if Path(path).is_relative_to(layout.layer) and path.endswith(".py")
        ]
        from_bytecode = set(
            re.findall(r"# code object from '([^']+)'", verbose[subject.name].stderr)
        )
        compiled = [path for path in loaded if cached(path) not in from_bytecode]
        report.add(
            f"functions/{subject.function}: layer modules loaded from the shipped bytecode",
            f"{len(loaded) - len(compiled)} of {len(loaded)}",
            "all",
            bool(loaded) and not compiled,
        )
    for subject in HANDLERS:
        outside = sorted(
            {
                name.split(".")[0]
                for name, path in probes[subject.name].modules.items()
                if Path(path).is_relative_to(layout.runtime)
            }
        )
        report.notes.append(f"{subject.name:<9} loaded from the runtime: {', '.join(outside)}")

    report.add(
        "import cmstoken.get_token (get-token), built layer", f"{median['get-token'] * 1000:.0f} ms"
    )
    tops = {name.split(".")[0] for name in probes["get-token"].modules}
    forbidden = [p for p in FORBIDDEN_IN_GET_TOKEN if p in tops]
    report.add(
        "get-token: boto3/botocore/powertools loaded",
        ", ".join(forbidden) or "none",
        "none",
        not forbidden,
    )
    for name, samples in importtime.items():
        attributed = [attribute_importtime(probe.stderr) for probe in samples]
        owners = {owner for sample in attributed for owner in sample}
        typical = {o: statistics.median(s.get(o, 0.0) for s in attributed) for o in owners}
        top = sorted(typical.items(), key=lambda item: -item[1])[:6]
        report.notes.append(
            f"{name:<9} import by package (-X importtime, inflated): "
            + ", ".join(f"{owner} {ms:.0f} ms" for owner, ms in top)
        )


def measure_get_token_refresh(report: Report, emulator: Any) -> None:
    """``get-token -r -`` as a user runs it (the installed console script) against the
    vendor's ``get-token.sh -r TOKEN`` (``tests/data/vendor-get-token``), both renewing a token
    at the same emulator, interleaved (one of each in turn, so that a busy moment slows both),
    the wall-clock time from spawning to exit; the budget is the ratio of the medians of
    ``GET_TOKEN_RUNS`` runs each. Separate ``-X importtime`` runs say how much of ours is
    importing."""
    command = [str(VENV_BIN / "get-token"), "--base-url", emulator.base_url, "-r", "-"]
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"the vendor's get-token.sh needs {', '.join(missing)}: install it")
    workdir = Path(tempfile.mkdtemp(prefix="cmstoken-bench-vendor-"))  # it writes its answers

    def ours(extra_env: Mapping[str, str]) -> tuple[float, str]:
        refresh_token = emulator.issue_tokens()["refresh_token"]
        return timed_run("get-token", command, refresh_token + "\n", {**os.environ, **extra_env})

    def theirs() -> float:
        refresh_token = emulator.issue_tokens()["refresh_token"]
        vendor = ["bash", str(VENDOR_GET_TOKEN), "-r", refresh_token]
        environment = {**os.environ, "BASE_URL": emulator.base_url}
        return timed_run("get-token.sh", vendor, "", environment, cwd=workdir)[0]

    ours({}), theirs()  # warm-up: the page cache, not timed
    mine, vendor = [], []
    for _ in range(GET_TOKEN_RUNS):
        mine.append(ours({})[0] * 1000)
        vendor.append(theirs() * 1000)
    importing = [
        importing_ms(ours({"PYTHONPROFILEIMPORTTIME": "1"})[1]) for _ in range(IMPORTTIME_RUNS)
    ]
    shutil.rmtree(workdir, ignore_errors=True)
    ratio = statistics.median(mine) / statistics.median(vendor)
    report.add(
        f"get-token -r / vendor get-token.sh -r, same emulator (medians of {GET_TOKEN_RUNS})",
        f"{ratio:.2f} ({statistics.median(mine):.0f} ms vs {statistics.median(vendor):.0f} ms; "
        f"importing: {statistics.median(importing):.0f} ms, -X importtime)",
        f"<= {GET_TOKEN_BUDGET_RATIO:.2f}",
        ratio <= GET_TOKEN_BUDGET_RATIO,
    )


def timed_run(
    name: str,
    command: list[str],
    stdin: str,
    environment: Mapping[str, str],
    *,
    cwd: Path | None = None,
) -> tuple[float, str]:
    """Run ``command`` to its end; its wall-clock seconds and its standard error. A run that
    fails, or prints no service token, fails the measure."""
    started = time.perf_counter()
    result = subprocess.run(  # noqa: S603 -- our console script, or the vendored baseline
        command,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        env=dict(environment),
        cwd=cwd,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if result.returncode != 0 or '"access_token"' not in result.stdout:
        raise RuntimeError(f"{name} -r exited {result.returncode} without a token")
    return elapsed, result.stderr


def importing_ms(stderr: str) -> float:
    """The total of the self times that ``-X importtime`` printed, in milliseconds."""
    total = 0
    for line in stderr.splitlines():
        if line.startswith("import time:"):
            field = line.split("|")[0].split(":")[1].strip()
            total += int(field) if field.isdigit() else 0
    return total / 1000


def cached(source: str) -> str:
    """The bytecode path CPython 3.13 uses for ``source``."""
    path = Path(source)
    return str(path.parent / "__pycache__" / f"{path.stem}.cpython-313.pyc")


def attribute_importtime(stderr: str) -> dict[str, float]:
    """Milliseconds of self time per owner: each module's time goes to the outermost third-party
    package whose import pulled it in (``ssl`` under ``requests`` counts for ``requests``);
    modules no third-party package pulled in count for ``cmstoken``, ``app`` or ``stdlib``."""
    lines = stderr.split(MARKER, 1)[-1].splitlines()
    # ``import time: self [us] | cumulative | <2 spaces per level>name``, children first
    pending: list[tuple[int, str, int, list[Any]]] = []
    for text in lines:
        if not text.startswith("import time:") or "self [us]" in text:
            continue
        self_part, _, name_part = text.split("|", 2)
        microseconds = int(self_part.split(":")[1])
        name = name_part[1:]
        depth = (len(name) - len(name.lstrip())) // 2
        children = []
        while pending and pending[-1][0] > depth:
            children.append(pending.pop())
        pending.append((depth, name.strip(), microseconds, children[::-1]))

    ours = ("cmstoken", "app")
    stdlib = sys.stdlib_module_names
    totals: dict[str, float] = defaultdict(float)

    def visit(node: tuple[int, str, int, list[Any]], owner: str | None) -> None:
        _, name, microseconds, children = node
        top = name.split(".")[0]
        if owner is None and top not in stdlib and top not in ours:
            owner = top
        totals[owner or (top if top in ours else "stdlib")] += microseconds / 1000
        for child in children:
            visit(child, owner)

    for root in pending:
        visit(root, None)
    return dict(totals)


# --- 2. calls ----------------------------------------------------------------------------------


class AwsCalls:
    """Counts boto3 API calls (not HTTP attempts) by operation, from ``before-call`` events."""

    UNIQUE_ID = "cmstoken-bench-aws-calls"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def attach(self, events: Any) -> None:
        """Hook an event emitter (a session's, inherited by its later clients, or a client's).
        The unique id makes a second attach to an emitter that inherited the hook a no-op."""
        events.register("before-call", self, unique_id=self.UNIQUE_ID)

    def __call__(self, model: Any, **_: Any) -> None:
        service = model.service_model.service_id
        self.calls[model.name if service == "Secrets Manager" else f"{service}:{model.name}"] += 1


@dataclass(frozen=True)
class Run:
    outcome: str
    aws: Counter[str]
    upstream: Counter[str]


def measure_calls(report: Report, after_bootstrap: Callable[[Any, str], None]) -> None:
    """``after_bootstrap(emulator, aws_endpoint)`` runs once the stack is bootstrapped, before
    the counted runs (the emulator's clock has not moved yet)."""
    with local_servers() as (emulator, aws_endpoint):
        configure_environment(emulator, aws_endpoint)
        noop, rotation = run_stack(emulator, lambda: after_bootstrap(emulator, aws_endpoint))

    aws_total = sum(noop.aws.values())
    upstream_total = sum(noop.upstream.values())
    report.add(
        f"scheduled no-op check ({noop.outcome}): AWS calls",
        f"{aws_total} ({describe(noop.aws)})",
        f"= {NOOP_AWS_CALLS}",
        aws_total == NOOP_AWS_CALLS and noop.outcome == "skipped",
    )
    report.add(
        f"scheduled no-op check ({noop.outcome}): upstream calls",
        f"{upstream_total} ({describe(noop.upstream)})",
        "= 0",
        upstream_total == 0 and noop.outcome == "skipped",
    )
    for kind, counted, budget in (
        ("AWS", rotation.aws, ROTATION_AWS_CALLS),
        ("upstream", rotation.upstream, ROTATION_UPSTREAM_CALLS),
    ):
        within = all(count <= budget.get(name, 0) for name, count in counted.items())
        report.add(
            f"due rotation after +{HOURS_FORWARD} h ({rotation.outcome}): {kind} calls",
            f"{sum(counted.values())} ({describe(counted)})",
            "<= " + ", ".join(f"{name} {count}" for name, count in budget.items()),
            within and rotation.outcome == "rotated",
        )


def describe(calls: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(calls.items())) or "none"


def run_stack(emulator: Any, after_bootstrap: Callable[[], None]) -> tuple[Run, Run]:
    """Bootstrap the stack, then count a scheduled no-op check and a due rotation."""
    import boto3

    from cmstoken import runtime
    from cmstoken.admin import StackFunctions, bootstrap

    counter = AwsCalls()
    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    # Every client the functions create through boto3's default session inherits the hook.
    counter.attach(boto3.DEFAULT_SESSION.events)
    # Its own session: setting up is not counted.
    create_secrets(boto3.session.Session().client("secretsmanager"))

    clock = EmulatorTime(emulator, real_waits=False)
    runtime.CLOCK = clock  # type: ignore[assignment]
    runtime.reset()
    counter.attach(runtime.store().client.meta.events)  # a no-op unless created elsewhere
    invoker = ApprovingInvoker(clock, lambda started: emulator.approve(started["user_code"]))
    functions = StackFunctions(bootstrap=BOOTSTRAP, rotator=ROTATOR)
    try:
        bootstrap(invoker, functions, free_trial=None, out=io.StringIO(), now=clock.now)
        after_bootstrap()

        def scheduled_run() -> Run:
            counter.calls.clear()
            before = Counter(emulator.counts)
            result = invoker.invoke(ROTATOR, {})
            upstream = Counter(emulator.counts)
            upstream.subtract(before)
            return Run(str(result.get("outcome")), Counter(counter.calls), +upstream)

        noop = scheduled_run()
        emulator.advance(HOURS_FORWARD * 3600)
        rotation = scheduled_run()
    finally:
        runtime.reset()
    return noop, rotation


# --- 3. the layer's size -----------------------------------------------------------------------


def start_sam_build(original_env: Mapping[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    sam = VENV_BIN / "sam"
    if not sam.exists():
        raise RuntimeError(
            f"sam not found at {sam.relative_to(ROOT)}: run `make venv` "
            "(aws-sam-cli is pinned in requirements-dev.txt)"
        )
    env = dict(original_env)
    env.update(
        {
            "AWS_DEFAULT_REGION": "us-east-1",
            "SAM_CLI_TELEMETRY": "0",
            "SAM_CLI_CONTACT_TRACKING": "0",
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    log = (workdir / "sam-build.log").open("wb")
    # build.toml goes next to the build directory: keep both inside workdir.
    command = [
        str(sam),
        "build",
        "--template",
        str(ROOT / "template.yaml"),
        "--build-dir",
        str(workdir / "build"),
        "--cache-dir",
        str(workdir / "cache"),
    ]
    with log:
        return subprocess.Popen(  # noqa: S603 -- the venv's sam, fixed arguments
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )


def wait_for_build(build: subprocess.Popen[bytes], workdir: Path) -> Path:
    """The build directory, once ``sam build`` has succeeded."""
    try:
        code = build.wait(timeout=SAM_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        build.kill()
        build.wait()
        raise RuntimeError(f"sam build took more than {SAM_TIMEOUT_SECONDS} s") from None
    if code != 0:
        log = (workdir / "sam-build.log").read_text(errors="replace").strip().splitlines()
        raise RuntimeError(f"sam build exited {code}:\n" + "\n".join(log[-10:]))
    for name in (
        "SharedLayer",
        *(f"{s.function.capitalize()}Function" for s in HANDLERS if s.function),
    ):
        if not (workdir / "build" / name).is_dir():
            raise RuntimeError(f"sam build produced no {name} directory")
    return workdir / "build"


def measure_layer(report: Report, build: Path, workdir: Path) -> None:
    layer = build / "SharedLayer"
    files = [path for path in sorted(layer.rglob("*")) if path.is_file() and not path.is_symlink()]
    unzipped = sum(path.stat().st_size for path in files)
    archive = workdir / "SharedLayer.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in files:
            zipped.write(path, path.relative_to(layer).as_posix())
    report.add(
        "SharedLayer (sam build), unzipped",
        f"{unzipped / MIB:.1f} MiB ({len(files)} files)",
        f"<= {LAMBDA_UNZIPPED_LIMIT / MIB:.0f} MiB",
        unzipped <= LAMBDA_UNZIPPED_LIMIT,
    )
    report.add("SharedLayer zip (deflate)", f"{archive.stat().st_size / MIB:.1f} MiB")


# --- main --------------------------------------------------------------------------------------


def main() -> int:
    started = time.monotonic()
    original_env = dict(os.environ)
    report = Report()
    print(
        f"bench: sam build, cold starts ({RUNS} interleaved runs each), calls, layer size ...",
        file=sys.stderr,
    )
    workdir = Path(tempfile.mkdtemp(prefix="cmstoken-bench-"))
    try:
        built: Path | None = None
        runtime = workdir / "runtime"
        try:
            build = start_sam_build(original_env, workdir)
            install_runtime(runtime)  # while sam builds
            built = wait_for_build(build, workdir)
            (workdir / "cwd").mkdir()
        except Exception as exc:  # noqa: BLE001 -- reported, and the other parts still run
            report.error("sam build and the runtime's boto3", f"{type(exc).__name__}: {exc}")

        def cold_starts(emulator: Any, aws_endpoint: str) -> None:
            if built is None:
                return
            try:
                layout = Layout(build=built, runtime=runtime, cwd=workdir / "cwd")
                measure_cold_starts(report, layout, emulator, aws_endpoint)
            except Exception as exc:  # noqa: BLE001
                report.error("cold starts", f"{type(exc).__name__}: {exc}")
            try:
                measure_get_token_refresh(report, emulator)
            except Exception as exc:  # noqa: BLE001
                report.error("get-token -r", f"{type(exc).__name__}: {exc}")

        try:
            measure_calls(report, cold_starts)
        except Exception as exc:  # noqa: BLE001
            report.error("AWS and upstream calls", f"{type(exc).__name__}: {exc}")
        if built is not None:
            try:
                measure_layer(report, built, workdir)
            except Exception as exc:  # noqa: BLE001
                report.error("SharedLayer size", str(exc))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(report.table())
    for note in report.notes:
        print(note)
    elapsed = time.monotonic() - started
    budgets = sum(1 for row in report.rows if row.ok is not None)
    if report.failures:
        print(f"bench: {len(report.failures)} of {budgets} budgets NOT met in {elapsed:.0f} s:")
        for failure in report.failures:
            print(f"  - {failure}")
        return 1
    print(f"bench: all {budgets} budgets met in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
