"""Client of the service: provider information, token exchange and project listing (1, 4, 6).

The response models are imported by the calls that parse them: a cold start that makes no
upstream call (a scheduled no-op, a status query) does not load them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cmstoken.core.clock import Clock, SystemClock
from cmstoken.core.urls import validate_url
from cmstoken.upstream.http import HttpTransport

if TYPE_CHECKING:
    from cmstoken.upstream.models import Project, ProviderInfo, ServiceToken


class ServiceClient:
    """Calls the service at ``base_url``; the management API lives at ``api_url``
    (the provider's audience, ``{base_url}/api`` by default)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_url: str | None = None,
        transport: HttpTransport | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.base_url = validate_url(base_url, what="service base URL")
        self.api_url = validate_url(api_url or f"{self.base_url}/api", what="API URL")
        self.transport = transport or HttpTransport()
        self.clock = clock or SystemClock()

    def provider_info(self) -> ProviderInfo:
        """The identity provider's address, client ids, scope and audience (endpoint 1)."""
        from cmstoken.upstream.models import ProviderInfo
        from cmstoken.upstream.responses import json_object, service_error

        response = self.transport.request(
            "GET", f"{self.base_url}/api/v3/auth/provider", endpoint="provider"
        )
        if response.status != 200:
            raise service_error(response, endpoint="provider", now=self.clock.now())
        return ProviderInfo.parse(json_object(response, endpoint="provider"))

    def exchange(
        self, access_token: str, *, fallback_expires_at: float, time_limit: float | None = None
    ) -> ServiceToken:
        """Exchange a raw access token for a service token (endpoint 4).

        The service token's expiry is its JWT ``exp``, else ``fallback_expires_at``, clamped
        to at most ``MAX_TOKEN_LIFETIME_SECONDS`` from now.
        """
        from cmstoken.upstream.models import ServiceToken
        from cmstoken.upstream.responses import json_object, service_error

        response = self.transport.request(
            "POST",
            f"{self.base_url}/api/v3/auth/token",
            endpoint="exchange",
            json_body={"token": access_token},
            time_limit=time_limit,
        )
        if response.status != 200:
            raise service_error(
                response, endpoint="exchange", now=self.clock.now(), secrets=(access_token,)
            )
        document = json_object(response, endpoint="exchange")
        return ServiceToken.parse(
            document, fallback_expires_at=fallback_expires_at, now=self.clock.now()
        )

    def list_projects(
        self, service_token: str, *, time_limit: float | None = None
    ) -> list[Project]:
        """The projects the service token can see (endpoint 6); accepts the ``{"data": [...]}``
        envelope and a bare object alike. ``TokenRefusedError`` when the token is not accepted."""
        from cmstoken.upstream.models import parse_project_listing
        from cmstoken.upstream.responses import json_value, service_error

        response = self.transport.request(
            "GET",
            f"{self.api_url}/v3/projects",
            endpoint="projects",
            headers={
                "Authorization": f"Bearer {service_token}",
                "Content-Type": "application/json",
            },
            time_limit=time_limit,
        )
        if response.status != 200:
            raise service_error(
                response, endpoint="projects", now=self.clock.now(), secrets=(service_token,)
            )
        document = json_value(response, endpoint="projects")
        return parse_project_listing(document)
