"""The pages the re-authorization links' function URL answers: the link's page (what is about
to happen, and one button), the started authorization (the user code to compare, and the way
on to the identity provider), and a page for each refusal. Pure: every value is escaped here,
and every page goes out with headers that keep it out of caches, frames, other origins'
scripts and other sites' ``Referer`` (the link is in the address)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from html import escape

from cmstoken.core.clock import to_iso
from cmstoken.links.stack import Stack

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;"
    "line-height:1.5;color:#1b1b1b}h1{font-size:1.4rem}dt{font-weight:600}"
    "dd{margin:0 0 .6rem 0}.code{font:700 2.4rem ui-monospace,monospace;letter-spacing:.2rem;"
    "padding:.6rem 1rem;border:2px solid #1b1b1b;display:inline-block}"
    "button,.go{font-size:1.1rem;padding:.6rem 1.4rem;background:#0b57d0;color:#fff;border:0;"
    "border-radius:.3rem;text-decoration:none;display:inline-block;cursor:pointer}"
    ".note{color:#555}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "Cache-Control": "no-store",
    # The link is in the address: no other site may see it in a Referer. "no-referrer" would
    # also make the browser send "Origin: null" with the page's own POST (Fetch standard),
    # which the same-origin check refuses (the browser test found it).
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}


@dataclass(frozen=True)
class Page:
    """An answer: its HTTP status, title and body (HTML, already escaped)."""

    status: int
    title: str
    body: str

    def html(self) -> str:
        return (
            '<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            '<meta name="robots" content="noindex,nofollow">'
            f"<title>{escape(self.title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{escape(self.title)}</h1>{self.body}</body></html>"
        )


def _where(stack: Stack) -> str:
    return (
        f"<dl><dt>Stack</dt><dd>{escape(stack.name)}</dd>"
        f"<dt>Account</dt><dd>{escape(stack.account)}</dd>"
        f"<dt>Region</dt><dd>{escape(stack.region)}</dd></dl>"
    )


def _fallback(stack: Stack) -> str:
    return (
        '<p class="note">Without this page: run <code>'
        f"{escape(stack.bootstrap_command)}</code> with AWS credentials for the account.</p>"
    )


def link_page(
    stack: Stack, *, expires_at: int, pending_until: int | None, proof: str, working: bool
) -> Page:
    """The page a link opens (``GET``: nothing changes). Its form posts back to the same
    address with the form's ``proof``; ``pending_until`` when an authorization is already
    pending (the button then shows it instead of starting another); ``working`` when the
    stack's current credential still works."""
    if pending_until is None:
        meanwhile = (
            "The stack's current credential keeps working until the new one is approved and "
            "verified."
            if working
            else "The stack has no working credential now: it works again once this "
            "authorization is approved and verified."
        )
        what = (
            "<p>Pressing the button starts a new device authorization of this stack with the "
            f"identity provider. You then approve it there. {meanwhile}</p>"
        )
        button = "Start the re-authorization"
    else:
        what = (
            "<p>An authorization of this stack is already pending until "
            f"{escape(to_iso(pending_until))}. Pressing the button shows its code and the way "
            "to approve it.</p>"
        )
        button = "Show the pending authorization"
    form = (
        '<form method="post"><input type="hidden" name="proof" '
        f'value="{escape(proof)}"><button type="submit">{escape(button)}</button></form>'
    )
    valid = f'<p class="note">This link is valid until {escape(to_iso(expires_at))}.</p>'
    return Page(200, "Re-authorize the service token stack", _where(stack) + what + form + valid)


def started_page(
    stack: Stack, *, user_code: str, verification_uri_complete: str, expires_at: int
) -> Page:
    """The started (or pending) authorization: the code the identity provider's page must
    show, and the way there. No automatic redirect: the person sees the code first."""
    body = (
        _where(stack)
        + "<p>The identity provider's page must show this code:</p>"
        + f'<p class="code">{escape(user_code)}</p>'
        + "<p>If it shows another code, stop: someone else started that authorization.</p>"
        + f'<p><a class="go" href="{escape(verification_uri_complete)}" rel="noreferrer">'
        + "Continue to the identity provider</a></p>"
        + f'<p class="note">Approve before {escape(to_iso(expires_at))}. The stack finishes '
        + "by itself after the approval and reports the outcome to its alarm topic; this page "
        + "can be closed.</p>"
    )
    return Page(200, "Approve the re-authorization", body)


def refused_page(
    stack: Stack | None, *, status: int, title: str, explanation: str, fallback: bool = True
) -> Page:
    """A refusal (403 for a link that cannot be used, 404, 405, 413, 429, 503): what it means
    and what to do, with the stack's fallback command unless ``explanation`` names it."""
    body = f"<p>{escape(explanation)}</p>"
    if stack is not None:
        body += _where(stack) + (_fallback(stack) if fallback else "")
    return Page(status, title, body + '<p class="note">Nothing was changed.</p>')
