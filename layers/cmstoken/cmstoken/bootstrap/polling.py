"""The ``poll`` action: the pending authorization polled until it ends or the invocation must
stop, resuming the schedule a previous invocation left, so the interval is respected across
invocations too; the schedule is stored only when the next invocation could not otherwise keep
to it (at most one write while nothing is approved). An approved authorization is stored, then
finished (``finishing``); one that an earlier invocation stored but could not finish is
finished first.

One poller per device code: a link's poll polls only what that link started, an operator's
only what no link started, and a link's poll reads, before each poll, whether its code is still
the stored one (an operator's start replaces a link's: ``states.takes_over``); it stops, writing
nothing, once it is not."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cmstoken.aws.documents import CandidateCredential, PendingAuthorization
from cmstoken.aws.vault import Check, CredentialVault, Snapshot
from cmstoken.bootstrap import results
from cmstoken.bootstrap.approval import approval_of, store_approval
from cmstoken.bootstrap.finishing import Finisher
from cmstoken.bootstrap.states import (
    Action,
    Event,
    Stage,
    Transition,
    poll_event,
    poll_stage,
    replace_pending,
    step,
)
from cmstoken.core.clock import Clock
from cmstoken.core.errors import CmsTokenError
from cmstoken.core.settings import Settings
from cmstoken.core.version_budget import PER_POLL, Writer
from cmstoken.upstream.service import ServiceClient

if TYPE_CHECKING:
    from cmstoken.upstream.device_flow import PollSchedule
    from cmstoken.upstream.models import TokenAnswer

# A poll stops this long before the invocation's deadline (SPEC: at most 2 s before it).
POLL_DEADLINE_MARGIN = 2.0


class Polling:
    """Runs one ``poll`` invocation."""

    def __init__(
        self,
        settings: Settings,
        service: ServiceClient,
        vault: CredentialVault,
        finisher: Finisher,
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.service = service
        self.vault = vault
        self.finisher = finisher
        self.clock = clock

    def poll(
        self,
        *,
        stop_at: float,
        deadline: float,
        allow_new_identity: bool = False,
        link: str | None = None,
    ) -> dict[str, Any]:
        """Finish a candidate, else poll the pending authorization until it ends or
        ``stop_at``, else publish a new credential's token an earlier poll had no time for.
        A link's poll (``link``: its tag) polls only what that link started, an operator's
        only what no link started; finishing what is already approved is the same whoever
        asks."""
        snapshot = self.vault.read_refresh(deadline)
        secret = snapshot.secret
        stage = poll_stage(secret, self.clock.now())
        if stage is Stage.CANDIDATE:
            assert secret.candidate is not None
            return self.finisher.finish(snapshot, secret.candidate, deadline)
        if stage is Stage.PENDING:
            assert secret.pending is not None
            if link is not None and secret.pending.link != link:
                return results.pending_elsewhere(secret.pending)
            if link is None and secret.pending.link is not None:
                return results.polled_by_link(secret.pending)
            checked = (
                Check(Writer.OUTSIDE, "a link's poll") if link else Check(Writer.INSIDE, "a poll")
            )
            # Before the device code is presented: its answer's writes must fit.
            self.vault.room(checked, PER_POLL, deadline)
            watch = None if link is None else _Watch(self.vault, secret.pending, deadline)
            return self._poll(
                snapshot, secret.pending, stop_at, deadline, allow_new_identity, checked, watch
            )
        if stage is Stage.CREDENTIAL:
            return self.finisher.resume(secret, deadline)
        return results.ending(step(Stage.NONE, Event.POLL))

    def _poll(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        stop_at: float,
        deadline: float,
        allow_new_identity: bool,
        checked: Check,
        watch: _Watch | None,
    ) -> dict[str, Any]:
        """Poll the token endpoint on the stored schedule until an answer ends the wait or
        ``watch`` (a link's poll) sees the code replaced; the schedule's and the forgetting's
        writes are counted as ``checked``."""
        # The device flow is loaded by start and poll only (not by a status query's cold start).
        from cmstoken.upstream.device_flow import DevicePoller, PollSchedule
        from cmstoken.upstream.identity import IdentityClient

        identity = IdentityClient(
            pending.issuer_url, transport=self.service.transport, clock=self.clock
        )
        schedule = PollSchedule(
            interval=pending.interval,
            next_poll_at=pending.next_poll_at,
            expires_at=pending.expires_at,
        )
        poller = DevicePoller(
            identity,
            client_id=pending.client_id,
            device_code=pending.device_code,
            schedule=schedule,
            clock=self.clock,
            proceed=watch,
        )
        stop_at = min(stop_at, deadline - POLL_DEADLINE_MARGIN)
        try:
            tokens = poller.run(stop_at=stop_at)
        except CmsTokenError as exc:
            transition = step(Stage.PENDING, poll_event(exc))
            self._keep(transition, snapshot, pending, schedule, None, deadline, checked)
            return results.ending(transition, error=exc)
        if tokens is None and watch is not None and watch.replaced:
            return results.ending(step(Stage.PENDING, Event.SUPERSEDED))  # nothing to write
        if tokens is None:
            still = step(Stage.PENDING, Event.STILL_PENDING)
            self._keep(still, snapshot, pending, schedule, stop_at, deadline, checked)
            return results.pending(pending, "not approved yet: poll again")
        allowed = allow_new_identity or pending.allow_new_identity
        return self._approved(snapshot, pending, tokens, deadline, allowed)

    def _approved(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        tokens: TokenAnswer,
        deadline: float,
        allow_new_identity: bool,
    ) -> dict[str, Any]:
        """Store the approved credential first, then finish it if time allows."""
        reauthorize_by = self.settings.reauthorize_by(tokens.received_at)
        approval = approval_of(
            tokens, pending, reauthorize_by, allow_new_identity=allow_new_identity
        )
        move, stored = store_approval(self.vault, snapshot, approval, deadline)
        transition = move.transition
        if transition.next is Stage.REFUSED:
            return results.ending(
                transition, reason=move.reason, problems="; ".join(tokens.problems)
            )
        if transition.next is Stage.CANDIDATE:
            assert stored is not None  # a write that decided is a write that happened
            assert approval.raw_access_token is not None  # a candidate comes with its token
            candidate = CandidateCredential(approval.credential, approval.raw_access_token)
            return self.finisher.finish(stored, candidate, deadline, just_approved=True)
        return self.finisher.publish(
            approval.credential, approval.raw_access_token, deadline, tokens.problems
        )

    def _keep(
        self,
        transition: Transition,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        schedule: PollSchedule,
        stop_at: float | None,
        deadline: float,
        checked: Check,
    ) -> None:
        """Write what a poll's answer asks: forget the pending authorization (only that one; a
        newer start stays), or keep its schedule for the next invocation."""
        if transition.action is Action.FORGET_PENDING:
            self._replace(snapshot, pending, None, deadline, checked)
        elif transition.action is Action.KEEP_SCHEDULE:
            self._settle(snapshot, pending, schedule, stop_at, deadline, checked)

    def _settle(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        schedule: PollSchedule,
        stop_at: float | None,
        deadline: float,
        checked: Check,
    ) -> None:
        """Make sure the next invocation keeps to the interval, writing only when it must.

        Nothing to do when the stored schedule already holds the next poll back far enough.
        Otherwise, when the next poll's time comes before this invocation must end (2 s before
        the deadline, and at most one interval past ``stop_at``, the caller's wish; ``None``:
        do not wait), wait for it: the next invocation starts later and may poll at once. Else
        store the schedule (one write).
        """
        if schedule.interval == pending.interval:
            if schedule.next_poll_at <= pending.next_poll_at:
                return
            if stop_at is not None and schedule.next_poll_at <= min(
                deadline - POLL_DEADLINE_MARGIN, stop_at + schedule.interval
            ):
                self.clock.sleep(schedule.next_poll_at - self.clock.now())
                return
        updated = replace(pending, interval=schedule.interval, next_poll_at=schedule.next_poll_at)
        self._replace(snapshot, pending, updated, deadline, checked)

    def _replace(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        replacement: PendingAuthorization | None,
        deadline: float,
        checked: Check,
    ) -> None:
        """Swap ``pending`` for ``replacement`` unless another start replaced it meanwhile."""
        self.vault.update_refresh(
            snapshot,
            lambda document: replace_pending(document, pending, replacement),
            deadline,
            checked=checked,
        )


class _Watch:
    """Asked by a link's poll before each poll of its code: whether ``pending`` is still the
    stored authorization (``replaced`` once it is not). A read that fails lets the poll go on:
    its writes check the stored code anyway."""

    def __init__(self, vault: CredentialVault, pending: PendingAuthorization, deadline: float):
        self.vault = vault
        self.device_code = pending.device_code
        self.deadline = deadline
        self.replaced = False

    def __call__(self) -> bool:
        try:
            stored = self.vault.read_refresh(self.deadline).secret.pending
        except CmsTokenError:
            return True
        self.replaced = stored is None or stored.device_code != self.device_code
        return not self.replaced
