"""Whether a replica's document may be served without asking the primary: pure functions.

When replication to a region fails, Secrets Manager keeps the versions already there ("they
remain in the replica Region until you explicitly remove them", Secrets Manager User Guide,
"Troubleshoot AWS Secrets Manager replication"), so a replica can hold an old token long after
the primary holds a new one. A replica's document is *stale* for a read (``stale_because``) when

- its token has expired, or expires within the caller's ``min_validity_seconds`` (the cache
  would not keep it);
- it holds the token the caller said was refused (a 401 or a 403); or
- it was issued before the newest document the provider has read from either place (the
  primary has held a newer one since: the primary only moves forward).

Then the primary is read too, and ``preferred`` chooses: an unexpired token over an expired
one, then the later ``issued_at``, then the later ``expires_at``; the primary's on a tie. The
replica is *behind* (``behind``) when the primary's document ranks strictly higher.
"""

from __future__ import annotations

from dataclasses import dataclass

from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.core.clock import to_iso


@dataclass(frozen=True)
class Need:
    """What a read needs of a replica's document: valid ``min_validity_seconds`` past ``now``,
    not the ``refused`` token, issued no earlier than ``newest_issued_at`` (the newest document
    read so far)."""

    now: float
    min_validity_seconds: float
    refused: str | None = None
    newest_issued_at: float | None = None


def stale_because(document: ServiceTokenDocument, need: Need) -> str | None:
    """Why a replica's ``document`` is stale for ``need`` (a clause for a log line, never a
    token), or ``None`` when it may be served without asking the primary."""
    if need.now >= document.expires_at:
        return f"its token expired at {to_iso(document.expires_at)}"
    if need.now >= document.expires_at - need.min_validity_seconds:
        return (
            f"its token expires at {to_iso(document.expires_at)}, within "
            f"{need.min_validity_seconds:.0f} s"
        )
    if need.refused is not None and document.token == need.refused:
        return "it holds the token the service refused"
    if need.newest_issued_at is not None and document.issued_at < need.newest_issued_at:
        return (
            f"its token was issued at {to_iso(document.issued_at)}, before one already read "
            f"(issued at {to_iso(need.newest_issued_at)})"
        )
    return None


def _rank(document: ServiceTokenDocument, now: float) -> tuple[bool, float, float]:
    return (now < document.expires_at, document.issued_at, document.expires_at)


def behind(replica: ServiceTokenDocument, primary: ServiceTokenDocument, now: float) -> bool:
    """Whether the primary's document is strictly fresher than the replica's."""
    return _rank(primary, now) > _rank(replica, now)


def preferred(
    replica: ServiceTokenDocument, primary: ServiceTokenDocument, now: float
) -> ServiceTokenDocument:
    """The document to serve when both were read: the replica's only when it is strictly
    fresher (see the module)."""
    return replica if _rank(replica, now) > _rank(primary, now) else primary


def lag(seconds: float) -> str:
    """A length of time for a message: ``45 s``, ``12 min``, ``3 h 05 min``, ``2.5 days``."""
    span = abs(int(seconds))
    if span < 60:
        return f"{span} s"
    hours, minutes = divmod(span // 60, 60)
    if hours >= 48:
        return f"{span / 86400:.1f} days"
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"
