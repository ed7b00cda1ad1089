"""Sending the links: a notice of what the stack needs (when an alarm goes off, then on the
daily schedule while the need lasts, at most once in ``REMINDER_EVERY``; never after a new
authorization), and the outcome of an authorization started from a link (the bootstrap's
background poll), with a new link at most once a day per credential."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cmstoken.core.errors import CmsTokenError
from cmstoken.links import messages, tokens
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import Need, StackState

logger = logging.getLogger(__name__)

DAY = 86_400
LINK_LIFETIME = DAY
AUTHORIZED_EVERY = 30 * DAY  # an authorization is reported once (its binding is new)
# An ending of an authorization a link started brings a new link at most once in this time
# per credential: whoever holds one message cannot chain links (press, let the code expire,
# press the next link) beyond the daily reminder's and this one.
OUTCOME_LINK_EVERY = DAY
# The daily reminder's schedule (template.yaml, rate(1 day)) is not exact: a run may come a few
# seconds early, and the run before it late (Scheduler retries an invocation for up to an hour,
# the RetryPolicy's MaximumEventAgeInSeconds; Lambda a failed one 1 and 3 minutes later). A run
# refused for coming less than a day after the last notice would leave the need unnotified until
# the next day's, so the reminder's claim allows this much less than a day: at most one reminder
# of a need in any REMINDER_EVERY (22 hours). A previous run later than that still loses a day.
REMINDER_SLACK = 2 * 3600
REMINDER_EVERY = DAY - REMINDER_SLACK
_ENDINGS = ("denied", "expired", "failed")
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

    def notice_sent(self, need: str, now: int, every: int) -> None: ...

    def release_notice(self, need: str, now: int) -> None: ...

    def last_sent(self, need: str) -> int | None: ...

    def publish(self, request: messages.PublishRequest) -> str: ...

    def nonce(self) -> bytes: ...

    def may_follow(self, now: int) -> bool: ...

    def follow(self, link: str) -> None: ...


@dataclass
class Notices:
    """Decides and sends; each method returns one line saying what it did (for the log).

    A notice is claimed in the links' table, published, then recorded as sent: two
    invocations at once send it once, and one that dies before publishing leaves a claim
    that lapses before Lambda retries it. One that dies after publishing but before the record
    lets the retry send it again: every notice goes at least once."""

    portal: NoticePortal
    warning_seconds: int

    def remind(self, now: int) -> str:
        """Send the notice of the current need, at most once in ``REMINDER_EVERY`` for the same
        need of the same credential (so on every run of the daily schedule); nothing while an
        authorization is pending or nothing is needed."""
        state = self.portal.state()
        need = state.need(now=now, warning_seconds=self.warning_seconds)
        if need is None:
            return "nothing needed"
        if state.pending_at(now) is not None:
            return "an authorization is pending"
        claim = _reminder(need, state)
        return self._once(
            claim, REMINDER_EVERY, now, lambda: self._need(need, state, now), need.value
        )

    def _need(self, need: Need, state: StackState, now: int) -> messages.Notice:
        link = self.link(state, now)
        if need is Need.NOT_BOOTSTRAPPED:
            return messages.NeverBootstrapped(link=link)
        if need is Need.REFUSED:
            error = "invalid_grant or invalid_client"
            return messages.CredentialRefused(
                error=error, link=link, deadline=state.token_expires_at
            )
        return messages.WarningWindow(link=link, deadline=state.reauthorize_by or now)

    def outcome(self, result: Any, now: int, tag: str | None = None) -> str:
        """Report how the background poll of what the link tagged ``tag`` started ended
        (``result``: its result, ``None`` when the invocation failed); poll again while it can
        still finish. A credential that works once the poll ended is reported once, as
        authorized, however many polls end on it. An ending while re-authorization is still
        needed brings a new link at most once in ``OUTCOME_LINK_EVERY`` per credential (a
        claim in the links' table); otherwise its notice says none comes, and when the daily
        reminder brings one."""
        result = result if isinstance(result, dict) else {"status": "failed"}
        status = result.get("status")
        state = self.portal.state()
        need = state.need(now=now, warning_seconds=self.warning_seconds)
        if status == "authorized" or (need is None and status == "failed"):
            identity = result.get("identity") if status == "authorized" else None
            authorized = messages.Authorized(
                identity_fingerprint=identity if isinstance(identity, str) else None,
                deadline=state.reauthorize_by,
            )
            claim = f"authorized#{state.binding}"
            return self._once(
                claim, AUTHORIZED_EVERY, now, lambda: authorized, "outcome authorized"
            )
        pending = state.pending_at(now)
        waiting = status == "pending" and (
            result.get("approved") is True or (pending is not None and pending.link == tag)
        )
        if tag is not None and (waiting or (status == "failed" and result.get("retry") is True)):
            if self.portal.may_follow(now):
                self.portal.follow(tag)
                return f"outcome {status}: polling again"
            status = "failed"  # polled as often as the stack allows: a person takes over
        if status not in _ENDINGS or (need is None and status != "denied"):
            return f"outcome {status or 'unknown'}: not reported"
        if need is None:  # nothing needed any more: no link
            self._publish(messages.Denied(deadline=state.reauthorize_by))
            return f"outcome {status}: sent"
        return self._ended(status, result, need, state, now)

    def _ended(
        self, status: str, result: dict[str, Any], need: Need, state: StackState, now: int
    ) -> str:
        """Report an authorization that ended unapproved while ``need`` lasts: with a new
        link when none went with an ending in the last ``OUTCOME_LINK_EVERY``, otherwise saying
        that none comes and when the daily reminder brings one."""
        deadline = state.reauthorize_by if need is not Need.REFUSED else state.token_expires_at
        claim = f"outcome-link#{state.binding}"
        what = f"outcome {status}"
        if self.portal.claim_notice(claim, now, OUTCOME_LINK_EVERY):

            def ending() -> messages.Notice:
                return _ending(status, result, deadline, link=self.link(state, now))

            return self._send_claimed(claim, OUTCOME_LINK_EVERY, now, ending, what)
        sent = self.portal.last_sent(_reminder(need, state))
        withheld = messages.Withheld(sent + DAY if sent is not None and sent + DAY > now else None)
        self._publish(_ending(status, result, deadline, withheld=withheld))
        return f"{what}: sent without a link (an ending brought one in the last day)"

    def _publish(self, notice: messages.Notice) -> None:
        self.portal.publish(messages.publish_request(self.portal.stack, notice))

    def _once(
        self, claim: str, every: int, now: int, notice: Callable[[], messages.Notice], what: str
    ) -> str:
        """Publish ``notice()`` unless the notice ``claim`` names went in the last ``every``
        seconds, or another invocation is sending it."""
        if not self.portal.claim_notice(claim, now, every):
            return f"{what}: not again (already sent, or being sent)"
        return self._send_claimed(claim, every, now, notice, what)

    def _send_claimed(
        self, claim: str, every: int, now: int, notice: Callable[[], messages.Notice], what: str
    ) -> str:
        """Publish ``notice()`` under the claim taken at ``now``: recorded as sent, or the
        claim given back when it could not be sent."""
        try:
            self._publish(notice())
        except CmsTokenError:
            self.portal.release_notice(claim, now)  # not sent: Lambda's retry sends it
            raise
        try:
            self.portal.notice_sent(claim, now, every)
        except CmsTokenError as exc:  # sent: failing now would only make Lambda send it again
            logger.warning("notice sent, not recorded", extra={"error": str(exc)})
            return f"{what}: sent, not recorded"
        return f"{what}: sent"

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


def _reminder(need: Need, state: StackState) -> str:
    """The claim of the daily reminder of ``need`` for the current credential."""
    return f"{need.value}#{state.binding}"


def _ending(
    status: str,
    result: dict[str, Any],
    deadline: int | None,
    *,
    link: messages.Link | None = None,
    withheld: messages.Withheld | None = None,
) -> messages.Notice:
    """The notice of an authorization that ended (``status``: one of ``_ENDINGS``) without
    replacing the credential: with a new ``link``, or saying why none comes."""
    if status == "denied":
        return messages.Denied(link=link, withheld=withheld, deadline=deadline)
    if status == "expired":
        return messages.Expired(link=link, withheld=withheld, deadline=deadline)
    refused = _OTHER_IDENTITY.search(str(result.get("message", "")))
    if refused is not None:
        return messages.IdentityRefused(
            approving_fingerprint=refused[1],
            expected_fingerprint=refused[2],
            link=link,
            withheld=withheld,
            deadline=deadline,
        )
    return messages.Failed(link=link, withheld=withheld, deadline=deadline)
