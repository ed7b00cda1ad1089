"""Sixty simulated days of hourly scheduled runs, on moto's server and the emulator, both over
HTTP: the published token always works, refreshes happen once per token lifetime minus margin,
and the refresh family is never revoked."""

from __future__ import annotations

import pytest

from cmstoken.upstream.service import ServiceClient
from harness import Stack

pytestmark = pytest.mark.integration

HOUR = 3600
DAYS = 60


def test_sixty_days_of_hourly_runs_keep_a_working_token(server_stack: Stack) -> None:
    stack = server_stack
    emulator = stack.emulator
    emulator.config.refresh_absolute_lifetime = 0  # the tenant enforces the idle lifetime only
    stack.seed()
    first_refresh_token = stack.newest_refresh_token()
    service = ServiceClient(emulator.base_url, clock=stack.clock)
    outcomes: dict[str, int] = {}
    for hour in range(1, DAYS * 24 + 1):
        emulator.advance(HOUR)
        result = stack.invoke("rotator", {})
        outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1
        document = stack.service_document()
        assert document.expires_at > stack.clock.now(), f"expired token published at hour {hour}"
        assert service.list_projects(document.token), f"token refused at hour {hour}"
    # A 24 h service token refreshed 6 h before expiry: one refresh every 18 h.
    expected = DAYS * 24 / 18
    assert outcomes.get("rotated", 0) == pytest.approx(expected, abs=2)
    assert outcomes.get("rotated", 0) + outcomes.get("skipped", 0) == DAYS * 24
    assert emulator.counts["refresh"] == outcomes["rotated"]
    newest = stack.newest_refresh_token()
    assert newest != first_refresh_token
    assert not emulator.family_revoked(newest)
    assert emulator.refresh_token_valid(newest)
