"""`make bench`: cold-start imports, AWS and upstream calls per run, and the layer's size.

A benchmark, not a test (it is not part of `make test`). It prints a table
``| measure | value | budget | ok |`` and a one-line summary, and exits 1 when a budget is exceeded
or a measurement could not be made (naming which). Three parts:

1. Imports. Fresh interpreters, interleaved, ``BENCH_RUNS`` (15) runs each, medians: each handler
   loaded the way Lambda loads it (``app`` from its file, the layer package importable), against
   ``import boto3, requests`` in the same interpreter (budget: ratio <= 1.10); ``get-token``'s
   import, which must load no boto3, botocore or Powertools module. A few ``-X importtime`` runs
   attribute each handler's import time to the packages that pull the modules in.
2. Calls. The emulator and moto's server on 127.0.0.1, the stack's two secrets, a bootstrap through
   the operator command's code (approved at the emulator), then the AWS calls (botocore
   ``before-call`` hook) and upstream calls (``emulator.counts``) of a scheduled no-op check and of
   a due rotation after the clock moves 19 hours.
3. Size. ``sam build`` into a temporary directory (in the background while part 2 runs); the
   SharedLayer directory's unzipped size against Lambda's 250 MB limit, and its deflated zip.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_stack import (
    BOOTSTRAP,
    ROTATOR,
    ApprovingInvoker,
    EmulatorTime,
    configure_environment,
    create_secrets,
    local_servers,
)

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
VENV_BIN = ROOT / ".venv" / "bin"
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
IMPORTTIME_RUNS = 3
SAM_TIMEOUT_SECONDS = 300

IMPORT_RATIO_BUDGET = 1.10
FORBIDDEN_IN_GET_TOKEN = ("boto3", "botocore", "aws_lambda_powertools")
NOOP_AWS_CALLS = 1
# Read the published token and the credential; claim, store the rotation, publish; announce it.
ROTATION_AWS_CALLS = {"GetSecretValue": 2, "PutSecretValue": 3, "EventBridge:PutEvents": 1}
ROTATION_UPSTREAM_CALLS = {"refresh": 1, "exchange": 1, "projects": 1}
HOURS_FORWARD = 19
LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024  # function code and all its layers, unzipped
MIB = 1024 * 1024

HANDLERS = ("rotator", "bootstrap")
# What the template sets for every function (the Powertools logger and metrics read it at import).
FUNCTION_ENV = {
    "POWERTOOLS_SERVICE_NAME": "cmstoken",
    "POWERTOOLS_METRICS_NAMESPACE": "CmsToken/bench",
    "POWERTOOLS_LOG_LEVEL": "INFO",
}
MARKER = "--bench: timed import starts--"

# Runs in a fresh interpreter (``-P``: no script directory on sys.path). Prints one JSON line.
PROBE = f"""
import json, sys, time
mode, target = sys.argv[1], sys.argv[2]
if mode == "handler":
    import importlib.util, os
    sys.path.insert(0, os.path.dirname(target))  # the function's directory, as /var/task
sys.stderr.write({MARKER!r} + "\\n")
sys.stderr.flush()
started = time.perf_counter()
if mode == "baseline":
    import boto3, requests
elif mode == "handler":
    spec = importlib.util.spec_from_file_location("app", target)
    module = importlib.util.module_from_spec(spec)
    sys.modules["app"] = module
    spec.loader.exec_module(module)
    handler = module.lambda_handler
else:
    __import__(target)
elapsed = time.perf_counter() - started
tops = sorted({{name.split(".")[0] for name in sys.modules}})
print(json.dumps({{"seconds": elapsed, "packages": tops}}))
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


# --- 1. imports --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    name: str
    mode: str  # baseline | handler | module
    target: str


def probe_env(base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("PYTHON")}
    env.update(FUNCTION_ENV)
    return env


