"""The refresh credential secret's version budget: the decision, from the versions read.

Secrets Manager "removes outdated versions when there are more than 100, but it does not remove
versions created less than 24 hours ago. If you call PutSecretValue more than once every 10
minutes, you create more versions than Secrets Manager removes, and you will reach the quota
for secret versions" (Secrets Manager API Reference, PutSecretValue). A write refused there
after a refresh would lose the rotated refresh token, so a refresh starts only when the writes
it may make fit: the claim, the store, and one more (a lease given back, or the credential
marked refused). The versions in use are those created in the last 24 hours and those that
carry a staging label.

Every writer of the secret counts (docs/how-rotation-works.md, "The version budget"): a
scheduled refresh (about every 18 hours), a forced one (at most every
``MinRefreshIntervalSeconds``, requests coalesced to one a five minutes), the bootstrap (a
start, a poll's schedule, the approval, its promotion). A forced refresh is the only one a
caller outside the stack can ask for, so it leaves ``RESERVE`` versions to the others: the
scheduled refreshes and a re-authorization keep their room, and a flood of requests writes at
most ``QUOTA - RESERVE`` versions in any 24 hours.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

from cmstoken.core.clock import to_iso
from cmstoken.core.errors import VersionQuotaError

logger = logging.getLogger(__name__)

QUOTA = 100
DAY = 86_400.0
# Writes one refresh may make: the claim, the store, and a lease given back or a refusal noted.
PER_REFRESH = 3
# Left by forced refreshes to the other writers: two scheduled refreshes a day and a
# re-authorization (a start, its polls' schedules, the approval and its promotion), with room.
RESERVE = 24


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

    def forced_refusal(self) -> str | None:
        """Why a forced refresh may not start now (``None``: it may)."""
        if self.in_use + PER_REFRESH <= QUOTA - RESERVE:
            return None
        return (
            f"version budget: {self.in_use} versions of the refresh credential are in use (of "
            f"Secrets Manager's {QUOTA}); forced refreshes leave {RESERVE} to scheduled ones"
            + self._until()
        )

    def refusal(self) -> str | None:
        """Why no refresh may start now, forced or due (``None``: one may)."""
        if self.in_use + PER_REFRESH <= QUOTA:
            return None
        return (
            f"not refreshing: {self.in_use} versions of the refresh credential are in use, and "
            f"a refresh may write {PER_REFRESH}, past Secrets Manager's quota of {QUOTA}"
            + self._until()
        )

    def _until(self) -> str:
        return "" if self.frees_at is None else f" until {to_iso(self.frees_at)}"


def budget(versions: Iterable[Version], now: float) -> Budget:
    """The budget of a secret whose versions are ``versions``, at ``now``."""
    young = [v for v in versions if v.staged or now - v.created < DAY]
    ageing = [v.created + DAY for v in young if not v.staged and math.isfinite(v.created)]
    return Budget(in_use=len(young), frees_at=min(ageing) if ageing else None)


def refusal(versions: Iterable[tuple[float, bool]], now: float, *, forced: bool) -> str | None:
    """Why a refresh may not start now for the secret's ``versions`` (creation time, staged):
    a forced one is skipped with the reason returned; any other raises ``VersionQuotaError``,
    before any write. ``None``: it may start."""
    found = budget((Version(created, staged) for created, staged in versions), now)
    if not forced and (hard := found.refusal()) is not None:
        raise VersionQuotaError(hard)
    reason = found.forced_refusal() if forced else None
    if reason is not None:
        logger.warning("refresh not started", extra={"reason": reason})
    return reason
