"""`make demo`'s script runs the lifecycle end to end and prints no secret."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_the_lifecycle_and_prints_only_metadata() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "approving automatically" in result.stderr
    assert re.search(r"enter the code [B-Z]{4}-[B-Z]{4}", result.stderr)
    assert "old refresh token void  yes" in result.stdout
    assert re.search(r"projects\s+prj_[A-Za-z0-9]{16}", result.stdout)
    output = result.stdout + result.stderr
    assert "eyJ" not in output  # no JWT (raw, id or service token)
    assert not re.search(r"v1\.[A-Za-z0-9_-]{20,}", output)  # no refresh token
