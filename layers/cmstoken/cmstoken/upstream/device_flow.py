"""The OAuth 2.0 device authorization flow (RFC 8628, service-api.md sections 5 and 7).

``start_device_authorization`` runs steps 1 and 2 (provider information, device code).
``DevicePoller`` runs step 4: it polls at the interval counted from the arrival of the previous
response, adds 5 s for this and every later poll after ``slow_down``, stops at the code's expiry,
and can stop early at a deadline with its schedule intact, so that a caller with a time budget (a
Lambda invocation) can persist the schedule and carry on later without polling too fast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.errors import (
    AuthorizationPendingError,
    ExpiredTokenError,
    InvalidGrantError,
    SlowDownError,
    TransientError,
    may_send_again,
)
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.models import DeviceAuthorization, ProviderInfo, TokenAnswer
from cmstoken.upstream.service import ServiceClient

logger = logging.getLogger(__name__)

SLOW_DOWN_STEP = 5
# Do not start a poll whose answer could arrive after the caller's deadline.
MIN_POLL_BUDGET = 1.0


@dataclass
class PollSchedule:
    """When the next poll may be sent, at what interval, and when the code expires."""

    interval: int
    next_poll_at: float
    expires_at: float

    @classmethod
    def first(cls, authorization: DeviceAuthorization) -> PollSchedule:
        """The schedule right after the device code arrived: first poll one interval later."""
        return cls(
            interval=authorization.interval,
            next_poll_at=authorization.received_at + authorization.interval,
            expires_at=authorization.expires_at,
        )


@dataclass(frozen=True)
class StartedAuthorization:
    """Steps 1 and 2 done: the provider, the client id in use, the device code response and a
    client of the provider's identity service."""

    provider: ProviderInfo
    client_id: str
    authorization: DeviceAuthorization
    identity: IdentityClient

    def poller(self, schedule: PollSchedule | None = None) -> DevicePoller:
        """A poller for this authorization, first poll one interval after the code arrived."""
        return DevicePoller(
            self.identity,
            client_id=self.client_id,
            device_code=self.authorization.device_code,
            schedule=schedule or PollSchedule.first(self.authorization),
            clock=self.identity.clock,
        )


def start_device_authorization(service: ServiceClient, *, free_trial: bool) -> StartedAuthorization:
    """Fetch the provider information and request a device code with its scope and audience,
    using ``freetrialClientId`` when ``free_trial`` is set."""
    provider = service.provider_info()
    client_id = provider.client_id_for(free_trial)
    identity = IdentityClient(provider.issuer_url, transport=service.transport, clock=service.clock)
    authorization = identity.request_device_code(
        client_id=client_id, scope=provider.scope, audience=provider.audience
    )
    return StartedAuthorization(
        provider=provider, client_id=client_id, authorization=authorization, identity=identity
    )


