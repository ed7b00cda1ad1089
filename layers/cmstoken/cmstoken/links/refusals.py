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


# What every refusal and the 503 page say to do instead (NAME: the stack's name).
FALLBACK = "run `cmstoken-admin --stack NAME bootstrap` with the account's AWS credentials"
# The page says that nothing was changed, under every refusal: these words do not repeat it.
_TEXTS: dict[Refusal, tuple[str, str]] = {
    Refusal.FORGED: (
        "This link is not valid",
        "This address is not a re-authorization link this stack sent: it is malformed, cut "
        "short, meant for another stack, account or region, or dated in the future. Open the "
        "link from the latest alert exactly as it was sent (some mail programs break long "
        f"addresses), or {FALLBACK}.",
    ),
    Refusal.VOID_KEY: (
        "This link was revoked",
        "The links' signing key was rotated since this link was sent, which voids every "
        "outstanding link. Ask for a new link (the next alert carries one while "
        f"re-authorization is still needed), or {FALLBACK}.",
    ),
    Refusal.TAMPERED: (
        "This link was altered",
        "This link names this stack but its signature does not match: it was changed after "
        f"it was sent. Use the link from the alert exactly as it was sent, or {FALLBACK}. If "
        "nobody changed it on purpose, tell the stack's owners: someone may be trying to "
        "forge links.",
    ),
    Refusal.EXPIRED: (
        "This link has expired",
        "Re-authorization links are valid for at most 24 hours, and this one is past its "
        "time. The next alert carries a new link while re-authorization is still needed; or "
        f"{FALLBACK}.",
    ),
    Refusal.VOID_AUTHORIZED: (
        "This link is no longer needed",
        "The stack was re-authorized after this link was sent, so the link is void. Nothing "
        "needs doing unless a newer alert asks for it: then use that alert's link, or "
        f"{FALLBACK}.",
    ),
    Refusal.REPLAYED: (
        "This link was already used",
        "Each link starts one authorization, once, and this one already has. If the "
        "authorization it started is still pending, finish it or wait for the outcome "
        f"message; otherwise use a newer alert's link, or {FALLBACK}.",
    ),
}
