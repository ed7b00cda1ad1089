"""How often a refresh is attempted while attempts keep failing (SPEC section 4 item 5: a
transient failure gets a bounded back-off, then fails so that the platform retries).

Every attempt that claims the credential and fails writes versions of the refresh credential
secret (its claim and its release, and its store when the refresh worked but the publication
did not), and Secrets Manager keeps a day of versions (``core.version_budget``). Without a
back-off the schedule's checks and Lambda's two retries of each would make an outage of the
identity provider (or of the service's exchange) cost 6 versions an hour, more at shorter
intervals: the reserve kept for the schedule and an operator's re-authorization would be spent
by the schedule itself. So the release of a failed attempt records how many attempts in a row
failed (``Failures``), and the next attempt waits:

- the first three in a row are never delayed: the run and Lambda's two retries of it, "about 1
  and 3 minutes later" (SPEC 2b/2c: a token whose answer was lost is presented again promptly;
  a tenant's reuse interval of 5 minutes must be enough);
- then ``BACKOFF`` after the third, the fourth, the fifth and every later failure: 10 minutes
  (so that, at every schedule interval, a check within the ``RotationFailingAlarm``'s window
  attempts again: a failure the next run repairs raises no alarm), then a little short of 1, 2
  and 4 hours, so that an hourly schedule's check is the one that makes the attempt;
- except right after a lost answer (the provider may have rotated the token, and only
  presenting it again within the tenant's reuse interval recovers it; SPEC 2b/2c): the next
  ``OWED_AFTER_LOST`` attempts, Lambda's two retries of the run that lost it, go at once
  whatever they fail with, except where a wait was due: only ``SPARED_A_STREAK`` attempt of a
  streak goes at once where a wait was due (a lost answer, then Lambda's first retry);
- but never past ``LAST_CHANCE`` before the published service token expires, when that moment
  is still ahead: the back-off is not what lets a token expire after the provider recovered.
  This adds at most one attempt to a streak (a streak keeps one published token).

So a lost answer's retry goes at once when it matters (a streak already waiting, then a lost
answer), a bounded number of times; a streak that waits with an answer at stake has had a
second fault (docs/how-rotation-works.md, "What is still lost").

A streak ends when a service token is published after its last failure (a refresh that went
through, or a new authorization). At most ``ATTEMPTS_A_DAY`` attempts fall in any 24 hours.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmstoken.core.clock import to_iso

DAY = 86_400.0
AT_ONCE = 3
BACKOFF = (10 * 60.0, 50 * 60.0, 110 * 60.0, 230 * 60.0)
LAST_CHANCE = 90 * 60.0
OWED_AFTER_LOST = 2
SPARED_A_STREAK = 1


@dataclass(frozen=True)
class Failures:
    """A streak of failed refresh attempts: how many in a row, when the last one ended, when
    the next may start (epoch seconds), how many attempts are still owed at once after a lost
    answer, and how many went at once where a wait was due."""

    count: int
    last_at: float
    retry_at: float
    owed: int = 0
    spared: int = 0


def delay(count: int) -> float:
    """Seconds after the ``count``-th failure in a row before the next attempt."""
    if count < AT_ONCE:
        return 0.0
    return BACKOFF[min(count - AT_ONCE, len(BACKOFF) - 1)]


def offsets_within(span: float) -> list[float]:
    """When one streak's attempts start, in seconds from its first, up to ``span``: each as
    soon as the back-off allows."""
    at, offsets = 0.0, []
    while at <= span:
        offsets.append(at)
        at += delay(len(offsets))
    return offsets


def attempts_within(span: float) -> int:
    """The most attempts one streak makes in ``span`` seconds from its first (both ends in):
    those the back-off allows, its last chance before the token expires, and those spared a
    wait after a lost answer."""
    return len(offsets_within(span)) + 1 + SPARED_A_STREAK


# A streak's first day is its densest: the back-off only grows.
ATTEMPTS_A_DAY = attempts_within(DAY)


def streak(recorded: Failures | None, published_at: float | None) -> Failures | None:
    """The streak ``recorded`` while it lasts: ``None`` once a service token was published
    (``published_at``, ``None``: none is) after its last failure."""
    # Stored times are whole seconds: a publication in the second of the last failure is
    # counted as after it (a refresh stores its attempt as failed, then publishes).
    if recorded is None or (published_at is not None and published_at >= recorded.last_at):
        return None
    return recorded


def refusal(recorded: Failures | None, *, now: float) -> str | None:
    """Why no attempt may start now in the streak ``recorded``; ``None``: one may."""
    if recorded is None or now >= recorded.retry_at:
        return None
    return (
        f"backing off: {recorded.count} refresh attempts in a row failed; the next may start "
        f"at {to_iso(recorded.retry_at)}"
    )


def failed(
    previous: Failures | None,
    *,
    now: float,
    retry_after: float | None = None,
    expires_at: float | None = None,
    answer_lost: bool = False,
) -> Failures:
    """The streak after an attempt that failed at ``now``: one more in a row, and the next
    attempt after the back-off or the upstream's own wait hint (``Retry-After``), whichever
    is later, but no later than ``LAST_CHANCE`` before the published token expires
    (``expires_at``) while that is still ahead; after the hint only, while attempts are owed
    at once after a lost answer (``answer_lost``: this one lost its answer) and the streak
    has spared fewer than ``SPARED_A_STREAK`` waits."""
    count, owing, spared = 1, 0, 0
    if previous is not None:
        count, owing, spared = previous.count + 1, previous.owed, previous.spared
    # A lost answer opens Lambda's retries unless it is one of them.
    owed = OWED_AFTER_LOST if answer_lost and not owing else max(owing - 1, 0)
    hint = retry_after or 0.0
    if owed and delay(count) and spared < SPARED_A_STREAK:
        return Failures(count, last_at=now, retry_at=now + hint, owed=owed, spared=spared + 1)
    retry_at = now + max(delay(count), hint)
    if expires_at is not None and now < expires_at - LAST_CHANCE < retry_at:
        retry_at = max(expires_at - LAST_CHANCE, now + hint)
    return Failures(count, last_at=now, retry_at=retry_at, owed=owed, spared=spared)
