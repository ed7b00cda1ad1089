"""Storing an approved authorization before anything else is done with it (persist-first): as
the credential when none is active, else as the candidate; or refused, its tokens discarded."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
)
from cmstoken.aws.vault import CredentialVault, Snapshot
from cmstoken.bootstrap.identity import short_identity, token_subject
from cmstoken.bootstrap.states import Approval, Move, Stage, approve
from cmstoken.core.errors import StoreError
from cmstoken.core.redaction import fingerprint

if TYPE_CHECKING:
    from cmstoken.upstream.models import TokenAnswer

logger = logging.getLogger(__name__)


def approval_of(
    tokens: TokenAnswer,
    pending: PendingAuthorization,
    reauthorize_by: float | None,
    *,
    allow_new_identity: bool,
) -> Approval:
    """The credential the approved ``tokens`` make, authorized when they arrived. A sloppy
    answer (RFC 6749 5.1: no expires_in, no scope) is read leniently: its refresh token is
    stored whatever else it lacks, its access token only when usable."""
    now = tokens.received_at
    credential = RefreshCredential(
        refresh_token=tokens.refresh_token,
        client_id=pending.client_id,
        issuer_url=pending.issuer_url,
        status=STATUS_ACTIVE,
        authorized_at=now,
        refreshed_at=now,
        reauthorize_by=reauthorize_by,
        free_trial=pending.free_trial,
        subject_sha256=token_subject(tokens, pending.issuer_url, pending.client_id),
    )
    access_token = tokens.usable_access_token
    raw = (
        None
        if access_token is None
        else RawAccessToken(
            token=access_token,
            expires_at=tokens.access_token_expires_at,
            expires_at_assumed=tokens.expiry_assumed,
        )
    )
    return Approval(pending, credential, raw, allow_new_identity)


def store_approval(
    vault: CredentialVault, snapshot: Snapshot, approval: Approval, deadline: float
) -> tuple[Move, Snapshot | None]:
    """Write the approval into the newest document; the move the last attempt made, and the
    document written (``None`` when nothing was: a refusal of a replaced authorization)."""
    moves: list[Move] = []  # what the last attempt of the write decided

    def change(document: RefreshSecret) -> RefreshSecret | None:
        moves[:] = [approve(document, approval)]
        return moves[0].document

    identity = short_identity(approval.credential.subject_sha256)
    try:
        stored = vault.update_refresh(snapshot, change, deadline)
    except StoreError as exc:
        logger.critical(
            "the approved authorization could not be stored and is lost; run start again",
            extra={"identity": identity, "error": type(exc).__name__, "aws_error": exc.code},
        )
        raise
    move = moves[0]
    if move.transition.next is Stage.REFUSED:
        logger.warning("new authorization refused", extra={"identity": identity})
    else:
        logger.info(
            "device authorization approved; credential stored",
            extra={
                "credential": fingerprint(approval.credential.refresh_token),
                "identity": identity,
                "as": move.transition.next.value,
            },
        )
    return move, stored
