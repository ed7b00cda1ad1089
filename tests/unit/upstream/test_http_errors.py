"""The transport's connection-failure messages name the cause (name not resolved, connection
refused, TLS handshake failed and why, timed out connecting, connection dropped) and keep the
classification of whether the request may have been acted on (``outcome_unknown``).

The errors are built as ``requests`` and ``urllib3`` build them; the TLS failure that ends a
handshake with a server that does not speak TLS is a real one, from an in-memory handshake.
"""

from __future__ import annotations

import socket
import ssl
from http.client import RemoteDisconnected
from typing import Any

import pytest
import requests
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
)
from urllib3.exceptions import SSLError as Urllib3SSLError

from cmstoken.core.errors import UpstreamConnectionError, may_send_again
from cmstoken.upstream.http import HttpTransport

URL = "https://login.example.com/oauth/token?secret=v1.query-secret"
ORIGIN = "https://login.example.com"


class RaisingSession:
    """A ``requests.Session`` stand-in whose every request fails with ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.headers: dict[str, str] = {}

    def request(self, *_: Any, **__: Any) -> Any:
        raise self.error

    def close(self) -> None:
        pass


def failure(error: BaseException) -> UpstreamConnectionError:
    transport = HttpTransport(session=RaisingSession(error))  # type: ignore[arg-type]
    with pytest.raises(UpstreamConnectionError) as raised:
        transport.request("POST", URL, endpoint="refresh", form={"refresh_token": "v1.form"})
    message = str(raised.value)
    assert message.startswith("refresh: ")
    assert ORIGIN in message
    for hidden in ("oauth", "v1.query-secret", "v1.form"):
        assert hidden not in message
    return raised.value


def caused(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


NO_CONNECTION: Any = None  # urllib3 names the connection in its errors; none is needed here


def pool_failure(reason: BaseException, kind: type[requests.RequestException]) -> BaseException:
    """What requests raises when urllib3's pool gave up with ``reason``."""
    cause: Any = reason
    return kind(MaxRetryError(NO_CONNECTION, "/oauth/token", cause))


def test_an_unresolvable_name() -> None:
    gaierror = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    reason = caused(NameResolutionError("login.example.com", NO_CONNECTION, gaierror), gaierror)
    error = failure(pool_failure(reason, requests.ConnectionError))
    assert "cannot reach https://login.example.com: name not resolved" in str(error)
    assert "Name or service not known" in str(error)
    assert not error.outcome_unknown
    assert may_send_again(error)


def test_a_refused_connection() -> None:
    refused = ConnectionRefusedError(111, "Connection refused")
    reason = caused(NewConnectionError(NO_CONNECTION, f"Failed to establish: {refused}"), refused)
    error = failure(pool_failure(reason, requests.ConnectionError))
    assert "cannot reach https://login.example.com: connection refused" in str(error)
    assert not error.outcome_unknown


def test_another_connect_failure_says_what_the_system_said() -> None:
    unreachable = OSError(101, "Network is unreachable")
    reason = caused(NewConnectionError(NO_CONNECTION, f"Failed: {unreachable}"), unreachable)
    error = failure(pool_failure(reason, requests.ConnectionError))
    assert "cannot reach https://login.example.com: Network is unreachable" in str(error)
    assert not error.outcome_unknown


def test_a_connect_timeout() -> None:
    timed_out = ConnectTimeoutError(NO_CONNECTION, "timed out (connect timeout=3.05)")
    error = failure(pool_failure(caused(timed_out, TimeoutError()), requests.ConnectTimeout))
    assert "timed out connecting to https://login.example.com" in str(error)
    assert "3.05 s" in str(error)
    assert not error.outcome_unknown


def wrong_version_number() -> ssl.SSLError:
    """A real handshake failure: the client's hello answered with plain HTTP."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="login.example.com")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    incoming.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)
    with pytest.raises(ssl.SSLError) as raised:
        client.do_handshake()
    return raised.value


def tls_failure(error: ssl.SSLError) -> BaseException:
    wrapped = caused(Urllib3SSLError(error), error)
    return pool_failure(wrapped, requests.exceptions.SSLError)


def test_a_server_that_does_not_speak_tls() -> None:
    error = failure(tls_failure(wrong_version_number()))
    message = str(error)
    assert "TLS handshake with https://login.example.com failed" in message
    assert "does not speak TLS" in message
    assert "dropped" not in message
    assert error.outcome_unknown  # unchanged: only a refused certificate counts as never sent


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (18, "self-signed certificate"),
        (20, "unable to get local issuer certificate"),
        (10, "certificate has expired"),
        (62, "Hostname mismatch, certificate is not valid for 'login.example.com'."),
    ],
)
def test_a_certificate_that_is_not_trusted(code: int, text: str) -> None:
    refused = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {text}")
    refused.verify_code = code
    refused.verify_message = text
    error = failure(tls_failure(refused))
    message = str(error)
    assert "TLS handshake with https://login.example.com failed" in message
    assert "certificate not trusted" in message
    assert text in message
    assert not error.outcome_unknown


def test_a_tls_failure_after_the_handshake_is_not_called_a_handshake_failure() -> None:
    late = ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] decryption failed")
    late.reason = "DECRYPTION_FAILED_OR_BAD_RECORD_MAC"
    error = failure(tls_failure(late))
    assert "handshake" not in str(error)
    assert "TLS failure on the connection to https://login.example.com" in str(error)
    assert error.outcome_unknown


@pytest.mark.parametrize(
    ("cause", "words"),
    [
        (RemoteDisconnected("Remote end closed connection without response"), "closed"),
        (ConnectionResetError(104, "Connection reset by peer"), "reset"),
    ],
)
def test_a_dropped_connection(cause: BaseException, words: str) -> None:
    dropped = ProtocolError("Connection aborted.", cause)
    dropped.__context__ = cause  # urllib3 raises it while handling the cause
    error = failure(requests.ConnectionError(dropped))
    assert "connection to https://login.example.com dropped before an answer arrived" in str(error)
    assert words in str(error)
    assert error.outcome_unknown
    assert not may_send_again(error)
