"""Failed refresh attempts back off (``core.refresh_backoff``), so that an outage of the identity
provider or of the service's exchange costs the refresh credential secret no more versions than
the version budget keeps for the schedule (docs/how-rotation-works.md, "Failed attempts back
off").

On Lambda's retry semantics: "If the function returns an error, Lambda attempts to run it two
more times, with a one-minute wait between the first two attempts, and two minutes between the
second and third attempts" (Lambda Developer Guide, "Asynchronous invocation"); a run that
returns is not retried. The schedule invokes the rotator every hour (the default
``RotationIntervalMinutes``). Secrets Manager keeps every version younger than a day
(PutSecretValue: "it does not remove versions created less than 24 hours ago"), so a day's
writes are what the quota sees."""

from __future__ import annotations

from collections import Counter

import pytest

from cmstoken.core import refresh_backoff
from cmstoken.core.errors import CmsTokenError, RefreshBackoffError
from cmstoken.core.version_budget import SCHEDULE_DAY
from harness import Stack
from support import load_event

pytestmark = pytest.mark.integration

HOUR = 3600
LAMBDA_RETRIES = (60, 120)  # seconds before the first and between the first and second retry
# An outage "from now on": the emulator queues one fault per request to come, each an object, so
# a million of them cost seconds; ten thousand are far more requests than a test makes (a day of
# outage makes well under a thousand, which the test checks: the outage never ran out).
OUTAGE = 10_000


def make_due(stack: Stack) -> None:
    stack.emulator.advance(19 * HOUR)


def scheduled_check(stack: Stack, outcomes: Counter[str]) -> None:
    """One scheduled invocation, retried as Lambda retries a failed asynchronous one."""
    for wait in (0, *LAMBDA_RETRIES):
        stack.emulator.advance(wait)
        try:
            outcomes[stack.invoke("rotator", load_event("rotator-scheduled"))["outcome"]] += 1
            return
        except RefreshBackoffError:
            outcomes["backing off"] += 1
        except CmsTokenError:
            outcomes["failed"] += 1


def failing_streak(stack: Stack, status: int) -> Counter[str]:
    """A seeded stack, due, whose token endpoint answers ``status`` from now on, after one
    scheduled check: its run and Lambda's two retries failed at once (the streak's first
    three never wait). The check's outcomes."""
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "status", times=OUTAGE, status=status)
    outcomes: Counter[str] = Counter()
    scheduled_check(stack, outcomes)
    assert outcomes == Counter({"failed": 3})
    return outcomes


def recorded(stack: Stack) -> refresh_backoff.Failures:
    """The streak of failed attempts the refresh credential's document records."""
    failures = stack.refresh_document().failures
    assert failures is not None
    return failures


def written(stack: Stack) -> int:
    return stack.aws_calls["PutSecretValue"]


@pytest.mark.parametrize(
    ("endpoint", "status"), [("refresh", 503), ("refresh", 502), ("exchange", 503)]
)
def test_a_day_of_outage_writes_no_more_than_the_schedules_day(
    stack: Stack, endpoint: str, status: int
) -> None:
    """A day of 503s from the token endpoint (nothing acted on), of a gateway's 502s there
    (each answer lost: the provider may have acted), or of 503s from the service's exchange
    (each attempt's refresh goes through and is stored; its token is never published): at most
    ``ATTEMPTS_A_DAY`` attempts and ``SCHEDULE_DAY`` versions, where every hourly check and
    each of Lambda's retries would otherwise attempt (72 attempts, 144 versions or more). The
    day after, the outage over, the next attempt rotates within the longest wait."""
    stack.seed()
    make_due(stack)
    stack.emulator.inject(endpoint, "status", times=OUTAGE, status=status)
    outcomes: Counter[str] = Counter()
    start = stack.clock.now()
    while stack.clock.now() < start + 24 * HOUR - 300:
        scheduled_check(stack, outcomes)
        next_check = start + HOUR * (1 + (stack.clock.now() - start) // HOUR)
        stack.emulator.advance(next_check - stack.clock.now())
    assert stack.emulator.counts[endpoint] < OUTAGE  # every request of the day met the outage
    attempts = recorded(stack).count
    assert attempts <= refresh_backoff.ATTEMPTS_A_DAY, outcomes
    assert written(stack) <= SCHEDULE_DAY, (written(stack), outcomes)
    print(endpoint, status, dict(outcomes), "attempts", attempts, "versions", written(stack))
    if endpoint == "refresh":
        assert outcomes["failed"] == attempts, outcomes
        assert outcomes["backing off"] > 0
    stack.emulator.clear_faults()
    recovered = stack.clock.now()
    while stack.clock.now() < recovered + refresh_backoff.BACKOFF[-1] + HOUR:
        scheduled_check(stack, outcomes)
        if outcomes["rotated"]:
            break
        stack.emulator.advance(HOUR)
    assert outcomes["rotated"] == 1, outcomes
    assert stack.published_token_works()
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())


