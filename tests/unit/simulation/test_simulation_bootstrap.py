"""The real ``Bootstrapper`` on the simulation's models (start, poll), one invocation at a time:
a first bootstrap, a re-authorization over an active credential (the candidate, promoted once
verified), an approval by another identity, a denial, an expiry, and the poll interval kept
across invocations. (Interleaved with a rotator: test_simulation_bootstrap_schedules.py.)"""

from __future__ import annotations

from cmstoken.core.triggers import RotationRequest
from simulation.upstream import SUBJECT
from simulation.world import HOUR, World

SCHEDULED = RotationRequest(forced=False, source="schedule")


def device_polls(world: World) -> list[int | None]:
    return [e.status for e in world.upstream.log if e.endpoint == "device_token"]


def test_a_first_bootstrap_authorizes_the_stack_and_the_rotator_takes_over() -> None:
    world = World()
    world.create_secrets()
    started = world.bootstrap("start")
    assert started["status"] == "pending"
    assert started["user_code"] == world.pending_user_code()
    assert world.identity.pending_user_codes() == [started["user_code"]]
    assert world.bootstrap("poll", max_wait_seconds=12)["status"] == "pending"
    world.identity.approve(started["user_code"])
    result = world.bootstrap("poll")
    assert result["status"] == "authorized", result
    document = world.refresh_document()
    assert document.pending is None
    assert document.candidate is None
    credential = document.credential
    assert credential is not None
    assert credential.subject_sha256 is not None
    assert world.identity.usable(credential.refresh_token)
    assert world.upstream.service.valid(world.service_document().token)
    assert 429 not in device_polls(world)  # the interval was kept, across invocations too
    assert world.bootstrap("status")["credential"]["status"] == "active"

    world.clock.advance(19 * HOUR)
    rotated = world.rotator("later").run(SCHEDULED, deadline=world.clock.now() + 120)
    assert rotated.outcome == "rotated"
    assert world.identity.usable(world.newest_refresh_token())
    assert world.replayed_refresh_tokens() == []


def test_a_reauthorization_is_kept_as_the_candidate_and_promoted_once_verified() -> None:
    world = World()
    world.seed()
    old = world.newest_refresh_token()
    before = world.refresh_document().credential
    started = world.bootstrap("start")
    assert world.refresh_document().credential == before  # an active credential is not touched
    world.identity.approve(started["user_code"], subject=SUBJECT)
    result = world.bootstrap("poll")
    assert result["status"] == "authorized", result
    document = world.refresh_document()
    assert document.candidate is None
    assert document.pending is None
    new = world.newest_refresh_token()
    assert new != old
    assert world.identity.usable(new)
    assert world.identity.tokens[new].parent is None  # a new family, by the device flow
    assert world.upstream.service.valid(world.service_document().token)
    assert [e.endpoint for e in world.upstream.log].count("refresh") == 0


def test_an_approval_by_another_identity_changes_nothing() -> None:
    world = World()
    world.seed()
    before = world.refresh_document().credential
    published = world.service_document().token
    world.identity.approve(world.bootstrap("start")["user_code"], subject="auth0|someone-else")
    result = world.bootstrap("poll")
    assert result["status"] == "failed"
    assert "different identity" in result["message"]
    document = world.refresh_document()
    assert document.credential == before
    assert document.pending is None
    assert document.candidate is None
    assert world.service_document().token == published


def test_a_denied_or_expired_authorization_is_forgotten() -> None:
    world = World()
    world.create_secrets()
    world.identity.deny(world.bootstrap("start")["user_code"])
    assert world.bootstrap("poll")["status"] == "denied"
    assert world.refresh_document().pending is None
    world.bootstrap("start")
    world.clock.advance(world.identity.device_code_lifetime)
    assert world.bootstrap("poll")["status"] == "expired"
    assert world.refresh_document().pending is None
    assert world.bootstrap("poll")["status"] == "none"
