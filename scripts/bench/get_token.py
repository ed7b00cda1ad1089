"""``get-token -r -`` as a user runs it against the vendor's ``get-token.sh -r TOKEN`` (bash,
curl and jq), renewing at the same emulator, interleaved; the budget is their ratio."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .importtime import IMPORTTIME_RUNS, importing_ms
from .report import Report
from .runner import ROOT, VENV_BIN, medians, timed_run

GET_TOKEN_RUNS = 9
# get-token -r against the vendor's script for the same job (bash, curl and jq), measured
# side by side: a ratio means the same on every machine, busy or not.
GET_TOKEN_BUDGET_RATIO = 0.8
VENDOR_GET_TOKEN = ROOT / "tests" / "data" / "vendor-get-token" / "get-token.sh"
PACKAGE = ROOT / "layers" / "cmstoken" / "cmstoken"


def compile_bytecode() -> None:
    """Compile the package's modules as pip does when it installs the wheel a user runs (it
    compiles to bytecode unless told ``--no-compile``): in a checkout whose imports may not
    write bytecode (``PYTHONDONTWRITEBYTECODE``), each run would otherwise compile every
    module from source, which no installed ``get-token`` does."""
    subprocess.run(  # noqa: S603 -- this checkout's interpreter on its own package
        [str(VENV_BIN / "python"), "-m", "compileall", "-q", str(PACKAGE)], check=True
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

    compile_bytecode()
    ours({}), theirs()  # warm-up: the page cache, not timed
    mine, vendor = [], []
    for _ in range(GET_TOKEN_RUNS):
        mine.append(ours({})[0] * 1000)
        vendor.append(theirs() * 1000)
    importing = [
        importing_ms(ours({"PYTHONPROFILEIMPORTTIME": "1"})[1]) for _ in range(IMPORTTIME_RUNS)
    ]
    shutil.rmtree(workdir, ignore_errors=True)
    median = medians({"ours": mine, "vendor": vendor, "importing": importing})
    ratio = median["ours"] / median["vendor"]
    report.add(
        f"get-token -r / vendor get-token.sh -r, same emulator (medians of {GET_TOKEN_RUNS})",
        f"{ratio:.2f} ({median['ours']:.0f} ms vs {median['vendor']:.0f} ms; "
        f"importing: {median['importing']:.0f} ms, -X importtime)",
        f"<= {GET_TOKEN_BUDGET_RATIO:.2f}",
        ratio <= GET_TOKEN_BUDGET_RATIO,
    )
