"""What a first run prints: `sam build` says nothing alarming about the functions (each has a
requirements.txt that installs nothing: its code needs only the layer and the runtime's boto3),
and creating `.venv/` says what it does and how long it takes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py"))


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_has_a_requirements_file_that_installs_nothing(function: str) -> None:
    lines = (ROOT / "functions" / function / "requirements.txt").read_text().splitlines()
    assert lines, "empty: say why in a comment"
    assert all(line.startswith("#") or not line.strip() for line in lines)


def test_sam_build_of_a_function_prints_no_warning_about_requirements(tmp_path: Path) -> None:
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SAM_CLI_TELEMETRY": "0",
        "SAM_CLI_CONTACT_TRACKING": "0",
    }
    sam = str(Path(sys.executable).parent / "sam")
    template, build = str(ROOT / "template.yaml"), str(tmp_path / "build")
    completed = subprocess.run(
        [sam, "build", "RotatorFunction", "--template", template, "--build-dir", build],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-3000:]
    assert "Build Succeeded" in output
    assert "requirements.txt file not found" not in output


def test_creating_the_venv_says_what_it_does_and_for_how_long() -> None:
    """`make -n` shows the recipe that runs on a fresh clone: it announces the minute it takes,
    and the editable install runs with warnings silenced (setuptools' box)."""
    completed = subprocess.run(
        ["make", "-n", "-B", "venv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert re.search(r"Creating \.venv .*\(about a minute, once\)", completed.stdout)
    assert "PYTHONWARNINGS=ignore" in completed.stdout
    assert ".venv is ready" in completed.stdout
