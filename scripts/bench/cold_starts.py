"""Cold starts of the built functions in Lambda's layout against the floor (``import boto3,
requests`` + one ``GetSecretValue``): interleaved runs on a read-only build, medians, and the
budget on each handler's ratio to the floor. The links function's first invocation is a link's
page, which asks the bootstrap (warm, in this process, behind the local Lambda API) for the
stack's status: the time that took is reported beside its ratio."""

from __future__ import annotations

import os
import statistics
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .build import Layout
from .environment import lambda_environment
from .importtime import IMPORTTIME_RUNS
from .links import LinksSite
from .loaded_modules import (
    note_import_owners,
    note_layer_packages,
    note_runtime_packages,
    report_get_token,
    report_layer_bytecode,
    report_unneeded,
)
from .probe import FLOOR, GET_TOKEN, HANDLERS, LINK_PAGE, Probe, Subject, run_probe
from .report import Report
from .runner import RUNTIME_PYTHON, medians

RUNTIME_VERSION = (3, 13)  # Lambda's python3.13: the layer's bytecode is for this version only
MIN_RUNS = 7
RUNS = int(os.environ.get("BENCH_RUNS", "15"))
# Each handler's median at most this many times the floor's (docs/development.md: measured
# ratios and the headroom left for a busy machine).
COLD_START_BUDGETS = {"rotator": 1.10, "bootstrap": 1.10, "links": 1.40}


@dataclass
class Samples:
    seconds: dict[str, list[float]]  # per subject, the timed runs
    last: dict[str, Probe]  # per subject, its last timed run
    verbose: dict[str, Probe]  # per handler, a -v run
    importtime: dict[str, list[Probe]]  # the floor and each handler, -X importtime runs
    behind: list[float]  # the bootstrap's status behind each timed link page, warm, seconds


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


def subjects(page: dict[str, Any]) -> tuple[Subject, ...]:
    """Every subject, in the order of a round; the links function's first invocation is
    ``page`` (a link's page, signed for the bootstrapped stack)."""
    handlers = tuple(s.with_event(page) if s is LINK_PAGE else s for s in HANDLERS)
    return (FLOOR, *handlers, GET_TOKEN)


def sample(
    layout: Layout,
    every: tuple[Subject, ...],
    envs: Mapping[str, Mapping[str, str]],
    status_seconds: list[float],
) -> Samples:
    """A warm-up run of each subject, then ``RUNS`` interleaved rounds (each subject in every
    position in turn), then the ``-v`` and ``-X importtime`` runs. ``status_seconds`` grows
    by the bootstrap's time behind each link page."""
    handlers = [s for s in every if s.mode == "handler"]
    samples = Samples({s.name: [] for s in every}, {}, {}, {}, [])
    for subject in every:  # warm-up: the page cache, not timed
        run_probe(subject, envs[subject.name], layout.cwd)
    del status_seconds[:]
    for run in range(RUNS):
        shift = run % len(every)  # interleaved, each subject in every position in turn
        for subject in every[shift:] + every[:shift]:
            probe = run_probe(subject, envs[subject.name], layout.cwd)
            samples.seconds[subject.name].append(probe.seconds)
            samples.last[subject.name] = probe
    samples.behind = list(status_seconds)
    samples.verbose = {s.name: run_probe(s, envs[s.name], layout.cwd, "-v") for s in handlers}
    samples.importtime = {
        s.name: [
            run_probe(s, envs[s.name], layout.cwd, "-X", "importtime")
            for _ in range(IMPORTTIME_RUNS)
        ]
        for s in [FLOOR, *handlers]
    }
    return samples


def report_ratios(report: Report, median: Mapping[str, float], behind: list[float]) -> None:
    """The floor's median, and each handler's median against it (its budget); beside the
    links function's, the bootstrap's status behind its page (median, warm)."""
    floor = median["floor"]
    report.add(
        f"cold start floor: import boto3, requests + client + GetSecretValue (median of {RUNS})",
        f"{floor * 1000:.0f} ms",
    )
    for subject in HANDLERS:
        assert subject.function is not None
        ratio = median[subject.name] / floor
        budget = COLD_START_BUDGETS[subject.function]
        value = f"{ratio:.2f} ({median[subject.name] * 1000:.0f} ms vs {floor * 1000:.0f} ms"
        if subject is LINK_PAGE and behind:
            value += f"; the bootstrap's status in it: {statistics.median(behind) * 1000:.0f} ms"
        report.add(
            f"cold start functions/{subject.function} ({subject.first}) / floor",
            value + ")",
            f"<= {budget:.2f}",
            ratio <= budget,
        )


def measure_cold_starts(
    report: Report, layout: Layout, emulator: Any, aws_endpoint: str, links: LinksSite
) -> None:
    """The cold starts, once the stack is bootstrapped and ``links.page`` is a link's page."""
    if RUNS < MIN_RUNS:
        raise RuntimeError(f"BENCH_RUNS={RUNS}: the budget is a median of at least {MIN_RUNS}")
    if links.page is None:
        raise RuntimeError("no link's page to open: the stack's link was not signed")
    check_runtime()
    every = subjects(links.page)
    envs = {
        s.name: lambda_environment(layout, s, emulator, aws_endpoint, links.variables)
        for s in every
    }
    shipped = [layout.build]
    before = set().union(*(files_under(d) for d in shipped))
    with read_only(*shipped):
        samples = sample(layout, every, envs, links.status_seconds)
    written = set().union(*(files_under(d) for d in shipped)) - before
    if written:
        report.error("read-only layout", f"{len(written)} files written, e.g. {min(written)}")

    median = medians(samples.seconds)
    report_ratios(report, median, samples.behind)
    report_layer_bytecode(report, layout, samples.verbose)
    report_unneeded(report, samples.last)
    note_runtime_packages(report, layout, samples.last)
    note_layer_packages(report, layout, samples.last)
    report_get_token(report, median["get-token"], samples.last["get-token"])
    note_import_owners(report, samples.importtime)
