"""Client of the identity provider: device code, device-token poll, refresh (endpoints 2, 3, 5)."""

from __future__ import annotations

from cmstoken.core.clock import Clock, SystemClock
from cmstoken.core.urls import validate_url
from cmstoken.upstream.http import HttpTransport
from cmstoken.upstream.models import DeviceAuthorization, TokenAnswer
from cmstoken.upstream.responses import json_object, json_value, oauth_error

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class IdentityClient:
    """Calls the identity provider at ``issuer_url`` (https, or http on a loopback host)."""

    def __init__(
        self,
        issuer_url: str,
        *,
        transport: HttpTransport | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.issuer_url = validate_url(issuer_url, what="issuer URL")
        self.transport = transport or HttpTransport()
        self.clock = clock or SystemClock()

    def request_device_code(
        self, *, client_id: str, scope: str, audience: str
    ) -> DeviceAuthorization:
        """Start a device authorization (endpoint 2)."""
        response = self.transport.request(
            "POST",
            f"{self.issuer_url}/oauth/device/code",
            endpoint="device_code",
            form={"client_id": client_id, "scope": scope, "audience": audience},
        )
        now = self.clock.now()
        if response.status != 200:
            raise oauth_error(response, endpoint="device_code", now=now)
        document = json_object(response, endpoint="device_code")
        return DeviceAuthorization.parse(document, received_at=now)

    def poll_device_token(
        self, *, client_id: str, device_code: str, time_limit: float | None = None
    ) -> TokenAnswer:
        """Poll once for the tokens of a device authorization (endpoint 3).

        Raises ``AuthorizationPendingError`` or ``SlowDownError`` while the user has not
        finished, and a ``TerminalError`` (expired, denied, invalid) when the flow is over. An
        approved answer is read as leniently as a refresh's (``TokenAnswer``): the device code
        is spent once it is given, so its refresh token must be kept whatever else is missing.
        """
        return self._token_answer(
            "device_token",
            {"grant_type": DEVICE_GRANT, "device_code": device_code, "client_id": client_id},
            secret=device_code,
            time_limit=time_limit,
        )

    def refresh(
        self, *, client_id: str, refresh_token: str, time_limit: float | None = None
    ) -> TokenAnswer:
        """Trade a refresh token for new tokens (endpoint 5). The one sent is void afterwards:
        keep the ``refresh_token`` of the answer.

        Any 2xx answer is read leniently (``TokenAnswer``): it is the identity provider's
        proof that it rotated the refresh token, so whatever else is wrong with it, its refresh
        token must be kept. Errors raised for a 2xx answer carry its status (2xx): callers
        must not send the same refresh token again after one.
        """
        return self._token_answer(
            "refresh",
            {"grant_type": "refresh_token", "client_id": client_id, "refresh_token": refresh_token},
            secret=refresh_token,
            time_limit=time_limit,
        )

    def _token_answer(
        self, endpoint: str, form: dict[str, str], *, secret: str, time_limit: float | None
    ) -> TokenAnswer:
        response = self.transport.request(
            "POST",
            f"{self.issuer_url}/oauth/token",
            endpoint=endpoint,
            form=form,
            time_limit=time_limit,
        )
        now = self.clock.now()
        if not 200 <= response.status < 300:
            raise oauth_error(response, endpoint=endpoint, now=now, secrets=(secret,))
        document = json_value(response, endpoint=endpoint)
        return TokenAnswer.parse(document, received_at=now, endpoint=endpoint)
