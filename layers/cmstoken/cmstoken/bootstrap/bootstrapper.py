"""The one-time device authorization, run inside AWS (SPEC section 3, bootstrap function).

``start`` asks for a device code and keeps the pending authorization in the refresh credential
secret, next to (never over) an active credential; one that meets a live pending authorization
returns it, except an operator's over one a link started, which it replaces (that link's poll
stops: ``states.takes_over``). ``poll`` (``polling``) polls it until 2 s before the
invocation's deadline and stores the approval at once (persist-first, ``approval``):

- with no active credential (a first bootstrap, or after the old one was refused), it becomes
  the credential right away; its service token is then exchanged, verified and published (or,
  when too little of the invocation is left, by the next poll or the rotator);
- over an active credential, it is kept as the *candidate*: the service token is exchanged and
  verified first, and only then is the candidate promoted (refresh credential first, then the
  published token). When the service refuses it, the candidate is dropped and both secrets are
  left as they were before ``start`` (``finishing``). The rotator never uses a candidate and
  keeps it.

The stages and transitions are in ``states``. Identity: the credential records who authorized
it (``identity``); an approval by another subject is refused unless the operator allowed a new
identity (``"allow_new_identity": true``). ``status`` reports metadata only; no token, device
code or user code is ever logged (the operator gets the user code in the result of ``start``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from cmstoken.aws.documents import PendingAuthorization, RefreshSecret
from cmstoken.aws.notifications import Notifier
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import Check, CredentialVault
from cmstoken.bootstrap import results
from cmstoken.bootstrap.request import BootstrapRequest
from cmstoken.bootstrap.states import (
    Action,
    Event,
    begin,
    start_event,
    start_stage,
    step,
)
from cmstoken.core.clock import Clock, optional_iso, to_iso
from cmstoken.core.settings import Settings

if TYPE_CHECKING:
    from cmstoken.bootstrap.polling import Polling
    from cmstoken.upstream.service import ServiceClient

logger = logging.getLogger(__name__)


class Bootstrapper:
    """Runs the bootstrap actions for one stack."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: SecretStore,
        service: ServiceClient,
        clock: Clock,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.service = service
        self.clock = clock
        self.notifier = notifier
        self.vault = CredentialVault(settings, store, clock)

    @cached_property
    def polling(self) -> Polling:
        """The ``poll`` action's machinery, loaded by a poll only (not by a status query's
        cold start)."""
        from cmstoken.bootstrap.finishing import Finisher
        from cmstoken.bootstrap.polling import Polling
        from cmstoken.rotation.publishing import Publisher

        publisher = Publisher(
            self.service,
            self.vault,
            self.clock,
            verify=self.settings.verify_service_token,
            notifier=self.notifier,
        )
        finisher = Finisher(self.vault, publisher, self.clock)
        return Polling(self.settings, self.service, self.vault, finisher, self.clock)

    def handle(self, request: BootstrapRequest, *, deadline: float) -> dict[str, Any]:
        """Run one action and return its result document."""
        if request.action == "start":
            free_trial = (
                self.settings.free_trial if request.free_trial is None else request.free_trial
            )
            return self.start(
                free_trial=free_trial,
                deadline=deadline,
                allow_new_identity=request.allow_new_identity,
                link=request.link,
            )
        if request.action == "poll":
            from cmstoken.bootstrap.polling import POLL_DEADLINE_MARGIN

            stop_at = deadline - POLL_DEADLINE_MARGIN
            if request.max_wait_seconds is not None:
                stop_at = min(stop_at, self.clock.now() + request.max_wait_seconds)
            return self.polling.poll(
                stop_at=stop_at,
                deadline=deadline,
                allow_new_identity=request.allow_new_identity,
                link=request.link,
            )
        return self.status(deadline=deadline, via_links=request.via_links)

    def start(
        self,
        *,
        free_trial: bool,
        deadline: float,
        allow_new_identity: bool = False,
        link: str | None = None,
    ) -> dict[str, Any]:
        """Request a device code and keep it pending (started by ``link``, when a link asks);
        an active credential stays untouched. A candidate left unfinished by an earlier
        authorization is dropped (this one replaces it), and so is, by an operator's start, a
        link's pending authorization."""
        snapshot = self.vault.read_refresh(deadline)
        now = self.clock.now()
        transition = step(
            start_stage(snapshot.secret, now), start_event(snapshot.secret, now, link)
        )
        if transition.action is Action.NOTHING:
            return _already_pending(snapshot.secret, link)
        from cmstoken.core.version_budget import PER_START, Writer  # a start's only

        checked = Check(
            Writer.OUTSIDE if link else Writer.INSIDE, "a link's start" if link else "a start"
        )
        self.vault.room(checked, PER_START, deadline)  # before the request
        pending = replace(self._device_code(free_trial, allow_new_identity), link=link)
        latest = [snapshot.secret]

        def store(document: RefreshSecret) -> RefreshSecret | None:
            latest[0] = document
            return begin(document, pending, self.clock.now())

        if self.vault.update_refresh(snapshot, store, deadline, checked=checked) is None:
            return _already_pending(latest[0], link)  # another start came first: it stands
        # What the write replaced: a link's live authorization, or none.
        took_over = start_event(latest[0], self.clock.now(), link) is Event.TAKE_OVER
        # The user code is not logged: whoever reads the logs could approve it first.
        logger.info(
            "device authorization started",
            extra={
                "free_trial": free_trial,
                "allow_new_identity": allow_new_identity,
                "by_link": link is not None,
                "took_over": took_over,
            },
        )
        replaced = (
            "it replaces the authorization a link started (whose code is not polled again): "
            if took_over
            else ""
        )
        return results.pending(
            pending,
            f"{replaced}open {pending.verification_uri_complete} (or {pending.verification_uri} "
            f"and enter {pending.user_code}), approve, then poll",
        )

    def _device_code(self, free_trial: bool, allow_new_identity: bool) -> PendingAuthorization:
        """A new device code from the identity provider, as the pending authorization."""
        # The device flow is loaded by start and poll only (not by a status query's cold start).
        from cmstoken.upstream.device_flow import PollSchedule, start_device_authorization

        started = start_device_authorization(self.service, free_trial=free_trial)
        authorization = started.authorization
        schedule = PollSchedule.first(authorization)
        return PendingAuthorization(
            device_code=authorization.device_code,
            user_code=authorization.user_code,
            verification_uri=authorization.verification_uri,
            verification_uri_complete=authorization.verification_uri_complete,
            client_id=started.client_id,
            issuer_url=started.provider.issuer_url,
            free_trial=free_trial,
            interval=schedule.interval,
            started_at=authorization.received_at,
            expires_at=schedule.expires_at,
            next_poll_at=schedule.next_poll_at,
            allow_new_identity=allow_new_identity,
        )

    def status(self, *, deadline: float, via_links: bool = False) -> dict[str, Any]:
        """The credential's state and any pending authorization: metadata only. The credential
        has ``service_refused_at`` too while the service refuses its tokens (a refusal that no
        token published since has answered). To the links, a pending authorization has no user
        code, only the tag of the link that started it (``None``: an operator did)."""
        secret: RefreshSecret = self.vault.read_refresh(deadline).secret
        published = self.vault.read_published(deadline)
        credential = secret.credential
        pending = secret.pending
        refused_at = credential.service_refused_at if credential else None
        if refused_at is not None and published and published.issued_at > refused_at:
            refused_at = None
        return {
            "credential": {
                "status": credential.status if credential else "absent",
                "authorized_at": optional_iso(credential.authorized_at) if credential else None,
                "refreshed_at": optional_iso(credential.refreshed_at) if credential else None,
                "reauthorize_by": optional_iso(credential.reauthorize_by) if credential else None,
                "service_token_expires_at": optional_iso(published.expires_at)
                if published
                else None,
                **({} if refused_at is None else {"service_refused_at": to_iso(refused_at)}),
            },
            "pending": None
            if pending is None or pending.expires_at <= self.clock.now()
            else results.pending_status(pending, via_links=via_links),
        }


def _already_pending(document: RefreshSecret, link: str | None) -> dict[str, Any]:
    """The result of a start that meets a live pending authorization: that one, or to a link
    that did not start it, only that one is pending (and until when)."""
    pending = document.pending
    assert pending is not None  # a live one
    if link is not None and pending.link != link:
        return results.pending_elsewhere(pending)
    return results.pending(
        pending,
        "an authorization is already pending: approve it at the address shown, or "
        f"start again after it expires at {to_iso(pending.expires_at)}",
    )
