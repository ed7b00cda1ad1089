"""The refresh credential secret's versions: one account for every writer.

Secrets Manager "removes outdated versions when there are more than 100, but it does not remove
versions created less than 24 hours ago. If you call PutSecretValue more than once every 10
minutes, you create more versions than Secrets Manager removes, and you will reach the quota
for secret versions" (Secrets Manager API Reference, PutSecretValue). A write refused after a
refresh (or an approved device-code poll) would lose the refresh token it carries, and a
scheduled refresh refused for a day would let the service token expire. So every action that
writes the secret is counted before its first write, by who caused it:

- ``INSIDE``: the schedule's refreshes and an operator's re-authorization (the bootstrap asked
  without the links' alias);
- ``OUTSIDE``: whatever a caller outside the stack can cause: a forced refresh (a refresh
  request, ``{"force": true}``) and anything the bootstrap does through the links' alias (a
  link's start and its background polls).

An action may start only while its writes fit under its class's limit, leaving ``IN_FLIGHT``
versions to the writes that must follow a spend already made (a refresh's store and release,
an approval's storage and promotion), which are never checked and so never refused. Outside
callers stop ``RESERVE`` versions earlier: what the schedule writes in a day and what one
re-authorization writes at most. The arithmetic is the table in docs/how-rotation-works.md
("The version budget"), which ``tests/unit/core/test_version_budget.py`` holds to these numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from cmstoken.core import refresh_backoff
from cmstoken.core.clock import to_iso

QUOTA = 100
DAY = 86_400.0

# One refresh: the claim, the store, and a lease given back or a refusal noted.
PER_REFRESH = 3
# A bootstrap start: the pending authorization.
PER_START = 1
# One poll invocation: its schedule or the authorization forgotten (one write), or the approval
# stored, then promoted (a write) or dropped (a write) and a refusal of the service noted.
PER_POLL = 3
# Writes that may still follow spends already made, whatever else writes meanwhile: one
# refresh's store and release (reserved concurrency 1, or the lease) and one approval's
# promotion and notes (a device code yields tokens once).
IN_FLIGHT = (PER_REFRESH - 1) + PER_POLL

# The schedule in a day. Refresh attempts keep to the back-off of failed ones
# (``core.refresh_backoff``): one streak makes at most ``ATTEMPTS_A_DAY`` in 24 hours. The
# service token lives about 24 hours and is refreshed within its last RefreshMarginSeconds (at
# most ``MAX_MARGIN_SECONDS``), so a streak ends with a token that is not due for 24 hours less
# the margin: one day holds at most two streaks, within the margin's hours between them. Each
# attempt writes at most ``PER_ATTEMPT``: its claim, then its store (which records the attempt
# as failed unless its token is published) or its lease given back with the failure recorded,
# or the credential marked refused; and one more, once: a store that went through unseen
# before the lease was given back (the answer is then lost).
PER_ATTEMPT = 2
MAX_MARGIN_SECONDS = 43_200
SCHEDULE_ATTEMPTS_A_DAY = max(
    refresh_backoff.ATTEMPTS_A_DAY,
    *(
        refresh_backoff.attempts_within(first)
        + refresh_backoff.attempts_within(MAX_MARGIN_SECONDS - first)
        for first in refresh_backoff.offsets_within(MAX_MARGIN_SECONDS)
    ),
)
SCHEDULE_DAY = SCHEDULE_ATTEMPTS_A_DAY * PER_ATTEMPT + 1
# One re-authorization by an operator (``cmstoken-admin bootstrap``): the start, and poll
# invocations of 20 s each for the device code's 900 s. A poll writes its schedule only when
# the interval grew (``slow_down``, 5 s more each time) or the next poll lies beyond its
# 20 s: intervals of 25 s and more leave at most 36 polls in 900 s, after at most 4 slow_downs
# below that; the last poll's approval, promotion and note.
DEVICE_CODE_SECONDS = 900
REAUTHORIZATION_POLL_WRITES = DEVICE_CODE_SECONDS // 25 + 4
REAUTHORIZATION = PER_START + REAUTHORIZATION_POLL_WRITES + PER_POLL
# Kept from outside callers for the schedule and a re-authorization.
RESERVE = SCHEDULE_DAY + REAUTHORIZATION


class Writer(Enum):
    """Who caused an action, and so which limit it starts under."""

    INSIDE = "inside"
    OUTSIDE = "outside"

    @property
    def limit(self) -> int:
        """The most versions in use once an action of this class has written all it may."""
        inside = QUOTA - IN_FLIGHT
        return inside if self is Writer.INSIDE else inside - RESERVE


@dataclass(frozen=True)
class Version:
    """One version of the secret: when it was created (epoch seconds) and whether it carries a
    staging label (``AWSCURRENT``, ``AWSPREVIOUS``), which keeps it whatever its age."""

    created: float
    staged: bool


@dataclass(frozen=True)
class Budget:
    """The versions in use now, and when the oldest unlabeled one of the last 24 hours ages out
    (``None``: none will)."""

    in_use: int
    frees_at: float | None

    def refusal(self, writer: Writer, writes: int, what: str) -> str | None:
        """Why ``what`` (an action of ``writer`` that may write ``writes`` versions) may not
        start now; ``None``: it may."""
        if self.in_use + writes <= writer.limit:
            return None
        whose = (
            f"the {writer.limit} that callers outside the stack may fill (forced refreshes, "
            f"links): {RESERVE} more are kept for the schedule and an operator's "
            "re-authorization"
            if writer is Writer.OUTSIDE
            else f"the {writer.limit} of Secrets Manager's {QUOTA} that may be filled before "
            f"the {IN_FLIGHT} kept for the writes that follow a refresh or an approval"
        )
        return (
            f"version budget: {what} may write {writes} versions of the refresh credential, and "
            f"{self.in_use} are in use, of {whose}" + self._until()
        )

    def _until(self) -> str:
        return "" if self.frees_at is None else f"; one ages out at {to_iso(self.frees_at)}"


def budget(versions: Iterable[Version], now: float) -> Budget:
    """The budget of a secret whose versions are ``versions``, at ``now``."""
    young = [v for v in versions if v.staged or now - v.created < DAY]
    ageing = [v.created + DAY for v in young if not v.staged and math.isfinite(v.created)]
    return Budget(in_use=len(young), frees_at=min(ageing) if ageing else None)


def refusal(
    versions: Iterable[tuple[float, bool]], now: float, writer: Writer, writes: int, what: str
) -> tuple[str, float | None] | None:
    """Why ``what`` may not start now for the secret's ``versions`` (creation time, staged),
    with when a version ages out (``None``: never); ``None``: it may start."""
    found = budget((Version(created, staged) for created, staged in versions), now)
    reason = found.refusal(writer, writes, what)
    return None if reason is None else (reason, found.frees_at)
