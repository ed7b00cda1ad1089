"""Re-authorization links: their signed tokens, and the proof their page's form carries.

A token is ``v1.<payload>.<mac>``: the payload is the base64url (no padding) of compact JSON
claims (``s`` stack, ``a`` account, ``r`` region, ``b`` binding, ``k`` key id, ``n`` nonce,
``i`` issued at, ``e`` expires at), the mac the base64url of HMAC-SHA256 over
``cmstoken-link-v1.`` and the payload. Pure: the time, the key and the nonce's random bytes are
passed in. Nothing here puts a token, or any part of one, in an exception or a refusal's text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

from cmstoken.links.refusals import Refusal as Refusal  # part of this module's answers
from cmstoken.links.stack import ACCOUNT, REGION, STACK_NAME, Stack

VERSION = "v1"
MAX_TOKEN_LENGTH = 512
MIN_LIFETIME = 60
MAX_LIFETIME = 86_400
CLOCK_SKEW = 300  # how far in the future a link's issue time may be (another clock's drift)
NONCE_BYTES = 16
MIN_KEY_BYTES = 32
_MAC_BYTES = 32
_MAC_CONTEXT = b"cmstoken-link-v1."
_FORM_CONTEXT = b"form."

# ASCII classes only: ``\d`` would also match other scripts' digits.
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_NAMES = ("s", "a", "r", "b", "k", "n", "i", "e")  # the payload's keys, in Claims' order


@dataclass(frozen=True)
class Claims:
    """What a link says: the stack it re-authorizes, the credential it replaces (``binding``:
    the current credential's ``authorized_at``, 0 when there is none), the key that signed it,
    its nonce (single use) and its lifetime (epoch seconds)."""

    stack: str
    account: str
    region: str
    binding: int
    key_id: str
    nonce: str
    issued_at: int
    expires_at: int


@dataclass(frozen=True)
class Expected:
    """What a link must be for: this stack, and its current credential's ``authorized_at``."""

    stack: str
    account: str
    region: str
    binding: int


type Checked = Claims | Refusal


def key_id(key: bytes) -> str:
    """The key's public identifier: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(key).hexdigest()[:16]


def issue(
    *,
    stack: str,
    account: str,
    region: str,
    binding: int,
    key: bytes,
    now: int,
    lifetime: int,
    nonce: bytes,
) -> Claims:
    """The claims of a new link, valid from ``now`` for ``lifetime`` seconds (60 to 86400);
    ``nonce`` is 16 random bytes. ValueError for anything a link cannot carry."""
    if not MIN_LIFETIME <= lifetime <= MAX_LIFETIME:
        raise ValueError(
            f"a link's lifetime is {MIN_LIFETIME} to {MAX_LIFETIME} seconds, not {lifetime}"
        )
    if len(nonce) != NONCE_BYTES:
        raise ValueError(f"a link's nonce is {NONCE_BYTES} random bytes")
    claims = Claims(
        stack, account, region, binding, key_id(key), _encode(nonce), now, now + lifetime
    )
    if not _well_formed(claims):
        raise ValueError("a link needs a stack name, an account id, a region and times >= 0")
    return claims


def new_link(
    stack: Stack, *, binding: int, key: bytes, now: int, nonce: bytes, lifetime: int = MAX_LIFETIME
) -> tuple[str, Claims]:
    """A signed link for ``stack`` bound to the credential authorized at ``binding``: its
    token and its claims (``issue``, then ``sign``)."""
    claims = issue(
        stack=stack.name,
        account=stack.account,
        region=stack.region,
        binding=binding,
        key=key,
        now=now,
        lifetime=lifetime,
        nonce=nonce,
    )
    return sign(claims, key), claims


def sign(claims: Claims, key: bytes) -> str:
    """The token of ``claims``, signed with ``key`` (whose id the claims must carry)."""
    _require_key(key)
    if not _well_formed(claims) or claims.key_id != key_id(key):
        raise ValueError("these claims cannot be signed with this key")
    payload = _payload(claims)
    token = f"{VERSION}.{payload}.{_encode(_mac(key, payload))}"
    if len(token) > MAX_TOKEN_LENGTH:
        raise ValueError(f"the link would be longer than {MAX_TOKEN_LENGTH} characters")
    return token


@dataclass(frozen=True)
class Addressed:
    """A well-formed token addressed to the expected stack: its claims, not yet verified."""

    claims: Claims
    payload: str
    mac: bytes


def addressed(token: str, stack: str, account: str, region: str, now: int) -> Addressed | Refusal:
    """The first stage of ``check``, which needs neither the key nor the stack's state: the
    token is well formed, names this stack, account and region, and is not dated in the
    future; otherwise ``FORGED``. Never raises."""
    parsed = _parse(token)
    if parsed is None:
        return Refusal.FORGED
    claims, payload, mac = parsed
    if (claims.stack, claims.account, claims.region) != (stack, account, region):
        return Refusal.FORGED
    if claims.issued_at > now + CLOCK_SKEW:
        return Refusal.FORGED
    return Addressed(claims, payload, mac)


def verified(token: Addressed, key: bytes, now: int) -> Claims | Refusal:
    """The second stage, with the key alone: signed with this key (``VOID_KEY``), by it
    (``TAMPERED``), and not expired (``EXPIRED``). ValueError for a key under 32 bytes."""
    _require_key(key)
    if token.claims.key_id != key_id(key):
        return Refusal.VOID_KEY
    if not hmac.compare_digest(token.mac, _mac(key, token.payload)):
        return Refusal.TAMPERED
    if token.claims.expires_at <= now:
        return Refusal.EXPIRED
    return token.claims


def bound(claims: Claims, binding: int) -> Checked:
    """The last stage, with the stack's state: the link is for the current credential."""
    return claims if claims.binding == binding else Refusal.VOID_AUTHORIZED


def check(token: str, key: bytes, expected: Expected, now: int) -> Checked:
    """The claims of a valid ``token``, or the first reason to refuse it (see ``Refusal``):
    ``addressed``, ``verified`` and ``bound`` in turn, for a caller that holds the key and the
    binding already (a page reads each only once the stage before it passed).

    Never raises for any ``token``; ValueError only for a key shorter than 32 bytes."""
    _require_key(key)
    found = addressed(token, expected.stack, expected.account, expected.region, now)
    if isinstance(found, Refusal):
        return found
    claims = verified(found, key, now)
    return claims if isinstance(claims, Refusal) else bound(claims, expected.binding)


def form_proof(key: bytes, claims: Claims) -> str:
    """The proof the link's page puts in its form: HMAC-SHA256 over ``form.`` and the nonce."""
    _require_key(key)
    digest = hmac.new(key, _FORM_CONTEXT + claims.nonce.encode("ascii"), hashlib.sha256)
    return _encode(digest.digest())


def tag(claims: Claims) -> str:
    """Which link this is, as the bootstrap records the authorization it started: 32
    hexadecimal digits of a hash of its nonce (nothing of the link can be made from it)."""
    return hashlib.sha256(b"tag." + claims.nonce.encode("ascii")).hexdigest()[:32]


def check_form_proof(key: bytes, claims: Claims, proof: str) -> bool:
    """Whether ``proof`` (from a posted form: any text) is the form proof of ``claims``."""
    if not proof.isascii():
        return False
    return hmac.compare_digest(form_proof(key, claims), proof)


def _require_key(key: bytes) -> None:
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"the link signing key is shorter than {MIN_KEY_BYTES} bytes")


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, _MAC_CONTEXT + payload.encode("ascii"), hashlib.sha256).digest()


