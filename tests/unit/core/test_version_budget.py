"""The version budget (``core.version_budget``): what each action may write, against Secrets
Manager's quota of versions (PutSecretValue: "Secrets Manager removes outdated versions when
there are more than 100, but it does not remove versions created less than 24 hours ago"), and
the table of docs/how-rotation-works.md that states its arithmetic.

The table is read as the document a person checks, not as the code's constants: the numbers are
compared with the code, and the sums are done here, so a constant changed alone (a reserve of
0, say) fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmstoken.core import version_budget
from cmstoken.core.clock import to_iso
from cmstoken.core.version_budget import DAY, QUOTA, Version, Writer, budget

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_795_500_000.0
ages = st.floats(min_value=0, max_value=3 * DAY, allow_nan=False)
versions = st.lists(st.tuples(ages, st.booleans()), max_size=150)


def table(marker: str) -> list[list[str]]:
    """The rows (cells) of the table after ``<!-- marker -->`` in how-rotation-works.md."""
    text = (ROOT / "docs/how-rotation-works.md").read_text()
    after = text.split(f"<!-- {marker} -->\n", 1)[1]
    lines = [line for line in after.split("\n\n", 1)[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def first_number(cell: str) -> int:
    found = re.match(r"\d+", cell)
    assert found is not None, cell
    return int(found.group())


def limits() -> dict[str, int]:
    rows = table("version-budget-limits")
    return {name.split(" (")[0].split(":")[0]: int(value) for name, value in rows}


def test_the_documented_limits_are_the_codes_and_add_up() -> None:
    found = limits()
    quota = found["Secrets Manager's quota"]
    kept = found["kept for writes that follow a spend"]
    inside = found["the schedule's and an operator's limit"]
    reserve = found["kept from outside callers"]
    outside = found["the outside callers' limit"]
    assert quota - kept == inside
    assert inside - reserve == outside
    assert (quota, kept, Writer.INSIDE.limit, Writer.OUTSIDE.limit) == (
        QUOTA,
        version_budget.IN_FLIGHT,
        inside,
        outside,
    )


def test_the_documented_writers_are_the_codes_and_the_reserve_covers_them() -> None:
    """The reserve kept from outside callers is the schedule's day and one
    re-authorization, as the writers' table counts them."""
    rows = {row[0]: row for row in table("version-budget-writers")}
    refresh = first_number(rows["a scheduled refresh"][2])
    schedule_day = first_number(rows["a scheduled refresh"][3])
    reauthorization = first_number(rows["a re-authorization (`cmstoken-admin bootstrap`)"][2])
    start = first_number(rows["a link's start"][2])
    poll = first_number(rows["a link's background poll"][2])
    assert (
        first_number(rows['a forced refresh (`{"force": true}`, refresh requests)'][2]) == refresh
    )
    assert (refresh, start, poll) == (
        version_budget.PER_REFRESH,
        version_budget.PER_START,
        version_budget.PER_POLL,
    )
    assert (schedule_day, reauthorization) == (
        version_budget.SCHEDULE_DAY,
        version_budget.REAUTHORIZATION,
    )
    assert limits()["kept from outside callers"] == schedule_day + reauthorization
    # What may follow a spend: a refresh's store and release, and an approval's writes.
    assert limits()["kept for writes that follow a spend"] == (refresh - 1) + poll


@given(versions, st.sampled_from(Writer), st.integers(min_value=1, max_value=5))
def test_an_action_starts_only_when_its_writes_fit_its_callers_limit(
    found: list[tuple[float, bool]], writer: Writer, writes: int
) -> None:
    """Whatever the versions: an action that may start leaves room under its caller's
    documented limit for all it may write; only versions a day old or more without a label
    do not count."""
    made = budget([Version(NOW - age, staged) for age, staged in found], NOW)
    in_use = sum(1 for age, staged in found if staged or age < DAY)
    documented = limits()[
        "the outside callers' limit"
        if writer is Writer.OUTSIDE
        else "the schedule's and an operator's limit"
    ]
    assert made.in_use == in_use
    assert (made.refusal(writer, writes, "an action") is None) == (in_use + writes <= documented)


def test_a_refusal_says_who_and_when_a_version_ages_out() -> None:
    full = [Version(NOW - 600 * n, False) for n in range(60)]  # one every 10 minutes
    made = budget(full, NOW)
    assert made.frees_at == NOW - 600 * 59 + DAY
    refusal = made.refusal(Writer.OUTSIDE, 3, "a forced refresh")
    assert refusal is not None
    assert refusal.startswith(
        "version budget: a forced refresh may write 3 versions of the refresh credential, "
        "and 60 are in use, of the 16 that callers outside the stack may fill"
    )
    assert refusal.endswith(f"one ages out at {to_iso(NOW - 600 * 59 + DAY)}")
    assert made.refusal(Writer.INSIDE, 3, "a refresh") is None


@pytest.mark.parametrize("staged", [True, False])
def test_labelled_and_undated_versions_always_count(staged: bool) -> None:
    made = budget([Version(NOW - 5 * DAY, True), Version(float("inf"), staged)], NOW)
    assert (made.in_use, made.frees_at) == (2, None)
