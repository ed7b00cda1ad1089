"""Cold starts of the built functions in Lambda's layout against the floor (``import boto3,
requests`` + one ``GetSecretValue``): interleaved runs on a read-only build, medians, and the
budget on each handler's ratio to the floor."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .build import Layout
from .environment import lambda_environment
from .importtime import IMPORTTIME_RUNS
from .loaded_modules import (
    note_import_owners,
    note_runtime_packages,
    report_get_token,
    report_layer_bytecode,
)
from .probe import FLOOR, GET_TOKEN, HANDLERS, Probe, run_probe
from .report import Report
from .runner import RUNTIME_PYTHON, medians

RUNTIME_VERSION = (3, 13)  # Lambda's python3.13: the layer's bytecode is for this version only
MIN_RUNS = 7
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
COLD_START_BUDGET = 1.10
SUBJECTS = (FLOOR, *HANDLERS, GET_TOKEN)


@dataclass
class Samples:
    seconds: dict[str, list[float]]  # per subject, the timed runs
    last: dict[str, Probe]  # per subject, its last timed run
    verbose: dict[str, Probe]  # per handler, a -v run
    importtime: dict[str, list[Probe]]  # the floor and each handler, -X importtime runs


def check_runtime() -> None:
    """The cold starts' interpreter must be Lambda's minor version (the layer's bytecode)."""
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


def sample(layout: Layout, envs: Mapping[str, Mapping[str, str]]) -> Samples:
    """A warm-up run of each subject, then ``RUNS`` interleaved rounds (each subject in every
    position in turn), then the ``-v`` and ``-X importtime`` runs."""
    samples = Samples({s.name: [] for s in SUBJECTS}, {}, {}, {})
    for subject in SUBJECTS:  # warm-up: the page cache, not timed
        run_probe(subject, envs[subject.name], layout.cwd)
    for run in range(RUNS):
        shift = run % len(SUBJECTS)  # interleaved, each subject in every position in turn
        for subject in SUBJECTS[shift:] + SUBJECTS[:shift]:
            probe = run_probe(subject, envs[subject.name], layout.cwd)
            samples.seconds[subject.name].append(probe.seconds)
            samples.last[subject.name] = probe
    samples.verbose = {s.name: run_probe(s, envs[s.name], layout.cwd, "-v") for s in HANDLERS}
    samples.importtime = {
        s.name: [
            run_probe(s, envs[s.name], layout.cwd, "-X", "importtime")
            for _ in range(IMPORTTIME_RUNS)
        ]
        for s in [FLOOR, *HANDLERS]
    }
    return samples


def report_ratios(report: Report, median: Mapping[str, float]) -> None:
    """The floor's median, and each handler's median against it (the budget)."""
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


def measure_cold_starts(report: Report, layout: Layout, emulator: Any, aws_endpoint: str) -> None:
    if RUNS < MIN_RUNS:
        raise RuntimeError(f"BENCH_RUNS={RUNS}: the budget is a median of at least {MIN_RUNS}")
    check_runtime()
    envs = {s.name: lambda_environment(layout, s, emulator, aws_endpoint) for s in SUBJECTS}
    shipped = [layout.build]
    before = set().union(*(files_under(d) for d in shipped))
    with read_only(*shipped):
        samples = sample(layout, envs)
    written = set().union(*(files_under(d) for d in shipped)) - before
    if written:
        report.error("read-only layout", f"{len(written)} files written, e.g. {min(written)}")

    median = medians(samples.seconds)
    report_ratios(report, median)
    report_layer_bytecode(report, layout, samples.verbose)
    note_runtime_packages(report, layout, samples.last)
    report_get_token(report, median["get-token"], samples.last["get-token"])
    note_import_owners(report, samples.importtime)
