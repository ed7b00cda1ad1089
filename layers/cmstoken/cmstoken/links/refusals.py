"""Why a re-authorization link is refused, and what its 403 page says about it: plain text
(the page escapes it), never any part of the link."""

from __future__ import annotations

from enum import Enum


class Refusal(Enum):
    """Why a link is refused, in the order ``tokens.check`` decides (the first that applies).

    ``REPLAYED`` is never returned by ``check``: whether a nonce was used is in the link store,
    and the caller decides it (after every other check passed)."""

    FORGED = "forged"
    VOID_KEY = "void_key"
    TAMPERED = "tampered"
    EXPIRED = "expired"
    VOID_AUTHORIZED = "void_authorized"
    REPLAYED = "replayed"

    @property
    def title(self) -> str:
        """A short heading for the refusal page (plain text)."""
        return _TEXTS[self][0]

    @property
    def explanation(self) -> str:
        """One paragraph: what the refusal means and what to do (plain text; ``NAME`` stands
        for the stack's name)."""
        return _TEXTS[self][1]


_FALLBACK = "run `cmstoken-admin --stack NAME bootstrap` with the account's AWS credentials"
_TEXTS: dict[Refusal, tuple[str, str]] = {
    Refusal.FORGED: (
        "This link is not valid",
        "This address is not a re-authorization link this stack sent: it is malformed, cut "
        "short, meant for another stack, account or region, or dated in the future. Nothing "
        "was changed. Open the link from the latest alert exactly as it was sent (some mail "
        f"programs break long addresses), or {_FALLBACK}.",
    ),
    Refusal.VOID_KEY: (
        "This link was revoked",
        "The links' signing key was rotated since this link was sent, which voids every "
        "outstanding link. Nothing was changed. Ask for a new link (the next alert carries "
        f"one while re-authorization is still needed), or {_FALLBACK}.",
    ),
    Refusal.TAMPERED: (
        "This link was altered",
        "This link names this stack but its signature does not match: it was changed after "
        "it was sent. Nothing was changed. Use the link from the alert exactly as it was "
        f"sent, or {_FALLBACK}. If nobody changed it on purpose, tell the stack's owners: "
        "someone may be trying to forge links.",
    ),
    Refusal.EXPIRED: (
        "This link has expired",
        "Re-authorization links are valid for at most 24 hours, and this one is past its "
        "time. Nothing was changed. The next alert carries a new link while re-authorization "
        f"is still needed; or {_FALLBACK}.",
    ),
    Refusal.VOID_AUTHORIZED: (
        "This link is no longer needed",
        "The stack was re-authorized after this link was sent, so the link is void. Nothing "
        "was changed, and nothing needs doing unless a newer alert asks for it: then use that "
        f"alert's link, or {_FALLBACK}.",
    ),
    Refusal.REPLAYED: (
        "This link was already used",
        "Each link starts one authorization, once. Nothing was changed by this request. If "
        "the authorization it started is still pending, finish it or wait for the outcome "
        f"message; otherwise use a newer alert's link, or {_FALLBACK}.",
    ),
}
