"""The upstream clients against the emulator over real HTTP: every row of service-api.md
section 7, every note of section 4, the upstream facts of SPEC section 2, and faults."""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from cmsemu import Emulator
from cmstoken.core.errors import (
    AccessDeniedError,
    AuthorizationPendingError,
    CmsTokenError,
    ExpiredTokenError,
    InvalidClientError,
    InvalidGrantError,
    MalformedResponseError,
    RateLimitedError,
    ServerError,
    TokenRefusedError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
)
from cmstoken.upstream.device_flow import PollSchedule, start_device_authorization
from cmstoken.upstream.http import HttpTransport, Timeouts
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.models import RawTokens
from cmstoken.upstream.service import ServiceClient
from support import EmulatorClock, LogScan

pytestmark = pytest.mark.integration


@dataclass
class Upstream:
    emulator: Emulator
    clock: EmulatorClock
    service: ServiceClient
    identity: IdentityClient


@pytest.fixture
def upstream(emulator: Emulator) -> Iterator[Upstream]:
    clock = EmulatorClock(emulator)
    transport = HttpTransport(timeouts=Timeouts(connect=2, total=5))
    service = ServiceClient(emulator.base_url, transport=transport, clock=clock)
    identity = IdentityClient(emulator.issuer_url, transport=transport, clock=clock)
    yield Upstream(emulator, clock, service, identity)
    transport.close()


def authorize(up: Upstream, *, free_trial: bool = False, approve_after: float = 12) -> RawTokens:
    """Run the whole device flow, the user approving ``approve_after`` seconds in."""
    started = start_device_authorization(up.service, free_trial=free_trial)
    code = started.authorization.user_code
    up.clock.at(approve_after, lambda: up.emulator.approve(code))
    answer = started.poller().run()
    assert answer is not None
    return answer.strict("device_token")


# --- service-api.md section 5: the whole flow, and section 7 row by row ---------------------


def test_device_flow_exchange_and_listing_end_to_end(upstream: Upstream) -> None:
    tokens = authorize(upstream)
    assert tokens.scope == "openid profile email offline_access"
    assert tokens.expires_in == 86400
    service_token = upstream.service.exchange(
        tokens.access_token, fallback_expires_at=tokens.access_token_expires_at
    )
    assert service_token.expires_at == pytest.approx(upstream.clock.now() + 86400, abs=5)
    projects = upstream.service.list_projects(service_token.token)
    assert len(projects) == 1
    assert projects[0].project_id.startswith("prj_")
    assert len(projects[0].project_id) == 20


def test_authorization_pending_keeps_polling_at_the_interval(upstream: Upstream) -> None:
    authorize(upstream, approve_after=23)
    polls = [r for r in upstream.emulator.requests if r.endpoint == "device_token"]
    assert [r.error for r in polls] == ["authorization_pending"] * 4 + [None]
    gaps = [round(b.at - a.at) for a, b in itertools.pairwise(polls)]
    assert gaps == [5, 5, 5, 5]


def test_slow_down_grows_the_interval_by_five_seconds_and_the_flow_still_succeeds(
    upstream: Upstream,
) -> None:
    started = start_device_authorization(upstream.service, free_trial=False)
    code = started.authorization.user_code
    upstream.clock.at(30, lambda: upstream.emulator.approve(code))
    # One poll now, then the poller's first poll comes 2 s later (say, after a restart): too
    # early for the server's 5 s interval, so it answers slow_down.
    with pytest.raises(AuthorizationPendingError):
        upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        )
    schedule = PollSchedule.first(started.authorization)
    schedule.next_poll_at = upstream.clock.now() + 2
    poller = started.poller(schedule)
    assert poller.run() is not None
    polls = [r for r in upstream.emulator.requests if r.endpoint == "device_token"]
    assert [r.error for r in polls[:3]] == [
        "authorization_pending",
        "slow_down",
        "authorization_pending",
    ]
    assert "slow_down" not in [r.error for r in polls[2:]]
    assert poller.schedule.interval == 10
    gaps = [round(b.at - a.at) for a, b in itertools.pairwise(polls[1:])]
    assert set(gaps) == {10}


def test_expired_token_from_the_server_tells_the_user_to_start_again(upstream: Upstream) -> None:
    started = start_device_authorization(upstream.service, free_trial=False)
    upstream.emulator.advance(901)
    with pytest.raises(ExpiredTokenError, match="start the flow again") as info:
        upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        )
    assert info.value.status == 403
    # expired_token is answered once; afterwards the code is simply invalid.
    with pytest.raises(InvalidGrantError):
        upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        )


