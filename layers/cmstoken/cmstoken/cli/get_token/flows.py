"""``get-token``'s ways to the tokens: the device authorization (with the person's
confirmation and the countdown), the refresh, and the exchange for the service token."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TextIO

from cmstoken.cli import countdown
from cmstoken.cli.console import is_terminal, say, shown
from cmstoken.cli.get_token.holding import HeldInterrupts
from cmstoken.cli.get_token.options import PROG
from cmstoken.cli.get_token.output import Result
from cmstoken.cli.get_token.retries import Retries, refused_for_now
from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.errors import (
    CmsTokenError,
    InvalidGrantError,
    MalformedResponseError,
    TransientError,
    may_send_again,
)
from cmstoken.upstream.device_flow import StartedAuthorization, start_device_authorization
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.models import DeviceAuthorization, RawTokens, TokenAnswer
from cmstoken.upstream.service import ServiceClient

# After a refresh whose answer can no longer arrive (SPEC 4.2b): the same token again, once.
ANSWER_LOST = (
    "the answer was lost, and the identity provider may have rotated the refresh token: "
    "presenting the same token again, once (this recovers it if the provider never acted, "
    "or allows a reuse interval)"
)
REFRESH_LOST = (
    "refresh: the answer to the first refresh was lost after the identity provider may have "
    "rotated the token, and presenting it again was refused (invalid_grant): the refresh "
    f"token is void; log in again ({PROG} without -r)"
)
PROMPT = "Press y once you have approved the login in your browser (y/N): "
YES = frozenset({"y", "yes"})


class AbortedError(CmsTokenError):
    """The user did not confirm the login."""


class Countdown(countdown.Countdown):
    """``get-token``'s countdown: live on a terminal from the start, saying how to give up;
    nothing elsewhere."""

    tail = " (Ctrl-C to give up) "


def run_device_flow(
    service: ServiceClient,
    *,
    free_trial: bool,
    stdin: TextIO | None,
    stderr: TextIO,
    retries: Retries | None = None,
    held: HeldInterrupts | None = None,
) -> Result:
    """Provider information and a device code, the address on stderr, the (y/N) confirmation,
    then RFC 8628 polling until the tokens arrive (or a terminal error), with a countdown on
    stderr when it is a terminal. Each poll is sent with interrupts ``held`` (tokens issued
    once must be kept), released before the wait for the next."""
    retries = retries or Retries(service.clock, stderr)
    started: StartedAuthorization = retries.call(
        lambda: start_device_authorization(service, free_trial=free_trial),
        description="device authorization",
        retryable=refused_for_now,
    )
    authorization = started.authorization
    say(stderr, _where_to_approve(authorization, free_trial=free_trial))
    _confirm(stdin, stderr)
    say(stderr, "Waiting for the authorization...")
    poller = started.poller()
    if held is not None:
        poller.clock = _ReleasingClock(poller.clock, held)
        poller.proceed = _holding(held)
    with Countdown(stderr, authorization.expires_at, service.clock.now):
        tokens = poller.run()
    if tokens is None:  # only with a stop_at, which is not given
        raise AbortedError("polling stopped before the authorization finished")
    say(stderr, "Authorized.")
    return _result(tokens, started.provider.scope, stderr)


class _ReleasingClock:
    """A poller's clock whose waits between polls release the interrupts held for the last
    poll (its answer held no tokens): an interrupt then ends the run at once."""

    def __init__(self, clock: Clock, held: HeldInterrupts) -> None:
        self.clock = clock
        self.held = held

    def now(self) -> float:
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        self.held.release()
        self.clock.sleep(seconds)


def _holding(held: HeldInterrupts) -> Callable[[], bool]:
    """The poller's ``proceed``: asked right before each poll is sent, it holds interrupts."""

    def proceed() -> bool:
        held.hold()
        return True

    return proceed


def _where_to_approve(authorization: DeviceAuthorization, *, free_trial: bool) -> str:
    """The address to open and the code to check, for the person at the terminal."""
    account = " (free-trial account)" if free_trial else ""
    # Checked when parsed; made harmless here all the same, as everything the provider says.
    return (
        f"\nTo log in{account}, open this address in a browser and approve the request:\n\n"
        f"    {shown(authorization.verification_uri_complete)}\n\n"
        f"and check that the page shows this code:\n\n"
        f"    {shown(authorization.user_code)}\n\n"
        f"The code is valid for {_duration(authorization.expires_in)} "
        f"(until {to_iso(authorization.expires_at)}).\n"
    )


