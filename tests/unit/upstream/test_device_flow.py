"""The device-flow poller (RFC 8628 and service-api.md section 7), on a fake clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from cmstoken.core.errors import (
    AccessDeniedError,
    ExpiredTokenError,
    InvalidGrantError,
    ServerError,
    TransientError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
)
from cmstoken.upstream.device_flow import DevicePoller, PollSchedule
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.models import TokenAnswer
from support import Answer, FakeClock, ScriptedTransport, response

TOKENS = {
    "access_token": "eyJ.access.token",
    "refresh_token": "v1.refresh-secret-0123456789",
    "scope": "openid profile email offline_access",
    "expires_in": 86400,
    "token_type": "Bearer",
}
PENDING = response(403, {"error": "authorization_pending", "error_description": "pending"})
SLOW_DOWN = response(429, {"error": "slow_down", "error_description": "slow down"})
GRANTED = response(200, TOKENS)


def poller(
    script: Sequence[Answer], *, latency: float = 0.0, interval: int = 5, expires_in: int = 900
) -> tuple[DevicePoller, ScriptedTransport, FakeClock]:
    clock = FakeClock()
    transport = ScriptedTransport(script=list(script), clock=clock, latency=latency)
    identity = IdentityClient("https://login.example.com/", transport=transport, clock=clock)
    schedule = PollSchedule(
        interval=interval,
        next_poll_at=clock.now() + interval,
        expires_at=clock.now() + expires_in,
    )
    device = DevicePoller(
        identity,
        client_id="client-abc",
        device_code="device-code-0123456789",
        schedule=schedule,
        clock=clock,
    )
    return device, transport, clock


def poll_times(transport: ScriptedTransport) -> list[float]:
    start = FakeClock().now()
    return [round(sent.at - start, 3) for sent in transport.sent]


def test_polls_at_the_interval_until_granted() -> None:
    device, transport, _ = poller([PENDING, PENDING, GRANTED])
    tokens = device.run()
    assert isinstance(tokens, TokenAnswer)
    assert tokens.refresh_token == TOKENS["refresh_token"]
    assert poll_times(transport) == [5, 10, 15]
    sent = transport.sent[0]
    assert sent.url == "https://login.example.com/oauth/token"
    assert sent.form == {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": "device-code-0123456789",
        "client_id": "client-abc",
    }


def test_interval_counts_from_the_arrival_of_the_previous_response() -> None:
    device, transport, _ = poller([PENDING, PENDING, GRANTED], latency=2.0)
    device.run()
    # Each answer arrives 2 s after its request; the next request goes 5 s after that arrival.
    assert poll_times(transport) == [5, 12, 19]


def test_slow_down_adds_five_seconds_to_this_and_every_later_poll() -> None:
    device, transport, _ = poller([PENDING, SLOW_DOWN, PENDING, SLOW_DOWN, PENDING, GRANTED])
    device.run()
    assert poll_times(transport) == [5, 10, 20, 30, 45, 60]
    assert device.schedule.interval == 15


def test_the_code_expiry_stops_polling_with_advice_to_start_again() -> None:
    device, transport, clock = poller([PENDING] * 10, interval=5, expires_in=22)
    with pytest.raises(ExpiredTokenError, match="start the flow again"):
        device.run()
    assert poll_times(transport) == [5, 10, 15, 20]
    # The next poll (25 s) would come after the expiry (22 s): no pointless wait for it.
    assert clock.now() - FakeClock().now() == 20


def test_expired_token_from_the_server_ends_polling() -> None:
    device, transport, _ = poller([PENDING, response(403, {"error": "expired_token"})])
    with pytest.raises(ExpiredTokenError, match="start the flow again"):
        device.run()
    assert len(transport.sent) == 2


def test_access_denied_ends_polling() -> None:
    denied = response(403, {"error": "access_denied", "error_description": "User cancelled"})
    device, transport, _ = poller([PENDING, denied, GRANTED])
    with pytest.raises(AccessDeniedError, match="denied"):
        device.run()
    assert len(transport.sent) == 2


def test_invalid_grant_ends_polling() -> None:
    device, _, _ = poller([response(403, {"error": "invalid_grant"})])
    with pytest.raises(InvalidGrantError) as raised:
        device.run()
    assert "lost" not in str(raised.value)


def test_transient_errors_are_retried_honouring_retry_after() -> None:
    rate_limited = response(429, {"error": "too_many_requests"}, headers={"Retry-After": "30"})
    device, transport, _ = poller([response(503, {}), rate_limited, PENDING, GRANTED])
    assert device.run() is not None
    assert poll_times(transport) == [5, 10, 40, 45]


LOST_ANSWERS = [
    UpstreamTimeoutError("device_token: no answer", endpoint="device_token", outcome_unknown=True),
    UpstreamConnectionError("device_token: dropped", endpoint="device_token", outcome_unknown=True),
    response(502, {}),
    response(504, {}),
    response(200, raw=b"{not json"),
    response(200, {"access_token": "eyJx.eyJ5.sig", "token_type": "Bearer"}),
]
LOST_IDS = ["timeout", "dropped", "502", "504", "garbled-2xx", "2xx-without-refresh-token"]
SPENT = response(403, {"error": "invalid_grant", "error_description": "Invalid device code."})


@pytest.mark.parametrize("failure", LOST_ANSWERS, ids=LOST_IDS)
def test_a_poll_whose_answer_was_lost_is_sent_again_once_at_the_interval(failure: Any) -> None:
    """SPEC 4.2b: once no answer can arrive, the code is polled again (RFC 8628 section 3.5:
    at the interval); a provider that never acted answers as usual."""
    device, transport, _ = poller([failure, PENDING, GRANTED])
    assert device.run() is not None
    assert poll_times(transport) == [5, 10, 15]


@pytest.mark.parametrize("failure", LOST_ANSWERS, ids=LOST_IDS)
def test_a_code_spent_with_the_lost_answer_ends_polling_with_its_refusal(failure: Any) -> None:
    """The provider handed out the tokens with the lost answer: the code is spent, and the
    poll sent again meets the terminal refusal."""
    device, transport, _ = poller([failure, SPENT, GRANTED])
    with pytest.raises(InvalidGrantError, match="the poll sent again was refused") as raised:
        device.run()
    assert len(transport.sent) == 2
    assert raised.value.code == "invalid_grant"
    assert "device-code-0123456789" not in str(raised.value)


@pytest.mark.parametrize("failure", LOST_ANSWERS, ids=LOST_IDS)
def test_a_second_lost_answer_ends_polling(failure: Any) -> None:
    device, transport, _ = poller([failure, PENDING, failure, GRANTED])
    with pytest.raises(TransientError):
        device.run()
    assert poll_times(transport) == [5, 10, 15]  # at most one poll again per run


def test_a_lost_answer_is_raised_when_the_poll_again_comes_after_stop_at() -> None:
    device, transport, clock = poller([response(502, {}), GRANTED])
    with pytest.raises(ServerError):
        device.run(stop_at=clock.now() + 9)
    assert len(transport.sent) == 1
    assert device.schedule.next_poll_at == clock.now() + 5  # the next run keeps the interval


def test_a_lost_answer_is_raised_when_the_code_expires_before_the_poll_again() -> None:
    device, transport, _ = poller([response(504, {}), GRANTED], expires_in=8)
    with pytest.raises(ServerError):
        device.run()
    assert len(transport.sent) == 1


def test_repeated_transient_errors_give_up_with_the_last_error() -> None:
    device, transport, _ = poller([response(503, {})] * 3 + [GRANTED])
    device.max_transient_failures = 3
    with pytest.raises(ServerError):
        device.run()
    assert len(transport.sent) == 3


def test_transient_failure_count_resets_after_a_real_answer() -> None:
    boom = UpstreamConnectionError("device_token: cannot reach", endpoint="device_token")
    device, transport, _ = poller([boom, boom, PENDING, boom, boom, GRANTED])
    device.max_transient_failures = 3
    assert device.run() is not None
    assert len(transport.sent) == 6


def test_stop_at_returns_none_and_keeps_the_schedule_for_later() -> None:
    device, transport, clock = poller([PENDING, SLOW_DOWN, PENDING, GRANTED])
    start = clock.now()
    assert device.run(stop_at=start + 12) is None
    assert poll_times(transport) == [5, 10]
    assert device.schedule.interval == 10
    assert device.schedule.next_poll_at == start + 20
    # A later invocation resumes from the stored schedule: no poll before it is due.
    assert device.run() is not None
    assert poll_times(transport) == [5, 10, 20, 30]


def test_stop_at_never_starts_a_poll_that_could_outlive_it() -> None:
    device, transport, clock = poller([PENDING])
    assert device.run(stop_at=clock.now() + 5.5) is None
    assert transport.sent == []


def test_time_limit_is_bounded_by_stop_at() -> None:
    device, transport, clock = poller([PENDING])
    stop_at = clock.now() + 9
    device.run(stop_at=stop_at)
    assert transport.sent[0].time_limit == pytest.approx(4)


def test_expiry_is_declared_as_soon_as_no_poll_is_left_even_with_a_stop_at() -> None:
    device, transport, clock = poller([PENDING] * 5, expires_in=12)
    with pytest.raises(ExpiredTokenError):
        device.run(stop_at=clock.now() + 11)
    assert len(transport.sent) == 2
