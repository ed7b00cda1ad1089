"""Issue 29, item 6: the refresh credential secret's version quota, on the model of Secrets
Manager that enforces it as the PutSecretValue reference describes (``simulation.secretsmanager``;
moto does not), with the real rotator. A refused write between a refresh and its store would
lose the rotated refresh token; the version budget (``core.version_budget``) makes a
refusal come before a refresh or not at all, and keeps a flood of forced refreshes within the
quota whatever the requests, the scheduled refreshes going on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from cmstoken.core import version_budget
from cmstoken.core.errors import CredentialLostError, VersionQuotaError
from cmstoken.core.triggers import QUEUED, RotationRequest
from cmstoken.core.version_budget import Writer
from simulation.exploration import SCHEDULED
from simulation.secretsmanager import QUOTA
from simulation.world import HOUR, REFRESH_SECRET, World

FORCED = RotationRequest(forced=True, source=QUEUED)
DAY = 24 * HOUR


@dataclass
class Flood:
    refreshed: int = 0
    skipped_for_budget: int = 0
    quota_refusals: int = 0


def run(world: World, request: RotationRequest, owner: str, flood: Flood) -> None:
    written = len(world.secretsmanager.texts(REFRESH_SECRET))
    result = world.rotator(owner).run(request, deadline=world.clock.now() + 120)
    if result.outcome == "skipped" and "version budget" in str(result.reason):
        flood.skipped_for_budget += 1
    if len(world.secretsmanager.texts(REFRESH_SECRET)) > written and result.outcome == "rotated":
        flood.refreshed += 1


def versions_written(world: World, since: float, until: float) -> int:
    secret = world.secretsmanager.secrets[REFRESH_SECRET]
    return sum(since <= v.created < until for v in (*secret.removed, *secret.versions.values()))


def test_a_two_day_flood_stays_within_the_quota_and_loses_nothing(
    say: Callable[[str], None],
) -> None:
    """A forced run every five minutes (a request through the queue's every window) for two
    days, and the hourly schedule: no write is ever refused, the credential stays usable and
    the service token never expires; forced refreshes stop at the budget and the scheduled
    ones go on."""
    world = World()
    world.seed()
    start, flood = world.clock.now(), Flood()
    for tick in range(2 * DAY // 300):
        world.clock.advance(300)
        run(world, FORCED, f"forced-{tick}", flood)
        if tick % 12 == 0:
            run(world, SCHEDULED, f"scheduled-{tick}", flood)
        assert world.service_document().expires_at > world.clock.now()
    assert world.identity.usable(world.newest_refresh_token())
    first, second = (
        versions_written(world, start + n * DAY, start + (n + 1) * DAY) for n in (0, 1)
    )
    assert max(first, second) <= Writer.OUTSIDE.limit + version_budget.SCHEDULE_DAY
    assert flood.skipped_for_budget > 0  # the budget, not the debounce, stopped the flood
    say(
        f"[quota] a forced run every 5 min for 2 days: {flood.refreshed} refreshes, "
        f"{flood.skipped_for_budget} skipped for the version budget; refresh credential "
        f"versions written: {first} the first day, {second} the second (quota {QUOTA})"
    )


def test_without_the_budget_the_flood_loses_the_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control, and the code before the budget: forced refreshes every ten minutes write two
    versions each until one claims the 100th and its store is refused after the refresh."""
    monkeypatch.setattr(version_budget, "refusal", lambda *args: None)
    world = World()
    world.seed()
    lost = None
    for tick in range(DAY // 300):
        world.clock.advance(600)
        try:
            world.rotator(f"forced-{tick}").run(FORCED, deadline=world.clock.now() + 120)
        except CredentialLostError as exc:
            lost = exc
            break
    assert lost is not None, "the flood never reached the quota"
    assert not world.identity.usable(world.newest_refresh_token())


@pytest.mark.parametrize("forced", [True, False], ids=["forced", "scheduled"])
def test_with_no_room_left_a_refresh_does_not_start(forced: bool) -> None:
    """98 versions in use: a refresh, which may write three, would pass the quota. A forced
    run is skipped and a due one fails before any write; nothing is refreshed."""
    world = World()
    world.seed()
    secret = world.secretsmanager.secrets[REFRESH_SECRET]
    current = world.newest_refresh_token()
    model = world.secretsmanager
    for n in range(QUOTA - 2 - len(secret.versions)):  # another writer's versions
        text = model.current_text(REFRESH_SECRET) or ""
        model.put_secret_value(
            SecretId=REFRESH_SECRET, SecretString=text, ClientRequestToken=f"{n:032d}"
        )
    world.clock.advance(19 * HOUR)  # due, and past the debounce
    before = len(model.texts(REFRESH_SECRET))
    rotator = world.rotator("run")
    if forced:
        result = rotator.run(FORCED, deadline=world.clock.now() + 120)
        assert (result.outcome, "version budget" in str(result.reason)) == ("skipped", True)
    else:
        with pytest.raises(VersionQuotaError, match="of Secrets Manager's 100 that may be"):
            rotator.run(SCHEDULED, deadline=world.clock.now() + 120)
    assert len(model.texts(REFRESH_SECRET)) == before
    assert world.newest_refresh_token() == current
    assert world.identity.usable(current)
