"""The common runner: where the project and its tools are, a command timed from spawning to exit,
a command timed from spawning to a marker line (under a watchdog), and medians."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# The interpreter the cold starts run on: the one this venv was made from, without its packages.
RUNTIME_PYTHON = getattr(sys, "_base_executable", sys.executable)
VENV_BIN = ROOT / ".venv" / "bin"
RUN_TIMEOUT_SECONDS = 60


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


@dataclass
class Marked:
    """A run timed to its marker line: ``seconds`` and ``line`` are None when none came."""

    seconds: float | None
    line: str | None  # the marker line, without the marker
    rest: str  # standard output after the marker line
    stderr: str
    returncode: int | None


def run_to_marker(command: list[str], env: Mapping[str, str], cwd: Path, marker: str) -> Marked:
    """Spawn ``command``; the wall-clock time from before spawning to the first output line
    that starts with ``marker``; then the rest of its output. A watchdog kills the process after
    ``RUN_TIMEOUT_SECONDS``."""
    stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 -- closed below
    started = time.perf_counter()
    process = subprocess.Popen(  # noqa: S603 -- our interpreter and probe
        command, stdout=subprocess.PIPE, stderr=stderr, env=dict(env), cwd=cwd, text=True
    )
    watchdog = threading.Timer(RUN_TIMEOUT_SECONDS, process.kill)
    watchdog.start()
    try:
        assert process.stdout is not None
        seconds, found = None, None
        for line in process.stdout:
            if line.startswith(marker):
                seconds = time.perf_counter() - started
                found = line[len(marker) :]
                break
        rest = process.stdout.read()
        process.wait()
    finally:
        watchdog.cancel()
        stderr.seek(0)
        errors = stderr.read()
        stderr.close()
    return Marked(seconds, found, rest, errors, process.returncode)


def medians(samples: Mapping[str, Iterable[float]]) -> dict[str, float]:
    """The median of each named series."""
    return {name: statistics.median(values) for name, values in samples.items()}
