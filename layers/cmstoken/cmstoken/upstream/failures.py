"""What a failed upstream request means: the project's error for each ``requests`` failure, its
message naming the cause (the name not resolved, the connection refused, the TLS handshake failed
and why, the connection dropped) and ``outcome_unknown``, which says whether the request may have
reached the upstream. Only one that provably never left (refused, unresolvable, no TCP or TLS
connection) is marked as not acted on.

Messages quote only the origin and the system's and TLS library's own reason words: nothing of
the request. ``requests``, ``urllib3`` and ``ssl`` are imported when a failure is classified.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from cmstoken.core.errors import TransientError, UpstreamConnectionError, UpstreamTimeoutError

if TYPE_CHECKING:
    import ssl

    import requests


def request_failure(
    exc: requests.RequestException, *, endpoint: str, origin: str, connect: float, read: float
) -> TransientError:
    """The error for a request that got no answer: ``connect`` and ``read`` are the socket
    timeouts it was sent with."""
    import requests

    if isinstance(exc, requests.ConnectTimeout):
        return UpstreamConnectionError(
            f"{endpoint}: timed out connecting to {origin} (no connection within {connect:.3g} s)",
            endpoint=endpoint,
        )
    if isinstance(exc, requests.ReadTimeout):
        return UpstreamTimeoutError(
            f"{endpoint}: no answer from {origin} within {read:.3g} s (the request "
            "may have been acted on)",
            endpoint=endpoint,
            outcome_unknown=True,
        )
    if isinstance(exc, requests.ConnectionError):
        return UpstreamConnectionError(
            f"{endpoint}: {_connection_failure(exc, origin)}",
            endpoint=endpoint,
            outcome_unknown=not _is_connect_failure(exc),
        )
    return UpstreamConnectionError(
        f"{endpoint}: request to {origin} failed ({type(exc).__name__})",
        endpoint=endpoint,
        outcome_unknown=True,
    )


def body_failure(exc: requests.RequestException, *, endpoint: str, status: int) -> TransientError:
    """The error for an answer whose body did not arrive whole (its status line had)."""
    import requests

    if isinstance(exc, requests.Timeout):
        return UpstreamTimeoutError(
            f"{endpoint}: response body did not arrive in time",
            endpoint=endpoint,
            status=status,
            outcome_unknown=True,
        )
    return UpstreamConnectionError(
        f"{endpoint}: connection dropped while reading the response",
        endpoint=endpoint,
        status=status,
        outcome_unknown=True,
    )


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
    before an answer."""
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
