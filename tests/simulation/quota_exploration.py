"""The bootstrap as a concurrent writer near the version quota, explored: a rotation (scheduled,
the token due; or forced, past the debounce) and an approved poll of a re-authorization (the
operator's, or a link's through the bootstrap's links alias, as a link's background poll calls
it) on a refresh credential secret whose versions in use are seeded at a level where the
writers' version budgets decide (``core.version_budget``), on the model of Secrets Manager that
enforces its quota ("Secrets Manager removes outdated versions when there are more than 100, but
it does not remove versions created less than 24 hours ago", PutSecretValue, API Reference; a
write past it is refused with ``LimitExceededException``).

The harness of ``simulation.bootstrap_exploration`` (every call a scheduling point, sleep sets,
an actor at an upstream call first), with each count of the credential's versions
(``ListSecretVersionIds``) a scheduling point too, where the other scenarios take
``exploration.counted``'s shortcut: so the interleavings of counts and writes are explored. The
checks: I6 (``simulation.invariants``: no write of the credential refused by the quota, above
all no store after a spend) with I1-I5 and the bootstrap's window (``BootstrapChecker``).

After the actors, the recovery: the poller (the operator, or the link) polls again when an
authorization is still pending or a candidate is left, once more a day later if the version
budget refused that poll (the seeded versions have aged out; the code has expired by then),
then a clean rotator, a day later if the budget would refuse it (as it refuses the schedule's
runs until then).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cmstoken.core import version_budget
from cmstoken.core.errors import VersionQuotaError
from cmstoken.core.triggers import RotationRequest
from simulation.bootstrap_exploration import BOOTSTRAP, ROTATOR, BootstrapChecker, BootstrapHarness
from simulation.exploration import (
    DEADLINE_SECONDS,
    FORCED,
    SCHEDULED,
    Bounds,
    Decide,
    Harness,
    Report,
    search,
)
from simulation.fingerprints import Recovery
from simulation.invariants import QUOTA_REFUSED
from simulation.secretsmanager import DAY, QUOTA
from simulation.step_texts import error_code
from simulation.world import HOUR, REFRESH_SECRET, World

LINK = "0123456789abcdef0123456789abcdef"  # the tag of the link that started the authorization
LINK_POLL_SECONDS = 60.0  # a link's background poll (``LinksWorld.poll_and_report``)
COUNT = "secretsmanager.ListSecretVersionIds:credential"
WRITE = "secretsmanager.PutSecretValue:credential"

# The rotations: the request and how long after the seeded state it comes.
ROTATIONS: dict[str, tuple[RotationRequest, float]] = {
    "scheduled": (SCHEDULED, 19 * HOUR),  # the service token due
    "forced": (FORCED, 1 * HOUR),  # past the debounce
}
POLLERS = ("operator", "link")


def _outside() -> int:
    return version_budget.Writer.OUTSIDE.limit - version_budget.PER_REFRESH


def _inside() -> int:
    return version_budget.Writer.INSIDE.limit - version_budget.PER_REFRESH


# Versions in use when the actors start, read from the budget when a schedule starts (a broken
# budget moves them with it): the last count at which an outside caller's refresh or poll may
# start (a forced refresh, a link's poll); the last at which the schedule's refresh or an
# operator's poll may; one short of Secrets Manager's quota.
LEVELS: dict[str, Callable[[], int]] = {
    "outside": _outside,
    "inside": _inside,
    "quota": lambda: QUOTA - 1,
}


@dataclass(frozen=True)
class QuotaScenario:
    rotation: str  # of ROTATIONS
    poller: str  # of POLLERS
    level: str  # of LEVELS

    @property
    def name(self) -> str:
        who = "an operator's" if self.poller == "operator" else "a link's"
        return (
            f"{self.rotation} rotation and {who} approved poll, "
            f"versions at the {self.level} edge ({LEVELS[self.level]()} in use)"
        )

    def label(self) -> str:
        """A short name, for test ids."""
        return f"{self.rotation}-{self.poller}-{self.level}"


SCENARIOS = tuple(
    QuotaScenario(rotation, poller, level)
    for level in LEVELS
    for rotation in ROTATIONS
    for poller in POLLERS
)


class QuotaHarness(BootstrapHarness):
    """``BootstrapHarness`` with the counts of the credential's versions as scheduling points,
    recorded with the versions in use; a write the quota refuses recorded as such."""

    scheduled_counts = True
    via_links = False  # the poller is a link's (through the links alias), not the operator's

    def _record(
        self,
        name: str,
        action: str,
        fault: str,
        seconds: float,
        answer: Any,
        error: Exception | None,
        before: str | None,
        log_size: int,
    ) -> None:
        quota = error is not None and error_code(error) == QUOTA_REFUSED
        if action != COUNT and not (action == WRITE and quota):
            super()._record(name, action, fault, seconds, answer, error, before, log_size)
            return
        now = self.world.clock.now()
        when = f"t+{now - self.start_at:.1f}s"
        tag = " [BUSY]" if fault == "busy" else ""
        versions = len(self.world.secretsmanager.secrets[REFRESH_SECRET].versions)
        if action == WRITE:
            text = f"{name} writes credential{tag}: REFUSED ({QUOTA_REFUSED}, {versions} versions)"
            self._step(name, action, f"{when} {text}", refused=QUOTA_REFUSED)
            return
        if error is not None:
            text = f"{name} counts the credential's versions{tag}: REFUSED ({error_code(error)})"
        else:
            young = sum(
                1 for v in answer["Versions"] if v["VersionStages"] or now - _epoch(v) < DAY
            )
            text = f"{name} counts the credential's versions: {young} in use"
        self._step(name, action, f"{when} {text}")

    def recover(self, deadline: float) -> None:
        """The poller polls again (when an authorization is still pending or a candidate is
        left), once more a day later if the budget refused it; a day later still if the budget
        refuses the schedule's refresh; then the rotator's recovery."""
        for wait in (5.0, DAY):
            document = self.world.refresh_document()
            if document.pending is None and document.candidate is None:
                break
            self.world.clock.advance(wait)
            if self._poll_again() != "version_budget":
                break
        if self._refresh_refused():  # the schedule's runs fail until versions age out
            self.world.clock.advance(DAY)
        Harness.recover(self, deadline)

    def _refresh_refused(self) -> bool:
        """Whether the budget refuses the schedule's refresh now (read off the model)."""
        secret = self.world.secretsmanager.secrets[REFRESH_SECRET]
        versions = [(v.created, bool(v.stages)) for v in secret.versions.values()]
        now, writer = self.world.clock.now(), version_budget.Writer.INSIDE
        return (
            version_budget.refusal(versions, now, writer, version_budget.PER_REFRESH, "")
            is not None
        )

    def _poll_again(self) -> str:
        """The operator's poll, or the link's, in the recovery; its status (``version_budget``:
        refused)."""
        fields: dict[str, Any] = {"link": LINK} if self.via_links else {}
        self.recovering = self.checker.polling = True
        try:
            result = self.world.bootstrap("poll", via_links=self.via_links, **fields)
            status = str(result.get("reason") or result["status"])
        except VersionQuotaError:
            status = "version_budget"
        except Exception as exc:
            status = type(exc).__name__
        finally:
            self.recovering = self.checker.polling = False
        who = "the link's" if self.via_links else "the operator's"
        self._step("recovery", "end", f"{who} poll ends: {status}")
        return status


