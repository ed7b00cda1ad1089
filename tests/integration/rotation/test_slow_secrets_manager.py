"""Storing a rotated refresh token against a Secrets Manager that answers slowly (moto's server
behind a proxy that holds its answers): every call ends within the store's limits, the time
kept after a refresh is sized from them, and the run ends before its invocation's deadline,
with the token stored or the loss reported, never with the token unstored past the deadline."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from cmsemu import Emulator
from cmstoken.aws.secrets import SecretStore, StoreTimeouts
from cmstoken.core.clock import SystemClock
from cmstoken.core.errors import CredentialLostError
from cmstoken.core.settings import Settings
from cmstoken.core.triggers import RotationRequest
from cmstoken.rotation.rotator import Rotator
from cmstoken.upstream.http import HttpTransport, Timeouts
from cmstoken.upstream.service import ServiceClient
from harness import REFRESH_SECRET, SERVICE_SECRET

pytestmark = pytest.mark.integration

LIMITS = StoreTimeouts(connect=1.0, read=1.0)
HOLD_SECONDS = 2.5  # longer than the read timeout: the caller gives up on the answer


class SlowProxy(ThreadingHTTPServer):
    """Forwards to moto's server; after the first write of the refresh credential (the
    rotator's claim), holds the answers of the next ``slow_writes`` writes of it for
    ``HOLD_SECONDS`` (moto has acted on them)."""

    daemon_threads = True

    def __init__(self, target: str) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.target = target
        self.slow_writes = 0
        self.held = 0
        self.writes = 0
        self.lock = threading.Lock()

    def hold(self, body: bytes, target: str) -> bool:
        if target != "secretsmanager.PutSecretValue" or REFRESH_SECRET.encode() not in body:
            return False
        with self.lock:
            self.writes += 1
            if self.writes == 1 or self.slow_writes == 0:
                return False
            self.slow_writes -= 1
            self.held += 1
            return True


class _Forward(BaseHTTPRequestHandler):
    server: SlowProxy

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = urllib.request.Request(  # noqa: S310 -- moto's server on 127.0.0.1
            self.server.target + self.path, data=body, method="POST"
        )
        for name in ("Content-Type", "X-Amz-Target", "Authorization", "X-Amz-Date"):
            if self.headers.get(name):
                request.add_header(name, self.headers[name])
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
                status, data = answer.status, answer.read()
        except urllib.error.HTTPError as refused:
            status, data = refused.code, refused.read()
        if self.server.hold(body, self.headers.get("X-Amz-Target", "")):
            time.sleep(HOLD_SECONDS)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the caller gave up

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def proxy(moto_server: str) -> Iterator[SlowProxy]:
    server = SlowProxy(moto_server)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def rotator(proxy: SlowProxy, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Rotator:
    """A rotator of a bootstrapped stack whose Secrets Manager calls go through the proxy, with
    short store limits (the arithmetic is the product's, the seconds scaled down)."""
    host, port = proxy.server_address[:2]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host!s}:{port}")
    settings = Settings.from_environ(
        {
            "SERVICE_BASE_URL": emulator.base_url,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
        }
    )
    client = boto3.client("secretsmanager", endpoint_url=proxy.target)
    client.create_secret(Name=REFRESH_SECRET)
    client.create_secret(Name=SERVICE_SECRET)
    store = SecretStore(timeouts=LIMITS)
    transport = HttpTransport(timeouts=Timeouts(connect=1, total=3))
    service = ServiceClient(emulator.base_url, transport=transport)
    rotator = Rotator(settings, store=store, service=service, clock=SystemClock(), owner="slow")
    seed(client, emulator)
    return rotator


def seed(client: Any, emulator: Emulator) -> None:
    """An authorized credential, written directly to moto; no published token yet (due)."""
    from cmstoken.aws.documents import STATUS_ACTIVE, RefreshCredential, RefreshSecret

    now = time.time()
    credential = RefreshCredential(
        refresh_token=emulator.issue_tokens()["refresh_token"],
        client_id=emulator.config.client_id,
        issuer_url=emulator.issuer_url,
        status=STATUS_ACTIVE,
        authorized_at=now,
        refreshed_at=now,
        reauthorize_by=None,
    )
    client.put_secret_value(
        SecretId=REFRESH_SECRET, SecretString=RefreshSecret(credential=credential).to_json()
    )


def test_the_reserve_is_sized_from_the_store_limits(rotator: Rotator) -> None:
    assert rotator.write_reserve >= 3 * LIMITS.attempt_limit + 2
    # the claim, two whole refresh calls (the second after a lost answer), the write reserve
    assert rotator.refresh_guard == LIMITS.attempt_limit + 2 * 3 + rotator.write_reserve


def test_slow_writes_are_retried_and_the_token_stored_before_the_deadline(
    rotator: Rotator, proxy: SlowProxy, emulator: Emulator
) -> None:
    proxy.slow_writes = 2  # moto stores, the answers never reach the rotator in time
    deadline = time.time() + rotator.refresh_guard + 2
    result = rotator.run(RotationRequest(forced=False, source="test"), deadline=deadline)
    assert result.outcome == "rotated"
    assert time.time() < deadline
    assert proxy.held == 2
    stored = rotator.vault.read_refresh(time.time() + 30).secret.credential
    assert stored is not None
    assert emulator.refresh_token_valid(stored.refresh_token)


def test_a_store_that_stays_slow_reports_the_loss_before_the_deadline(
    rotator: Rotator, proxy: SlowProxy
) -> None:
    proxy.slow_writes = 10_000
    deadline = time.time() + rotator.refresh_guard + 2
    with pytest.raises(CredentialLostError):
        rotator.run(RotationRequest(forced=False, source="test"), deadline=deadline)
    assert time.time() < deadline  # the run ended inside its invocation
    assert proxy.held >= 2  # each write was tried, and given up on at the read timeout
