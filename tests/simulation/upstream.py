"""The identity provider and the service in memory, behind an ``HttpTransport``.

``SimulatedUpstream`` is an ``HttpTransport`` whose ``request`` answers the identity provider's
device code and token endpoints (the device code and refresh grants) and the service's provider,
exchange and project listing endpoints from in-memory models, with the same statuses and bodies
as the emulator, so that the real ``IdentityClient``, ``ServiceClient``, device flow and response
parsers run unchanged.

``IdentityProviderModel`` follows the emulator's refresh families (``cmsemu.families``): every
refresh rotates the token; presenting a used token again revokes the whole family, except the
immediately previous token within ``reuse_interval`` seconds of its first use; absolute and idle
lifetimes end a family. Its device authorizations follow the emulator's (``cmsemu.devices``,
``cmsemu.idp``): a device code and a user code (``XXXX-XXXX``, deterministic here) per request;
polls answer ``authorization_pending`` until the user acts (``approve(user_code, subject)``,
``deny(user_code)``: the controls of the emulator), ``slow_down`` (the interval grows by 5 s) when
a poll comes sooner than the interval after the previous one, ``access_denied`` once denied,
``expired_token`` once the code expired and ``invalid_grant`` after that (and for a consumed or
unknown code); an approved code yields a new family, its tokens naming the approving subject
(``sub``; the provider's one user by default), in its refresh answers too. ``ServiceModel``
exchanges unexpired access tokens of the provider for service tokens (naming the access token's
subject) and lists projects for unexpired service tokens.

Lost responses: ``lose(endpoint)`` makes the next request to that endpoint act and then fail as
``HttpTransport`` fails when the connection drops (``UpstreamConnectionError``) or the time limit
ends (``UpstreamTimeoutError``) before the answer arrives, both with ``outcome_unknown``, or as a
gateway in front of the provider answers when the provider acted and its answer went missing
(HTTP 504, which the client reads as outcome unknown). Every request runs through
``interceptor`` (see ``simulation.interception``).
"""

from __future__ import annotations

import base64
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from requests.structures import CaseInsensitiveDict

from cmstoken.core.errors import UpstreamConnectionError, UpstreamTimeoutError
from cmstoken.upstream.http import HttpResponse, HttpTransport
from simulation.interception import Interceptor, direct

ISSUER_URL = "https://idp.sim.test/"
BASE_URL = "https://cms.sim.test"
API_URL = BASE_URL + "/api"
CLIENT_ID = "cms-client"
FREETRIAL_CLIENT_ID = "cms-freetrial-client"
SCOPE = "openid profile email offline_access"
REFRESH_SCOPE = "openid profile offline_access"
SUBJECT = "auth0|simulated-user"
VERIFICATION_URI = ISSUER_URL + "activate"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"
SLOW_DOWN_STEP = 5
ID_TOKEN_LIFETIME = 36000
DAY = 86400
Loss = Literal["connection", "timeout", "gateway"]


class Clock(Protocol):
    def now(self) -> float: ...

    def advance(self, seconds: float) -> None: ...


class OAuthRefusalError(Exception):
    """An identity provider error answer (``{"error", "error_description"}``)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.description = description


def _invalid_grant() -> OAuthRefusalError:
    return OAuthRefusalError(403, "invalid_grant", "Unknown or invalid refresh token.")


def _invalid_device_code() -> OAuthRefusalError:
    return OAuthRefusalError(403, "invalid_grant", "Invalid or expired device code.")


def _jwt(claims: dict[str, Any]) -> str:
    """An unsigned-looking JWT (the models keep the tokens they issued; nothing verifies it)."""

    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.c2ltdWxhdGVk"


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT (its signature unchecked)."""
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


def normalize_user_code(text: str) -> str:
    """A user code as ``XXXX-XXXX`` whatever case, spaces or dashes were typed (as the
    emulator reads it)."""
    letters = "".join(text.split()).replace("-", "").upper()
    return f"{letters[:4]}-{letters[4:]}" if len(letters) == 8 else letters


def _user_code(serial: int) -> str:
    """The ``serial``-th user code: eight letters of the emulator's alphabet, distinct for every
    serial below 20**8 (7919 is prime to 20)."""
    value = (serial * 7919 + 104_729) % len(USER_CODE_ALPHABET) ** 8
    letters = ""
    for _ in range(8):
        value, digit = divmod(value, len(USER_CODE_ALPHABET))
        letters += USER_CODE_ALPHABET[digit]
    return f"{letters[:4]}-{letters[4:]}"


@dataclass
class DeviceCode:
    """One device authorization (``cmsemu.devices.DeviceCode``); ``status`` is pending,
    approved, denied or consumed."""

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


