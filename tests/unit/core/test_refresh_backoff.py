"""The back-off of failed refresh attempts (``core.refresh_backoff``): the table of
docs/how-rotation-works.md ("Failed attempts back off") against the code, and the bound the
version budget relies on, whoever attempts and whenever (any attempt at or after the time the
last failure allows, with any ``Retry-After``)."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cmstoken.core import refresh_backoff
from cmstoken.core.refresh_backoff import DAY, Failures, failed, refusal, streak

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_795_500_000.0


def documented() -> list[list[str]]:
    """The rows (failures in a row, next attempt) of the table in how-rotation-works.md."""
    text = (ROOT / "docs/how-rotation-works.md").read_text()
    after = text.split("<!-- refresh-backoff -->\n", 1)[1]
    lines = [line for line in after.split("\n\n", 1)[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_documented_waits_are_the_codes() -> None:
    rows = documented()
    assert rows[0][0] == "1 or 2"
    assert rows[0][1].startswith("at once")
    assert [refresh_backoff.delay(n) for n in (1, 2)] == [0.0, 0.0]
    for (count, wait), seconds in zip(rows[1:], refresh_backoff.BACKOFF, strict=True):
        minutes = re.match(r"(\d+) minutes later", wait)
        assert minutes is not None, wait
        first = int(count.split()[0])
        assert refresh_backoff.delay(first) == int(minutes.group(1)) * 60 == seconds
    assert refresh_backoff.delay(50) == refresh_backoff.BACKOFF[-1]


def test_a_streak_makes_thirteen_attempts_in_its_first_day() -> None:
    """Three at once, one after each wait that fits in 24 hours, the last chance before the
    token expires, and Lambda's retry of a run that lost its answer, spared a wait."""
    assert refresh_backoff.ATTEMPTS_A_DAY == 13


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=4 * 3600),  # how long after it was allowed
            st.none() | st.floats(min_value=0, max_value=7200),  # Retry-After
            st.booleans(),  # whether its answer was lost
        ),
        min_size=1,
        max_size=40,
    ),
    st.none() | st.floats(min_value=-DAY, max_value=2 * DAY),
)
def test_no_24_hours_hold_more_attempts_than_a_streaks_first_day(
    attempts: list[tuple[float, float | None, bool]], expires_in: float | None
) -> None:
    """Whoever attempts, and however late after the back-off allows, whenever the published
    token expires (one token for the streak), whichever answers are lost: the failures of one
    streak in any 24 hours are at most ``ATTEMPTS_A_DAY``."""
    expires_at = None if expires_in is None else NOW + expires_in
    times, record, now = [], None, NOW
    for late, retry_after, lost in attempts:
        now = (record.retry_at if record else now) + late
        assert refusal(record, now=now) is None
        times.append(now)
        record = failed(
            record, now=now, retry_after=retry_after, expires_at=expires_at, answer_lost=lost
        )
    for start in times:
        within = [t for t in times if start <= t <= start + DAY]
        assert len(within) <= refresh_backoff.ATTEMPTS_A_DAY


def test_an_attempt_before_the_retry_time_is_refused_saying_until_when() -> None:
    record = Failures(count=4, last_at=NOW, retry_at=NOW + 6600)
    reason = refusal(record, now=NOW + 6599)
    assert reason is not None
    assert reason.startswith("backing off: 4 refresh attempts in a row failed")
    assert refusal(record, now=NOW + 6600) is None


def test_no_wait_passes_the_last_chance_before_the_token_expires() -> None:
    """A long wait is cut to ``LAST_CHANCE`` before the token expires, once: after that
    attempt fails, the back-off runs on."""
    expires_at = NOW + 3 * 3600
    record = failed(Failures(5, NOW - 60, NOW), now=NOW, expires_at=expires_at)
    assert record.retry_at == expires_at - refresh_backoff.LAST_CHANCE
    later = failed(record, now=record.retry_at, expires_at=expires_at)
    assert later.retry_at == record.retry_at + refresh_backoff.BACKOFF[-1]


def test_a_token_published_after_the_last_failure_ends_the_streak() -> None:
    record = Failures(count=7, last_at=NOW, retry_at=NOW + 13800)
    assert streak(record, None) == record
    assert streak(record, NOW - 5) == record
    assert streak(record, NOW + 0.5) is None  # the failure's second: a store, then its publication
    assert streak(record, NOW + 1) is None
    assert failed(streak(record, NOW + 1), now=NOW + 2).count == 1
    assert failed(record, now=NOW + 2).count == 8


def test_a_lost_answer_spares_the_wait_of_lambdas_first_retry_once_a_streak() -> None:
    """Three 503s (the streak waits), then a lost answer: the next attempt (Lambda's first
    retry) goes at once; the one after it, and a later lost answer's retry, wait."""
    record = None
    for at in (0, 60, 180):
        record = failed(record, now=NOW + at)
    assert record is not None
    assert record.retry_at - record.last_at == refresh_backoff.BACKOFF[0]
    lost = failed(record, now=NOW + 3600, answer_lost=True)
    assert (lost.retry_at, lost.owed, lost.spared) == (NOW + 3600, 2, 1)
    retried = failed(lost, now=NOW + 3660)  # not acted on: still owed, but the spare is spent
    assert (retried.owed, retried.spared) == (1, 1)
    assert retried.retry_at == NOW + 3660 + refresh_backoff.BACKOFF[2]
    later = failed(retried, now=NOW + 30_000, answer_lost=True)
    assert later.retry_at - later.last_at == refresh_backoff.BACKOFF[-1]


def test_the_first_attempts_lost_answers_spare_no_wait() -> None:
    """A streak's first three go at once anyway: their lost answers (one run and Lambda's
    two retries) spare nothing, and owe nothing after them."""
    record = None
    for at in (0, 60, 180):
        record = failed(record, now=NOW + at, answer_lost=True)
    assert record is not None
    assert (record.owed, record.spared) == (0, 0)
    assert record.retry_at - record.last_at == refresh_backoff.BACKOFF[0]
