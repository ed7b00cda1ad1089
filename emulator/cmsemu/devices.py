"""Device codes of the device authorization flow and the polling rules of RFC 8628."""

import secrets
from dataclasses import dataclass

from cmsemu.responses import OAuthError

USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
SLOW_DOWN_STEP = 5


@dataclass
class DeviceCode:
    """One device authorization; status is pending, approved, denied or consumed."""

    device_code: str
    user_code: str
    client_id: str
    scope: str
    expires_at: float
    interval: int
    status: str = "pending"
    subject: str | None = None
    last_poll_at: float | None = None
    expiry_reported: bool = False


def normalize_user_code(text: str) -> str:
    """Return a user code as XXXX-XXXX whatever case, spaces or dashes the user typed."""
    letters = "".join(text.split()).replace("-", "").upper()
    return f"{letters[:4]}-{letters[4:]}" if len(letters) == 8 else letters


def _new_user_code() -> str:
    letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
    return f"{letters[:4]}-{letters[4:]}"


class DeviceCodes:
    """The device codes issued so far, by device code and by user code."""

    def __init__(self) -> None:
        self._by_device: dict[str, DeviceCode] = {}
        self._by_user: dict[str, DeviceCode] = {}

    def issue(
        self, client_id: str, scope: str, expires_at: float, interval: int, approved: bool
    ) -> DeviceCode:
        """Create a device code (already approved when `approved`)."""
        user_code = _new_user_code()
        while user_code in self._by_user:
            user_code = _new_user_code()
        code = DeviceCode(
            device_code=secrets.token_urlsafe(30),
            user_code=user_code,
            client_id=client_id,
            scope=scope,
            expires_at=expires_at,
            interval=interval,
            status="approved" if approved else "pending",
        )
        self._by_device[code.device_code] = code
        self._by_user[user_code] = code
        return code

    def set_status(self, user_code: str, status: str, subject: str | None = None) -> None:
        """Approve or deny a user code (approving as `subject`, the provider's user by
        default); KeyError if it was never issued."""
        code = self._by_user[normalize_user_code(user_code)]
        code.status = status
        code.subject = subject

    def awaiting(self, user_code: str, now: float) -> DeviceCode | None:
        """Return the code if the user may still approve or deny it."""
        code = self._by_user.get(normalize_user_code(user_code))
        if code is None or code.status != "pending" or now >= code.expires_at:
            return None
        return code

    def pending_user_codes(self, now: float) -> list[str]:
        """User codes still waiting for the user."""
        return [c.user_code for c in self._by_user.values() if self.awaiting(c.user_code, now)]

    def poll(self, device_code: str, client_id: str, now: float) -> DeviceCode:
        """Answer a token poll: return the approved code (now consumed) or raise OAuthError."""
        code = self._by_device.get(device_code)
        if code is None or code.status == "consumed":
            raise OAuthError(403, "invalid_grant", "Invalid or expired device code.")
        if code.client_id != client_id:
            raise OAuthError(401, "invalid_client", "Client does not match the device code.")
        if now >= code.expires_at:
            if code.expiry_reported:
                raise OAuthError(403, "invalid_grant", "Invalid or expired device code.")
            code.expiry_reported = True
            raise OAuthError(403, "expired_token", "The device code has expired.")
        if code.status == "denied":
            raise OAuthError(
                403, "access_denied", "User cancelled the confirmation prompt or consent page."
            )
        previous, code.last_poll_at = code.last_poll_at, now
        if previous is not None and now - previous < code.interval:
            code.interval += SLOW_DOWN_STEP
            raise OAuthError(
                429,
                "slow_down",
                f"You are polling faster than the specified interval of {code.interval} seconds.",
            )
        if code.status == "pending":
            raise OAuthError(403, "authorization_pending", "User has yet to authorize device code.")
        code.status = "consumed"
        return code
