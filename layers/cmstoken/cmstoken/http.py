"""HTTP plumbing shared by the upstream clients: URL rules, one pooled session, timeouts, body cap.

Every request goes through ``HttpTransport.request``, which never follows redirects (a token must
not travel to an address nobody configured), reads at most ``max_body`` bytes, and turns every
``requests`` failure into the project's ``TransientError`` types.

``requests`` is imported on the first request, not with this module: a run that makes no upstream
call (a scheduled no-op, a status query) does not pay for loading it at cold start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from . import __version__
from .errors import (
    ConfigurationError,
    MalformedResponseError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
)

if TYPE_CHECKING:
    import requests

logger = logging.getLogger(__name__)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
DEFAULT_MAX_BODY = 1024 * 1024
_CHUNK = 16 * 1024


def validate_url(url: str, *, what: str, allow_query: bool = False) -> str:
    """Check the https-or-loopback rule and return ``url`` without a trailing slash.

    ``http`` is allowed only for ``127.0.0.1``, ``::1`` and ``localhost``. A URL must name a host
    and carry no user name, password or fragment, nor a query unless ``allow_query``. ``what``
    names the setting in errors.
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"{what} is empty; expected an https URL")
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError for a bad port
    except ValueError as exc:
        raise ConfigurationError(f"{what} is not a valid URL ({exc})") from exc
    # Checked first, and no message repeats the URL: it might carry a password.
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(f"{what} must not contain a user name or password")
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigurationError(f"{what} must be an absolute https URL (https://host/...)")
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        raise ConfigurationError(
            f"{what} must use https (plain http is allowed only for 127.0.0.1, ::1 and localhost)"
        )
    if parts.fragment or (parts.query and not allow_query):
        raise ConfigurationError(f"{what} must not contain a query or fragment")
    return url.strip() if parts.query else url.strip().rstrip("/")


@dataclass(frozen=True)
class Timeouts:
    """Connect and read timeouts in seconds for one request."""

    connect: float = 3.05
    read: float = 10.0

    def __post_init__(self) -> None:
        if self.connect <= 0 or self.read <= 0:
            raise ConfigurationError("timeouts must be positive")


@dataclass(frozen=True)
class HttpResponse:
    """A complete upstream response: status, headers and the (capped) body."""

    status: int
    headers: Mapping[str, str] = field(repr=False)
    body: bytes = field(repr=False)

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower case (``application/json``)."""
        return self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


class HttpTransport:
    """One pooled ``requests`` session with explicit timeouts, no redirects and a body cap.
    ``observer(endpoint, elapsed_ms)`` is told of every call that got a response."""

    def __init__(
        self,
        *,
        timeouts: Timeouts | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        session: requests.Session | None = None,
        observer: Callable[[str, float], None] | None = None,
    ) -> None:
        self.timeouts = timeouts or Timeouts()
        self.max_body = max_body
        self._session = session
        self.observer = observer

    @property
    def session(self) -> requests.Session:
        """The pooled session, created on first use."""
        if self._session is None:
            import requests

            session = requests.Session()
            session.headers["User-Agent"] = f"cmstoken/{__version__}"
            session.headers["Accept"] = "application/json"
            self._session = session
        return self._session

    def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def request(
        self,
        method: str,
        url: str,
        *,
        endpoint: str,
        form: Mapping[str, str] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        read_timeout: float | None = None,
    ) -> HttpResponse:
        """Send one request and return the whole response, whatever its status.

        ``read_timeout`` shortens the read timeout (never lengthens it), for callers with a
        deadline. Raises ``UpstreamConnectionError``, ``UpstreamTimeoutError`` or
        ``MalformedResponseError`` (body over the cap); never includes request data in messages.
        """
        read = self.timeouts.read if read_timeout is None else min(read_timeout, self.timeouts.read)
        started = time.monotonic()
        try:
            return self._send(method, url, endpoint, form, json_body, headers, read, started)
        except Exception as exc:
            logger.warning(
                "upstream call failed",
                extra={
                    "endpoint": endpoint,
                    "error": type(exc).__name__,
                    "elapsed_ms": round((time.monotonic() - started) * 1000),
                },
            )
            raise

    def _send(
        self,
        method: str,
        url: str,
        endpoint: str,
        form: Mapping[str, str] | None,
        json_body: Any,
        headers: Mapping[str, str] | None,
        read: float,
        started: float,
    ) -> HttpResponse:
        import requests
        from requests.structures import CaseInsensitiveDict

        try:
            response = self.session.request(
                method,
                url,
                data=form,
                json=json_body,
                headers=dict(headers or {}),
                timeout=(self.timeouts.connect, max(read, 0.001)),
                allow_redirects=False,
                stream=True,
            )
        except requests.ConnectTimeout as exc:
            raise UpstreamConnectionError(
                f"{endpoint}: could not connect to {_origin(url)} within "
                f"{self.timeouts.connect:g} s",
                endpoint=endpoint,
            ) from exc
        except requests.ReadTimeout as exc:
            raise UpstreamTimeoutError(
                f"{endpoint}: no answer from {_origin(url)} within {read:g} s",
                endpoint=endpoint,
                outcome_unknown=True,
            ) from exc
        except requests.ConnectionError as exc:
            refused = _is_connect_failure(exc)
            raise UpstreamConnectionError(
                f"{endpoint}: "
                + (
                    f"cannot reach {_origin(url)}"
                    if refused
                    else f"connection to {_origin(url)} dropped before an answer arrived"
                ),
                endpoint=endpoint,
                outcome_unknown=not refused,
            ) from exc
        except requests.RequestException as exc:
            raise UpstreamConnectionError(
                f"{endpoint}: request to {_origin(url)} failed ({type(exc).__name__})",
                endpoint=endpoint,
                outcome_unknown=True,
            ) from exc
        with response:
            body = self._read_body(response, endpoint=endpoint)
            elapsed_ms = round((time.monotonic() - started) * 1000)
            logger.debug(
                "upstream response",
                extra={
                    "endpoint": endpoint,
                    "method": method,
                    "origin": _origin(url),
                    "status": response.status_code,
                    "bytes": len(body),
                    "elapsed_ms": elapsed_ms,
                },
            )
            if self.observer is not None:
                self.observer(endpoint, elapsed_ms)
            return HttpResponse(
                status=response.status_code,
                headers=CaseInsensitiveDict(response.headers),
                body=body,
            )

    def _read_body(self, response: requests.Response, *, endpoint: str) -> bytes:
        import requests

        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_content(_CHUNK):
                size += len(chunk)
                if size > self.max_body:
                    raise MalformedResponseError(
                        f"{endpoint}: response body larger than {self.max_body} bytes",
                        endpoint=endpoint,
                        status=response.status_code,
                        outcome_unknown=True,
                    )
                chunks.append(chunk)
        except requests.Timeout as exc:
            raise UpstreamTimeoutError(
                f"{endpoint}: response body did not arrive in time",
                endpoint=endpoint,
                status=response.status_code,
                outcome_unknown=True,
            ) from exc
        except requests.RequestException as exc:
            raise UpstreamConnectionError(
                f"{endpoint}: connection dropped while reading the response",
                endpoint=endpoint,
                status=response.status_code,
                outcome_unknown=True,
            ) from exc
        return b"".join(chunks)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _is_connect_failure(exc: requests.ConnectionError) -> bool:
    """True when the request never reached the server (refused, unresolvable, connect timeout),
    so it was certainly not acted on."""
    from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    return isinstance(reason, NewConnectionError | NameResolutionError | ConnectTimeoutError)
