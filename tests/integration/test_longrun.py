"""Hourly scheduled runs over simulated days, on moto's server and the emulator, both over
HTTP: the published token always works, refreshes happen once per token lifetime minus margin,
and the refresh family is never revoked, though it lives past the tenant's idle lifetime (the
absolute one off). ``make test`` runs 10 days with a 4-day idle lifetime (the family outlives
it 2.5 times over, as 60 days outlive 30: the same refreshes every 18 h, the same checks, about
4 s); ``SIMULATION_BOUNDS=verify`` (``make verify``) runs the 60 days at the emulator's 30-day
idle lifetime (1,440 runs, about 25 s on 2 cores). See docs/how-we-know-it-holds.md."""

from __future__ import annotations

import pytest

from cmstoken.upstream.service import ServiceClient
from harness import Stack
from support import DEEPER

pytestmark = pytest.mark.integration

HOUR = 3600
DAY = 24 * HOUR
# (days, the tenant's idle lifetime in days): None keeps the emulator's default (30 days).
RUN = (60, None) if DEEPER else (10, 4)


def test_hourly_runs_past_the_idle_lifetime_keep_a_working_token(server_stack: Stack) -> None:
    stack = server_stack
    emulator = stack.emulator
    days, idle_days = RUN
    emulator.config.refresh_absolute_lifetime = 0  # the tenant enforces the idle lifetime only
    if idle_days is not None:
        emulator.config.refresh_idle_lifetime = idle_days * DAY
    assert days * DAY >= 2 * emulator.config.refresh_idle_lifetime
    stack.seed()
    first_refresh_token = stack.newest_refresh_token()
    service = ServiceClient(emulator.base_url, clock=stack.clock)
    outcomes: dict[str, int] = {}
    for hour in range(1, days * 24 + 1):
        emulator.advance(HOUR)
        result = stack.invoke("rotator", {})
        outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1
        document = stack.service_document()
        assert document.expires_at > stack.clock.now(), f"expired token published at hour {hour}"
        assert service.list_projects(document.token), f"token refused at hour {hour}"
    # A 24 h service token refreshed 6 h before expiry: one refresh every 18 h.
    expected = days * 24 / 18
    assert outcomes.get("rotated", 0) == pytest.approx(expected, abs=2)
    assert outcomes.get("rotated", 0) + outcomes.get("skipped", 0) == days * 24
    assert emulator.counts["refresh"] == outcomes["rotated"]
    newest = stack.newest_refresh_token()
    assert newest != first_refresh_token
    assert not emulator.family_revoked(newest)
    assert emulator.refresh_token_valid(newest)
