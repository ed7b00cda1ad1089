"""What the links' function URL answers. ``GET`` (and ``HEAD``) of a link shows its page and
changes nothing, so mail scanners and chat unfurlers that fetch it first do no harm; the page's
``POST`` (its form's proof, from the same origin) records the link as used, starts the device
authorization through the bootstrap and lets the bootstrap poll in the background. Every
refusal changes nothing. The I/O is behind ``Portal``."""

from __future__ import annotations

import base64
import binascii
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs

from cmstoken.aws.link_state import LinkUse
from cmstoken.core.errors import CmsTokenError
from cmstoken.links import tokens
from cmstoken.links.pages import HEADERS, Page, link_page, refused_page, started_page
from cmstoken.links.refusals import FALLBACK, Refusal
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import Pending, StackState

MAX_BODY = 4096
METHODS = ("GET", "HEAD", "POST")
_ROUTE = re.compile(r"/l/([A-Za-z0-9._-]{1,512})")
_SAME_SITE = frozenset({"same-origin", "none"})

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Request:
    """A function URL request (payload format 2.0), as the page logic needs it."""

    method: str
    path: str
    domain: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Request:
        """The request of a function URL event; ``ValueError`` when a field is not of the
        type AWS sends."""
        context = event["requestContext"]
        body, headers = event.get("body") or "", event.get("headers") or {}
        method, domain = context["http"]["method"], context["domainName"]
        path = event.get("rawPath") or "/"
        if not all(isinstance(v, str) for v in (body, method, domain, path)):
            raise ValueError("a function URL event's method, domain, path and body are text")
        if not isinstance(headers, dict):
            raise ValueError("a function URL event's headers are an object")
        raw = body.encode()
        if event.get("isBase64Encoded"):
            try:
                raw = base64.b64decode(body, validate=True)
            except (binascii.Error, ValueError):
                raw = b""  # not what a function URL sends: no form, so refused as none of ours
        return cls(
            method=method.upper(),
            path=path,
            domain=domain,
            headers={str(k).lower(): str(v) for k, v in headers.items()},
            body=raw,
        )


class Portal(Protocol):
    """What the pages need of the world: the stack, the signing key, the stack's state (the
    bootstrap's ``status``), the links' table, and the bootstrap's ``start`` and ``poll``."""

    stack: Stack

    def key(self) -> bytes: ...

    def state(self) -> StackState: ...

    def used(self, claims: tokens.Claims) -> LinkUse | None: ...

    def use(self, claims: tokens.Claims, now: int) -> str | None: ...

    def started(self, claims: tokens.Claims, now: int) -> None: ...

    def unuse(self, claims: tokens.Claims, press: str) -> None: ...

    def may_start(self, now: int) -> bool: ...

    def may_follow(self, now: int) -> bool: ...

    def start(self) -> Pending: ...

    def follow(self) -> None: ...


def answer(page: Page, **extra: str) -> dict[str, Any]:
    """The function URL response for ``page``."""
    return {"statusCode": page.status, "headers": {**HEADERS, **extra}, "body": page.html()}


def handle(request: Request, portal: Portal, now: int) -> dict[str, Any]:
    """The answer to ``request``. Nothing is read for a request that is not a link addressed
    to this stack; only the signing key until its signature holds, and only then the stack's
    state; a page says which stack, account and Region only to a link whose signature holds.
    The stack's trouble (the bootstrap, the key, the table) is a 503 page, its kind logged."""
    route = _ROUTE.fullmatch(request.path)
    if route is None:
        return answer(refused_page(None, status=404, title="Not found", explanation=_NOT_FOUND))
    if request.method not in METHODS:
        page = refused_page(None, status=405, title="Method not allowed", explanation=_METHOD)
        return answer(page, Allow=", ".join(METHODS))
    if len(request.body) > MAX_BODY:
        return answer(refused_page(None, status=413, title="Too large", explanation=_TOO_LARGE))
    stack = portal.stack
    token = tokens.addressed(route.group(1), stack.name, stack.account, stack.region, now)
    if isinstance(token, Refusal):
        return _refused(None, token)
    try:
        key = portal.key()
    except CmsTokenError as exc:
        return _unavailable(request, None, exc)
    claims = tokens.verified(token, key, now)
    if isinstance(claims, Refusal):  # expired: signed by this stack, so it may say which
        return _refused(stack if claims is Refusal.EXPIRED else None, claims)
    try:
        return _signed(request, portal, key, claims, now)
    except CmsTokenError as exc:
        return _unavailable(request, stack, exc)


def _signed(
    request: Request, portal: Portal, key: bytes, signed: tokens.Claims, now: int
) -> dict[str, Any]:
    """The answer to a link whose signature holds."""
    state = portal.state()
    checked = tokens.bound(signed, state.binding)
    if isinstance(checked, Refusal):
        return _refused(portal.stack, checked)
    if request.method == "POST":
        return _post(request, portal, key, checked, state, now)
    pending = state.pending_at(now)
    if pending is None and _spent(portal, checked):
        return _refused(portal.stack, Refusal.REPLAYED)
    proof = tokens.form_proof(key, checked)
    page = link_page(
        portal.stack,
        expires_at=checked.expires_at,
        pending_until=None if pending is None else pending.expires_at,
        proof=proof,
        working=state.status == "active",
    )
    return answer(page)