def _confirm(stdin: TextIO | None, stderr: TextIO) -> None:
    """The (y/N) question on stderr, answered on ``stdin``; ``AbortedError`` unless yes."""
    stderr.write(PROMPT)
    stderr.flush()
    answer = stdin.readline() if stdin is not None else ""
    if not answer or not is_terminal(stdin):
        say(stderr, "")  # nobody pressed Enter on this line
    if not answer:  # end of input (Ctrl-D, a closed pipe): SPEC's "end of input aborts"
        raise AbortedError("aborted (end of input: nobody answered y)")
    if answer.strip().lower() not in YES:
        raise AbortedError("aborted")


def run_refresh(
    service: ServiceClient,
    refresh_token: str,
    *,
    free_trial: bool,
    stderr: TextIO,
    retries: Retries | None = None,
    held: HeldInterrupts | None = None,
) -> Result:
    """Provider information, then a refresh with the provider's (free-trial) client id. Either
    is sent again when it provably was not acted on (``may_send_again``); a refresh whose
    answer was lost (it can no longer arrive) is sent again at once, once (``_refresh_again``).
    Interrupts are ``held`` from the refresh's sending on (the caller releases them once its
    answer is stored); one held when an attempt was provably not acted on ends the run then."""
    retries = retries or Retries(service.clock, stderr)
    provider = retries.call(
        service.provider_info, description="provider", retryable=refused_for_now
    )
    identity = IdentityClient(provider.issuer_url, transport=service.transport, clock=service.clock)
    client_id = provider.client_id_for(free_trial)

    def send() -> TokenAnswer:
        if held is not None:
            held.hold()  # from the sending on: its answer must be stored
        return identity.refresh(client_id=client_id, refresh_token=refresh_token)

    def retryable(error: BaseException) -> bool:
        if not refused_for_now(error):
            return False
        if held is not None:
            held.release()  # not acted on: nothing to store, so an interrupt ends the run
        return True

    def refresh() -> TokenAnswer:
        return retries.call(send, description="refresh", retryable=retryable)

    say(stderr, "Refreshing...")
    try:
        answer = refresh()
    except TransientError as exc:
        if may_send_again(exc):
            raise
        say(stderr, f"{PROG}: {shown(exc)}; {ANSWER_LOST}")
        answer = _refresh_again(refresh, stderr)
    return _result(answer, provider.scope, stderr)


def _refresh_again(refresh: Callable[[], TokenAnswer], stderr: TextIO) -> TokenAnswer:
    """The refresh sent again after its answer was lost. ``invalid_grant`` then means the
    provider rotated the token with the lost answer and allows no reuse: the token is void."""
    try:
        return refresh()
    except InvalidGrantError as exc:
        raise InvalidGrantError(
            REFRESH_LOST, endpoint=exc.endpoint, status=exc.status, code=exc.code
        ) from exc
    except TransientError:
        say(stderr, "The identity provider may have acted: the refresh token given may be void.")
        raise


def _result(answer: TokenAnswer, default_scope: str, stderr: TextIO) -> Result:
    """A 2xx token answer (refresh or device flow) as the result to print. Its refresh token is
    kept whatever else it lacks: without a usable access token the exchange fails, and the new
    refresh token is printed for the next run."""
    if answer.problems:
        say(stderr, "The answer is not as specified: " + "; ".join(answer.problems) + ".")
    tokens = RawTokens(
        access_token=answer.usable_access_token or "",
        refresh_token=answer.refresh_token,
        id_token=answer.id_token,
        scope=answer.scope,
        expires_in=max(0, round(answer.access_token_expires_at - answer.received_at)),
        received_at=answer.received_at,
    )
    return Result(tokens=tokens, scope=tokens.scope or default_scope)


def exchange(service: ServiceClient, result: Result, retries: Retries | None = None) -> Result:
    """The raw access token exchanged for the service token (transient failures retried: the
    raw token stays valid for the next attempt)."""
    tokens = result.tokens
    if not tokens.access_token:
        raise MalformedResponseError(
            "refresh: the answer holds no access token to exchange", endpoint="refresh", status=200
        )
    retries = retries or Retries(service.clock, None)
    service_token = retries.call(
        lambda: service.exchange(
            tokens.access_token, fallback_expires_at=tokens.access_token_expires_at
        ),
        description="exchange",
        retryable=None,  # the raw access token it sends stays valid for another attempt
    )
    return dataclasses.replace(result, service_token=service_token)


def _duration(seconds: int) -> str:
    if seconds % 60 or seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = seconds // 60
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
