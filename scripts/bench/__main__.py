"""``python -m bench`` (from scripts/, as ``make bench`` runs it): sam build and the runtime's
boto3, then the calls with the cold starts and get-token measured inside the same local stack,
then the layer's size; the table, and exit status 1 when a budget is missed."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .build import Layout, install_runtime, start_sam_build, wait_for_build
from .calls import measure_calls
from .cold_starts import RUNS, measure_cold_starts
from .get_token import measure_get_token_refresh
from .layer_size import measure_layer
from .links import LinksSite
from .report import Report, finish


def build(report: Report, original_env: Mapping[str, str], workdir: Path) -> Path | None:
    """The build directory (the runtime's boto3 in ``workdir/runtime``), or None: reported."""
    built: Path | None = None
    with report.failing_as("sam build and the runtime's boto3"):
        process = start_sam_build(original_env, workdir)
        install_runtime(workdir / "runtime")  # while sam builds
        built = wait_for_build(process, workdir)
        (workdir / "cwd").mkdir()
    return built


def measure_all(report: Report, original_env: Mapping[str, str], workdir: Path) -> None:
    """Every measure; one that fails is reported and the others still run."""
    built = build(report, original_env, workdir)

    def cold_starts(emulator: Any, aws_endpoint: str, links: LinksSite) -> None:
        if built is None:
            return
        with report.failing_as("cold starts"):
            layout = Layout(build=built, runtime=workdir / "runtime", cwd=workdir / "cwd")
            measure_cold_starts(report, layout, emulator, aws_endpoint, links)
        with report.failing_as("get-token -r"):
            measure_get_token_refresh(report, emulator)

    with report.failing_as("AWS and upstream calls"):
        measure_calls(report, cold_starts)
    if built is not None:
        with report.failing_as("SharedLayer size", typed=False):
            measure_layer(report, built, workdir)


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
        measure_all(report, original_env, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return finish(report, started)


if __name__ == "__main__":
    sys.exit(main())
