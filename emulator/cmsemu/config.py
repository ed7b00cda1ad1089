"""EmulatorConfig: the knobs tests turn (a running emulator reads them on every request)."""

import secrets
from dataclasses import dataclass, field
from typing import Literal


@dataclass
class EmulatorConfig:
    """Behaviour of the emulated identity provider and service.

    Lifetimes are seconds; 0 disables the refresh lifetimes. `rate_limit` is the number of
    token-endpoint requests allowed per window per (client IP, presented credential).
    """

    client_id: str = "cms-client"
    freetrial_client_id: str = "cms-freetrial-client"
    scope: str = "openid profile email offline_access"
    device_code_lifetime: int = 900
    poll_interval: int = 5
    access_token_lifetime: int = 86400
    service_token_lifetime: int = 86400
    refresh_absolute_lifetime: int = 30 * 86400
    refresh_idle_lifetime: int = 30 * 86400
    refresh_reuse_interval: float = 0
    refresh_scope: str = "openid profile offline_access"
    rate_limit: int | None = None
    rate_limit_window: int = 60
    rate_limit_retry_after: bool = True
    projects_envelope: Literal["data", "bare"] = "data"
    service_error_style: Literal["details", "errors"] = "details"
    refused_token_status: int = 401
    auto_approve: bool = False
    verbose: bool = False
    signing_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
