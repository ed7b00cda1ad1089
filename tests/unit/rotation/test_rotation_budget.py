"""The version budget (``rotation.budget``): what a refresh may write, against Secrets Manager's
quota of versions (PutSecretValue: outdated versions are removed past 100, never those under
24 hours old)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cmstoken.core.clock import to_iso
from cmstoken.rotation.budget import DAY, PER_REFRESH, QUOTA, RESERVE, Version, budget

NOW = 1_795_500_000.0
ages = st.floats(min_value=0, max_value=3 * DAY, allow_nan=False)
versions = st.lists(st.tuples(ages, st.booleans()), max_size=150)


@given(versions)
def test_a_refresh_starts_only_when_its_writes_fit(found: list[tuple[float, bool]]) -> None:
    """Whatever the versions: a refresh that may start has room for all it may write, a forced
    one leaves the reserve, and only versions a day old or more without a label do not count."""
    made = budget([Version(NOW - age, staged) for age, staged in found], NOW)
    in_use = sum(1 for age, staged in found if staged or age < DAY)
    assert made.in_use == in_use
    assert (made.refusal() is None) == (in_use + PER_REFRESH <= QUOTA)
    assert (made.forced_refusal() is None) == (in_use + PER_REFRESH <= QUOTA - RESERVE)


def test_a_refusal_says_when_a_version_ages_out() -> None:
    full = [Version(NOW - 600 * n, False) for n in range(QUOTA - 1)]  # one every 10 minutes
    made = budget(full, NOW)
    assert made.frees_at == NOW - 600 * (QUOTA - 2) + DAY
    refusal = made.refusal()
    assert refusal is not None
    assert "99 versions of the refresh credential are in use" in refusal
    assert refusal.endswith(f"until {to_iso(NOW - 600 * (QUOTA - 2) + DAY)}")


def test_labelled_and_undated_versions_always_count() -> None:
    made = budget([Version(NOW - 5 * DAY, True), Version(float("inf"), False)], NOW)
    assert (made.in_use, made.frees_at) == (2, None)