class DevicePoller:
    """Polls the token endpoint for one device code until it yields tokens or ends.

    ``run`` returns the tokens, returns ``None`` when ``stop_at`` comes first (the schedule is
    then the one to resume with) or ``proceed`` says no before a poll, or raises:
    ``ExpiredTokenError`` when the code expired (start again), ``AccessDeniedError`` when the
    user refused, another ``TerminalError``, the last
    ``TransientError`` after ``max_transient_failures`` failures in a row, or a second
    ``TransientError`` whose answer can no longer arrive (``may_send_again`` False: no answer
    within the limit, a dropped connection, a gateway's 502 or 504, a 2xx answer that could
    not be read).

    After the first such lost answer the code is polled once more, at the next poll's time
    (RFC 8628 section 3.5): a provider that never acted answers as usual, and one that handed
    out the tokens answers that the code is spent (``InvalidGrantError``, saying so). When that
    poll cannot be sent in this run (``stop_at``, the code's expiry), the lost answer's error
    is raised.
    """

    def __init__(
        self,
        identity: IdentityClient,
        *,
        client_id: str,
        device_code: str,
        schedule: PollSchedule,
        clock: Clock,
        max_transient_failures: int = 5,
        proceed: Callable[[], bool] | None = None,
    ) -> None:
        self.identity = identity
        self.client_id = client_id
        self._device_code = device_code
        self.schedule = schedule
        self.clock = clock
        self.max_transient_failures = max_transient_failures
        self.proceed = proceed  # asked before each poll: False stops the run (None: never)
        self.polls = 0

    def run(self, *, stop_at: float | None = None) -> TokenAnswer | None:
        """Poll until done or until ``stop_at`` (epoch seconds); see the class docstring."""
        failures = 0
        lost: TransientError | None = None  # a lost answer not yet followed by an answer
        polled_again = False  # after a lost answer: at most once per run
        schedule = self.schedule
        while True:
            now = self.clock.now()
            poll_at = max(now, schedule.next_poll_at)
            if lost is not None and not _in_time(poll_at, schedule, stop_at):
                raise lost  # the poll again after a lost answer cannot be sent in this run
            if poll_at >= schedule.expires_at:
                # No poll is left before the code expires: waiting for it would change nothing.
                raise _expired(schedule)
            if not self._wait(poll_at, stop_at):
                return None
            time_limit = None if stop_at is None else stop_at - self.clock.now()
            self.polls += 1
            try:
                return self.identity.poll_device_token(
                    client_id=self.client_id,
                    device_code=self._device_code,
                    time_limit=time_limit,
                )
            except InvalidGrantError as exc:
                if lost is None:
                    raise
                raise _spent_with_lost_answer(exc, lost) from exc
            except AuthorizationPendingError:
                failures = 0
                lost = None
                schedule.next_poll_at = self.clock.now() + schedule.interval
                logger.debug("authorization pending", extra={"interval": schedule.interval})
            except SlowDownError:
                failures = 0
                lost = None
                schedule.interval += SLOW_DOWN_STEP
                schedule.next_poll_at = self.clock.now() + schedule.interval
                logger.info("polling slowed down", extra={"interval": schedule.interval})
            except TransientError as exc:
                failures += 1
                wait = max(float(schedule.interval), exc.retry_after or 0.0)
                schedule.next_poll_at = self.clock.now() + wait
                if failures >= self.max_transient_failures:
                    raise
                if not may_send_again(exc):
                    if polled_again:
                        raise  # polled once more after a lost answer: that one was lost too
                    polled_again = True
                    lost = exc
                    logger.warning(
                        "a poll's answer was lost: polling once more",
                        extra={"error": str(exc), "wait_seconds": wait},
                    )
                    continue
                logger.warning(
                    "poll failed, retrying",
                    extra={"error": str(exc), "failures": failures, "wait_seconds": wait},
                )

    def _wait(self, poll_at: float, stop_at: float | None) -> bool:
        """Sleep until ``poll_at``, then ask ``proceed``; False at once when the poll's answer
        could not come before ``stop_at``."""
        if stop_at is not None and poll_at + MIN_POLL_BUDGET > stop_at:
            return False
        self.clock.sleep(poll_at - self.clock.now())
        return self.proceed is None or self.proceed()


def _expired(schedule: PollSchedule) -> ExpiredTokenError:
    """The code's end before its next poll."""
    return ExpiredTokenError(
        "device_token: the code expired before it was approved (it ends at "
        f"{to_iso(schedule.expires_at)}, before the next poll); start the flow again",
        endpoint="device_token",
        code="expired_token",
    )


def _in_time(poll_at: float, schedule: PollSchedule, stop_at: float | None) -> bool:
    """Whether a poll due at ``poll_at`` can still be sent: before the code expires, and with
    its answer due before ``stop_at``."""
    if poll_at >= schedule.expires_at:
        return False
    return stop_at is None or poll_at + MIN_POLL_BUDGET <= stop_at


def _spent_with_lost_answer(error: InvalidGrantError, lost: TransientError) -> InvalidGrantError:
    """``invalid_grant`` for the poll sent again after the answer ``lost``: the approval went
    with that answer."""
    return InvalidGrantError(
        f"{lost.message}; the poll sent again was refused (HTTP {error.status} invalid_grant): "
        "the identity provider most likely handed out the tokens in the answer lost, and the "
        "approval went with it: authorize again",
        endpoint=error.endpoint,
        status=error.status,
        code=error.code,
    )
