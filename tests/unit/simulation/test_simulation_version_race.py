"""Issue 36, item 2: no quota refusal between a refresh and its store, whatever else writes
meanwhile. The real rotator refreshes while the real bootstrap, through an operator and through
the links' alias, writes the same secret during the refresh call, on the model of Secrets
Manager that enforces its quota of versions as the PutSecretValue reference describes ("it
does not remove versions created less than 24 hours ago"; moto does not).

For every count of versions already in use near the quota and every mix of concurrent writers,
the outcome is one of two: the refresh does not start (nothing spent), or its rotated refresh
token is stored. Before the one budget for every writer (``core.version_budget``), the
rotator alone counted, once, and a link's start and a refused approval during its refresh were
enough to refuse its store (the control below)."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest

from cmstoken.aws import vault
from cmstoken.core import version_budget
from cmstoken.core.errors import CmsTokenError, CredentialLostError, VersionQuotaError
from simulation.exploration import SCHEDULED
from simulation.secretsmanager import QUOTA
from simulation.world import HOUR, REFRESH_SECRET, World

LINK = "0123456789abcdef0123456789abcdef"
FOREIGN = "someone-else"

# What may write during the refresh call: a start, then its poll meeting an approval (by the
# stack's identity, or a foreign one, which the bootstrap refuses after storing nothing).
Writer = Callable[[World], None]


def link_start(world: World) -> None:
    world.bootstrap("start", via_links=True, link=LINK)


def operator_start(world: World) -> None:
    world.bootstrap("start")


def approved_poll(subject: str | None, *, via_links: bool) -> Writer:
    def poll(world: World) -> None:
        codes = world.identity.pending_user_codes()
        if codes:
            world.identity.approve(codes[-1], subject)
        fields = {"link": LINK} if via_links else {}
        world.bootstrap("poll", seconds=30, via_links=via_links, **fields)

    return poll


WRITERS: dict[str, list[Writer]] = {
    "a link's start": [link_start],
    "a link's start and a foreign approval": [
        link_start,
        approved_poll(FOREIGN, via_links=True),
    ],
    "an operator's start": [operator_start],
    "an operator's start and its approval": [
        operator_start,
        approved_poll(None, via_links=False),
    ],
    "an operator's start and a foreign approval": [
        operator_start,
        approved_poll(FOREIGN, via_links=False),
    ],
}


def fill(world: World, versions: int) -> None:
    """Another writer's versions, until ``versions`` are in use."""
    model = world.secretsmanager
    secret = model.secrets[REFRESH_SECRET]
    for n in range(versions - len(secret.versions)):
        text = model.current_text(REFRESH_SECRET) or ""
        model.put_secret_value(
            SecretId=REFRESH_SECRET, SecretString=text, ClientRequestToken=f"{n:032d}"
        )


def refresh_with_writers(in_use: int, writers: list[Writer]) -> tuple[str, World]:
    """A due scheduled refresh with ``in_use`` versions in use, the ``writers`` acting during
    its refresh call; how it ended (``not started``, ``stored``, or the error's name)."""
    world = World()
    world.seed()
    world.clock.advance(19 * HOUR)  # due, past the debounce
    fill(world, in_use)
    busy = [False]
    inner = world.upstream.interceptor

    def during_refresh(service: str, operation: str, act: Callable[[], Any]) -> Any:
        if (service, operation) == ("upstream", "refresh") and not busy[0]:
            busy[0] = True
            for writer in writers:
                with contextlib.suppress(CmsTokenError):  # refused, or failed
                    writer(world)
        return inner(service, operation, act)

    world.upstream.interceptor = during_refresh
    spent = world.newest_refresh_token()
    try:
        world.rotator("scheduled").run(SCHEDULED, deadline=world.clock.now() + 120)
    except VersionQuotaError:
        assert world.newest_refresh_token() == spent
        assert world.identity.usable(spent), "a refresh was spent before the refusal"
        return "not started", world
    except CredentialLostError:
        return "lost", world
    stored = world.newest_refresh_token()
    assert stored != spent
    assert world.identity.usable(stored)
    return "stored", world


@pytest.mark.parametrize("mix", WRITERS)
def test_no_write_during_a_refresh_can_refuse_its_store(mix: str) -> None:
    outcomes = {}
    for in_use in range(80, QUOTA + 1):
        outcome, world = refresh_with_writers(in_use, WRITERS[mix])
        assert outcome in ("not started", "stored"), (in_use, outcome)
        assert len(world.secretsmanager.secrets[REFRESH_SECRET].versions) <= QUOTA
        outcomes[in_use] = outcome
    assert "stored" in outcomes.values()
    assert "not started" in outcomes.values()