def _post(
    request: Request,
    portal: Portal,
    key: bytes,
    claims: tokens.Claims,
    state: StackState,
    now: int,
) -> dict[str, Any]:
    """The button: checks the request came from the link's own page, then shows the pending
    authorization, or uses the link and starts one (at most ``may_start`` allows)."""
    if not _same_origin(request):
        return answer(refused_page(portal.stack, status=403, title=_CROSS, explanation=_CROSS_TEXT))
    proofs = parse_qs(request.body.decode("utf-8", "replace")).get("proof", [])
    if len(proofs) != 1 or not tokens.check_form_proof(key, claims, proofs[0]):
        return answer(refused_page(portal.stack, status=403, title=_FORM, explanation=_FORM_TEXT))
    pending = state.pending_at(now)
    if pending is None:
        press = portal.use(claims, now)
        if press is None and _spent(portal, claims):
            # A press a moment ago (a double click) whose authorization is pending now, or an
            # authorization that ended: the link starts no other.
            pending = portal.state().pending_at(now)
            if pending is None:
                return _refused(portal.stack, Refusal.REPLAYED)
        else:  # this press used the link, or the one that did has started nothing (yet)
            started = _start(portal, claims, now, press)
            if not isinstance(started, Pending):
                return started
            pending = started
    if portal.may_follow(now):
        portal.follow()  # its poll, or another: polls of one code end on one credential
    page = started_page(
        portal.stack,
        user_code=pending.user_code,
        verification_uri_complete=pending.verification_uri_complete,
        expires_at=pending.expires_at,
    )
    return answer(page)


def _start(
    portal: Portal, claims: tokens.Claims, now: int, press: str | None
) -> Pending | dict[str, Any]:
    """Start an authorization (the bootstrap's start gives the pending one, if another press
    started it meanwhile) and record that the link did; when nothing starts, ``press`` (the
    use this press made, if it made it) is given back."""
    try:
        if not portal.may_start(now):
            if press is not None:
                portal.unuse(claims, press)
            page = refused_page(portal.stack, status=429, title=_BUSY, explanation=_BUSY_TEXT)
            return answer(page, **{"Retry-After": str(3600 - now % 3600)})
        pending = portal.start()
    except CmsTokenError:
        if press is not None:
            portal.unuse(claims, press)  # nothing started: the link stays usable
        raise
    portal.started(claims, now)
    return pending


def _spent(portal: Portal, claims: tokens.Claims) -> bool:
    """Whether the link started an authorization (a link pressed only by presses that failed,
    or died before starting anything, may still start one)."""
    use = portal.used(claims)
    return use is not None and use.started_at is not None


def _same_origin(request: Request) -> bool:
    """A browser's request from the page itself: its ``Origin`` (when sent) is this URL's, and
    its ``Sec-Fetch-Site`` (when sent) is same-origin (or none: typed or bookmarked)."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if origin is not None and origin != f"https://{request.domain}":
        return False
    return site is None or site in _SAME_SITE


def _refused(stack: Stack | None, refusal: Refusal) -> dict[str, Any]:
    """A refusal's page; ``None``: to a caller who may not learn which stack this is."""
    text = refusal.explanation.replace("NAME", _UNNAMED if stack is None else stack.name)
    page = refused_page(stack, status=403, title=refusal.title, explanation=text, fallback=False)
    return answer(page)


def _unavailable(request: Request, stack: Stack | None, exc: CmsTokenError) -> dict[str, Any]:
    """The answer when the stack could not be reached; its kind logged (never the link, which
    is in the path)."""
    logger.error(
        "link page failed",
        extra={"method": request.method, "kind": type(exc).__name__, "error": str(exc)},
    )
    explanation = _DOWN_TEXT if stack is not None else _DOWN_TEXT_UNNAMED
    page = refused_page(stack, status=503, title=_DOWN, explanation=explanation)
    return answer(page, **{"Retry-After": "60"})


_UNNAMED = "<stack name>"  # a page that may not say which stack this is
_NOT_FOUND = "There is nothing at this address. Re-authorization links start with /l/."
_METHOD = "A re-authorization link is opened (GET) and its page's button sends a POST."
_TOO_LARGE = "The request is larger than a re-authorization page ever sends."
_CROSS = "Refused: the request came from another site"
_CROSS_TEXT = (
    "The button only works on the link's own page. Open the link from the alert and press "
    "the button there."
)
_FORM = "Refused: this is not the link's form"
_FORM_TEXT = "The request did not come from this link's page. Open the link and press its button."
_BUSY = "Too many re-authorizations were started"
_BUSY_TEXT = (
    "Links started as many authorizations in this hour as the stack allows. Try again after "
    "the hour, or use the fallback command below."
)
_DOWN = "The stack could not be reached"
_DOWN_TEXT = "The stack did not answer. Try again in a minute, or use the fallback command below."
_DOWN_TEXT_UNNAMED = (
    f"The stack did not answer. Try again in a minute, or {FALLBACK.replace('NAME', _UNNAMED)}."
)
