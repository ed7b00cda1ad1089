"""Sending the links: a notice of what the stack needs (when an alarm goes off, then once a
day while the need lasts, never after a new authorization), and the outcome of an
authorization started from a link (the bootstrap's background poll)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from cmstoken.core.errors import CmsTokenError
from cmstoken.links import messages, tokens
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import Need, StackState

DAY = 86_400
LINK_LIFETIME = DAY
# The bootstrap's words for an approval by another identity (bootstrap/identity.py).
_OTHER_IDENTITY = re.compile(
    r"approved by a different identity \(([0-9a-f]{8,16})\) than the one this stack is "
    r"authorized as \(([0-9a-f]{8,16})\)"
)


class NoticePortal(Protocol):
    """What sending needs (``portal.AwsPortal``)."""

    stack: Stack

    @property
    def url(self) -> str: ...

    def key(self) -> bytes: ...

    def state(self) -> StackState: ...

    def claim_notice(self, need: str, now: int, every: int) -> bool: ...

    def release_notice(self, need: str, now: int) -> None: ...

    def publish(self, request: messages.PublishRequest) -> str: ...

    def nonce(self) -> bytes: ...

    def follow(self) -> None: ...


@dataclass
class Notices:
    """Decides and sends; each method returns one line saying what it did (for the log)."""

    portal: NoticePortal
    warning_seconds: int

    def remind(self, now: int) -> str:
        """Send the notice of the current need, at most once a day for the same need of the
        same credential; nothing while an authorization is pending or nothing is needed."""
        state = self.portal.state()
        need = state.need(now=now, warning_seconds=self.warning_seconds)
        if need is None:
            return "nothing needed"
        if state.pending_at(now) is not None:
            return "an authorization is pending"
        claim = f"{need.value}#{state.binding}"
        if not self.portal.claim_notice(claim, now, DAY):
            return f"{need.value}: already sent today"
        try:
            self._send_need(need, state, now)
        except CmsTokenError:
            self.portal.release_notice(claim, now)  # not sent: Lambda's retry sends it
            raise
        return f"{need.value}: sent"

    def _send_need(self, need: Need, state: StackState, now: int) -> None:
        link = self.link(state, now)
        notice: messages.Notice
        if need is Need.NOT_BOOTSTRAPPED:
            notice = messages.NeverBootstrapped(link=link)
        elif need is Need.REFUSED:
            error = "invalid_grant or invalid_client"
            notice = messages.CredentialRefused(
                error=error, link=link, deadline=state.token_expires_at
            )
        else:
            notice = messages.WarningWindow(link=link, deadline=state.reauthorize_by or now)
        self.portal.publish(messages.publish_request(self.portal.stack, notice))

    def outcome(self, result: Any, now: int) -> str:
        """Report what the background poll ended with; poll again while the authorization it
        followed is still pending."""
        status = result.get("status") if isinstance(result, dict) else None
        state = self.portal.state()
        if status == "pending" and state.pending_at(now) is not None:
            self.portal.follow()
            return "still pending: polling again"
        need = state.need(now=now, warning_seconds=self.warning_seconds)
        link = None if need is None else self.link(state, now)
        deadline = state.reauthorize_by if need is not Need.REFUSED else state.token_expires_at
        notice = self._notice(status, result, link, deadline)
        if notice is None:
            return f"outcome {status or 'unknown'}: not reported"
        self.portal.publish(messages.publish_request(self.portal.stack, notice))
        return f"outcome {status}: sent"

    def _notice(
        self, status: Any, result: Any, link: messages.Link | None, deadline: int | None
    ) -> messages.Notice | None:
        if status == "authorized":
            identity = result.get("identity")
            return messages.Authorized(
                identity_fingerprint=identity if isinstance(identity, str) else None,
                deadline=deadline,
            )
        if status == "denied":
            return messages.Denied(link=link, deadline=deadline)
        if status == "expired" and link is not None:
            return messages.Expired(link=link, deadline=deadline)
        refused = _OTHER_IDENTITY.search(str(result.get("message", "")))
        if status == "failed" and refused is not None:
            return messages.IdentityRefused(
                approving_fingerprint=refused[1],
                expected_fingerprint=refused[2],
                link=link,
                deadline=deadline,
            )
        return None

    def link(self, state: StackState, now: int) -> messages.Link:
        """A new link bound to the current credential, valid for a day."""
        token, claims = tokens.new_link(
            self.portal.stack,
            binding=state.binding,
            key=self.portal.key(),
            now=now,
            lifetime=LINK_LIFETIME,
            nonce=self.portal.nonce(),
        )
        url = f"{self.portal.url.rstrip('/')}/l/{token}"
        return messages.Link(url=url, expires_at=claims.expires_at)
