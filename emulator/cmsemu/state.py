"""Everything the emulator remembers, guarded by one lock, and the tokens it mints."""

import secrets
import string
import threading
from collections import Counter
from typing import Any

from cmsemu import jwt
from cmsemu.clock import Clock
from cmsemu.config import EmulatorConfig
from cmsemu.devices import DeviceCodes
from cmsemu.families import Families
from cmsemu.faults import FaultQueue
from cmsemu.ratelimit import RateLimiter
from cmsemu.records import RequestRecord
from cmsemu.urls import Urls

# The claim that tells the emulator's own JWTs apart.
KIND_CLAIM = "token_use"
RAW_ACCESS = "raw_access"
ID_TOKEN = "id"
SERVICE = "service"
ID_TOKEN_LIFETIME = 36000


class State:
    """Device codes, refresh families, faults, rate limits, clock and request log.

    Callers hold `lock` while they read or change anything here.
    """

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.lock = threading.RLock()
        self.clock = Clock()
        self.urls = Urls("http://127.0.0.1:0")
        self.subject = "auth0|" + secrets.token_hex(12)
        alphabet = string.ascii_letters + string.digits
        self.project_id = "prj_" + "".join(secrets.choice(alphabet) for _ in range(16))
        self.faults = FaultQueue()
        self.counts: Counter[str] = Counter()
        self.records: list[RequestRecord] = []
        self.devices = DeviceCodes()
        self.families = Families()
        self.limiter = RateLimiter()

    def reset(self) -> None:
        """Forget all codes, tokens, families, faults, counts, records and the clock offset."""
        self.devices = DeviceCodes()
        self.families = Families()
        self.limiter = RateLimiter()
        self.faults.clear()
        self.counts.clear()
        self.records.clear()
        self.clock.reset()

    def now(self) -> float:
        """The emulator clock."""
        return self.clock.now()

    def client_ids(self) -> tuple[str, str]:
        """The client ids the identity provider knows."""
        return self.config.client_id, self.config.freetrial_client_id

    def start_family(
        self, client_id: str, scope: str, subject: str | None = None
    ) -> dict[str, Any]:
        """Authorize a new refresh family now (by `subject`, default the provider's user);
        return the raw token response."""
        refresh_token = self.families.create(client_id, self.now(), subject)
        return self.token_response(client_id, scope, refresh_token, subject)

    def token_response(
        self, client_id: str, scope: str, refresh_token: str, subject: str | None = None
    ) -> dict[str, Any]:
        """Return a raw token response with a fresh access token and ID token naming `subject`
        (the provider's user by default)."""
        config, urls = self.config, self.urls
        subject = subject or self.subject
        iat = int(self.now())
        access_token = jwt.encode(
            {
                "iss": urls.issuer_url,
                "sub": subject,
                "aud": [urls.api_url, urls.issuer_url + "userinfo"],
                "iat": iat,
                "exp": iat + config.access_token_lifetime,
                "azp": client_id,
                "scope": scope,
                KIND_CLAIM: RAW_ACCESS,
                "jti": secrets.token_hex(8),
            },
            config.signing_key,
        )
        id_token = jwt.encode(
            {
                "iss": urls.issuer_url,
                "sub": subject,
                "aud": client_id,
                "iat": iat,
                "exp": iat + ID_TOKEN_LIFETIME,
                "name": "Emulated User",
                "email": "user@example.com",
                KIND_CLAIM: ID_TOKEN,
            },
            config.signing_key,
        )
        return {
            "access_token": access_token,
            "id_token": id_token,
            "refresh_token": refresh_token,
            "scope": scope,
            "expires_in": config.access_token_lifetime,
            "token_type": "Bearer",
        }

    def service_token(self, subject: str) -> str:
        """Mint a service token for `subject`."""
        iat = int(self.now())
        claims = {
            "iss": self.urls.base_url,
            "sub": subject,
            "aud": self.urls.api_url,
            "iat": iat,
            "exp": iat + self.config.service_token_lifetime,
            KIND_CLAIM: SERVICE,
            "jti": secrets.token_hex(8),
        }
        return jwt.encode(claims, self.config.signing_key)

    def valid_claims(self, token: str, kind: str) -> dict[str, Any] | None:
        """Return the claims of an unexpired emulator token of `kind`, else None."""
        claims = jwt.decode(token, self.config.signing_key)
        if claims is None or claims.get(KIND_CLAIM) != kind:
            return None
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or exp <= self.now():
            return None
        return claims
