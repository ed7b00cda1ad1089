"""Sample stacks, links and one notice of every kind (and their variants without the optional
parts), shared by the message tests."""

from __future__ import annotations

from datetime import UTC, datetime

from cmstoken.links import messages as m
from cmstoken.links.stack import Stack


def epoch(iso: str) -> float:
    """Epoch seconds of ``2026-11-22T04:00:00Z``."""
    return datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


STACK = Stack(name="cmstoken-prod", account="123456789012", region="eu-west-1")
LINK = m.Link(
    url="https://abcdefghij0123456789abcdefghij.lambda-url.eu-west-1.on.aws/l/v1.eyJzIjoiY21z.AbC",
    expires_at=epoch("2026-11-21T09:30:00Z"),
)
DEADLINE = epoch("2026-11-22T04:00:00Z")
REMINDER = epoch("2026-11-21T08:15:00Z")  # the earliest the next daily reminder comes
EXPECTED = "0a1b2c3d4e5f"
APPROVING = "f5e4d3c2b1a0"

# Every kind, with all it can carry; then the kinds whose link or deadline is optional,
# without them.
NOTICES: dict[str, m.Notice] = {
    "credential-refused": m.CredentialRefused(error="invalid_grant", link=LINK, deadline=DEADLINE),
    "never-bootstrapped": m.NeverBootstrapped(link=LINK),
    "warning-window": m.WarningWindow(deadline=DEADLINE, link=LINK),
    "authorized": m.Authorized(identity_fingerprint=EXPECTED, deadline=DEADLINE),
    "denied": m.Denied(link=LINK, deadline=DEADLINE),
    "expired": m.Expired(link=LINK, deadline=DEADLINE),
    "identity-refused": m.IdentityRefused(
        expected_fingerprint=EXPECTED, approving_fingerprint=APPROVING, link=LINK, deadline=DEADLINE
    ),
    "failed": m.Failed(link=LINK, deadline=DEADLINE),
    "credential-refused, invalid_client, no deadline": m.CredentialRefused(
        error="invalid_client", link=LINK
    ),
    "authorized, no deadline": m.Authorized(identity_fingerprint=EXPECTED),
    "authorized, no identity": m.Authorized(deadline=DEADLINE),
    "denied, no link": m.Denied(),
    "expired, no deadline": m.Expired(link=LINK),
    "identity-refused, no link": m.IdentityRefused(
        expected_fingerprint=EXPECTED, approving_fingerprint=APPROVING
    ),
    "failed, no link": m.Failed(),
    # an ending that brings no new link (one went with an ending in the last day)
    "expired, link withheld": m.Expired(
        withheld=m.Withheld(next_reminder_at=REMINDER), deadline=DEADLINE
    ),
    "denied, link withheld": m.Denied(withheld=m.Withheld(REMINDER), deadline=DEADLINE),
    "identity-refused, link withheld, reminder due": m.IdentityRefused(
        expected_fingerprint=EXPECTED, approving_fingerprint=APPROVING, withheld=m.Withheld()
    ),
    "failed, link withheld, reminder due": m.Failed(withheld=m.Withheld(), deadline=DEADLINE),
}
NEEDS = ("credential-refused", "never-bootstrapped", "warning-window")


def fingerprints(notice: m.Notice) -> set[str]:
    """The identity fingerprints a notice was given."""
    return {
        value
        for name, value in vars(notice).items()
        if name.endswith("fingerprint") and isinstance(value, str)
    }
