"""HTTP plumbing shared by the upstream clients: one pooled session, time limits, body cap.

Every request goes through ``HttpTransport.request``, which never follows redirects (a token must
not travel to an address nobody configured), reads at most ``max_body`` bytes, ends within one
total time limit (connect, headers and body together: ``requests``' own timeouts apply to each
socket operation, so an answer sent a byte at a time would never trip them), and turns every
``requests`` failure into the project's ``TransientError`` types.

A slow answer is waited for up to that total limit: no shorter per-read timeout ends a request
the upstream may be acting on, because the only way to learn its outcome would be to send it
again, and a refresh token or device code sent twice is a reuse. ``outcome_unknown`` on the
error says whether the request may have reached the upstream (``failures`` tells, and words the
cause).

``requests`` is imported on the first request, not with this module: a run that makes no upstream
call (a scheduled no-op, a status query) does not pay for loading it at cold start.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cmstoken import __version__
from cmstoken.core.errors import ConfigurationError, MalformedResponseError, UpstreamTimeoutError
from cmstoken.upstream.failures import body_failure, request_failure

if TYPE_CHECKING:
    import requests

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 1024 * 1024
_CHUNK = 16 * 1024


@dataclass(frozen=True)
class Timeouts:
    """Time limits in seconds for one request: ``connect`` for opening the connection, ``total``
    for the whole call (connect, headers and body). Once the request may have been sent, the
    answer is waited for until ``total`` (or the caller's shorter limit): there is deliberately
    no shorter per-read timeout."""

    connect: float = 3.05
    total: float = 30.0

    def __post_init__(self) -> None:
        if self.connect <= 0 or self.total <= 0:
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
        time_limit: float | None = None,
    ) -> HttpResponse:
        """Send one request and return the whole response, whatever its status.

        The whole call (connect, headers and body) ends within ``timeouts.total``, and within
        ``time_limit`` when given (callers with a deadline pass what is left of it). Raises
        ``UpstreamConnectionError``, ``UpstreamTimeoutError`` or ``MalformedResponseError``
        (body over the cap); never includes request data in messages.
        """
        budget = self.timeouts.total if time_limit is None else time_limit
        budget = max(min(budget, self.timeouts.total), 0.001)
        started = time.monotonic()
        try:
            response = self._send_within(method, url, endpoint, form, json_body, headers, budget)
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
        elapsed_ms = round((time.monotonic() - started) * 1000)
        logger.debug(
            "upstream response",
            extra={
                "endpoint": endpoint,
                "method": method,
                "origin": _origin(url),
                "status": response.status,
                "bytes": len(response.body),
                "elapsed_ms": elapsed_ms,
            },
        )
        if self.observer is not None:
            self.observer(endpoint, elapsed_ms)
        return response

    def _send_within(
        self,
        method: str,
        url: str,
        endpoint: str,
        form: Mapping[str, str] | None,
        json_body: Any,
        headers: Mapping[str, str] | None,
        budget: float,
    ) -> HttpResponse:
        """``_send`` on a worker thread that the caller waits for at most ``budget`` seconds.

        A call still running then is abandoned: its socket is shut down when the headers had
        arrived (which ends a body that trickles in), and otherwise the worker ends at its next
        per-read timeout. Its session is dropped, so no later call shares its connection pool.
        The error carries the status when the status line had arrived (a refresh answered 2xx
        must not be sent again, even if its body never arrived).
        """
        session = self.session
        result: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                result["response"] = self._send(
                    session, method, url, endpoint, form, json_body, headers, budget, result
                )
            except BaseException as exc:  # noqa: BLE001 -- handed to the waiting caller
                result["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=work, name=f"cmstoken-{endpoint}", daemon=True)
        worker.start()
        if not done.wait(budget):
            self._abandon(session, result.get("raw"))
            status = result.get("status")
            arrived = "" if status is None else f" (its status line, HTTP {status}, had arrived)"
            raise UpstreamTimeoutError(
                f"{endpoint}: no complete answer from {_origin(url)} within {budget:.3g} s"
                + arrived,
                endpoint=endpoint,
                status=status,
                outcome_unknown=True,
            )
        error = result.get("error")
        if error is not None:
            raise error
        response: HttpResponse = result["response"]
        return response

    def _abandon(self, session: requests.Session, raw: Any) -> None:
        if self._session is session:
            self._session = None
        sock = _socket_of(raw)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _send(
        self,
        session: requests.Session,
        method: str,
        url: str,
        endpoint: str,
        form: Mapping[str, str] | None,
        json_body: Any,
        headers: Mapping[str, str] | None,
        budget: float,
        shared: dict[str, Any],
    ) -> HttpResponse:
        import requests
        from requests.structures import CaseInsensitiveDict

        connect = min(self.timeouts.connect, budget)
        # The per-read timeout is the whole budget: a slow answer is waited for, not cut short.
        read = budget
        try:
            response = session.request(
                method,
                url,
                data=form,
                json=json_body,
                headers=dict(headers or {}),
                timeout=(connect, read),
                allow_redirects=False,
                stream=True,
            )
        except requests.RequestException as exc:
            raise request_failure(
                exc, endpoint=endpoint, origin=_origin(url), connect=connect, read=read
            ) from exc
        shared["raw"], shared["status"] = response.raw, response.status_code
        with response:
            body = self._read_body(response, endpoint=endpoint)
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
        except requests.RequestException as exc:
            raise body_failure(exc, endpoint=endpoint, status=response.status_code) from exc
        return b"".join(chunks)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _socket_of(raw: Any) -> socket.socket | None:
    """The socket under a ``urllib3`` response, when it can be found (best effort)."""
    for path in (("_connection", "sock"), ("_fp", "fp", "raw", "_sock")):
        value = raw
        for name in path:
            value = getattr(value, name, None)
        if isinstance(value, socket.socket):
            return value
    return None