def test_poller_stops_at_expires_in_without_polling_past_it(upstream: Upstream) -> None:
    started = start_device_authorization(upstream.service, free_trial=False)
    poller = started.poller()
    begun = time.monotonic()
    with pytest.raises(ExpiredTokenError, match="start the flow again"):
        poller.run()
    real = time.monotonic() - begun
    assert upstream.emulator.counts["device_token"] == 179  # polls at 5, 10, ... 895 s
    # The clock is the emulator's: real time plus what the poller slept. The sleeps add up to
    # the last poll's time (895 s) less the real time the answers took (on a busy machine,
    # seconds), and never wait on towards the expiry at 900 s.
    assert 895 - real - 1 <= sum(upstream.clock.sleeps) <= 895 + 1


def test_access_denied_ends_the_flow(upstream: Upstream) -> None:
    started = start_device_authorization(upstream.service, free_trial=False)
    upstream.clock.at(7, lambda: upstream.emulator.deny(started.authorization.user_code))
    poller = started.poller()
    with pytest.raises(AccessDeniedError, match="denied"):
        poller.run()
    assert upstream.emulator.counts["device_token"] == 2


def test_a_granted_device_code_is_consumed(upstream: Upstream) -> None:
    started = start_device_authorization(upstream.service, free_trial=False)
    upstream.emulator.approve(started.authorization.user_code)
    upstream.identity.poll_device_token(
        client_id=started.client_id, device_code=started.authorization.device_code
    )
    with pytest.raises(InvalidGrantError):
        upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        )


def test_a_lost_poll_answer_while_pending_is_polled_again_once(upstream: Upstream) -> None:
    """SPEC 4.2b: the poll's answer was lost (the provider answered pending, then the
    connection dropped): the code is polled again at the interval, and the flow goes on."""
    started = start_device_authorization(upstream.service, free_trial=False)
    code = started.authorization.user_code
    upstream.emulator.inject("device_token", "drop")
    upstream.clock.at(12, lambda: upstream.emulator.approve(code))
    answer = started.poller().run()
    assert answer is not None
    assert upstream.emulator.refresh_token_valid(answer.refresh_token)
    polls = [r for r in upstream.emulator.requests if r.endpoint == "device_token"]
    assert len(polls) == 3  # dropped, pending, the tokens
    assert polls[1].error == "authorization_pending"
    gaps = [round(b.at - a.at) for a, b in itertools.pairwise(polls)]
    assert gaps == [5, 5]


def test_a_poll_answer_lost_with_the_tokens_ends_with_the_spent_code_s_refusal(
    upstream: Upstream,
) -> None:
    """The provider handed out the tokens and the answer was lost: the poll sent again meets
    the spent code's invalid_grant, which ends the flow (no third poll)."""
    started = start_device_authorization(upstream.service, free_trial=False)
    upstream.emulator.approve(started.authorization.user_code)
    upstream.emulator.inject("device_token", "drop")
    with pytest.raises(InvalidGrantError, match="the poll sent again was refused") as raised:
        started.poller().run()
    assert raised.value.code == "invalid_grant"
    assert started.authorization.device_code not in str(raised.value)
    assert upstream.emulator.counts["device_token"] == 2


def test_pending_is_a_poll_again_state(upstream: Upstream) -> None:
    started = start_device_authorization(upstream.service, free_trial=False)
    with pytest.raises(AuthorizationPendingError):
        upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        )


# --- service-api.md section 4, notes 1 to 6 -------------------------------------------------


def test_note_1_identity_calls_go_to_the_issuer_and_service_calls_to_the_base_url(
    upstream: Upstream,
) -> None:
    tokens = authorize(upstream)
    upstream.service.exchange(tokens.access_token, fallback_expires_at=0)
    paths = {r.endpoint: r.path for r in upstream.emulator.requests}
    assert paths["provider"] == "/api/v3/auth/provider"
    assert paths["device_code"] == "/idp/oauth/device/code"
    assert paths["device_token"] == "/idp/oauth/token"
    assert paths["exchange"] == "/api/v3/auth/token"