def test_the_first_failures_are_retried_at_once_and_the_streak_ends_with_a_published_token(
    stack: Stack,
) -> None:
    """Lambda's two retries of a failed run attempt again at once (a lost answer must be
    presented again within the provider's reuse interval); the third failure in a row waits;
    a token published ends the streak."""
    failing_streak(stack, 503)
    failures = recorded(stack)
    assert failures.count == 3
    assert failures.retry_at - failures.last_at == refresh_backoff.BACKOFF[0]
    stack.emulator.clear_faults()
    stack.emulator.advance(refresh_backoff.BACKOFF[0] - 60)
    with pytest.raises(RefreshBackoffError, match="3 refresh attempts in a row failed"):
        stack.invoke("rotator", load_event("rotator-scheduled"))
    refreshes = stack.emulator.counts["refresh"]
    requested = stack.invoke("rotator", load_event("rotator-refresh-requested"))
    assert (requested["outcome"], requested["reason"][:11]) == ("skipped", "backing off")
    assert stack.emulator.counts["refresh"] == refreshes
    stack.emulator.advance(60)
    assert stack.invoke("rotator", load_event("rotator-scheduled"))["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == refreshes + 1
    # The failures stay in the document until the next failure; a published token ends them.
    make_due(stack)
    stack.emulator.inject("refresh", "status", times=OUTAGE, status=503)
    with pytest.raises(CmsTokenError):
        stack.invoke("rotator", load_event("rotator-scheduled"))
    assert recorded(stack).count == 1


def test_an_operators_rotate_is_not_delayed(stack: Stack) -> None:
    """``cmstoken-admin rotate`` (a direct invocation with ``{"force": true}``, which only IAM
    in the stack's account allows) attempts at once, whatever the streak: an operator who
    fixed the cause need not wait hours for the schedule's next attempt."""
    failing_streak(stack, 503)
    assert refresh_backoff.refusal(stack.refresh_document().failures, now=stack.clock.now())
    stack.emulator.clear_faults()
    assert stack.invoke("rotator", load_event("rotator-force"))["outcome"] == "rotated"


def test_retry_after_longer_than_the_wait_is_kept(stack: Stack) -> None:
    """A 429 whose ``Retry-After`` outlasts the invocation: the next attempt waits for it, even
    among the first failures of a streak (SPEC 4.5: honour ``Retry-After``)."""
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "rate_limit", times=OUTAGE, retry_after=900)
    with pytest.raises(CmsTokenError):
        stack.invoke("rotator", load_event("rotator-scheduled"))
    failures = recorded(stack)
    assert failures.count == 1
    assert failures.retry_at - failures.last_at >= 899
    refreshes = stack.emulator.counts["refresh"]
    stack.emulator.advance(60)
    with pytest.raises(RefreshBackoffError):
        stack.invoke("rotator", load_event("rotator-scheduled"))
    assert stack.emulator.counts["refresh"] == refreshes


def test_a_lost_answer_in_a_streak_is_presented_again_on_lambdas_retry(stack: Stack) -> None:
    """A streak already backing off (three 503s), then the next check's refresh is acted on
    and both its answers are lost (the connection closes). Lambda retries the failed run a
    minute later; a provider whose reuse interval is 5 minutes accepts the token once more
    only then (SPEC section 2), so that retry must not back off: it presents the token at once
    and the family survives."""
    stack.emulator.config.refresh_reuse_interval = 300
    outcomes = failing_streak(stack, 503)
    stack.emulator.clear_faults()
    stack.emulator.advance(HOUR - sum(LAMBDA_RETRIES))
    stack.emulator.inject("refresh", "drop", times=2)
    scheduled_check(stack, outcomes)
    assert outcomes == Counter({"failed": 4, "rotated": 1}), outcomes
    newest = stack.newest_refresh_token()
    assert stack.emulator.refresh_token_valid(newest)
    assert not stack.emulator.family_revoked(newest)
    assert stack.published_token_works()


def test_a_streak_spares_the_wait_after_a_lost_answer_once(stack: Stack) -> None:
    """Answers lost on every attempt (a gateway's 502s: the provider may have acted each time):
    the first lost answer after a wait has Lambda's first retry at once, once a streak; the
    next runs' retries back off, so lost answers do not make the schedule attempt at every
    check and Lambda retry."""
    outcomes = failing_streak(stack, 502)  # three at once: the streak's first three never wait
    assert (recorded(stack).spared, recorded(stack).owed) == (0, 0)
    stack.emulator.advance(HOUR - sum(LAMBDA_RETRIES))
    scheduled_check(stack, outcomes)  # a wait was due: Lambda's first retry spared it
    assert outcomes == Counter({"failed": 5, "backing off": 1})
    assert recorded(stack).spared == 1
    stack.emulator.advance(HOUR - sum(LAMBDA_RETRIES))
    scheduled_check(stack, outcomes)
    assert outcomes == Counter({"failed": 5, "backing off": 4})