def test_before_the_one_budget_a_links_start_and_a_refused_approval_lose_the_credential(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: the code before (only the refresh counted, against the whole quota; the
    bootstrap wrote without counting) loses the rotated refresh token at 97 versions."""

    def rotator_only(
        self: vault.CredentialVault, checked: vault.Check, writes: int, deadline: float
    ) -> None:
        if checked.what == "a refresh" and len(self.refresh_versions(deadline)) + writes > QUOTA:
            raise VersionQuotaError("no room")

    monkeypatch.setattr(vault.CredentialVault, "room", rotator_only)
    found = {
        in_use: refresh_with_writers(in_use, WRITERS["a link's start and a foreign approval"])[0]
        for in_use in range(94, 98)
    }
    assert "lost" in found.values(), found


def test_every_mix_of_two_writers_keeps_the_store() -> None:
    """Two of the mixes at once, at the counts where a refresh may still start."""
    for first, second in itertools.combinations(WRITERS, 2):
        for in_use in range(88, 96):
            outcome, _ = refresh_with_writers(in_use, WRITERS[first] + WRITERS[second])
            assert outcome in ("not started", "stored"), (first, second, in_use, outcome)


def poll_counted_before_the_refresh(in_use: int, *, via_links: bool, approve: bool) -> str:
    """A poll counts its room, then waits for the user; the rotator counts, claims and sends
    its refresh; the user's answer arrives then (an approval, or a denial after which an
    operator starts again), and the bootstrap writes; then the refresh's answer comes back.
    The two run on threads taking turns (one at a time), so the order is exactly this one."""
    world = World()
    world.seed()
    world.clock.advance(19 * HOUR)
    if via_links:
        link_start(world)
    else:
        operator_start(world)
    fill(world, in_use)
    waiting, at_refresh, polled = threading.Event(), threading.Event(), threading.Event()
    inner = world.upstream.interceptor

    def turns(service: str, operation: str, act: Callable[[], Any]) -> Any:
        if (service, operation) == ("upstream", "device_token") and not at_refresh.is_set():
            waiting.set()  # counted, now at the provider: the rotator's turn
            at_refresh.wait(30)
            for code in world.identity.pending_user_codes()[-1:]:
                (world.identity.approve if approve else world.identity.deny)(code)
        if (service, operation) == ("upstream", "refresh"):
            at_refresh.set()
            polled.wait(30)
        return inner(service, operation, act)

    world.upstream.interceptor = turns
    fields = {"link": LINK} if via_links else {}

    def poll() -> None:
        try:
            with contextlib.suppress(CmsTokenError):
                world.bootstrap("poll", seconds=60, via_links=via_links, **fields)
            if not approve:
                with contextlib.suppress(CmsTokenError):
                    operator_start(world)
        finally:
            waiting.set()
            at_refresh.set()
            polled.set()

    poller = threading.Thread(target=poll)
    poller.start()
    waiting.wait(30)  # the rotator starts once the poll has counted (not beside its count)
    try:
        world.rotator("scheduled").run(SCHEDULED, deadline=world.clock.now() + 120)
    except VersionQuotaError:
        return "not started"
    except CredentialLostError:
        return "lost"
    finally:
        at_refresh.set()
        poller.join(30)
    return "stored"


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied-then-started"])
@pytest.mark.parametrize("via_links", [False, True], ids=["operator", "link"])
def test_a_poll_counted_before_a_refresh_and_writing_during_it_leaves_room_for_its_store(
    via_links: bool, approve: bool
) -> None:
    """The poll and the refresh each counted the same versions; what the bootstrap writes
    during the refresh (an approval stored and promoted; or the denied authorization
    forgotten and a new one started) leaves room for the refresh's store: the 5 versions kept
    for writes that follow a spend."""
    found = {
        in_use: poll_counted_before_the_refresh(in_use, via_links=via_links, approve=approve)
        for in_use in range(30, QUOTA - 1)
    }
    assert set(found.values()) <= {"stored", "not started"}, found
    assert "stored" in found.values()


def start_overtaken(in_use: int, *, via_links: bool) -> str:
    """A start with ``in_use`` versions in use, another writer adding one while the start asks
    for its device code; ``refused`` (it wrote nothing, nothing is pending), ``started``, or
    ``not started`` (refused by its first count, before it asked)."""
    world = World()
    world.seed()
    fill(world, in_use)
    inner = world.upstream.interceptor
    overtaken = [False]

    def during_device_code(service: str, operation: str, act: Callable[[], Any]) -> Any:
        if (service, operation) == ("upstream", "device_code") and not overtaken[0]:
            overtaken[0] = True
            model = world.secretsmanager
            model.put_secret_value(
                SecretId=REFRESH_SECRET,
                SecretString=model.current_text(REFRESH_SECRET) or "",
                ClientRequestToken="another-writer-" + "0" * 17,
            )
        return inner(service, operation, act)

    world.upstream.interceptor = during_device_code
    fields: dict[str, Any] = {"link": LINK} if via_links else {}
    with contextlib.suppress(VersionQuotaError):
        world.bootstrap("start", via_links=via_links, **fields)
    if not overtaken[0]:
        return "not started"
    versions = len(world.secretsmanager.secrets[REFRESH_SECRET].versions)
    pending = world.refresh_document().pending is not None
    return "refused" if versions == in_use + 1 and not pending else "started"


@pytest.mark.parametrize("via_links", [False, True], ids=["operator", "link"])
def test_a_start_whose_count_another_write_overtook_is_counted_again_at_its_write(
    via_links: bool,
) -> None:
    """A start counts its room, then asks the identity provider for a device code; another
    writer adds a version meanwhile. The start counts again at its write: at the count where
    that version took the last room, it is refused and writes nothing; no start writes past
    what its count allowed."""
    below = version_budget.Writer.OUTSIDE.limit - 10  # from under the lower limit
    found = {n: start_overtaken(n, via_links=via_links) for n in range(below, QUOTA - 1)}
    assert "started" in found.values()
    assert "refused" in found.values()
    first = min(n for n, outcome in found.items() if outcome != "started")
    assert all(outcome != "started" for n, outcome in found.items() if n >= first), found