def test_note_3_free_trial_uses_the_free_trial_client_id_for_device_poll_and_refresh(
    upstream: Upstream,
) -> None:
    tokens = authorize(upstream, free_trial=True)
    trial = upstream.emulator.config.freetrial_client_id
    # The family belongs to the free-trial client: refreshing with it works, with the other not.
    rotated = upstream.identity.refresh(client_id=trial, refresh_token=tokens.refresh_token)
    with pytest.raises((InvalidGrantError, InvalidClientError)):
        upstream.identity.refresh(
            client_id=upstream.emulator.config.client_id, refresh_token=rotated.refresh_token
        )


def test_note_4_the_audience_must_be_the_providers(upstream: Upstream) -> None:
    provider = upstream.service.provider_info()
    with pytest.raises(AccessDeniedError):
        upstream.identity.request_device_code(
            client_id=provider.client_id, scope=provider.scope, audience="https://other.example/api"
        )


def test_note_5_refresh_rotates_and_the_used_token_is_void(upstream: Upstream) -> None:
    first = authorize(upstream)
    client_id = upstream.emulator.config.client_id
    second = upstream.identity.refresh(client_id=client_id, refresh_token=first.refresh_token)
    third = upstream.identity.refresh(client_id=client_id, refresh_token=second.refresh_token)
    assert len({first.refresh_token, second.refresh_token, third.refresh_token}) == 3
    assert second.scope == "openid profile offline_access"  # narrower than the device flow's
    assert not upstream.emulator.refresh_token_valid(first.refresh_token)
    assert upstream.emulator.refresh_token_valid(third.refresh_token)


def test_reusing_a_used_refresh_token_revokes_the_whole_family(upstream: Upstream) -> None:
    first = authorize(upstream)
    client_id = upstream.emulator.config.client_id
    newest = upstream.identity.refresh(client_id=client_id, refresh_token=first.refresh_token)
    with pytest.raises(InvalidGrantError, match="Unknown or invalid refresh token") as info:
        upstream.identity.refresh(client_id=client_id, refresh_token=first.refresh_token)
    assert info.value.status == 403
    assert upstream.emulator.family_revoked(newest.refresh_token)
    with pytest.raises(InvalidGrantError):
        upstream.identity.refresh(client_id=client_id, refresh_token=newest.refresh_token)


def test_note_6_the_exchange_takes_the_raw_token_not_the_service_token(upstream: Upstream) -> None:
    tokens = authorize(upstream)
    service_token = upstream.service.exchange(tokens.access_token, fallback_expires_at=0)
    with pytest.raises(ServerError, match="failed to get") as info:
        upstream.service.exchange(service_token.token, fallback_expires_at=0)
    assert info.value.status == 500
    assert "upmrid/" in str(info.value)


def test_the_errors_list_form_of_the_service_envelope_is_rendered(upstream: Upstream) -> None:
    upstream.emulator.config.service_error_style = "errors"
    with pytest.raises(ServerError, match="failed to get service token"):
        upstream.service.exchange("not-a-token-at-all", fallback_expires_at=0)


# --- the project listing accepts only a valid service token -------------------------------


@pytest.mark.parametrize("refused_status", [401, 403])
def test_listing_refuses_a_raw_access_token(upstream: Upstream, refused_status: int) -> None:
    upstream.emulator.config.refused_token_status = refused_status
    tokens = authorize(upstream)
    with pytest.raises(TokenRefusedError) as info:
        upstream.service.list_projects(tokens.access_token)
    assert info.value.status == refused_status


def test_listing_refuses_an_expired_service_token(upstream: Upstream) -> None:
    upstream.emulator.config.service_token_lifetime = 3600
    tokens = authorize(upstream)
    service_token = upstream.service.exchange(tokens.access_token, fallback_expires_at=0)
    upstream.service.list_projects(service_token.token)
    upstream.emulator.advance(3601)
    with pytest.raises(TokenRefusedError):
        upstream.service.list_projects(service_token.token)


def test_listing_accepts_the_bare_object_form(upstream: Upstream) -> None:
    upstream.emulator.config.projects_envelope = "bare"
    tokens = authorize(upstream)
    service_token = upstream.service.exchange(tokens.access_token, fallback_expires_at=0)
    assert len(upstream.service.list_projects(service_token.token)) == 1


# --- refresh-token lifetimes (SPEC section 2) -----------------------------------------------


