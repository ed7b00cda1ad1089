"""`make demo`'s script runs the lifecycle end to end and prints no secret."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
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
    assert "Approving automatically" in result.stderr
    assert re.search(r"^\s+[B-Z]{4}-[B-Z]{4}$", result.stderr, re.MULTILINE)  # the user code
    # What an operator sees at bootstrap, once, although nobody is at a terminal: the QR code
    # (block characters) and the framed address.
    assert result.stderr.count("  Open:   http://127.0.0.1:") == 1
    assert result.stderr.count("=" * 64) == 2
    qr_rows = [line for line in result.stderr.splitlines() if set(line.strip()) <= set("█▀▄ ")]
    assert len([row for row in qr_rows if row.strip()]) >= 10
    assert "Authorized" in result.stderr
    assert re.search(r"rotator, scheduled\s+skipped: service token is fresh", result.stdout)
    assert re.search(r"rotator, scheduled again\s+rotated", result.stdout)
    assert "(old one void: yes)" in result.stdout
    assert re.search(r"projects listed\s+prj_[A-Za-z0-9]{16}", result.stdout)
    assert float(re.search(r"elapsed\s+([\d.]+) s", result.stdout).group(1)) < 60  # type: ignore[union-attr]
    output = result.stdout + result.stderr
    assert "eyJ" not in output  # no JWT (raw, id or service token)
    assert not re.search(r"v1\.[A-Za-z0-9_-]{20,}", output)  # no refresh token


def test_demo_stops_its_servers_on_ctrl_c() -> None:
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "demo.py")],
        env={**os.environ, "INTERACTIVE": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        port = None
        for line in process.stderr:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            port = int(found.group(1)) if found else port
            if "waiting for approval" in line:
                break
        assert port is not None
        assert _listening(port)
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
        assert process.returncode == 130
        assert "interrupted; servers stopped" in err
        assert time.monotonic() - started < 10
        assert not _listening(port)
    finally:
        process.kill()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
