"""The Node.js consumer module's cache and 403 rules, the Python helper's (docs/consume-node.md,
"What it does"), on a fake clock with fake Secrets Manager and API answers
(tests/node/rules.mjs): how long a read stays fresh at both ends of its jitter, the back-off
while Secrets Manager fails and the token is still valid, and a 403 that re-reads at most every
5 s and retries only with a changed token."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

RULES = Path(__file__).resolve().parents[3] / "tests" / "node" / "rules.mjs"


@pytest.fixture(scope="module")
def checks() -> dict[str, Any]:
    assert shutil.which("node"), "node is not on PATH: run `make node`"
    result = subprocess.run(
        ["node", str(RULES)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_a_read_is_fresh_for_half_to_all_of_max_age_and_never_near_expiry(
    checks: dict[str, Any],
) -> None:
    """maxAgeSeconds 900, minValiditySeconds 60, each shortened by a share of at most half (the
    Python helper's rules, cmstoken/consumer/spread.py): a token far from expiry is fresh for
    900 s at u = 0 down to 450 s at u near 1; one expiring in 100 s until 60 to 120 s before
    that (40 s from now at u = 0, past already at u near 1: then re-read in 5 down to 2.5 s),
    as one expiring in 30 s."""
    low, high = checks["bounds"]["low"], checks["bounds"]["high"]
    assert low == {"far": 900, "near": 40, "soon": 5}
    assert high["far"] == pytest.approx(450, abs=0.01)
    assert high["near"] == pytest.approx(2.5, abs=0.01)
    assert high["soon"] == pytest.approx(2.5, abs=0.01)


def test_failed_reads_serve_the_cached_token_and_back_off_until_it_expires(
    checks: dict[str, Any],
) -> None:
    back_off = checks["backOff"]
    # the read at 900 s fails, then every retry: 1, 2, 4 ... 30 s apart
    assert back_off["reads"][:9] == [0, 900, 901, 903, 907, 915, 931, 961, 991]
    assert back_off["served"] == ["cached"]
    assert back_off["last"] == "cached"
    # at its expiry the cached token is no longer served: the read's error comes through
    assert back_off["afterExpiry"] == "unavailable"


def test_a_403_rereads_at_most_every_5_s_and_retries_only_with_a_new_token(
    checks: dict[str, Any],
) -> None:
    forbidden = checks["forbidden"]
    assert forbidden["statuses"] == [403, 403, 200]
    assert forbidden["seen"] == ["first", "first", "first", "second"]
    # the first read; no re-read for the 403 right after it; one re-read for each later 403
    assert forbidden["reads"] == [0, 6, 12]