@dataclass
class Family:
    """The refresh tokens descending from one authorization."""

    client_id: str
    authorized_at: float
    last_refresh_at: float
    newest: str = ""
    revoked: bool = False
    subject: str | None = None


@dataclass
class RefreshToken:
    family: Family
    parent: str | None
    used_at: float | None = None


@dataclass
class IdentityProviderModel:
    """Refresh token families and device authorizations (see the module docstring); lifetimes
    in seconds, 0 disables the refresh lifetimes."""

    clock: Clock
    reuse_interval: float = 0
    absolute_lifetime: float = 30 * DAY
    idle_lifetime: float = 30 * DAY
    access_token_lifetime: int = DAY
    device_code_lifetime: int = 900
    poll_interval: int = 5
    auto_approve: bool = False
    client_ids: tuple[str, ...] = (CLIENT_ID, FREETRIAL_CLIENT_ID)
    tokens: dict[str, RefreshToken] = field(default_factory=dict)
    access_tokens: dict[str, float] = field(default_factory=dict)
    devices: dict[str, DeviceCode] = field(default_factory=dict)
    user_codes: dict[str, DeviceCode] = field(default_factory=dict)
    minted: int = 0

    def authorize(
        self, client_id: str = CLIENT_ID, scope: str = SCOPE, subject: str | None = None
    ) -> dict[str, Any]:
        """Start a family now (by ``subject``, the provider's user by default), as a completed
        device flow does; the raw token response."""
        now = self.clock.now()
        family = Family(client_id, authorized_at=now, last_refresh_at=now, subject=subject)
        return self._answer(family, self._mint(family, None), scope)

    # --- the device authorization (cmsemu.idp.device_code, cmsemu.devices) ------------------

    def request_device_code(self, client_id: str, scope: str, audience: str) -> dict[str, Any]:
        """The device code endpoint's answer for a validated request, or ``OAuthRefusalError``
        (the form's required fields are checked by the transport, in the emulator's order)."""
        if client_id not in self.client_ids:
            raise OAuthRefusalError(401, "invalid_client", "Unknown client.")
        if audience != API_URL:
            raise OAuthRefusalError(403, "access_denied", f"Service not found: {audience}")
        serial = len(self.devices) + 1
        code = DeviceCode(
            device_code=f"sim-device-{serial}",
            user_code=_user_code(serial),
            client_id=client_id,
            scope=scope,
            expires_at=self.clock.now() + self.device_code_lifetime,
            interval=self.poll_interval,
            status="approved" if self.auto_approve else "pending",
        )
        self.devices[code.device_code] = self.user_codes[code.user_code] = code
        return {
            "device_code": code.device_code,
            "user_code": code.user_code,
            "verification_uri": VERIFICATION_URI,
            "verification_uri_complete": f"{VERIFICATION_URI}?user_code={code.user_code}",
            "expires_in": self.device_code_lifetime,
            "interval": self.poll_interval,
        }

    def approve(self, user_code: str, subject: str | None = None) -> None:
        """The user approves ``user_code``, signed in as ``subject`` (the provider's one user by
        default); ``KeyError`` if it was never issued. As in the emulator, any code's status is
        set, whatever it was."""
        self._set_status(user_code, "approved", subject)

    def deny(self, user_code: str) -> None:
        """The user cancels ``user_code``; ``KeyError`` if it was never issued."""
        self._set_status(user_code, "denied", None)

    def pending_user_codes(self) -> list[str]:
        """The user codes still waiting for the user (pending and unexpired)."""
        now = self.clock.now()
        return [
            code.user_code
            for code in self.user_codes.values()
            if code.status == "pending" and now < code.expires_at
        ]

    def poll_device(self, device_code: str, client_id: str) -> dict[str, Any]:
        """A device-token poll: the raw token response of the new family once approved, or
        ``OAuthRefusalError`` (``cmsemu.devices.DeviceCodes.poll``)."""
        now = self.clock.now()
        code = self.devices.get(device_code)
        if code is None or code.status == "consumed":
            raise _invalid_device_code()
        if code.client_id != client_id:
            raise OAuthRefusalError(401, "invalid_client", "Client does not match the device code.")
        if now >= code.expires_at:
            if code.expiry_reported:
                raise _invalid_device_code()
            code.expiry_reported = True
            raise OAuthRefusalError(403, "expired_token", "The device code has expired.")
        if code.status == "denied":
            raise OAuthRefusalError(
                403, "access_denied", "User cancelled the confirmation prompt or consent page."
            )
        previous, code.last_poll_at = code.last_poll_at, now
        if previous is not None and now - previous < code.interval:
            code.interval += SLOW_DOWN_STEP
            raise OAuthRefusalError(
                429,
                "slow_down",
                f"You are polling faster than the specified interval of {code.interval} seconds.",
            )
        if code.status == "pending":
            raise OAuthRefusalError(
                403, "authorization_pending", "User has yet to authorize device code."
            )
        code.status = "consumed"
        return self.authorize(code.client_id, code.scope, code.subject)

    def _set_status(self, user_code: str, status: str, subject: str | None) -> None:
        code = self.user_codes[normalize_user_code(user_code)]
        code.status = status
        code.subject = subject

    # --- refresh families (cmsemu.families) --------------------------------------------------

    def refresh(self, client_id: str, refresh_token: str) -> dict[str, Any]:
        """The refresh grant: the raw token response, or ``OAuthRefusalError``."""
        if client_id not in self.client_ids:
            raise OAuthRefusalError(401, "invalid_client", "Unknown client.")
        now = self.clock.now()
        token = self.tokens.get(refresh_token)
        if token is None or token.family.revoked or token.family.client_id != client_id:
            raise _invalid_grant()
        family = token.family
        if self._expired(family, now):
            raise _invalid_grant()
        if token.used_at is None:
            token.used_at = now
        elif not self._reusable(refresh_token, token.used_at, family, now):
            family.revoked = True
            raise _invalid_grant()
        family.last_refresh_at = now
        return self._answer(family, self._mint(family, refresh_token), REFRESH_SCOPE)

    def usable(self, refresh_token: str) -> bool:
        """Issued, unused, and its family alive and unexpired."""
        token = self.tokens.get(refresh_token)
        return (
            token is not None
            and token.used_at is None
            and not token.family.revoked
            and not self._expired(token.family, self.clock.now())
        )

    def family_revoked(self, refresh_token: str) -> bool:
        """Whether the token's family is revoked; ``KeyError`` if it was never issued."""
        return self.tokens[refresh_token].family.revoked

    def access_token_valid(self, token: str) -> bool:
        expires_at = self.access_tokens.get(token)
        return expires_at is not None and expires_at > self.clock.now()

    def _reusable(self, value: str, used_at: float, family: Family, now: float) -> bool:
        newest = self.tokens[family.newest]
        return (
            self.reuse_interval > 0
            and newest.parent == value
            and now - used_at <= self.reuse_interval
        )

    def _expired(self, family: Family, now: float) -> bool:
        absolute, idle = self.absolute_lifetime, self.idle_lifetime
        return (absolute > 0 and now >= family.authorized_at + absolute) or (
            idle > 0 and now >= family.last_refresh_at + idle
        )

    def _mint(self, family: Family, parent: str | None) -> str:
        self.minted += 1
        value = f"v1.sim-refresh-{self.minted}"
        self.tokens[value] = RefreshToken(family, parent)
        family.newest = value
        return value

    def _answer(self, family: Family, refresh_token: str, scope: str) -> dict[str, Any]:
        iat = int(self.clock.now())
        exp = iat + self.access_token_lifetime
        subject = family.subject or SUBJECT
        self.minted += 1
        access_token = _jwt(
            {
                "iss": ISSUER_URL,
                "sub": subject,
                "aud": [API_URL, ISSUER_URL + "userinfo"],
                "iat": iat,
                "exp": exp,
                "azp": family.client_id,
                "scope": scope,
                "jti": f"sim-access-{self.minted}",
            }
        )
        self.access_tokens[access_token] = exp
        return {
            "access_token": access_token,
            "id_token": _jwt(
                {
                    "iss": ISSUER_URL,
                    "sub": subject,
                    "aud": family.client_id,
                    "iat": iat,
                    "exp": iat + ID_TOKEN_LIFETIME,
                }
            ),
            "refresh_token": refresh_token,
            "scope": scope,
            "expires_in": self.access_token_lifetime,
            "token_type": "Bearer",
        }


