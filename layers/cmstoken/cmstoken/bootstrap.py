"""The one-time device authorization, run inside AWS (SPEC section 3, bootstrap function).

``start`` asks for a device code and keeps the pending authorization in the refresh credential
secret, next to (never over) an active credential. ``poll`` polls within the invocation's time,
resuming the schedule a previous invocation stored, so the interval is respected across
invocations too. On success the new credential is stored first, then the service token is
exchanged, verified and published. ``status`` reports metadata only, never a token or code.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .clock import Clock, optional_iso, to_iso
from .credentials import CredentialVault, Snapshot
from .documents import (
    STATUS_ACTIVE,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
)
from .errors import (
    AccessDeniedError,
    CmsTokenError,
    ConfigurationError,
    ExpiredTokenError,
    TerminalError,
)
from .notifications import Notifier
from .publishing import Publisher
from .redaction import fingerprint
from .service import ServiceClient
from .settings import Settings
from .store import SecretStore

if TYPE_CHECKING:
    from .device_flow import PollSchedule
    from .models import RawTokens

logger = logging.getLogger(__name__)

ACTIONS = ("start", "poll", "status")
# A poll stops this long before the invocation's deadline (SPEC: at most 2 s before it).
POLL_DEADLINE_MARGIN = 2.0
# Time kept back from polling for storing the credential and publishing the service token.
AUTHORIZED_RESERVE = 20.0


@dataclass(frozen=True)
class BootstrapRequest:
    """A bootstrap invocation: ``action``, the free-trial choice for ``start``, and an optional
    cap on how long one ``poll`` waits (so an operator's tool can show progress)."""

    action: str
    free_trial: bool | None = None
    max_wait_seconds: float | None = None

    @classmethod
    def from_event(cls, event: Any) -> BootstrapRequest:
        """Validate ``{"action": "start" | "poll" | "status", ...}``."""
        if not isinstance(event, dict):
            raise ConfigurationError(
                f"bootstrap event must be a JSON object, got JSON {type(event).__name__}"
            )
        action = event.get("action")
        if action not in ACTIONS:
            raise ConfigurationError(
                f"bootstrap event field 'action' must be one of {', '.join(ACTIONS)}"
            )
        free_trial = event.get("free_trial")
        if free_trial is not None and not isinstance(free_trial, bool):
            raise ConfigurationError("bootstrap event field 'free_trial' must be true or false")
        wait = event.get("max_wait_seconds")
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int | float)):
            raise ConfigurationError("bootstrap event field 'max_wait_seconds' must be a number")
        if wait is not None and wait <= 0:
            raise ConfigurationError("bootstrap event field 'max_wait_seconds' must be positive")
        return cls(action=action, free_trial=free_trial, max_wait_seconds=wait)


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
        self.vault = CredentialVault(settings, store, clock)
        self.publisher = Publisher(
            service, self.vault, clock, verify=settings.verify_service_token, notifier=notifier
        )

    def handle(self, request: BootstrapRequest, *, deadline: float) -> dict[str, Any]:
        """Run one action and return its result document."""
        if request.action == "start":
            free_trial = (
                self.settings.free_trial if request.free_trial is None else request.free_trial
            )
            return self.start(free_trial=free_trial, deadline=deadline)
        if request.action == "poll":
            stop_at = deadline - POLL_DEADLINE_MARGIN
            if request.max_wait_seconds is not None:
                stop_at = min(stop_at, self.clock.now() + request.max_wait_seconds)
            return self.poll(stop_at=stop_at, deadline=deadline)
        return self.status(deadline=deadline)

    # --- start ------------------------------------------------------------------------------

    def start(self, *, free_trial: bool, deadline: float) -> dict[str, Any]:
        """Request a device code and keep it pending; an active credential stays untouched."""
        snapshot = self.vault.read_refresh(deadline)
        pending = snapshot.secret.pending
        if pending is not None and pending.expires_at > self.clock.now():
            return _pending_result(
                pending,
                "an authorization is already pending: approve it at the address shown, or "
                f"start again after it expires at {to_iso(pending.expires_at)}",
            )
        # The device flow is loaded by start and poll only (not by a status query's cold start).
        from .device_flow import PollSchedule, start_device_authorization

        started = start_device_authorization(self.service, free_trial=free_trial)
        authorization = started.authorization
        schedule = PollSchedule.first(authorization)
        pending = PendingAuthorization(
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
        )
        self.vault.update_refresh(
            snapshot, lambda document: replace(document, pending=pending), deadline
        )
        logger.info(
            "device authorization started",
            extra={"user_code": pending.user_code, "free_trial": free_trial},
        )
        return _pending_result(
            pending,
            f"open {pending.verification_uri_complete} (or {pending.verification_uri} and enter "
            f"{pending.user_code}), approve, then poll",
        )

    # --- poll -------------------------------------------------------------------------------

    def poll(self, *, stop_at: float, deadline: float) -> dict[str, Any]:
        """Poll the pending authorization until it ends or ``stop_at``."""
        snapshot = self.vault.read_refresh(deadline)
        pending = snapshot.secret.pending
        if pending is None:
            return {"status": "none", "message": "nothing is pending: run start first"}
        from .device_flow import DevicePoller, PollSchedule
        from .identity import IdentityClient

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
        )
        try:
            tokens = poller.run(stop_at=min(stop_at, deadline - AUTHORIZED_RESERVE))
        except ExpiredTokenError:
            self._forget(snapshot, pending, deadline)
            return {
                "status": "expired",
                "message": "the code expired before it was approved: run start again",
            }
        except AccessDeniedError:
            self._forget(snapshot, pending, deadline)
            return {
                "status": "denied",
                "message": "the authorization was denied in the browser: run start again",
            }
        except TerminalError as exc:
            self._forget(snapshot, pending, deadline)
            return {"status": "failed", "message": f"{exc}; run start again"}
        except CmsTokenError as exc:
            self._keep_schedule(snapshot, pending, schedule, deadline)
            return {
                "status": "failed",
                "message": f"{exc}; the pending authorization stays, poll again",
            }
        if tokens is None:
            self._keep_schedule(snapshot, pending, schedule, deadline)
            return _pending_result(pending, "not approved yet: poll again")
        return self._authorized(snapshot, pending, tokens, deadline)

    def _authorized(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        tokens: RawTokens,
        deadline: float,
    ) -> dict[str, Any]:
        """Store the new credential first (over any old one), then publish its service token."""
        now = tokens.received_at
        credential = RefreshCredential(
            refresh_token=tokens.refresh_token,
            client_id=pending.client_id,
            issuer_url=pending.issuer_url,
            status=STATUS_ACTIVE,
            authorized_at=now,
            refreshed_at=now,
            reauthorize_by=self.settings.reauthorize_by(now),
            free_trial=pending.free_trial,
        )
        raw = RawAccessToken(token=tokens.access_token, expires_at=tokens.access_token_expires_at)
        self.vault.update_refresh(
            snapshot,
            lambda document: replace(
                document, credential=credential, raw_access_token=raw, pending=None, lease=None
            ),
            deadline,
        )
        logger.info(
            "device authorization approved; credential stored",
            extra={"credential": fingerprint(credential.refresh_token)},
        )
        try:
            published = self.publisher.publish(credential, raw, deadline, "bootstrap")
        except CmsTokenError as exc:
            return {
                "status": "failed",
                "message": f"authorized and stored, but the service token was not published "
                f"({exc}); the rotator publishes it on its next run",
            }
        return {
            "status": "authorized",
            "message": "authorized; the service token is published",
            "service_token_expires_at": to_iso(published.expires_at),
            "reauthorize_by": optional_iso(credential.reauthorize_by),
        }

    def _forget(self, snapshot: Snapshot, pending: PendingAuthorization, deadline: float) -> None:
        """Remove a finished pending authorization (only that one; a newer start stays)."""
        self._replace_pending(snapshot, pending, None, deadline)

    def _keep_schedule(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        schedule: PollSchedule,
        deadline: float,
    ) -> None:
        """Store when the next poll may go, so the next invocation keeps to the interval."""
        if (schedule.interval, schedule.next_poll_at) == (pending.interval, pending.next_poll_at):
            return
        updated = replace(pending, interval=schedule.interval, next_poll_at=schedule.next_poll_at)
        self._replace_pending(snapshot, pending, updated, deadline)

    def _replace_pending(
        self,
        snapshot: Snapshot,
        pending: PendingAuthorization,
        replacement: PendingAuthorization | None,
        deadline: float,
    ) -> None:
        """Swap ``pending`` for ``replacement`` unless another start replaced it meanwhile."""

        def change(document: RefreshSecret) -> RefreshSecret | None:
            current = document.pending
            if current is None or current.user_code != pending.user_code:
                return None
            return replace(document, pending=replacement)

        self.vault.update_refresh(snapshot, change, deadline)

    # --- status -----------------------------------------------------------------------------

    def status(self, *, deadline: float) -> dict[str, Any]:
        """The credential's state and any pending authorization: metadata only."""
        secret: RefreshSecret = self.vault.read_refresh(deadline).secret
        published = self.vault.read_published(deadline)
        credential = secret.credential
        pending = secret.pending
        return {
            "credential": {
                "status": credential.status if credential else "absent",
                "authorized_at": optional_iso(credential.authorized_at) if credential else None,
                "refreshed_at": optional_iso(credential.refreshed_at) if credential else None,
                "reauthorize_by": optional_iso(credential.reauthorize_by) if credential else None,
                "service_token_expires_at": optional_iso(published.expires_at)
                if published
                else None,
            },
            "pending": None
            if pending is None or pending.expires_at <= self.clock.now()
            else {
                "user_code": pending.user_code,
                "verification_uri_complete": pending.verification_uri_complete,
                "expires_at": to_iso(pending.expires_at),
            },
        }


def _pending_result(pending: PendingAuthorization, message: str) -> dict[str, Any]:
    return {
        "status": "pending",
        "user_code": pending.user_code,
        "verification_uri": pending.verification_uri,
        "verification_uri_complete": pending.verification_uri_complete,
        "expires_at": to_iso(pending.expires_at),
        "message": message,
    }
