"""Bounded retries: attempts, back-off, the upstream's wait hint and the caller's deadline."""

from __future__ import annotations

import logging

import pytest

from cmstoken.core.errors import (
    InvalidGrantError,
    RateLimitedError,
    ServerError,
    StoreAccessError,
    StoreUnavailableError,
    TransientError,
    aws_error_code,
)
from cmstoken.core.retry import RetryPolicy, call_with_retries
from support import FakeClock

POLICY = RetryPolicy(attempts=4, base_delay=1.0, max_delay=4.0, max_retry_after=30.0)


class Flaky:
    """Fails with the given errors in order, then returns ``"ok"``."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def server_error() -> ServerError:
    return ServerError("refresh: HTTP 503", endpoint="refresh", status=503)


def test_transient_errors_are_retried_with_exponential_backoff() -> None:
    clock = FakeClock()
    operation = Flaky(server_error(), server_error(), server_error())
    result = call_with_retries(
        operation, retry_on=(TransientError,), policy=POLICY, clock=clock, jitter=lambda: 1.0
    )
    assert result == "ok"
    assert operation.calls == 4
    assert clock.sleeps == [1.0, 2.0, 4.0]


def test_backoff_is_capped_and_jittered_down_to_half() -> None:
    assert POLICY.backoff(10, jitter=1.0) == 4.0
    assert POLICY.backoff(1, jitter=0.0) == 0.5


def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    clock = FakeClock()
    last = server_error()
    operation = Flaky(server_error(), server_error(), server_error(), last)
    with pytest.raises(ServerError) as info:
        call_with_retries(operation, retry_on=(TransientError,), policy=POLICY, clock=clock)
    assert info.value is last
    assert operation.calls == 4


def test_retry_after_hint_replaces_the_backoff() -> None:
    clock = FakeClock()
    limited = RateLimitedError("refresh: HTTP 429", endpoint="refresh", status=429, retry_after=12)
    operation = Flaky(limited)
    assert (
        call_with_retries(operation, retry_on=(TransientError,), policy=POLICY, clock=clock) == "ok"
    )
    assert clock.sleeps == [12.0]


def test_a_hint_beyond_the_policy_is_not_waited_for() -> None:
    clock = FakeClock()
    limited = RateLimitedError(
        "refresh: HTTP 429", endpoint="refresh", status=429, retry_after=3600
    )
    operation = Flaky(limited)
    with pytest.raises(RateLimitedError):
        call_with_retries(operation, retry_on=(TransientError,), policy=POLICY, clock=clock)
    assert clock.sleeps == []


def test_no_retry_whose_wait_would_pass_the_deadline() -> None:
    clock = FakeClock()
    operation = Flaky(server_error(), server_error())
    with pytest.raises(ServerError):
        call_with_retries(
            operation,
            retry_on=(TransientError,),
            policy=POLICY,
            clock=clock,
            deadline=clock.now() + 2.5,
            jitter=lambda: 1.0,
        )
    assert operation.calls == 2
    assert clock.sleeps == [1.0]


def test_errors_outside_retry_on_are_raised_at_once() -> None:
    clock = FakeClock()
    operation = Flaky(InvalidGrantError("refresh: invalid_grant", endpoint="refresh"))
    with pytest.raises(InvalidGrantError):
        call_with_retries(operation, retry_on=(TransientError,), policy=POLICY, clock=clock)
    assert operation.calls == 1


def test_a_retry_warning_names_the_aws_error_code(caplog: pytest.LogCaptureFixture) -> None:
    """An AWS call's retry names what AWS answered (``aws_error``), not only the class; an
    upstream error's has no such field."""
    throttled = StoreUnavailableError(
        "cannot read secret 'cmstoken/refresh-credential': ThrottlingException",
        code="ThrottlingException",
    )
    operation = Flaky(throttled, server_error())
    with caplog.at_level(logging.WARNING, logger="cmstoken.core.retry"):
        call_with_retries(
            operation, retry_on=(Exception,), policy=POLICY, clock=FakeClock(), jitter=lambda: 1.0
        )
    aws, upstream = caplog.records
    assert aws.getMessage() == "retrying after a transient error"
    assert (aws.error, aws.aws_error, aws.operation) == (  # type: ignore[attr-defined]
        "StoreUnavailableError",
        "ThrottlingException",
        "call",
    )
    assert upstream.error == "ServerError"  # type: ignore[attr-defined]
    assert not hasattr(upstream, "aws_error")


def test_aws_error_code_is_the_code_of_an_aws_call_error_only() -> None:
    assert aws_error_code(StoreAccessError("x", code="EncryptionFailure")) == "EncryptionFailure"
    assert aws_error_code(StoreAccessError("x")) is None
    assert aws_error_code(server_error()) is None
    assert aws_error_code(ValueError("x")) is None
