"""One rotator invocation on the simulation's models, with a crash injected before and after every
call it makes, or the answer of each upstream call lost; then a later invocation recovers.

docs/how-rotation-works.md, "What a lost answer costs": with no reuse interval at the provider
(these tests), a rotated refresh token is lost only if the function dies between the moment the
identity provider rotates it and the moment Secrets Manager acknowledges the write of the answer,
or if the answer is lost after the provider acted (the run presents the token again at once and
is refused). Everywhere else the next invocation ends healthy, with no refresh token presented
again; after a loss a run reports reauthorization instead of failing silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cmstoken.core.errors import ReauthorizationRequiredError
from cmstoken.core.triggers import RotationRequest
from cmstoken.rotation.decisions import RotationResult
from simulation.upstream import Loss
from simulation.world import HOUR, World

SCHEDULED = RotationRequest(forced=False, source="schedule")
REFRESH = "upstream.refresh"
STORE_CALL = "secretsmanager.PutSecretValue"


class SimulatedCrash(BaseException):
    """The process dies here (not an ``Exception``: nothing in the product may catch it)."""


class CrashAt:
    """An interceptor that logs every call and crashes the caller once, at call ``index``:
    before the call is sent, or after the service acted (its answer never seen)."""

    def __init__(self, index: int | None = None, *, after: bool = False) -> None:
        self.index, self.after = index, after
        self.calls: list[str] = []

    def __call__(self, service: str, operation: str, act: Callable[[], Any]) -> Any:
        position = len(self.calls)
        self.calls.append(f"{service}.{operation}")
        fire = position == self.index
        if fire:
            self.index = None  # once: the recovery runs undisturbed
        if fire and not self.after:
            raise SimulatedCrash
        answer = act()
        if fire:
            raise SimulatedCrash
        return answer


def due_world(interceptor: Any = None, reuse_interval: float = 0) -> World:
    world = World(interceptor=interceptor or CrashAt(), reuse_interval=reuse_interval)
    world.seed()
    world.clock.advance(19 * HOUR)
    return world


def invoke(world: World, owner: str) -> RotationResult:
    return world.rotator(owner).run(SCHEDULED, deadline=world.clock.now() + 120)


def healthy(world: World) -> bool:
    return (
        world.replayed_refresh_tokens() == []
        and world.identity.usable(world.newest_refresh_token())
        and world.upstream.service.valid(world.service_document().token)
    )


def clean_calls() -> list[str]:
    log = CrashAt()
    world = due_world(log)
    assert invoke(world, "clean").outcome == "rotated"
    return log.calls


def crash_points() -> list[tuple[int, bool]]:
    return [(index, after) for index in range(len(clean_calls())) for after in (False, True)]


def in_window(calls: list[str], index: int, after: bool) -> bool:
    """Whether a crash there falls between the refresh's action and the acknowledged write of
    its answer."""
    refresh = calls.index(REFRESH)
    store = calls.index(STORE_CALL, refresh)
    return (index == refresh and after) or refresh < index < store or (index == store and not after)


def test_the_clean_run_makes_the_calls_the_window_is_defined_by() -> None:
    calls = clean_calls()
    assert calls == [
        "secretsmanager.GetSecretValue",  # the published token: due
        "secretsmanager.GetSecretValue",  # the credential
        "secretsmanager.ListSecretVersionIds",  # its versions: the version budget
        "secretsmanager.PutSecretValue",  # the lease
        REFRESH,
        STORE_CALL,  # the rotated credential, first
        "upstream.exchange",
        "upstream.projects",
        "secretsmanager.PutSecretValue",  # publication
    ]
    assert sum(in_window(calls, i, after) for i, after in crash_points()) == 2


@pytest.mark.parametrize(("index", "after"), crash_points())
def test_a_crash_loses_the_credential_only_inside_the_documented_window(
    index: int, after: bool
) -> None:
    calls = clean_calls()
    world = due_world(CrashAt(index, after=after))
    with pytest.raises(SimulatedCrash):
        invoke(world, "crashed")
    world.clock.advance(200)  # its lease (deadline + 30 s) is over; the token still due
    if in_window(calls, index, after):
        with pytest.raises(ReauthorizationRequiredError):
            invoke(world, "recovery")
        credential = world.refresh_document().credential
        assert credential is not None
        assert credential.status == "reauthorization_required"
        assert world.service_document().credential_status == "reauthorization_required"
    else:
        assert invoke(world, "recovery").outcome in ("rotated", "skipped")
        assert healthy(world)
        refreshes = [e for e in world.upstream.log if e.endpoint == "refresh"]
        assert len(refreshes) == 1  # one refresh across the crash and the recovery


@pytest.mark.parametrize("endpoint", ["exchange", "projects"])
def test_a_lost_service_answer_is_retried_and_the_run_ends_healthy(endpoint: str) -> None:
    world = due_world()
    world.upstream.lose(endpoint, "timeout")
    result = invoke(world, "one")
    assert (result.outcome, result.refreshed) == ("rotated", True)
    assert healthy(world)


@pytest.mark.parametrize("how", ["connection", "timeout"])
def test_a_lost_refresh_answer_is_presented_again_at_once_and_reported(how: Loss) -> None:
    """The provider acted and the answer was lost: no answer can arrive any more, so the run
    presents the token again at once; without a reuse interval the provider refuses it (and
    revokes the family) and the same run reports it; later runs stay quiet."""
    world = due_world()
    world.upstream.lose("refresh", how)
    with pytest.raises(ReauthorizationRequiredError):
        invoke(world, "one")
    assert [(e.endpoint, e.status) for e in world.upstream.log] == [
        ("refresh", None),
        ("refresh", 403),
    ]
    world.clock.advance(200)
    assert invoke(world, "two").outcome == "reauthorization_required"
    assert sum(e.endpoint == "refresh" for e in world.upstream.log) == 2  # no retry storm


def test_a_lost_refresh_answer_recovers_within_a_reuse_interval() -> None:
    world = due_world(reuse_interval=30)
    world.upstream.lose("refresh")
    result = invoke(world, "one")  # presented again at once, inside the interval
    assert (result.outcome, result.refreshed) == ("rotated", True)
    assert healthy(world)
    assert [(e.endpoint, e.status) for e in world.upstream.log][:2] == [
        ("refresh", None),
        ("refresh", 200),
    ]
