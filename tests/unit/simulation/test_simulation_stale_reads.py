"""Stale reads (an eventually consistent ``GetSecretValue`` answering the value before the
newest), explored exhaustively: one rotator invocation, then another whose every read may answer
the newest or the previous value. Whatever the second one reads, no refresh token is presented
again, the stored one stays usable and the published service token accepted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from cmstoken.core.triggers import RotationRequest
from simulation.scheduler import explore
from simulation.world import HOUR, World

SCHEDULED = RotationRequest(forced=False, source="schedule")


@pytest.mark.parametrize("pause", [0, 200], ids=["lease-held", "lease-expired"])
def test_a_second_invocation_reading_stale_values_never_replays_a_token(
    pause: float, say: Callable[[str], None]
) -> None:
    outcomes: Counter[str] = Counter()
    stale: Counter[int] = Counter()
    bad: list[list[str]] = []

    def run_one(choose: Callable[[int], int]) -> None:
        picks: list[int] = []
        reading = {"stale": False}

        def pick(count: int) -> int:
            if not reading["stale"]:
                return 0  # the first invocation reads consistently
            picks.append(choose(count))
            return picks[-1]

        world = World(stale_reads=1, choose=pick)
        world.seed()
        world.clock.advance(19 * HOUR)
        first = world.rotator("first").run(SCHEDULED, deadline=world.clock.now() + 120)
        assert first.outcome == "rotated"
        world.clock.advance(pause)
        reading["stale"] = True
        try:
            outcome = world.rotator("second").run(SCHEDULED, deadline=world.clock.now() + 120)
            outcomes[outcome.outcome] += 1
        except Exception as exc:
            outcomes[type(exc).__name__] += 1
        stale[sum(picks)] += 1
        reading["stale"] = False
        problems = [f"I1: {t}" for t in world.replayed_refresh_tokens()]
        if not world.identity.usable(world.newest_refresh_token()):
            problems.append("stored refresh token not usable")
        if not world.upstream.service.valid(world.service_document().token):
            problems.append("published token refused")
        if problems:
            bad.append(problems)

    schedules = explore(run_one, limit=5000)
    say(
        f"[simulation] stale reads after a rotation ({pause} s later): {schedules} "
        f"schedules; outcomes {dict(outcomes)}; stale answers per schedule {dict(stale)}"
    )
    assert bad == []
    assert max(stale) >= 2  # schedules with several stale answers were explored