def run_probe(
    subject: Subject, env: Mapping[str, str], *, importtime: bool = False
) -> tuple[dict[str, Any], str]:
    """One fresh interpreter: its JSON line (seconds, top-level packages loaded) and stderr."""
    flags = ["-X", "importtime"] if importtime else []
    completed = subprocess.run(  # noqa: S603 -- our own interpreter and probe
        [PYTHON, *flags, "-P", "-c", PROBE, subject.mode, subject.target],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=tempfile.gettempdir(),
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        tail = "\n".join(completed.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"importing {subject.name} failed:\n{tail}")
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result, completed.stderr


def attribute_importtime(stderr: str) -> dict[str, float]:
    """Milliseconds of self time per owner: each module's time goes to the outermost third-party
    package whose import pulled it in (``ssl`` under ``requests`` counts for ``requests``);
    modules no third-party package pulled in count for ``cmstoken`` or ``stdlib``."""
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

    stdlib = sys.stdlib_module_names
    totals: dict[str, float] = defaultdict(float)

    def visit(node: tuple[int, str, int, list[Any]], owner: str | None) -> None:
        _, name, microseconds, children = node
        top = name.split(".")[0]
        if owner is None and top not in stdlib and top != "cmstoken":
            owner = top
        totals[owner or ("cmstoken" if top == "cmstoken" else "stdlib")] += microseconds / 1000
        for child in children:
            visit(child, owner)

    for root in pending:
        visit(root, None)
    return dict(totals)


def measure_imports(report: Report, env: Mapping[str, str]) -> None:
    subjects = [
        Subject("baseline", "baseline", ""),
        *(Subject(name, "handler", str(ROOT / "functions" / name / "app.py")) for name in HANDLERS),
        Subject("get-token", "module", "cmstoken.get_token"),
    ]
    for subject in subjects:  # warm-up: byte-compile and fill the page cache, not timed
        run_probe(subject, env)
    seconds: dict[str, list[float]] = {s.name: [] for s in subjects}
    packages: dict[str, list[str]] = {}
    for run in range(RUNS):
        shift = run % len(subjects)  # interleaved, each subject in every position in turn
        for subject in subjects[shift:] + subjects[:shift]:
            result, _ = run_probe(subject, env)
            seconds[subject.name].append(result["seconds"])
            packages[subject.name] = result["packages"]
    median = {name: statistics.median(values) for name, values in seconds.items()}
    baseline = median["baseline"]
    report.add(f"import boto3, requests (baseline, median of {RUNS})", f"{baseline * 1000:.0f} ms")
    for name in HANDLERS:
        ratio = median[name] / baseline
        sdk = [p for p in packages[name] if p in FORBIDDEN_IN_GET_TOKEN]
        report.add(
            f"import functions/{name}/app.py / baseline",
            f"{ratio:.2f} ({median[name] * 1000:.0f} ms; loads {', '.join(sdk) or 'no SDK'})",
            f"<= {IMPORT_RATIO_BUDGET:.2f}",
            ratio <= IMPORT_RATIO_BUDGET,
        )
    report.add("import cmstoken.get_token (get-token)", f"{median['get-token'] * 1000:.0f} ms")
    loaded = [p for p in packages["get-token"] if p in FORBIDDEN_IN_GET_TOKEN]
    report.add(
        "get-token: boto3/botocore/powertools loaded",
        ", ".join(loaded) or "none",
        "none",
        not loaded,
    )
    for subject in subjects[:3]:
        samples = [
            attribute_importtime(run_probe(subject, env, importtime=True)[1])
            for _ in range(IMPORTTIME_RUNS)
        ]
        owners = {owner for sample in samples for owner in sample}
        typical = {o: statistics.median(s.get(o, 0.0) for s in samples) for o in owners}
        top = sorted(typical.items(), key=lambda item: -item[1])[:6]
        report.notes.append(
            f"{subject.name:<9} import by package (-X importtime, inflated): "
            + ", ".join(f"{owner} {ms:.0f} ms" for owner, ms in top)
        )


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


def measure_calls(report: Report) -> None:
    with local_servers() as (emulator, aws_endpoint):
        configure_environment(emulator, aws_endpoint)
        noop, rotation = run_stack(emulator)

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


def run_stack(emulator: Any) -> tuple[Run, Run]:
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


def measure_layer(report: Report, build: subprocess.Popen[bytes], workdir: Path) -> None:
    try:
        code = build.wait(timeout=SAM_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        build.kill()
        build.wait()
        raise RuntimeError(f"sam build took more than {SAM_TIMEOUT_SECONDS} s") from None
    if code != 0:
        log = (workdir / "sam-build.log").read_text(errors="replace").strip().splitlines()
        raise RuntimeError(f"sam build exited {code}:\n" + "\n".join(log[-10:]))
    layer = workdir / "build" / "SharedLayer"
    if not layer.is_dir():
        raise RuntimeError(f"sam build produced no {layer.name} directory")
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
    print(f"bench: imports ({RUNS} interleaved runs each), calls, layer size ...", file=sys.stderr)
    try:
        measure_imports(report, probe_env(original_env))
    except Exception as exc:  # noqa: BLE001 -- reported, and the other parts still run
        report.error("imports", str(exc))

    workdir = Path(tempfile.mkdtemp(prefix="cmstoken-bench-"))
    try:
        build: subprocess.Popen[bytes] | None = None
        try:
            build = start_sam_build(original_env, workdir)
        except Exception as exc:  # noqa: BLE001
            report.error("SharedLayer size", str(exc))
        try:
            measure_calls(report)
        except Exception as exc:  # noqa: BLE001
            report.error("AWS and upstream calls", f"{type(exc).__name__}: {exc}")
        if build is not None:
            try:
                measure_layer(report, build, workdir)
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
