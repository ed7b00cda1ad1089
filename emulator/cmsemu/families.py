"""Refresh token families: rotation, reuse detection and the absolute and idle lifetimes."""

import secrets
from dataclasses import dataclass

from cmsemu.config import EmulatorConfig
from cmsemu.responses import OAuthError


@dataclass
class Family:
    """The refresh tokens descending from one device authorization."""

    client_id: str
    authorized_at: float
    last_refresh_at: float
    newest: str = ""
    revoked: bool = False
    subject: str | None = None


@dataclass
class RefreshToken:
    """One refresh token; `parent` is the token whose use issued it."""

    family: Family
    parent: str | None
    used_at: float | None = None


def _invalid_grant() -> OAuthError:
    return OAuthError(403, "invalid_grant", "Unknown or invalid refresh token.")


class Families:
    """Every refresh token issued, each pointing at its family."""

    def __init__(self) -> None:
        self._tokens: dict[str, RefreshToken] = {}

    def create(self, client_id: str, now: float, subject: str | None = None) -> str:
        """Start a family at a device authorization (by `subject`, the provider's user by
        default); return its first refresh token."""
        family = Family(client_id, authorized_at=now, last_refresh_at=now, subject=subject)
        return self._mint(family, parent=None)

    def get(self, value: str) -> RefreshToken:
        """Return an issued refresh token; KeyError if it was never issued."""
        return self._tokens[value]

    def usable(self, value: str, now: float, config: EmulatorConfig) -> bool:
        """True if the token is issued, unused, and its family alive and unexpired."""
        token = self._tokens.get(value)
        return (
            token is not None
            and token.used_at is None
            and not token.family.revoked
            and not _expired(token.family, now, config)
        )

    def rotate(self, value: str, client_id: str, now: float, config: EmulatorConfig) -> Family:
        """Use a refresh token; return its family, whose `newest` is the new token.

        Reusing a used token revokes the whole family, except the immediately previous token
        within `refresh_reuse_interval` seconds of its first use.
        """
        token = self._tokens.get(value)
        if token is None or token.family.revoked or token.family.client_id != client_id:
            raise _invalid_grant()
        family = token.family
        if _expired(family, now, config):
            raise _invalid_grant()
        if token.used_at is None:
            token.used_at = now
        elif not self._reusable(value, token.used_at, family, now, config):
            family.revoked = True
            raise _invalid_grant()
        family.last_refresh_at = now
        self._mint(family, parent=value)
        return family

    def _reusable(
        self, value: str, used_at: float, family: Family, now: float, config: EmulatorConfig
    ) -> bool:
        interval = config.refresh_reuse_interval
        newest = self._tokens[family.newest]
        return interval > 0 and newest.parent == value and now - used_at <= interval

    def _mint(self, family: Family, parent: str | None) -> str:
        value = "v1." + secrets.token_urlsafe(45)
        self._tokens[value] = RefreshToken(family, parent)
        family.newest = value
        return value


def _expired(family: Family, now: float, config: EmulatorConfig) -> bool:
    absolute = config.refresh_absolute_lifetime
    idle = config.refresh_idle_lifetime
    return (absolute > 0 and now >= family.authorized_at + absolute) or (
        idle > 0 and now >= family.last_refresh_at + idle
    )
