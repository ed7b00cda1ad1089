"""The rotator meeting an approved bootstrap poll, explored with faults: the harness of
``simulation.exploration`` (every call a scheduling point, sleep sets, a crash at every point,
a lost answer at every chosen upstream call, a stale read at every read) with a bootstrap actor.

Cases (as in ``test_simulation_bootstrap_schedules``): ``first`` (both secrets empty, the
rotator due because nothing is published), ``reauthorization`` (an active credential, the
approval kept as the candidate until its service token is verified) and ``revoked`` (the
provider revoked the active credential's family: the rotator meets ``invalid_grant``).

After the actors end, the recovery: the operator polls again (when an authorization is still
pending or a candidate is left), then the clock moves past the leases and into the next due
period and a clean rotator runs. ``BootstrapChecker`` checks, after every step, I1, I3, I4, I2
for the family of the stored credential (the newest token of that family is stored, except
inside a window or after a documented loss), the bootstrap's own window (an approval received
is stored, as the credential or the candidate, before anything else), I6 (no write of the
credential refused by the version quota) and I5 at every write of the credential document; at
the end: nothing pending, no candidate, the approval installed unless its loss is documented,
and the stack healthy or a documented loss reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cmstoken.aws.documents import STATUS_ACTIVE, RefreshSecret
from simulation import i5
from simulation.exploration import (
    DEADLINE_SECONDS,
    SCHEDULED,
    Bounds,
    Decide,
    Harness,
    Report,
    Transition,
    search,
)
from simulation.fingerprints import Recovery
from simulation.invariants import InvariantChecker, Step, Violation, label
from simulation.world import HOUR, REFRESH_SECRET

ROTATOR, BOOTSTRAP = "rotator", "bootstrap"
WRITE_CREDENTIAL = "secretsmanager.PutSecretValue:credential"


@dataclass
class BootstrapChecker(InvariantChecker):
    """``InvariantChecker`` with a bootstrap actor (see the module docstring)."""

    approved: str | None = None  # the approval's refresh token, once the provider issued it
    expiries: dict[int, float] = field(default_factory=dict)  # per authorization
    documents: list[str | None] = field(default_factory=list)  # the credential document seen
    polling: bool = False  # the operator's poll (in the recovery) is running
    _minted: int = 0

    def start(self) -> None:
        if self.world.secretsmanager.current_text(self.world.settings.service_token_secret_id):
            super().start()
        self._minted = len(self.world.identity.tokens)
        self.documents = [self.world.secretsmanager.current_text(REFRESH_SECRET)]

    def after(self, step: Step) -> Violation | None:
        self._approval(step)
        return (
            self._i6(step)
            or self._i5(step)
            or self._i1(step)
            or self._window(step)
            or self._i4(step)
            or self._i2(step)
            or self._i3(step)
        )

    def _approval(self, step: Step) -> None:
        """Note the approval's refresh token when the provider issues it: held by the poller
        until stored, or lost with its answer."""
        tokens = self.world.identity.tokens
        minted = list(tokens)[self._minted :]
        self._minted = len(tokens)
        first = [t for t in minted if tokens[t].parent is None]
        if step.action == "upstream.device_token" and first:
            (token,) = first
            self.approved = token
            if step.status is None:
                self.lost[token] = f"the answer to the approved poll (step {step.number}) was lost"
            else:
                self.holding[step.actor] = token

    def _i5(self, step: Step) -> Violation | None:
        text = self.world.secretsmanager.current_text(REFRESH_SECRET)
        before = self.documents[-1]
        if text == before or text is None:
            return None
        self.documents.append(text)
        old = RefreshSecret() if before is None else RefreshSecret.from_json(before)
        bootstrap = step.actor == BOOTSTRAP or (step.actor == "recovery" and self.polling)
        problem = i5.judge(self.world, bootstrap, old, RefreshSecret.from_json(text))
        if problem is None:
            return None
        return Violation("I5", step.number, f"{step.actor}: {problem}")

    def _window(self, step: Step) -> Violation | None:
        token = self.holding.get(step.actor)
        if step.action == "upstream.device_token":
            return None  # the approval that starts the bootstrap's window
        if token is not None:
            document = self.world.refresh_document()
            candidate = document.candidate
            if (
                step.action == WRITE_CREDENTIAL
                and candidate is not None
                and candidate.credential.refresh_token == token
            ):
                del self.holding[step.actor]  # stored as the candidate
                return None
            credential = document.credential
            if (
                credential is not None
                and self._family(credential.refresh_token) is not self._family(token)
                and self._family(credential.refresh_token) is self._family(self.approved)
            ):
                # A new authorization replaced the credential while this actor rotated the
                # old one: the old family is given up by design, its token dropped.
                del self.holding[step.actor]
                return None
        return super()._window(step)

    def _i3(self, step: Step) -> Violation | None:
        if step.verified is not None:
            self.verified.add(step.verified)
        text = self.world.secretsmanager.current_text(self.world.settings.service_token_secret_id)
        if text is None:
            return None
        document = self.world.service_document()
        if document.token not in self.verified:
            return Violation(
                "I3", step.number, f"{label(document.token)} published without verification"
            )
        # A new authorization's token replaces the old one's whatever their expiries; within
        # one authorization the published expiry never moves backwards.
        key = int(document.authorized_at or 0)
        last = self.expiries.get(key, 0.0)
        if document.expires_at < last:
            return Violation(
                "I3",
                step.number,
                f"the published expiry moved backwards by {last - document.expires_at:.0f} s",
            )
        self.expiries[key] = document.expires_at
        return None

    def newest(self) -> str | None:
        """The newest token of the stored credential's family."""
        stored = self.stored()
        family = self._family(stored)
        return None if family is None else family.newest

    def final(self, number: int) -> Violation | None:
        world = self.world
        document = world.refresh_document()
        if document.pending is not None:
            return Violation("I5", number, "an authorization is still pending after a poll")
        if document.candidate is not None:
            return Violation("I5", number, "a candidate is left next to the credential")
        approval_lost = self.approved is None or self.approved in self.lost
        credential = document.credential
        if credential is None:
            if approval_lost:
                return None  # a first bootstrap whose approval was lost: start again
            return Violation("I2", number, "no credential, although the approval was stored")
        if not approval_lost and self._family(credential.refresh_token) is not self._family(
            self.approved
        ):
            return Violation("I5", number, "the approved authorization was not installed")
        family = self._family(credential.refresh_token)
        if family is not None and family.revoked and family is not self._family(self.approved):
            # The provider revoked the credential (the ``revoked`` case) and the approval
            # that would replace it was lost: reauthorization required, as a run must say.
            if credential.status != STATUS_ACTIVE and self.reported:
                return None
            return Violation("I2", number, "a revoked credential, and no run said so")
        published = world.service_document()
        if credential.status == STATUS_ACTIVE and not published.from_authorization(
            credential.authorized_at
        ):
            return Violation("I3", number, "the published token comes from another authorization")
        return super().final(number)

    def _family(self, token: str | None) -> Any:
        issued = self.world.identity.tokens.get(token) if token else None
        return None if issued is None else issued.family