def fill(world: World, in_use: int) -> None:
    """Versions written now, each as the successor of the one before (as the stack writes), the
    document unchanged, until ``in_use`` versions are in use (not through the scheduler)."""
    while len(world.secretsmanager.secrets[REFRESH_SECRET].versions) < in_use:
        current = world.store.read(REFRESH_SECRET)
        assert current.text is not None
        world.store.write(REFRESH_SECRET, current.text, replacing=current.version_id)


def run_schedule(
    scenario: QuotaScenario,
    bounds: Bounds,
    decide: Decide,
    *,
    states: set[int] | None = None,
    recoveries: dict[int, Recovery] | None = None,
) -> QuotaHarness:
    """One schedule: the seeded stack, a re-authorization started (by the operator, or a link)
    and approved, the versions filled to the scenario's level; the rotation and the poll."""
    harness = QuotaHarness(decide, bounds, upstream_first=True)
    harness.states = states
    harness.world = world = harness.new_world()  # the setup's calls pass it too (unscheduled)
    world.seed()
    request, advance = ROTATIONS[scenario.rotation]
    world.clock.advance(advance)
    via_links = harness.via_links = scenario.poller == "link"
    fields: dict[str, Any] = {"link": LINK} if via_links else {}
    started = world.bootstrap("start", via_links=via_links, **fields)
    world.identity.approve(started["user_code"])
    fill(world, LEVELS[scenario.level]())
    world.clock.advance(5)  # the first poll's time has come
    checker = BootstrapChecker(world, max_refreshes=1)
    harness.attach(world, checker)
    checker.start()
    deadline = world.clock.now() + DEADLINE_SECONDS
    harness.spawn(
        ROTATOR, lambda: world.rotator(ROTATOR).run(request, deadline=deadline), _rotation_outcome
    )
    seconds = LINK_POLL_SECONDS if via_links else DEADLINE_SECONDS
    harness.spawn(
        BOOTSTRAP,
        lambda: world.bootstrap("poll", seconds=seconds, via_links=via_links, **fields),
        _poll_outcome,
    )
    harness.run()
    if not harness.abandoned and harness.violation is None:
        harness.recover_once(deadline, recoveries)
    return harness


def explore(
    scenario: QuotaScenario, bounds: Bounds, *, prune: bool = True, recall: bool = True
) -> Report:
    """Every schedule of ``scenario`` within ``bounds``; stops at the first counterexample.
    ``prune``: at states explored before (``simulation.search``); ``recall``: a recovery from
    a state met before taken from its record (``Harness.recover_once``)."""
    recoveries: dict[int, Recovery] | None = {} if recall else None
    who = "the operator" if scenario.poller == "operator" else f"link {LINK[:8]}"
    setup = (
        f"the seeded stack, {ROTATIONS[scenario.rotation][1] / HOUR:.0f} h later; a start by "
        f"{who}, approved; {LEVELS[scenario.level]()} versions in use; the {scenario.rotation} "
        "rotator and the poll start"
    )
    return search(
        Report(scenario.name, bounds),
        lambda decide, states: run_schedule(
            scenario, bounds, decide, states=states, recoveries=recoveries
        ),
        setup,
        prune=prune,
    )


def _rotation_outcome(result: Any) -> str:
    """A rotation's outcome, saying when the version budget skipped it."""
    skipped = result.outcome == "skipped" and "version budget" in str(result.reason)
    budget = ", version budget" if skipped else ""
    return f"{result.outcome}{budget}" + (" (refreshed)" if result.refreshed else "")


def _poll_outcome(result: dict[str, Any]) -> str:
    """A poll's outcome, saying when the version budget refused it."""
    budget = ", version budget" if result.get("reason") == "version_budget" else ""
    return str(result["status"]) + budget + (" (approved)" if result.get("approved") else "")


def _epoch(version: dict[str, Any]) -> float:
    return float(version["CreatedDate"].timestamp())