def _payload(claims: Claims) -> str:
    fields = (
        claims.stack,
        claims.account,
        claims.region,
        claims.binding,
        claims.key_id,
        claims.nonce,
        claims.issued_at,
        claims.expires_at,
    )
    document = dict(zip(_NAMES, fields, strict=True))
    return _encode(json.dumps(document, separators=(",", ":")).encode("ascii"))


def _parse(token: str) -> tuple[Claims, str, bytes] | None:
    """The claims, payload and mac of a well-formed token; None for anything else."""
    if len(token) > MAX_TOKEN_LENGTH or not token.isascii():
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != VERSION:
        return None
    _, payload, mac_text = parts
    document, mac = _decode(payload), _decode(mac_text)
    if document is None or mac is None or len(mac) != _MAC_BYTES:
        return None
    claims = _claims(document)
    # The one encoding of these claims: no other spacing, key order, escapes or duplicates.
    if claims is None or _payload(claims) != payload:
        return None
    return claims, payload, mac


def _claims(document: bytes) -> Claims | None:
    try:
        data: Any = json.loads(document.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or set(data) != set(_NAMES):
        return None
    claims = Claims(*(data[name] for name in _NAMES))
    return claims if _well_formed(claims) else None


def _well_formed(claims: Claims) -> bool:
    """Whether a link can carry these claims (what ``sign`` signs, exactly what ``check``
    reads back)."""
    texts = (claims.stack, claims.account, claims.region, claims.key_id, claims.nonce)
    times = (claims.binding, claims.issued_at, claims.expires_at)
    # Exactly str and int: not a float, and not a bool (which is an int to isinstance).
    if any(type(text) is not str for text in texts) or any(type(t) is not int for t in times):
        return False
    nonce = _decode(claims.nonce)
    return (
        STACK_NAME.fullmatch(claims.stack) is not None
        and ACCOUNT.fullmatch(claims.account) is not None
        and REGION.fullmatch(claims.region) is not None
        and _KEY_ID.fullmatch(claims.key_id) is not None
        and nonce is not None
        and len(nonce) == NONCE_BYTES
        and min(times) >= 0
        and MIN_LIFETIME <= claims.expires_at - claims.issued_at <= MAX_LIFETIME
    )


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode(text: str) -> bytes | None:
    """The bytes of canonical unpadded base64url text; None for padding, other characters
    or unused bits set (which decoders ignore, so one value would have several spellings)."""
    if _BASE64URL.fullmatch(text) is None or len(text) % 4 == 1:
        return None
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return raw if _encode(raw) == text else None