def test_absolute_lifetime_is_not_extended_by_rotation(upstream: Upstream) -> None:
    upstream.emulator.config.refresh_absolute_lifetime = 10 * 86400
    upstream.emulator.config.refresh_idle_lifetime = 0
    token = authorize(upstream).refresh_token
    client_id = upstream.emulator.config.client_id
    for _ in range(9):
        upstream.emulator.advance(86400)
        token = upstream.identity.refresh(client_id=client_id, refresh_token=token).refresh_token
    upstream.emulator.advance(86400)
    with pytest.raises(InvalidGrantError):
        upstream.identity.refresh(client_id=client_id, refresh_token=token)


def test_idle_lifetime_is_reset_by_each_refresh(upstream: Upstream) -> None:
    upstream.emulator.config.refresh_absolute_lifetime = 0
    upstream.emulator.config.refresh_idle_lifetime = 3 * 86400
    token = authorize(upstream).refresh_token
    client_id = upstream.emulator.config.client_id
    for _ in range(5):
        upstream.emulator.advance(2 * 86400)
        token = upstream.identity.refresh(client_id=client_id, refresh_token=token).refresh_token
    upstream.emulator.advance(3 * 86400 + 1)
    with pytest.raises(InvalidGrantError):
        upstream.identity.refresh(client_id=client_id, refresh_token=token)


# --- transient faults ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_5xx_is_a_server_error_and_nothing_was_rotated(upstream: Upstream, status: int) -> None:
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "status", status=status)
    with pytest.raises(ServerError) as info:
        upstream.identity.refresh(client_id="cms-client", refresh_token=token)
    assert info.value.status == status
    assert upstream.emulator.refresh_token_valid(token)


def test_429_carries_the_retry_after_wait(upstream: Upstream) -> None:
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "rate_limit", retry_after=17)
    with pytest.raises(RateLimitedError) as info:
        upstream.identity.refresh(client_id="cms-client", refresh_token=token)
    assert info.value.retry_after == 17


def test_429_carries_the_x_ratelimit_reset_wait(upstream: Upstream) -> None:
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "rate_limit", reset_in=42)
    with pytest.raises(RateLimitedError) as info:
        upstream.identity.refresh(client_id="cms-client", refresh_token=token)
    # The reset is a whole epoch second (rounded up) on the emulator's clock, which runs in
    # real time: the wait is 42 s less whatever real time the answer took, plus the rounding.
    assert info.value.retry_after is not None
    assert 42 - 5 <= info.value.retry_after <= 42 + 1


def test_the_token_endpoint_rate_limit_is_reported_with_its_reset(upstream: Upstream) -> None:
    upstream.emulator.config.rate_limit = 2
    upstream.emulator.config.rate_limit_retry_after = False
    upstream.emulator.advance(60 - upstream.emulator.now() % 60 + 1)  # start of a fixed window
    started = start_device_authorization(upstream.service, free_trial=False)

    def poll() -> None:
        upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        )

    for _ in range(2):
        with pytest.raises(AuthorizationPendingError):
            poll()
        upstream.emulator.advance(5)
    with pytest.raises(RateLimitedError) as info:
        poll()
    # the window's end, less the real time the polls took (whole seconds, rounded up)
    assert info.value.retry_after is not None
    assert 49 - 5 <= info.value.retry_after <= 49 + 1


def test_a_slow_answer_is_a_timeout_with_unknown_outcome(upstream: Upstream) -> None:
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "delay", seconds=1.0)
    with pytest.raises(UpstreamTimeoutError) as info:
        upstream.identity.refresh(client_id="cms-client", refresh_token=token, time_limit=0.2)
    assert info.value.outcome_unknown


def test_a_response_lost_after_the_server_rotated_is_detected(upstream: Upstream) -> None:
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "drop")
    with pytest.raises(UpstreamConnectionError) as info:
        upstream.identity.refresh(client_id="cms-client", refresh_token=token)
    assert info.value.outcome_unknown
    assert not upstream.emulator.refresh_token_valid(token)  # the server did act


def test_a_lost_response_is_recoverable_within_the_reuse_interval(upstream: Upstream) -> None:
    upstream.emulator.config.refresh_reuse_interval = 60
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "drop")
    with pytest.raises(UpstreamConnectionError):
        upstream.identity.refresh(client_id="cms-client", refresh_token=token)
    recovered = upstream.identity.refresh(client_id="cms-client", refresh_token=token)
    assert not upstream.emulator.family_revoked(recovered.refresh_token)
    assert upstream.emulator.refresh_token_valid(recovered.refresh_token)