class BootstrapHarness(Harness):
    """``Harness`` with the bootstrap poll as an actor and the operator's poll in recovery.

    With ``upstream_first``, an actor parked at an upstream call takes it before anyone else
    moves (its variants, faults included, are the only options: a persistent set). Sound while
    nobody sleeps: an upstream call touches only its caller's family or device code, or
    exchanges and lists with its caller's tokens, so it commutes with every other actor's step
    but a sleep (which moves the clock it reads). The exploration counts schedules in which
    some actor slept (``slept``), for which this reduction is an approximation.
    """

    checker: BootstrapChecker

    def __init__(
        self,
        decide: Decide,
        bounds: Bounds,
        *,
        upstream_first: bool = False,
    ) -> None:
        super().__init__(lambda options, state: decide(self._persistent(options), state), bounds)
        self.upstream_first = upstream_first

    def _persistent(self, options: list[Transition]) -> list[Transition]:
        if not self.upstream_first:
            return options
        upstream = next((o.actor for o in options if o.action.startswith("upstream.")), None)
        return options if upstream is None else [o for o in options if o.actor == upstream]

    def recover(self, deadline: float) -> None:
        """The operator polls again (when an authorization is still pending or a candidate is
        left), then the rotator's recovery."""
        world = self.world
        document = world.refresh_document()
        if document.pending is not None or document.candidate is not None:
            world.clock.advance(5)
            self.recovering = self.checker.polling = True
            try:
                status = world.bootstrap("poll")["status"]
            except Exception as exc:
                status = type(exc).__name__
            finally:
                self.recovering = self.checker.polling = False
            self._step("recovery", "end", f"the operator's poll ends: {status}")
        super().recover(deadline)


def run_schedule(
    case: str,
    bounds: Bounds,
    decide: Decide,
    *,
    states: set[int] | None = None,
    recoveries: dict[int, Recovery] | None = None,
    upstream_first: bool = False,
) -> BootstrapHarness:
    """One schedule of ``case``: the rotator (the token due) and an approved poll."""
    harness = BootstrapHarness(decide, bounds, upstream_first=upstream_first)
    harness.states = states
    harness.world = world = harness.new_world()  # the setup's calls pass it too (unscheduled)
    if case == "first":
        world.create_secrets()
    else:
        world.seed()
        world.clock.advance(19 * HOUR)  # the service token is due
    if case == "revoked":
        world.identity.tokens[world.newest_refresh_token()].family.revoked = True
    started = world.bootstrap("start")
    world.identity.approve(started["user_code"])
    world.clock.advance(5)  # the first poll's time has come
    checker = BootstrapChecker(world, max_refreshes=2)
    harness.attach(world, checker)
    checker.start()
    deadline = world.clock.now() + DEADLINE_SECONDS
    harness.spawn(ROTATOR, lambda: world.rotator(ROTATOR).run(SCHEDULED, deadline=deadline))
    harness.spawn(
        BOOTSTRAP,
        lambda: world.bootstrap("poll", seconds=DEADLINE_SECONDS),
        lambda result: result["status"] + (" (approved)" if result.get("approved") else ""),
    )
    harness.run()
    if not harness.abandoned and harness.violation is None:
        harness.recover_once(deadline, recoveries)
    return harness


def explore(
    case: str,
    bounds: Bounds,
    *,
    upstream_first: bool = False,
    prune: bool = True,
    recall: bool = True,
) -> Report:
    """Every schedule of ``case`` within ``bounds``; stops at the first counterexample.
    ``prune``: at states explored before (``simulation.search``); ``recall``: a recovery from
    a state met before taken from its record (``Harness.recover_once``)."""
    recoveries: dict[int, Recovery] | None = {} if recall else None
    setup = "both secrets empty" if case == "first" else "the seeded stack, 19 h later"
    return search(
        Report(f"rotator and approved bootstrap poll ({case})", bounds),
        lambda decide, states: run_schedule(
            case,
            bounds,
            decide,
            states=states,
            upstream_first=upstream_first,
            recoveries=recoveries,
        ),
        f"{setup}; a start, approved; the rotator and a poll start",
        prune=prune,
    )