@dataclass
class ServiceModel:
    """The service: exchanges the provider's access tokens, lists projects for its tokens."""

    identity: IdentityProviderModel
    service_token_lifetime: int = DAY
    refused_token_status: int = 401
    tokens: dict[str, float] = field(default_factory=dict)
    minted: int = 0

    def exchange(self, access_token: object) -> str | None:
        """A new service token naming the access token's subject, or ``None`` when the access
        token is not valid now."""
        if not isinstance(access_token, str) or not self.identity.access_token_valid(access_token):
            return None
        iat = int(self.identity.clock.now())
        self.minted += 1
        token = _jwt(
            {
                "iss": BASE_URL,
                "sub": jwt_claims(access_token)["sub"],
                "aud": API_URL,
                "iat": iat,
                "exp": iat + self.service_token_lifetime,
                "jti": f"sim-service-{self.minted}",
            }
        )
        self.tokens[token] = iat + self.service_token_lifetime
        return token

    def valid(self, token: str) -> bool:
        expires_at = self.tokens.get(token)
        return expires_at is not None and expires_at > self.identity.clock.now()


@dataclass(frozen=True)
class Exchange:
    """One request the upstream models received: ``status`` is ``None`` when the answer was
    lost after the model acted."""

    endpoint: str
    credential: str | None
    status: int | None
    at: float
    # A slow answer the caller gave up on before the transport's whole limit: it could still
    # have arrived (a per-read timeout shorter than the call's limit).
    cut_short: bool = False


