"""The ``requests`` adapter: ``ServiceTokenAuth`` sets the bearer header of a request, and
retries it once with a new token after a 401, or after a 403 when the published token
changed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from requests.auth import AuthBase

from cmstoken.core.redaction import fingerprint

if TYPE_CHECKING:
    from requests import PreparedRequest, Response

    from cmstoken.consumer.provider import ServiceTokenProvider

logger = logging.getLogger(__name__)


class ServiceTokenAuth(AuthBase):
    """``requests`` authentication with the provider's token: sets ``Authorization: Bearer``.
    When the service answers 401, gets a new token (``provider.refused``) and retries the
    request once; on 403, retries once only when the published token changed
    (``provider.replacement``), and otherwise returns the 403 as it is. A request whose body is
    a stream is not retried."""

    def __init__(self, provider: ServiceTokenProvider) -> None:
        self.provider = provider

    def __call__(self, request: PreparedRequest) -> PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self.provider.token()}"
        request.hooks.setdefault("response", []).append(self._on_response)
        return request

    def _on_response(self, response: Response, **kwargs: Any) -> Response:
        """The response hook: one retry with a new token after 401, or after 403 when the
        token changed."""
        request = response.request
        sent = _bearer(request)
        if response.status_code not in (401, 403) or sent is None:
            return response
        if not isinstance(request.body, str | bytes | None):
            return response
        if response.status_code == 401:
            token = self.provider.refused(sent)
        else:
            replacement = self.provider.replacement(sent)
            if replacement is None:
                return response
            token = replacement
        retry = request.copy()
        retry.hooks = {"response": []}  # the copy shares the original's hooks: never re-run them
        retry.headers["Authorization"] = f"Bearer {token}"
        logger.info(
            "service answered %s; retrying once with a new token",
            response.status_code,
            extra={"refused": fingerprint(sent), "current": fingerprint(token)},
        )
        _ = response.content  # read it, so that the connection goes back to the pool
        response.close()
        retried = response.connection.send(retry, **kwargs)
        retried.history.append(response)
        retried.request = retry
        return retried


def _bearer(request: PreparedRequest) -> str | None:
    value = request.headers.get("Authorization")
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not value or not value.startswith("Bearer "):
        return None
    return value.removeprefix("Bearer ")
