"""I5, judged at every write of the refresh credential document: a pending authorization and a
rotation never erase each other's fields.

The rotator's writes leave ``pending`` and ``candidate`` as they were and change the credential
only by rotating it (the new token a child of the stored one) or marking it; the bootstrap's
writes leave the credential, the raw access token and the lease as they were, except when they
install a new authorization: as the first credential (none active before) or by promoting the
stored candidate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cmstoken.aws.documents import STATUS_ACTIVE, RefreshSecret

if TYPE_CHECKING:
    from simulation.world import World


def judge(world: World, bootstrap: bool, old: RefreshSecret, new: RefreshSecret) -> str | None:
    """What a write by the bootstrap (``bootstrap``) or a rotator that turned ``old`` into
    ``new`` erased, if anything."""
    if not bootstrap:
        if new.pending != old.pending:
            return "the pending authorization changed"
        if new.candidate != old.candidate:
            return "the candidate changed"
        if not _rotation_of(world, old, new):
            return "the credential changed other than by its rotation"
        return None
    kept = (
        new.credential == old.credential
        and new.raw_access_token == old.raw_access_token
        and new.lease == old.lease
    )
    if kept or _installed(world, old, new):
        return None
    return "the credential, raw access token or lease changed without a new authorization"


def _rotation_of(world: World, old: RefreshSecret, new: RefreshSecret) -> bool:
    before, after = old.credential, new.credential
    if before is None or after is None:
        return before == after
    if after.refresh_token == before.refresh_token:
        return after.authorized_at == before.authorized_at
    issued = world.identity.tokens.get(after.refresh_token)
    return issued is not None and issued.parent == before.refresh_token


def _installed(world: World, old: RefreshSecret, new: RefreshSecret) -> bool:
    """A new authorization installed: the first credential (none active before), or the stored
    candidate promoted; either way a device flow's first token, no lease."""
    credential = new.credential
    if credential is None or new.lease is not None:
        return False
    issued = world.identity.tokens.get(credential.refresh_token)
    if issued is None or issued.parent is not None or credential == old.credential:
        return False
    if old.candidate is not None:
        return (credential, new.raw_access_token) == (
            old.candidate.credential,
            old.candidate.raw_access_token,
        )
    return old.credential is None or old.credential.status != STATUS_ACTIVE
