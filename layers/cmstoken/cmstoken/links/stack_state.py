"""The stack as the links see it: what the bootstrap's ``status`` action answers (metadata
only), read into what a link is bound to, what is pending and what is needed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from cmstoken.core.clock import parse_iso
from cmstoken.core.errors import DocumentError


class Need(Enum):
    """Why the stack needs a person to approve a new authorization."""

    NOT_BOOTSTRAPPED = "not_bootstrapped"
    REFUSED = "refused"  # the identity provider refused the credential (invalid_grant/_client)
    EXPIRING = (
        "expiring"  # the refresh family is old enough to warn (ReauthorizationWarningSeconds)
    )


@dataclass(frozen=True)
class Pending:
    """An authorization waiting for its approval, as the link that started it sees it."""

    user_code: str
    verification_uri_complete: str
    expires_at: int


@dataclass(frozen=True)
class Elsewhere:
    """A link's start that met an authorization another link or an operator started: only
    when it expires."""

    expires_at: int


@dataclass(frozen=True)
class Spent:
    """A link's start the bootstrap refused before any write: what outside callers may write
    of the refresh credential is spent (``core.version_budget``) until ``retry_at`` (``None``:
    no version will age out)."""

    retry_at: int | None


@dataclass(frozen=True)
class Waiting:
    """A pending authorization as the stack's state shows it to the links: the tag of the
    link that started it (``None``: an operator did) and when it expires; never its code."""

    link: str | None
    expires_at: int


@dataclass(frozen=True)
class StackState:
    """The credential's status (``absent``, ``active``, ``reauthorization_required``), its
    ``authorized_at`` (``binding``, 0 when there is none: what a link is bound to), its
    ``reauthorize_by``, when the published service token expires, and any pending
    authorization."""

    status: str
    binding: int
    reauthorize_by: int | None
    token_expires_at: int | None
    pending: Waiting | None

    def need(self, *, now: int, warning_seconds: int) -> Need | None:
        """What is needed now; ``None`` when the credential works and is younger than
        ``warning_seconds`` (the family's age since its authorization, as the template's
        ``ReauthorizationWarningSeconds`` means it; 0: no warning)."""
        if self.status == "absent":
            return Need.NOT_BOOTSTRAPPED
        if self.status != "active":
            return Need.REFUSED
        if warning_seconds > 0 and self.binding > 0 and now - self.binding >= warning_seconds:
            return Need.EXPIRING  # as RefreshFamilyAgingAlarm and `status` read the setting
        return None

    def pending_at(self, now: int) -> Waiting | None:
        """The pending authorization, while it can still be approved."""
        return self.pending if self.pending and self.pending.expires_at > now else None


def read_status(answer: Any) -> StackState:
    """The bootstrap's ``status`` answer; ``DocumentError`` when it is not that shape."""
    try:
        credential = answer["credential"]
        status = credential["status"]
        if status not in ("absent", "active", "reauthorization_required"):
            raise DocumentError(f"unknown credential status {status!r}")
        pending = answer["pending"]
        return StackState(
            status=status,
            binding=_epoch(credential.get("authorized_at")) or 0,
            reauthorize_by=_epoch(credential.get("reauthorize_by")),
            token_expires_at=_epoch(credential.get("service_token_expires_at")),
            pending=None if pending is None else _waiting(pending),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DocumentError(f"the bootstrap's status answer is malformed: {exc!r}") from exc


def _waiting(answer: dict[str, Any]) -> Waiting:
    link = answer["link"]
    if link is not None and not isinstance(link, str):
        raise TypeError(f"a link's tag must be a string, not {type(link).__name__}")
    return Waiting(link=link, expires_at=_epoch(answer["expires_at"]) or 0)


def read_started(answer: Any) -> Pending | Elsewhere | Spent:
    """The bootstrap's answer to a link's ``start``: the authorization it started, that
    another is pending, or that the version budget refused it; ``DocumentError`` for any other
    answer."""
    status = answer.get("status") if isinstance(answer, dict) else None
    try:
        if status == "pending_elsewhere":
            return Elsewhere(expires_at=_epoch(answer["expires_at"]) or 0)
        if status == "failed" and answer.get("reason") == "version_budget":
            return Spent(retry_at=_epoch(answer.get("retry_at")))
        if status != "pending":
            raise DocumentError("the bootstrap did not start an authorization")
        return Pending(
            user_code=str(answer["user_code"]),
            verification_uri_complete=str(answer["verification_uri_complete"]),
            expires_at=_epoch(answer["expires_at"]) or 0,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise DocumentError(f"the bootstrap's pending authorization is malformed: {exc!r}") from exc


def _epoch(text: Any) -> int | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"a time must be a string, not {type(text).__name__}")
    return int(parse_iso(text))
