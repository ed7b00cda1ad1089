"""Redirects are never followed: a token must not travel to an address nobody configured.

A redirect answer (301, 302, 303, 307, 308) to the refresh, the device-token poll, the exchange or
the project listing ends the call in the project's error (``responses._by_status``: a 3xx is a
malformed answer), and the address in ``Location`` (the same host, or another server on
127.0.0.1) receives nothing: no request, not even a connection. Each "followed" address answers
a request with a perfectly good answer, so a client that followed would succeed (checked by
``test_the_followed_addresses_would_answer_well``). Real HTTP on 127.0.0.1 throughout."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cmstoken.core.errors import MalformedResponseError
from cmstoken.upstream.http import HttpTransport, Timeouts
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.service import ServiceClient
from harness import REFRESH_SECRET, Stack
from support import FakeClock, make_jwt, replayed_refresh_tokens

pytestmark = pytest.mark.integration

REDIRECTS = [301, 302, 303, 307, 308]
HOUR = 3600
MOVED = "/moved"  # where a followed redirect lands, on either server

REFRESH_TOKEN = "v1.redirected-refresh-token-0123456789"
DEVICE_CODE = "redirected-device-code-0123456789abcdef"
ACCESS_TOKEN = make_jwt({"sub": "auth0|redirected", "exp": 4_000_000_000, "jti": "access"})
SERVICE_TOKEN = make_jwt({"sub": "auth0|redirected", "exp": 4_000_000_000, "jti": "service"})


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def carries(self, secret: str) -> bool:
        return secret in self.body.decode("latin-1") or secret in json.dumps(self.headers)


Answer = tuple[int, dict[str, str], bytes]


class RecordingServer(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 (ephemeral port) that counts every connection it accepts,
    records every request, and answers with ``answer(request)``."""

    daemon_threads = True

    def __init__(self, answer: Callable[[Received], Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.connections = 0
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.lock:
            self.connections += 1
        return True

    def __enter__(self) -> RecordingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    server: RecordingServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Received(self.command, self.path, dict(self.headers.items()), body)
        with self.server.lock:
            self.server.received.append(request)
        status, headers, payload = self.server.answer(request)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass


def ok(document: object) -> Answer:
    return 200, {"Content-Type": "application/json"}, json.dumps(document).encode()


def redirect(status: int, location: str) -> Answer:
    page = b"<html><body>Moved</body></html>"
    return status, {"Location": location, "Content-Type": "text/html"}, page


# What a followed request would get: a good answer for each call.
GOOD_TOKENS = {
    "access_token": ACCESS_TOKEN,
    "id_token": make_jwt({"sub": "auth0|redirected", "jti": "id"}),
    "refresh_token": "v1.followed-refresh-token-0123456789",
    "scope": "openid profile email offline_access",
    "expires_in": 86400,
    "token_type": "Bearer",
}
GOOD_ANSWERS: dict[str, object] = {
    "refresh": GOOD_TOKENS,
    "device_token": GOOD_TOKENS,
    "exchange": {"token": SERVICE_TOKEN},
    "projects": {"data": [{"projectId": "prj_0123456789abcdef", "projectName": "followed"}]},
}
# The secret each call sends.
SENT_SECRETS = {
    "refresh": REFRESH_TOKEN,
    "device_token": DEVICE_CODE,
    "exchange": ACCESS_TOKEN,
    "projects": SERVICE_TOKEN,
}


def call(endpoint: str, base_url: str) -> object:
    """One upstream call with its secret, to the identity provider at ``{base_url}/idp`` or the
    service at ``base_url``."""
    transport = HttpTransport(timeouts=Timeouts(connect=2, total=10))
    clock = FakeClock()
    identity = IdentityClient(f"{base_url}/idp", transport=transport, clock=clock)
    service = ServiceClient(base_url, transport=transport, clock=clock)
    try:
        if endpoint == "refresh":
            return identity.refresh(client_id="cms-client", refresh_token=REFRESH_TOKEN)
        if endpoint == "device_token":
            return identity.poll_device_token(client_id="cms-client", device_code=DEVICE_CODE)
        if endpoint == "exchange":
            return service.exchange(ACCESS_TOKEN, fallback_expires_at=0)
        return service.list_projects(SERVICE_TOKEN)
    finally:
        transport.close()


@dataclass
class Servers:
    """``origin``: the configured upstream, which redirects (and answers well at ``/moved``);
    ``elsewhere``: another server on 127.0.0.1, which answers well to anything."""

    origin: RecordingServer
    elsewhere: RecordingServer
    endpoint: str = "refresh"
    status: int = 307
    target: str = "same-host"

    def location(self, path: str) -> str:
        server = self.origin if self.target == "same-host" else self.elsewhere
        return f"{server.url}{MOVED}{path}"


@pytest.fixture
def servers() -> Iterator[Servers]:
    state: list[Servers] = []

    def origin_answer(request: Received) -> Answer:
        if request.path.startswith(MOVED):
            return ok(GOOD_ANSWERS[state[0].endpoint])
        return redirect(state[0].status, state[0].location(request.path))

    def elsewhere_answer(request: Received) -> Answer:
        return ok(GOOD_ANSWERS[state[0].endpoint])

    with RecordingServer(origin_answer) as origin, RecordingServer(elsewhere_answer) as elsewhere:
        state.append(Servers(origin, elsewhere))
        yield state[0]


@pytest.mark.parametrize("endpoint", list(GOOD_ANSWERS))
def test_the_followed_addresses_would_answer_well(servers: Servers, endpoint: str) -> None:
    """The control: called directly, each "followed" address gives the client a good answer,
    so a redirect that was followed would end in success, not in the error expected below."""
    servers.endpoint = endpoint
    assert call(endpoint, f"{servers.origin.url}{MOVED}")
    assert call(endpoint, f"{servers.elsewhere.url}{MOVED}")
    assert len(servers.origin.received) == len(servers.elsewhere.received) == 1


@pytest.mark.parametrize("target", ["same-host", "other-host"])
@pytest.mark.parametrize("endpoint", list(GOOD_ANSWERS))
@pytest.mark.parametrize("status", REDIRECTS)
def test_a_redirect_is_an_error_and_its_location_receives_nothing(
    servers: Servers, status: int, endpoint: str, target: str
) -> None:
    servers.endpoint, servers.status, servers.target = endpoint, status, target
    secret = SENT_SECRETS[endpoint]
    with pytest.raises(MalformedResponseError, match=f"HTTP {status}") as info:
        call(endpoint, servers.origin.url)
    assert info.value.status == status
    assert secret not in str(info.value)
    # The configured upstream got the one request (with its secret), and nothing else.
    (request,) = servers.origin.received
    assert not request.path.startswith(MOVED)
    assert request.carries(secret)
    assert servers.origin.connections == 1
    # The redirect's address got nothing: no request, no connection.
    assert servers.elsewhere.received == []
    assert servers.elsewhere.connections == 0


# --- the rotator, end to end, facing a redirecting identity provider --------------------------


def point_the_credential_at(stack: Stack, issuer_url: str) -> None:
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"]
    )
    document["issuer_url"] = issuer_url
    stack.secretsmanager.put_secret_value(
        SecretId=REFRESH_SECRET, SecretString=json.dumps(document)
    )


@pytest.mark.parametrize("target", ["the provider", "elsewhere"])
@pytest.mark.parametrize("status", REDIRECTS)
def test_the_rotator_does_not_follow_a_redirected_refresh_and_loses_nothing(
    stack: Stack, status: int, target: str
) -> None:
    """The credential's issuer answers the refresh with a redirect: to the real identity
    provider's token endpoint (a followed 307 or 308 would spend the token there), or to
    another server. The run fails; the refresh token went nowhere but the configured issuer;
    the credential, the published token and the family are untouched; once the issuer answers
    again, the next run rotates with the same refresh token."""
    stack.seed()
    old_refresh = stack.newest_refresh_token()
    old_published = stack.service_document()
    issuer = stack.refresh_document().credential
    assert issuer is not None
    provider_token_url = f"{issuer.issuer_url}/oauth/token"

    with RecordingServer(lambda request: ok(GOOD_TOKENS)) as elsewhere:
        location = provider_token_url if target == "the provider" else f"{elsewhere.url}/token"
        with RecordingServer(lambda request: redirect(status, location)) as front:
            point_the_credential_at(stack, f"{front.url}/idp")
            stack.emulator.advance(19 * HOUR)  # due
            upstream_before = len(stack.emulator.requests)
            with pytest.raises(MalformedResponseError, match=f"HTTP {status}") as info:
                stack.invoke("rotator", {})
            assert old_refresh not in str(info.value)
            # Only the configured issuer saw the refresh token (retries included).
            assert front.received
            assert all(r.path == "/idp/oauth/token" for r in front.received)
            assert all(r.carries(old_refresh) for r in front.received)
        assert elsewhere.connections == 0
        assert elsewhere.received == []
    assert len(stack.emulator.requests) == upstream_before  # not reached through the redirect
    # Nothing lost: the same credential, unleased, still good; the same published token.
    stored = stack.refresh_document()
    assert stored.credential is not None
    assert stored.credential.refresh_token == old_refresh
    assert stored.credential.status == "active"
    assert stored.lease is None
    assert stack.emulator.refresh_token_valid(old_refresh)
    assert stack.service_document() == old_published
    # The issuer answers again: the next run rotates with that same refresh token.
    point_the_credential_at(stack, issuer.issuer_url)
    stack.emulator.advance(HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == 1
    assert not stack.emulator.refresh_token_valid(old_refresh)
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    assert stack.published_token_works()
    assert replayed_refresh_tokens(stack.emulator.requests) == []