def test_an_unreachable_upstream_is_a_connection_error_that_did_not_act() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    service = ServiceClient(f"http://127.0.0.1:{port}")
    with pytest.raises(UpstreamConnectionError, match="cannot reach") as info:
        service.provider_info()
    assert not info.value.outcome_unknown


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("html", "HTML page"),
        ("truncated", "not valid JSON"),
        ("empty", "empty response body"),
        ("not_object", "expected a JSON object"),
        ("missing_fields", "no usable refresh_token"),
        ("null_token", "no usable refresh_token"),
        ("huge", "larger than"),
    ],
)
def test_malformed_refresh_answers_never_yield_a_token(
    upstream: Upstream, body: str, problem: str
) -> None:
    token = upstream.emulator.issue_tokens()["refresh_token"]
    upstream.emulator.inject("refresh", "malformed", body=body)
    with pytest.raises(MalformedResponseError, match=problem):
        upstream.identity.refresh(client_id="cms-client", refresh_token=token)


@pytest.mark.parametrize("body", ["html", "truncated", "empty", "missing_fields", "null_token"])
def test_malformed_exchange_answers_never_yield_a_token(upstream: Upstream, body: str) -> None:
    access_token = upstream.emulator.issue_tokens()["access_token"]
    upstream.emulator.inject("exchange", "malformed", body=body)
    with pytest.raises(MalformedResponseError):
        upstream.service.exchange(access_token, fallback_expires_at=0)


@pytest.mark.parametrize("body", ["html", "missing_fields", "not_object"])
def test_malformed_provider_and_device_answers_are_reported(upstream: Upstream, body: str) -> None:
    upstream.emulator.inject("provider", "malformed", body=body)
    with pytest.raises(MalformedResponseError):
        upstream.service.provider_info()
    upstream.emulator.inject("device_code", "malformed", body=body)
    provider = upstream.service.provider_info()
    with pytest.raises(MalformedResponseError):
        upstream.identity.request_device_code(
            client_id=provider.client_id, scope=provider.scope, audience=provider.audience
        )


# --- no secret in any log line or error message --------------------------------------------


def test_no_token_refresh_token_or_device_code_reaches_the_logs(
    upstream: Upstream, log_level: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    """At INFO and at DEBUG (the library's loggers, routed as in the functions, and urllib3's,
    which logs every request line: a token in a URL would be caught)."""
    secrets: list[str] = []
    messages: list[str] = []

    started = start_device_authorization(upstream.service, free_trial=False)
    secrets.append(started.authorization.device_code)
    code = started.authorization.user_code
    upstream.clock.at(11, lambda: upstream.emulator.approve(code))
    upstream.emulator.inject("device_token", "status", status=503)
    poller = started.poller()
    answer = poller.run()
    assert answer is not None
    tokens = answer.strict("device_token")
    secrets += [tokens.access_token, tokens.refresh_token, tokens.id_token or ""]
    service_token = upstream.service.exchange(tokens.access_token, fallback_expires_at=0)
    secrets.append(service_token.token)
    upstream.service.list_projects(service_token.token)
    rotated = upstream.identity.refresh(
        client_id=started.client_id, refresh_token=tokens.refresh_token
    )
    secrets += [rotated.access_token or "", rotated.refresh_token]

    failing_calls: list[Callable[[], object]] = [
        lambda: upstream.service.list_projects(tokens.access_token),
        lambda: upstream.service.exchange(service_token.token, fallback_expires_at=0),
        lambda: upstream.identity.refresh(
            client_id="cms-client", refresh_token=tokens.refresh_token
        ),
        lambda: upstream.identity.poll_device_token(
            client_id=started.client_id, device_code=started.authorization.device_code
        ),
    ]
    for call in failing_calls:
        with pytest.raises(CmsTokenError) as info:
            call()
        messages.append(str(info.value))
        messages.append(repr(info.value))

    captured = capsys.readouterr()
    logged = log_level.keeper.text() + captured.out + captured.err
    assert "retrying" in logged or "upstream" in logged, "the clients log their calls"
    for secret in filter(None, secrets):
        assert secret not in logged
        for message in messages:
            assert secret not in message
    assert repr(tokens).count("eyJ") == 0
    log_level.assert_clean(captured.out, captured.err, *messages, secrets=secrets)