def _json(status: int, payload: object) -> HttpResponse:
    return HttpResponse(
        status=status,
        headers=CaseInsensitiveDict({"Content-Type": "application/json"}),
        body=json.dumps(payload).encode(),
    )


def _oauth_error(refusal: OAuthRefusalError) -> HttpResponse:
    return _json(refusal.status, {"error": refusal.error, "error_description": refusal.description})


def _require(form: Mapping[str, str], *names: str) -> None:
    for name in names:
        if not form.get(name):
            raise OAuthRefusalError(400, "invalid_request", f"Missing required parameter: {name}")


def _service_error(status: int, details: str) -> HttpResponse:
    envelope = {
        "status": status,
        "message": HTTPStatus(status).phrase,
        "reference": "upmrid/simulated",
        "source": "API",
        "details": details,
    }
    return _json(status, {"error": envelope})


class SimulatedUpstream(HttpTransport):
    """An ``HttpTransport`` answered by the identity provider and service models."""

    def __init__(
        self,
        identity: IdentityProviderModel,
        service: ServiceModel | None = None,
        *,
        interceptor: Interceptor = direct,
    ) -> None:
        super().__init__()
        self.identity = identity
        self.service = service or ServiceModel(identity)
        self.interceptor = interceptor
        self.log: list[Exchange] = []
        self._losses: dict[str, deque[Loss]] = {}
        self._busy: set[str] = set()
        self._slow: dict[str, float] = {}

    def lose(self, endpoint: str, how: Loss = "connection", times: int = 1) -> None:
        """The next ``times`` requests to ``endpoint`` act, then their answers are lost."""
        self._losses.setdefault(endpoint, deque()).extend([how] * times)

    def slow(self, endpoint: str, seconds: float) -> None:
        """The next request to ``endpoint`` is acted on at once and answered ``seconds`` later:
        time passes while the caller waits (the clock moves), and a caller whose time limit
        (the transport's, or the one it passed) is shorter gives up at that limit, the request
        acted on and its answer never read (``UpstreamTimeoutError``, outcome unknown)."""
        self._slow[endpoint] = seconds

    def busy(self, endpoint: str) -> None:
        """The next request to ``endpoint`` is answered 503 without being acted on (the
        provider or the service is overloaded: the caller may retry)."""
        self._busy.add(endpoint)

    def request(
        self,
        method: str,
        url: str,
        *,
        endpoint: str,
        form: Mapping[str, str] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        time_limit: float | None = None,
    ) -> HttpResponse:
        name, credential, answer = self._route(method, url, form, json_body, headers)

        def act() -> HttpResponse:
            if name in self._busy:
                self._busy.discard(name)
                self.log.append(Exchange(name, credential, 503, self.identity.clock.now()))
                if name in ("refresh", "device_token", "device_code", "token"):
                    refusal = OAuthRefusalError(503, "temporarily_unavailable", "Try again later.")
                    return _oauth_error(refusal)
                return _service_error(503, "the service is temporarily unavailable")
            response: HttpResponse = answer()
            seconds = self._slow.pop(name, None)
            if seconds is not None:
                return self._slow_answer(name, credential, response, seconds, time_limit)
            losses = self._losses.get(name)
            if losses:
                self.log.append(Exchange(name, credential, None, self.identity.clock.now()))
                return self._lost(name, losses.popleft())
            self.log.append(Exchange(name, credential, response.status, self.identity.clock.now()))
            return response

        answered: HttpResponse = self.interceptor("upstream", name, act)
        return answered

    def _slow_answer(
        self,
        name: str,
        credential: str | None,
        response: HttpResponse,
        seconds: float,
        time_limit: float | None,
    ) -> HttpResponse:
        limit = self.timeouts.total if time_limit is None else min(time_limit, self.timeouts.total)
        clock = self.identity.clock
        if seconds <= limit:
            clock.advance(seconds)
            self.log.append(Exchange(name, credential, response.status, clock.now()))
            return response
        clock.advance(limit)
        cut_short = limit < self.timeouts.total
        self.log.append(Exchange(name, credential, None, clock.now(), cut_short=cut_short))
        return self._lost(name, "timeout")

    def _lost(self, name: str, how: Loss) -> HttpResponse:
        if how == "gateway":
            return _json(HTTPStatus.GATEWAY_TIMEOUT, {"message": "Endpoint request timed out"})
        if how == "timeout":
            raise UpstreamTimeoutError(
                f"{name}: no complete answer within the time limit",
                endpoint=name,
                outcome_unknown=True,
            )
        raise UpstreamConnectionError(
            f"{name}: connection dropped before an answer arrived",
            endpoint=name,
            outcome_unknown=True,
        )

    def _route(
        self,
        method: str,
        url: str,
        form: Mapping[str, str] | None,
        json_body: Any,
        headers: Mapping[str, str] | None,
    ) -> tuple[str, str | None, Any]:
        """The endpoint's name, the credential it presents, and a function that answers it."""
        path = urlsplit(url).path
        form = dict(form or {})
        if method == "POST" and url == ISSUER_URL + "oauth/token":
            grant = form.get("grant_type")
            name = {"refresh_token": "refresh", DEVICE_GRANT: "device_token"}.get(grant or "")
            credential = form.get("device_code") or form.get("refresh_token")
            return name or "token", credential, lambda: self._token(form)
        if method == "POST" and url == ISSUER_URL + "oauth/device/code":
            return "device_code", None, lambda: self._device_code(form)
        if url.startswith(BASE_URL):
            if method == "GET" and path == "/api/v3/auth/provider":
                return "provider", None, self._provider
            if method == "POST" and path == "/api/v3/auth/token":
                raw = json_body.get("token") if isinstance(json_body, dict) else None
                return "exchange", raw, lambda: self._exchange(raw)
            if method == "GET" and path == "/api/v3/projects":
                bearer = dict(headers or {}).get("Authorization", "").removeprefix("Bearer ")
                return "projects", bearer or None, lambda: self._projects(bearer or None)
        return "unknown", None, lambda: _service_error(404, f"no route for {method} {path}")

    def _device_code(self, form: dict[str, str]) -> HttpResponse:
        try:
            _require(form, "client_id")
            if form["client_id"] not in self.identity.client_ids:
                raise OAuthRefusalError(401, "invalid_client", "Unknown client.")
            _require(form, "scope", "audience")
            return _json(
                200,
                self.identity.request_device_code(
                    form["client_id"], form["scope"], form["audience"]
                ),
            )
        except OAuthRefusalError as refusal:
            return _oauth_error(refusal)

    def _token(self, form: dict[str, str]) -> HttpResponse:
        """The token endpoint (``cmsemu.idp.token``): the device code and refresh grants."""
        grant = form.get("grant_type")
        try:
            if grant == DEVICE_GRANT:
                _require(form, "device_code", "client_id")
                return _json(200, self.identity.poll_device(form["device_code"], form["client_id"]))
            if grant == "refresh_token":
                _require(form, "client_id", "refresh_token")
                return _json(200, self.identity.refresh(form["client_id"], form["refresh_token"]))
            _require(form, "grant_type")
            raise OAuthRefusalError(
                400, "unsupported_grant_type", f"Unsupported grant type: {grant}"
            )
        except OAuthRefusalError as refusal:
            return _oauth_error(refusal)

    def _provider(self) -> HttpResponse:
        return _json(
            200,
            {
                "clientId": CLIENT_ID,
                "freetrialClientId": FREETRIAL_CLIENT_ID,
                "issuerUri": ISSUER_URL,
                "scope": SCOPE,
                "audience": API_URL,
            },
        )

    def _exchange(self, raw: object) -> HttpResponse:
        token = self.service.exchange(raw)
        if token is None:
            return _service_error(500, "failed to get service token")
        return _json(200, {"token": token})

    def _projects(self, bearer: str | None) -> HttpResponse:
        if bearer is None or not self.service.valid(bearer):
            details = "missing token" if bearer is None else "invalid token"
            return _service_error(self.service.refused_token_status, details)
        project = {
            "projectId": "prj_simulated",
            "projectName": "Simulated Project",
            "clusterCount": 2,
            "userCount": 3,
            "cloudProviders": [
                {"cloudProviderId": "aws", "cloudProviderName": "Amazon Web Services"}
            ],
        }
        return _json(200, {"data": [project]})
