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
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import CmsTokenError
from cmstoken.links import tokens
from cmstoken.links.pages import HEADERS, Page, link_page, refused_page, started_page
from cmstoken.links.refusals import FALLBACK, Refusal
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import Elsewhere, Pending, Spent, StackState

MAX_BODY = 4096
# How long a press may run: the links function's timeout (template.yaml). A press that used a
# link longer ago than this and started nothing has failed or died, and another may take over.
PRESS_SECONDS = 30
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
    bootstrap's ``status``), the links' table, and the bootstrap's ``start`` and ``poll`` of
    what a link started."""

    stack: Stack

    def key(self) -> bytes: ...

    def state(self) -> StackState: ...

    def used(self, claims: tokens.Claims) -> LinkUse | None: ...

    def use(self, claims: tokens.Claims, now: int) -> str | None: ...

    def take_over(self, claims: tokens.Claims, used_at: int, now: int) -> str | None: ...

    def started(self, claims: tokens.Claims, now: int) -> None: ...

    def unuse(self, claims: tokens.Claims, press: str) -> None: ...

    def may_start(self, now: int) -> bool: ...

    def may_follow(self, now: int) -> bool: ...

    def start(self, claims: tokens.Claims) -> Pending | Elsewhere | Spent: ...

    def claim_follow(self, claims: tokens.Claims, now: int) -> bool: ...

    def follow(self, link: str) -> None: ...

    def followed(self, claims: tokens.Claims, now: int) -> None: ...

    def release_follow(self, claims: tokens.Claims, now: int) -> None: ...


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
    pending = state.pending_at(now)
    if pending is not None and pending.link != tokens.tag(checked):
        if _spent(portal, checked):
            return _refused(portal.stack, Refusal.REPLAYED)
        return _elsewhere(portal.stack, pending.expires_at)
    if request.method == "POST":
        return _post(request, portal, key, checked, pending is not None, now)
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
    started: bool,
    now: int,
) -> dict[str, Any]:
    """The button: checks the request came from the link's own page, then shows the
    authorization this link started (``started``: it is pending), or uses the link and starts
    one. Of presses at once, the one that used the link counts the start; the others wait for
    it (``_in_flight``) and count nothing."""
    if not _same_origin(request):
        return answer(refused_page(portal.stack, status=403, title=_CROSS, explanation=_CROSS_TEXT))
    proofs = parse_qs(request.body.decode("utf-8", "replace")).get("proof", [])
    if len(proofs) != 1 or not tokens.check_form_proof(key, claims, proofs[0]):
        return answer(refused_page(portal.stack, status=403, title=_FORM, explanation=_FORM_TEXT))
    if started:
        return _show(portal, claims, now, queue=True)
    press = portal.use(claims, now)
    if press is not None:
        return _start(portal, claims, press, now)
    use = portal.used(claims)
    if use is None:  # the press that used it gave it back just now
        return _in_flight(portal, claims, now, until=now + 1)
    if use.started_at is None and use.used_at is not None:
        if now - use.used_at <= PRESS_SECONDS:  # that press may still be starting it
            return _in_flight(portal, claims, now, until=use.used_at + PRESS_SECONDS + 1)
        press = portal.take_over(claims, use.used_at, now)  # that press failed or died
        if press is None:  # another press took it over first
            return _in_flight(portal, claims, now, until=now + PRESS_SECONDS + 1)
        return _start(portal, claims, press, now)
    again = portal.state().pending_at(now)  # a press a moment ago, or an ended authorization
    if again is None or again.link != tokens.tag(claims):
        return _refused(portal.stack, Refusal.REPLAYED)
    return _show(portal, claims, now, queue=True)


def _start(portal: Portal, claims: tokens.Claims, press: str, now: int) -> dict[str, Any]:
    """Start the authorization with the use ``press`` made of the link (within the hour's
    starts), record it and queue its poll; the use is given back when nothing started."""
    try:
        if not portal.may_start(now):
            portal.unuse(claims, press)
            return _busy(portal.stack, now)
        pending = portal.start(claims)
    except CmsTokenError:
        portal.unuse(claims, press)  # nothing started: the link stays usable
        raise
    if isinstance(pending, Elsewhere):  # another started meanwhile
        portal.unuse(claims, press)
        return _elsewhere(portal.stack, pending.expires_at)
    if isinstance(pending, Spent):  # nothing written: the link stays usable
        portal.unuse(claims, press)
        return _spent_budget(portal.stack, pending.retry_at, now)
    portal.started(claims, now)
    _follow(portal, claims, now)
    return _started(portal.stack, pending)


def _show(portal: Portal, claims: tokens.Claims, now: int, *, queue: bool) -> dict[str, Any]:
    """The pending authorization the link started (the bootstrap's start gives its own again),
    and (``queue``) its poll queued when none was."""
    pending = portal.start(claims)
    if isinstance(pending, Elsewhere):  # it ended, and another started meanwhile
        return _elsewhere(portal.stack, pending.expires_at)
    if isinstance(pending, Spent):  # it ended, and starting another was refused
        return _spent_budget(portal.stack, pending.retry_at, now)
    if queue:
        _follow(portal, claims, now)
    return _started(portal.stack, pending)


def _in_flight(portal: Portal, claims: tokens.Claims, now: int, *, until: int) -> dict[str, Any]:
    """The answer to a press while another press of the link may still be starting its
    authorization: that authorization once it is pending, else a page asking to press again
    at ``until``, when that press has surely ended. Nothing counted, nothing queued."""
    pending = portal.state().pending_at(now)
    if pending is not None and pending.link == tokens.tag(claims):
        return _show(portal, claims, now, queue=False)
    text = _STARTING_TEXT.replace("UNTIL", to_iso(until))
    page = refused_page(portal.stack, status=503, title=_STARTING, explanation=text)
    return answer(page, **{"Retry-After": str(until - now)})


def _follow(portal: Portal, claims: tokens.Claims, now: int) -> None:
    """Queue the background poll of what the link started, unless one was queued or another
    press is queueing it (claimed, sent, then recorded; the claim given back when nothing was
    sent), within the hour's polls."""
    if not portal.claim_follow(claims, now):
        return
    try:
        if portal.may_follow(now):
            portal.follow(tokens.tag(claims))
            portal.followed(claims, now)
            return
    except CmsTokenError:
        portal.release_follow(claims, now)
        raise
    portal.release_follow(claims, now)


def _started(stack: Stack, pending: Pending) -> dict[str, Any]:
    page = started_page(
        stack,
        user_code=pending.user_code,
        verification_uri_complete=pending.verification_uri_complete,
        expires_at=pending.expires_at,
    )
    return answer(page)


def _busy(stack: Stack, now: int) -> dict[str, Any]:
    """The 429 page: the hour's starts are spent, until the next hour."""
    until = now - now % 3600 + 3600
    text = _BUSY_TEXT.replace("UNTIL", to_iso(until))
    page = refused_page(stack, status=429, title=_BUSY, explanation=text)
    return answer(page, **{"Retry-After": str(until - now)})


def _spent_budget(stack: Stack, retry_at: int | None, now: int) -> dict[str, Any]:
    """The 429 page of a start the version budget refused: until a version ages out."""
    if retry_at is None:
        text = _BUDGET_TEXT.replace("UNTIL", "later")
        return answer(refused_page(stack, status=429, title=_BUDGET, explanation=text))
    text = _BUDGET_TEXT.replace("UNTIL", f"after {to_iso(retry_at)}")
    page = refused_page(stack, status=429, title=_BUDGET, explanation=text)
    return answer(page, **{"Retry-After": str(max(retry_at - now, 1))})


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


def _elsewhere(stack: Stack, expires_at: int) -> dict[str, Any]:
    """The page of a link while an authorization it did not start is pending."""
    text = _ELSEWHERE_TEXT.replace("UNTIL", to_iso(expires_at))
    return answer(refused_page(stack, status=409, title=_ELSEWHERE, explanation=text))


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
    "UNTIL, or use the fallback command below."
)
_BUDGET = "The stack refused to start an authorization for now"
_BUDGET_TEXT = (
    "Authorizations started from links and forced refreshes have written the stack's "
    "refresh credential as often as the stack allows them, keeping the rest for its scheduled "
    "rotation and an operator. This link is still usable: try again UNTIL, or use the "
    "fallback command below."
)
_STARTING = "This link's authorization is being started"
_STARTING_TEXT = (
    "Another press of this link's button is starting its authorization now. Press the button "
    "again (or reload this page) after UNTIL to see its code; or use the fallback command below."
)
_ELSEWHERE = "Another authorization is pending"
_ELSEWHERE_TEXT = (
    "An operator or another link started an authorization of this stack; it is pending until "
    "UNTIL. A link shows and follows only the authorization it started: approve that one where "
    "it was started, or open this link again after UNTIL."
)
_DOWN = "The stack could not be reached"
_DOWN_TEXT = "The stack did not answer. Try again in a minute, or use the fallback command below."
_DOWN_TEXT_UNNAMED = (
    f"The stack did not answer. Try again in a minute, or {FALLBACK.replace('NAME', _UNNAMED)}."
)
