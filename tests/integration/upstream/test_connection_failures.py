"""Connection failures against real sockets on 127.0.0.1 name their cause: a TLS server whose
certificate is not trusted, https spoken to a plain HTTP server, a closed port, a name under
``.invalid`` (which never resolves). The classification of whether the request may have been
acted on stays what it was: a refused certificate, a refused connection and an unresolvable
name never sent it; any other TLS failure may have."""

from __future__ import annotations

import datetime
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmsemu import Emulator
from cmstoken.core.errors import UpstreamConnectionError
from cmstoken.upstream.service import ServiceClient
from support import UNRESOLVABLE_HOST, refuse_invalid_names

pytestmark = pytest.mark.integration


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key (nobody trusts it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class Recording(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []  # noqa: RUF012 -- shared on purpose, reset per server

    def do_GET(self) -> None:
        self.seen.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def untrusted_tls_server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = http.server.HTTPServer(("127.0.0.1", 0), Recording)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    Recording.seen = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", Recording.seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def provider_failure(base_url: str) -> UpstreamConnectionError:
    with pytest.raises(UpstreamConnectionError) as raised:
        ServiceClient(base_url).provider_info()
    return raised.value


def test_an_untrusted_certificate(untrusted_tls_server: tuple[str, list[str]]) -> None:
    base_url, seen = untrusted_tls_server
    error = provider_failure(base_url)
    assert f"provider: TLS handshake with {base_url} failed" in str(error)
    assert "certificate not trusted" in str(error)
    assert "self-signed" in str(error)
    assert not error.outcome_unknown
    assert seen == []  # the request never reached the server


def test_https_to_a_plain_http_server(emulator: Emulator) -> None:
    base_url = emulator.base_url.replace("http://", "https://")
    error = provider_failure(base_url)
    assert f"provider: TLS handshake with {base_url} failed" in str(error)
    assert "does not speak TLS" in str(error)
    assert error.outcome_unknown  # unchanged
    assert emulator.counts["provider"] == 0


def test_a_closed_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    error = provider_failure(f"http://127.0.0.1:{port}")
    assert f"cannot reach http://127.0.0.1:{port}: connection refused" in str(error)
    assert not error.outcome_unknown


def test_an_unresolvable_name(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_invalid_names(monkeypatch)  # no name server is asked
    error = provider_failure(f"https://{UNRESOLVABLE_HOST}")
    assert "cannot reach https://nonexistent.invalid: name not resolved" in str(error)
    assert not error.outcome_unknown


def test_a_dropped_connection(emulator: Emulator) -> None:
    emulator.inject("provider", "drop")
    error = provider_failure(emulator.base_url)
    assert "dropped before an answer arrived" in str(error)
    assert error.outcome_unknown
