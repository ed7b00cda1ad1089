"""Issue 29, item 5: a flood of refresh requests, on the wiring the template declares
(``simulation.refresh_flood``: Lambda's and SQS's documented behaviour where moto cannot run
it): the scheduled run stays on time and the requests cause a bounded number of rotator runs,
whatever their number. Before, each request was an asynchronous invocation of the rotator, and
10,000 of them held the schedule's run back for hours."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from simulation.refresh_flood import RUN_SECONDS, Wiring, simulate, wiring
from template_model import transformed

BURST = 10_000
HOUR = 3600


def test_the_template_coalesces_refresh_requests() -> None:
    assert wiring(transformed()["Resources"]) == Wiring(coalesced=True)


def test_a_burst_of_ten_thousand_requests_leaves_the_schedule_on_time(
    say: Callable[[str], None],
) -> None:
    outcome = simulate(wiring(transformed()["Resources"]), [0.0] * BURST, hours=24)
    assert outcome.request_runs == 1
    assert max(outcome.schedule_delays) <= RUN_SECONDS  # at most one run ahead of it
    assert len(outcome.schedule_delays) == 24
    # Control: the same burst straight to the rotator (the wiring before) holds it back hours.
    direct = simulate(Wiring(coalesced=False), [0.0] * BURST, hours=24)
    assert direct.request_runs == BURST
    assert direct.schedule_delays[0] >= (BURST - 15) * RUN_SECONDS
    say(
        f"[flood] {BURST} requests in a burst: {outcome.request_runs} rotator run, scheduled "
        f"run delayed {max(outcome.schedule_delays):.0f} s (straight to the rotator: "
        f"{direct.request_runs} runs, first scheduled run delayed "
        f"{direct.schedule_delays[0] / HOUR:.1f} h)"
    )


@pytest.mark.parametrize("per_second", [1, 35])
def test_a_day_long_flood_costs_a_run_per_five_minutes_at_most(
    per_second: int, say: Callable[[str], None]
) -> None:
    requests = [n / per_second for n in range(24 * HOUR * per_second)]
    outcome = simulate(wiring(transformed()["Resources"]), requests, hours=24)
    assert outcome.request_runs <= 24 * 12 + 1
    assert max(outcome.schedule_delays) <= RUN_SECONDS
    say(
        f"[flood] {len(requests)} requests over a day: {outcome.request_runs} rotator runs, "
        f"scheduled runs delayed {max(outcome.schedule_delays):.0f} s at most, "
        f"{outcome.versions} refresh credential versions written at a 600 s debounce"
    )
