"""An operator's re-authorization while a link's is pending (RFC 8628 section 3.5: a poll sooner
than the interval gets ``slow_down``, and the interval grows for every later poll): the
operator's start replaces the link's authorization with a new device code, the link's
background poll stops without polling its code again (before it starts, or between two
polls), the operator's poll never polls a link's code, and the operator's approval is
authorized. On the models of Secrets Manager and the identity provider (``simulation.world``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cmstoken.core.version_budget import PER_START
from simulation.upstream import IdentityProviderModel
from simulation.world import REFRESH_SECRET, SimClock, World

LINK = "0123456789abcdef" * 2  # a link's tag


class HookedClock(SimClock):
    """A clock that runs ``hook`` once, the first time a sleep reaches ``at``."""

    def __init__(self) -> None:
        super().__init__()
        self.at = float("inf")
        self.hook: Callable[[], None] = lambda: None

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.current >= self.at:
            self.at = float("inf")
            self.hook()


@dataclass
class OperatorStart:
    """What the operator's start, run by the hook, met and returned."""

    at: float = 0.0
    versions: int = 0
    result: dict[str, Any] = field(default_factory=dict)


def polls_of(identity: IdentityProviderModel, user_code: str) -> float | None:
    """When the device code of ``user_code`` was last polled (``None``: never)."""
    return identity.user_codes[user_code].last_poll_at


def versions(world: World) -> int:
    return len(world.secretsmanager.secrets[REFRESH_SECRET].history)


def links_start(world: World) -> str:
    started = world.bootstrap("start", via_links=True, link=LINK)
    assert started["status"] == "pending"
    return str(started["user_code"])


def operator_authorizes(world: World, begun: float) -> None:
    """The operator's own code approved and polled: authorized, with no ``slow_down``."""
    pending = world.refresh_document().pending
    assert pending is not None
    assert pending.link is None
    world.identity.approve(pending.user_code)
    assert world.bootstrap("poll")["status"] == "authorized"
    credential = world.refresh_document().credential
    assert credential is not None
    assert credential.authorized_at >= begun
    slowed = {c.user_code: c.interval for c in world.identity.devices.values() if c.interval != 5}
    assert slowed == {}, "a code was polled by two pollers"


def test_an_operators_start_replaces_a_links_authorization_whose_poll_then_stops() -> None:
    world = World()
    world.seed()
    links = links_start(world)
    before = versions(world)
    begun = world.clock.now()
    started = world.bootstrap("start")
    assert started["status"] == "pending"
    assert started["user_code"] != links, "a new device code, not the link's"
    assert "replaces the authorization a link started" in started["message"]
    assert versions(world) == before + PER_START
    pending = world.refresh_document().pending
    assert pending is not None
    assert (pending.user_code, pending.link) == (started["user_code"], None)

    world.clock.advance(6)
    background = world.bootstrap("poll", via_links=True, link=LINK)
    assert background["status"] == "pending_elsewhere"
    assert started["user_code"] not in str(background)
    assert polls_of(world.identity, links) is None, "the link's code was polled"
    assert versions(world) == before + PER_START, "the link's poll wrote"
    operator_authorizes(world, begun)
    assert polls_of(world.identity, links) is None


def test_a_links_poll_in_flight_stops_before_its_next_poll_once_replaced() -> None:
    """The link's background poll is polling when the operator starts: it polls its own code
    no more, writes nothing, and says it was superseded (which the links do not report)."""
    clock = HookedClock()
    world = World(clock=clock)
    world.seed()
    links = links_start(world)
    operator = OperatorStart()

    def operator_starts() -> None:
        operator.at, operator.versions = world.clock.now(), versions(world)
        operator.result = world.bootstrap("start")

    clock.at, clock.hook = world.clock.now() + 12, operator_starts
    background = world.bootstrap("poll", seconds=120, via_links=True, link=LINK)
    assert background["status"] == "superseded"
    assert "nothing failed" in background["message"]
    assert operator.result["status"] == "pending"
    assert operator.result["user_code"] != links
    last = polls_of(world.identity, links)
    assert last is not None, "the link's poll did poll before the operator came"
    assert last < operator.at, "the link's code was polled after it was replaced"
    assert versions(world) == operator.versions + PER_START, "the link's poll wrote"
    assert world.clock.now() < operator.at + 10, "it stopped at its next poll"
    operator_authorizes(world, operator.at)
    assert polls_of(world.identity, links) == last


def test_an_operators_poll_never_polls_a_links_code_nor_a_links_start_an_operators() -> None:
    """A link's pending authorization is polled by its link alone: the operator's poll is
    told to start (which replaces it); a link's start over the operator's gets only that one
    is pending, and an operator's start over the operator's own returns it."""
    world = World()
    world.seed()
    links = links_start(world)
    world.clock.advance(6)
    polled = world.bootstrap("poll")
    assert polled["status"] == "pending_elsewhere"
    assert "run start" in polled["message"]
    assert links not in str(polled)
    assert polls_of(world.identity, links) is None
    started = world.bootstrap("start")
    mine = str(started["user_code"])
    before = versions(world)
    assert world.bootstrap("start", via_links=True, link=LINK)["status"] == "pending_elsewhere"
    again = world.bootstrap("start")
    assert again["user_code"] == mine
    assert "already pending" in again["message"]
    assert versions(world) == before
