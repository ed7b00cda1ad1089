"""10,000 processes of the real consumer helper in one account (tests/simulation/fleet.py): at a
rotation and at a token refused everywhere at once, the peak ``GetSecretValue`` calls a second
and the refresh requests sent, without spreading (the helper's earlier rules: cached until 60 s
before expiry, a refused token re-read at once) and with the defaults. Secrets Manager serves
10,000 ``GetSecretValue`` and ``DescribeSecret`` calls a second per account and Region
("Secrets Manager quotas"); EventBridge's ``PutEvents`` takes 10,000 a second in us-east-1 and
2,400 in us-east-2 ("Amazon EventBridge quotas"). The figures are docs/consume.md's table."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from cmstoken.consumer import ServiceTokenProvider
from simulation import fleet

ROOT = Path(__file__).resolve().parents[3]
# The provider's defaults, read from its signature.
DEFAULTS = inspect.signature(ServiceTokenProvider).parameters
DEFAULT_MAX_AGE = DEFAULTS["max_age_seconds"].default
DEFAULT_REFUSED_SPREAD = DEFAULTS["refused_spread_seconds"].default


def fleet_table() -> str:
    """docs/consume.md's table of figures."""
    text = (ROOT / "docs" / "consume.md").read_text()
    start = text.index("<!-- fleet-figures -->")
    return text[start:].split("\n\n", 1)[0]


def number(cell: str) -> int:
    """The first number of a table cell (``4,968 (at most 1,018 a second)``: 4968)."""
    found = re.search(r"\d[\d,]*", cell)
    assert found is not None, cell
    return int(found.group().replace(",", ""))


@pytest.fixture(scope="module")
def table() -> list[list[str]]:
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in fleet_table().splitlines()[2:]
        if line.startswith("|") and not line.startswith("|---")
    ]
    assert len(rows) == 4, rows
    return rows


def test_at_a_rotation_the_fleet_picks_up_the_new_token_within_max_age_reading_spread_out(
    table: list[list[str]],
) -> None:
    before = fleet.rotation(spread=False)
    after = fleet.rotation(spread=True)
    print(fleet.summary("rotation, without spreading", before.counts))
    print(fleet.summary("rotation, defaults", after.counts))
    assert len(before.picked_up) == len(after.picked_up) == fleet.PROCESSES
    # Without spreading: every process re-reads in the one second 60 s before the old token
    # expires, hours after the new one was published.
    assert before.counts.peak_reads() == fleet.PROCESSES
    assert min(before.picked_up) > 5 * 3600
    # With the defaults: every process within max_age of the publication, reads spread.
    assert after.latest_pickup <= DEFAULT_MAX_AGE
    assert after.counts.peak_reads() < fleet.SECRETS_MANAGER_READS_A_SECOND / 100
    assert sum(after.counts.requests.values()) == sum(before.counts.requests.values()) == 0
    assert number(table[0][2]) == before.counts.peak_reads()
    assert number(table[1][2]) == after.counts.peak_reads()
    assert number(table[1][4]) == int(after.latest_pickup)


def test_a_token_refused_everywhere_at_once_is_re_read_and_requested_spread_out(
    table: list[list[str]],
) -> None:
    before = fleet.refused(spread=False)
    after = fleet.refused(spread=True)
    print(fleet.summary("refused, without spreading", before.counts))
    print(fleet.summary("refused, defaults", after.counts))
    assert len(before.waited) == len(after.waited) == fleet.PROCESSES, "every process served"
    assert before.counts.peak_reads() == before.requests == fleet.PROCESSES
    assert before.counts.peak_requests() == fleet.PROCESSES
    # With the defaults, the processes that re-read after the rotator published (5 s after the
    # first request) send nothing: about PUBLISH_AFTER_REQUEST / refused_spread of them ask.
    share = fleet.PUBLISH_AFTER_REQUEST / DEFAULT_REFUSED_SPREAD
    assert after.requests < fleet.PROCESSES * share * 1.05
    assert after.counts.peak_requests() < fleet.PROCESSES / DEFAULT_REFUSED_SPREAD * 1.1
    assert after.counts.peak_reads() < fleet.SECRETS_MANAGER_READS_A_SECOND / 4
    assert max(after.waited) <= DEFAULT_REFUSED_SPREAD + fleet.PUBLISH_AFTER_REQUEST
    assert number(table[2][2]) == before.counts.peak_reads()
    assert number(table[2][3]) == before.requests
    assert number(table[3][2]) == after.counts.peak_reads()
    assert number(table[3][3]) == after.requests
    assert f"at most {after.counts.peak_requests():,} a second" in table[3][3]
    assert number(table[3][4]) == round(max(after.waited))
