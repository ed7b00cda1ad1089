"""HTTP plumbing shared by the upstream clients: URL rules, one pooled session, timeouts, body cap.

Every request goes through ``HttpTransport.request``, which never follows redirects (a token must
not travel to an address nobody configured), reads at most ``max_body`` bytes, ends within one
total time limit (connect, headers and body together: ``requests``' own timeouts apply to each
socket operation, so an answer sent a byte at a time would never trip them), and turns every
``requests`` failure into the project's ``TransientError`` types.

A slow answer is waited for up to that total limit: no shorter per-read timeout ends a request
the upstream may be acting on, because the only way to learn its outcome would be to send it
again, and a refresh token or device code sent twice is a reuse. ``outcome_unknown`` on the
error says whether the request may have reached the upstream; only one that provably never left
(refused, unresolvable, no TCP or TLS connection) is marked as not acted on.

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
from cmstoken.core.errors import (
    ConfigurationError,
    MalformedResponseError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
)

if TYPE_CHECKING:
    import ssl

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
        except requests.ConnectTimeout as exc:
            raise UpstreamConnectionError(
                f"{endpoint}: timed out connecting to {_origin(url)} (no connection within "
                f"{connect:.3g} s)",
                endpoint=endpoint,
            ) from exc
        except requests.ReadTimeout as exc:
            raise UpstreamTimeoutError(
                f"{endpoint}: no answer from {_origin(url)} within {read:.3g} s (the request "
                "may have been acted on)",
                endpoint=endpoint,
                outcome_unknown=True,
            ) from exc
        except requests.ConnectionError as exc:
            raise UpstreamConnectionError(
                f"{endpoint}: {_connection_failure(exc, _origin(url))}",
                endpoint=endpoint,
                outcome_unknown=not _is_connect_failure(exc),
            ) from exc
        except requests.RequestException as exc:
            raise UpstreamConnectionError(
                f"{endpoint}: request to {_origin(url)} failed ({type(exc).__name__})",
                endpoint=endpoint,
                outcome_unknown=True,
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


def _socket_of(raw: Any) -> socket.socket | None:
    """The socket under a ``urllib3`` response, when it can be found (best effort)."""
    for path in (("_connection", "sock"), ("_fp", "fp", "raw", "_sock")):
        value = raw
        for name in path:
            value = getattr(value, name, None)
        if isinstance(value, socket.socket):
            return value
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and every error under it: ``reason`` (urllib3), ``__cause__``, ``__context__``
    and an error given as the first argument (``requests`` wraps urllib3's that way)."""
    seen: set[int] = set()
    found: list[BaseException] = []
    pending: list[object] = [exc]
    while pending:
        error = pending.pop()
        if not isinstance(error, BaseException) or id(error) in seen:
            continue
        seen.add(id(error))
        found.append(error)
        pending.extend((getattr(error, "reason", None), error.__cause__, error.__context__))
        pending.extend(error.args[:1])
    return found


def _is_connect_failure(exc: requests.ConnectionError) -> bool:
    """True when the request never reached the server (refused, unresolvable, connect timeout,
    a certificate refused in the TLS handshake), so it was certainly not acted on. Other TLS
    errors (an abrupt end of the connection, say) may come after the request was sent."""
    import ssl

    from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

    never_sent = (
        NewConnectionError,
        NameResolutionError,
        ConnectTimeoutError,
        ssl.SSLCertVerificationError,
    )
    return any(isinstance(error, never_sent) for error in _causes(exc))


def _connection_failure(exc: requests.ConnectionError, origin: str) -> str:
    """What went wrong, in words: the name not resolved, the connection refused (or another
    reason the system gave), the TLS handshake failed (and why), or the connection dropped
    before an answer. Only ``origin`` and the system's and TLS library's own reason words are
    quoted: nothing of the request."""
    import ssl

    from urllib3.exceptions import NameResolutionError, NewConnectionError

    causes = _causes(exc)
    if any(isinstance(error, NameResolutionError | socket.gaierror) for error in causes):
        detail = next(
            (error.strerror for error in causes if isinstance(error, socket.gaierror)), None
        )
        return f"cannot reach {origin}: name not resolved" + (f" ({detail})" if detail else "")
    tls = next((error for error in causes if isinstance(error, ssl.SSLError)), None)
    if tls is not None:
        return _tls_failure(tls, origin)
    if any(isinstance(error, ConnectionRefusedError) for error in causes):
        return f"cannot reach {origin}: connection refused (is anything listening there?)"
    if any(isinstance(error, NewConnectionError) for error in causes):
        reason = next(
            (e.strerror for e in causes if isinstance(e, OSError) and isinstance(e.strerror, str)),
            None,
        )
        return f"cannot reach {origin}" + (f": {reason}" if reason else "")
    return f"connection to {origin} dropped before an answer arrived" + _drop_reason(causes)


def _drop_reason(causes: list[BaseException]) -> str:
    from http.client import RemoteDisconnected

    for error in causes:
        if isinstance(error, RemoteDisconnected):
            return " (the server closed it without answering)"
        if isinstance(error, ConnectionResetError):
            return " (reset by the server or the network)"
        if isinstance(error, BrokenPipeError):
            return " (closed by the server while the request was being sent)"
    return ""


# TLS library reasons, by what they mean for whoever reads the message.
_NOT_TLS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "UNKNOWN_PROTOCOL",
        "HTTP_REQUEST",
        "PACKET_LENGTH_TOO_LONG",
        "RECORD_LAYER_FAILURE",
    }
)
_NO_COMMON_PROTOCOL = frozenset(
    {
        "TLSV1_ALERT_PROTOCOL_VERSION",
        "UNSUPPORTED_PROTOCOL",
        "NO_PROTOCOLS_AVAILABLE",
        "TLSV1_ALERT_INSUFFICIENT_SECURITY",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
        "NO_SHARED_CIPHER",
        "NO_CIPHERS_AVAILABLE",
    }
)
_CLIENT_CERTIFICATE_WANTED = frozenset(
    {"SSLV3_ALERT_BAD_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED", "CERTIFICATE_REQUIRED"}
)


def _tls_failure(error: ssl.SSLError, origin: str) -> str:
    """A TLS error, named a handshake failure when it arose in the handshake (a refused
    certificate, or raised by ``do_handshake``), with the class of its reason."""
    import ssl
    import traceback

    reason = str(getattr(error, "reason", None) or "")
    words = reason.replace("_", " ").lower() or type(error).__name__
    if isinstance(error, ssl.SSLCertVerificationError):
        why = f"certificate not trusted ({getattr(error, 'verify_message', None) or words})"
    elif reason in _NOT_TLS:
        why = f"the server does not speak TLS there ({words}): is it a plain http address?"
    elif reason in _NO_COMMON_PROTOCOL:
        why = f"no TLS version or cipher in common ({words})"
    elif reason in _CLIENT_CERTIFICATE_WANTED:
        why = f"the server asks for a client certificate ({words})"
    elif isinstance(error, ssl.SSLEOFError) or "EOF" in reason:
        why = f"the server closed the connection ({words})"
    else:
        why = words
    in_handshake = isinstance(error, ssl.SSLCertVerificationError) or any(
        frame.f_code.co_name == "do_handshake"
        for frame, _ in traceback.walk_tb(error.__traceback__)
    )
    if in_handshake:
        return f"TLS handshake with {origin} failed: {why}"
    return f"TLS failure on the connection to {origin}: {why}"
