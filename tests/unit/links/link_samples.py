"""Keys, claims and an encoder of link tokens written from the design (not from the module), so
that the tests pin the wire format and can sign payloads ``sign`` would never produce."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from cmstoken.links.tokens import Claims, Expected, key_id

KEY = b"Q7dK2mZp9WvXa4RtYc8NbE3uLf6HsJg1Tq5VxBz0Ao2Mw7Ki4Pe9Dy3Rn8Uc1Gh6"  # 64 alphanumerics
OTHER_KEY = b"Zr4Nc8Wq1Lm6Tb3Yk9Hx2Gs7Vd0Pf5Ja8Ue1Oi4Rt7Ky2Mn6Bv9Cx3Qw5Ez0Sl8"
NOW = 1_795_000_000
NONCE = "AAECAwQFBgcICQoLDA0ODw"  # bytes 0 to 15
CLAIMS = Claims(
    stack="cmstoken-eu",
    account="123456789012",
    region="eu-central-1",
    binding=1_794_000_000,
    key_id=key_id(KEY),
    nonce=NONCE,
    issued_at=NOW - 600,
    expires_at=NOW - 600 + 86_400,
)
NAMES = ("s", "a", "r", "b", "k", "n", "i", "e")


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def expected_for(claims: Claims, **changes: Any) -> Expected:
    """What a stack expects of a link meant for it (``changes`` make it expect otherwise)."""
    expected = Expected(claims.stack, claims.account, claims.region, claims.binding)
    return replace(expected, **changes)


def document_of(claims: Claims) -> dict[str, Any]:
    """The design's payload keys, in the design's order."""
    return {
        "s": claims.stack,
        "a": claims.account,
        "r": claims.region,
        "b": claims.binding,
        "k": claims.key_id,
        "n": claims.nonce,
        "i": claims.issued_at,
        "e": claims.expires_at,
    }


def token_of(payload: object, key: bytes = KEY) -> str:
    """``v1.<payload>.<mac>`` as the design specifies: bytes are the payload as they are, a text
    its UTF-8 bytes, anything else is written as compact JSON; the mac is HMAC-SHA256 over
    ``cmstoken-link-v1.`` and the payload."""
    if isinstance(payload, bytes):
        raw = payload
    elif isinstance(payload, str):
        raw = payload.encode("utf-8")
    else:
        raw = json.dumps(payload, separators=(",", ":")).encode("ascii")
    text = b64url(raw)
    mac = hmac.new(key, b"cmstoken-link-v1." + text.encode("ascii"), hashlib.sha256).digest()
    return f"v1.{text}.{b64url(mac)}"


def respelled(text: str) -> str:
    """``text`` with an unused low bit of its last character set: another spelling of the
    same bytes for a lenient decoder (``text`` must have unused bits)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    other = text[:-1] + alphabet[alphabet.index(text[-1]) ^ 1]
    assert lenient(other) == lenient(text)
    return other


def lenient(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


ALPHANUMERICS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
REGIONS = ("us-east-1", "eu-central-1", "ap-southeast-4", "us-gov-west-1", "cn-north-1")
# As the stack generates them: letters and digits. (HMAC pads a key shorter than its block with
# zero bytes, so keys that differ only in trailing zero bytes are the same HMAC key under two
# key ids: no generated key ends in one.)
keys = st.text(ALPHANUMERICS, min_size=32, max_size=96).map(str.encode)


@st.composite
def valid_claims(draw: st.DrawFn, key: bytes | None = None) -> Claims:
    """Any claims a link can carry (signed with ``key``, or with ``KEY``)."""
    issued_at = draw(st.integers(0, 2**34))
    return Claims(
        stack=draw(st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,127}", fullmatch=True)),
        account=draw(st.from_regex(r"[0-9]{12}", fullmatch=True)),
        region=draw(st.sampled_from(REGIONS)),
        binding=draw(st.integers(0, 2**40)),
        key_id=key_id(KEY if key is None else key),
        nonce=b64url(draw(st.binary(min_size=16, max_size=16))),
        issued_at=issued_at,
        expires_at=issued_at + draw(st.integers(60, 86_400)),
    )
