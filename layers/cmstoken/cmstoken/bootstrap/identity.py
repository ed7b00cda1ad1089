"""Who authorized a credential: the subject its tokens name (as a hash), and whether a new
authorization may replace the stored credential. Pure functions (no I/O)."""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from cmstoken.aws.documents import RefreshCredential
from cmstoken.core.lifetimes import unverified_claims


class NamedTokens(Protocol):
    """Tokens that may name their subject: a device-flow answer's ID and access tokens."""

    @property
    def id_token(self) -> str | None: ...

    @property
    def access_token(self) -> str | None: ...


def token_subject(tokens: NamedTokens, issuer_url: str, client_id: str) -> str | None:
    """Who the tokens name, as the SHA-256 (hex) of the issuer and the ``sub`` claim; ``None``
    when no token names a subject that can be read.

    The ID token is read first (OpenID Connect: its ``sub`` is the user; it must name our
    issuer and list our client among its audiences), then the access token (its ``iss`` must
    be our issuer). Signatures are not checked: the tokens came straight from the token
    endpoint over TLS (OpenID Connect Core 3.1.3.7). Only the hash is kept: comparing two
    identities needs no more, and it is not personal data in clear.
    """
    issuer = issuer_url.rstrip("/")
    for token, audience in ((tokens.id_token, client_id), (tokens.access_token, None)):
        claims = unverified_claims(token) if token else None
        if claims is None:
            continue
        subject, claimed_issuer = claims.get("sub"), claims.get("iss")
        if not isinstance(subject, str) or not subject:
            continue
        if claimed_issuer is not None and (
            not isinstance(claimed_issuer, str) or claimed_issuer.rstrip("/") != issuer
        ):
            continue
        if audience is not None and not _lists(claims.get("aud"), audience):
            continue
        return hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()
    return None


def _lists(audiences: Any, client_id: str) -> bool:
    if isinstance(audiences, str):
        return audiences == client_id
    return isinstance(audiences, list) and client_id in audiences


def identity_refusal(
    current: RefreshCredential | None, subject: str | None, *, allowed: bool
) -> str | None:
    """Why a new authorization by ``subject`` may not replace ``current``; ``None`` when it may.

    Allowed: a new identity was asked for, nothing was authorized yet, the stored credential
    records no identity (stored before identities were kept: the first re-authorization
    records one), or the identities are the same. Refused: another subject, or none readable
    while the stored credential has one (it cannot be shown to be the same person).
    """
    if allowed or current is None or current.subject_sha256 is None:
        return None
    if subject == current.subject_sha256:
        return None
    expected = short_identity(current.subject_sha256)
    if subject is None:
        return (
            "the new authorization's tokens name no subject that can be read, so it cannot be "
            f"shown to be the identity this stack is authorized as ({expected})"
        )
    return (
        f"the code was approved by a different identity ({short_identity(subject)}) than the "
        f"one this stack is authorized as ({expected})"
    )


def short_identity(subject: str | None) -> str | None:
    """A short, loggable name of an identity (the first 12 hex digits of its hash)."""
    return None if subject is None else subject[:12]
