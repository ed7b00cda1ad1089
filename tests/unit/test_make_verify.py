"""`make verify` runs every test module that goes deeper there: a module that reads
``support.DEEPER`` (``SIMULATION_BOUNDS=verify``) or counts its examples with
``support.examples`` keeps its deeper cases for `make verify`, and a module left out of its list
would drop them silently (`make test` runs the lighter ones only)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_with_deeper_cases_runs_in_make_verify() -> None:
    recipe = subprocess.run(
        ["make", "--dry-run", "--no-print-directory", "verify"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.replace("\\\n", " ")
    command = next(line for line in recipe.splitlines() if "SIMULATION_BOUNDS=verify" in line)
    run = {word for word in command.split() if word.endswith(".py")}
    deeper = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if path != Path(__file__).resolve()
        and re.search(r"\bDEEPER\b|\bexamples\(", path.read_text())
    }
    assert deeper, "no module goes deeper: the search above is wrong"
    assert sorted(deeper - run) == []
