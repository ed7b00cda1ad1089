"""Issue 30, item 3, the Node half: 10,000 instances of the real recipes/node/cmstoken.mjs in one
account, on a simulated clock with fake Secrets Manager, EventBridge and API answers that count
the calls (tests/node/fleet.mjs), at a rotation and when the API refuses the published token for
all of them in the same second. Secrets Manager's quota is 10,000 GetSecretValue and
DescribeSecret calls a second per account and Region; the rotator publishes a new token 6 h
before the old one expires (RefreshMarginSeconds).

Each figure is also computed for the helpers' old behaviour (the token kept until exactly 60 s
before it expires, re-read at once after a 401, polled every 5 s), which the same module takes
with ``maxAgeSeconds: Infinity, refusedSpreadSeconds: 0, random: () => 0``: every bound below
holds for the module's defaults and fails for the old behaviour."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
FLEET = ROOT / "tests" / "node" / "fleet.mjs"
INSTANCES = 10_000
QUOTA = 10_000  # GetSecretValue + DescribeSecret a second, per account and Region
MAX_AGE = 900  # maxAgeSeconds, the module's default
# Bounds: a rotation costs at most 1 % of the quota at its peak; a refusal at most a quarter,
# and requests from at most the instances that re-read before the rotated token came (about
# half: the rotator publishes 5 s after the first request, the re-reads spread over 10 s).
ROTATION_PEAK = QUOTA // 100
REFUSAL_PEAK = QUOTA // 4
REFUSAL_REQUESTS = INSTANCES * 6 // 10


@pytest.fixture(scope="module")
def figures() -> dict[str, Any]:
    assert shutil.which("node"), "node is not on PATH: run `make node`"
    result = subprocess.run(
        ["node", str(FLEET), str(INSTANCES)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for token in ("old-token-rotation", "new-token-rotation", "refused-token", "new-token-refusal"):
        assert token not in result.stdout + result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def report(say: Callable[[str], None], scenario: str, figures: dict[str, Any]) -> None:
    for behaviour in ("jitter", "old"):
        say(f"[node fleet] {scenario}, {behaviour}: {json.dumps(figures[behaviour])}")


def test_at_a_rotation_every_instance_has_the_new_token_within_max_age_without_a_peak(
    figures: dict[str, Any], say: Callable[[str], None]
) -> None:
    rotation = figures["rotation"]
    report(say, "rotation", rotation)
    new, old = rotation["jitter"], rotation["old"]
    assert new["instances"] == old["instances"] == INSTANCES
    # every instance reads at its first invocation (one a second) after its freshness ends
    assert new["max_pickup_seconds"] <= MAX_AGE + 1
    assert new["peak_reads_per_second"] <= ROTATION_PEAK
    assert new["refresh_requests"] == 0
    # the old behaviour: hours late, and all at once
    assert old["max_pickup_seconds"] > MAX_AGE + 1
    assert old["median_pickup_seconds"] > 5 * 3600
    assert old["peak_reads_per_second"] > ROTATION_PEAK
    assert old["peak_reads_per_second"] == INSTANCES


def test_at_a_refused_token_the_fleet_reads_and_requests_spread_out(
    figures: dict[str, Any], say: Callable[[str], None]
) -> None:
    refusal = figures["refusal"]
    report(say, "refusal", refusal)
    new, old = refusal["jitter"], refusal["old"]
    for behaviour in (new, old):
        assert behaviour["outcomes"] == {"200": INSTANCES}  # every call retried with the new token
        assert behaviour["requests_after_publication"] == 0
    assert new["peak_reads_per_second"] <= REFUSAL_PEAK
    assert 0 < new["refresh_requests"] <= REFUSAL_REQUESTS
    # the pause (10 s at most), the request, one poll (7.5 s at most) and the retry
    assert new["all_done_seconds_after_refusal"] <= 20
    assert old["peak_reads_per_second"] > REFUSAL_PEAK
    assert old["refresh_requests"] > REFUSAL_REQUESTS
    assert old["refresh_requests"] == old["peak_reads_per_second"] == INSTANCES
