"""Fixtures for integration tests: the upstream emulator on 127.0.0.1, and a stack (the two
secrets in moto, the environment the template sets, the handlers) wired to it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import requests
from moto import mock_aws
from moto.server import ThreadedMotoServer

from cmsemu import Emulator
from cmstoken import runtime
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack
from support import EmulatorClock


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started emulator (fresh state, ephemeral port), stopped after the test."""
    with Emulator() as emu:
        yield emu


def _open_stack(emulator: Emulator, monkeypatch: pytest.MonkeyPatch, lambda_context: Any) -> Stack:
    """Point the functions' environment at the emulator and the current AWS endpoint, create
    both secrets empty, and make the functions' clock the emulator's."""
    for name, value in {
        "SERVICE_BASE_URL": emulator.base_url,
        "REFRESH_SECRET_ID": REFRESH_SECRET,
        "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
        # as the template sets it by default: one rotator invocation at a time
        "ROTATOR_RESERVED_CONCURRENCY": "1",
    }.items():
        monkeypatch.setenv(name, value)
    clock = EmulatorClock(emulator)
    monkeypatch.setattr(runtime, "CLOCK", clock)
    runtime.reset()
    client = boto3.client("secretsmanager")
    client.create_secret(Name=REFRESH_SECRET)
    client.create_secret(Name=SERVICE_SECRET)
    stack = Stack(
        emulator=emulator,
        clock=clock,
        secretsmanager=client,
        context_factory=lambda: type(lambda_context)(),
    )
    runtime.store().client.meta.events.register(
        "before-call.secrets-manager.*",
        lambda model, **_: stack.aws_calls.update([model.name]),
    )
    return stack


@pytest.fixture
def stack(
    emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
    lambda_context: Any,
    lambda_logs: None,
    aws_credentials: None,
) -> Iterator[Stack]:
    """A stack on moto in-process, wired to the emulator."""
    with mock_aws():
        yield _open_stack(emulator, monkeypatch, lambda_context)
    runtime.reset()


@pytest.fixture(scope="session")
def _moto_endpoint() -> Iterator[str]:
    """One moto server per test process (ephemeral port): each test's ``moto_server`` resets
    it, and stopping one took half a second (its serve loop's poll) after each of 180 tests."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def moto_server(
    _moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, aws_credentials: None
) -> Iterator[str]:
    """moto's server on 127.0.0.1, empty; boto3 reaches it through AWS_ENDPOINT_URL."""
    endpoint = _moto_endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    # moto's backends are process-wide: start and end every test with an empty account.
    requests.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()
    yield endpoint
    requests.post(f"{endpoint}/moto-api/reset", timeout=10).raise_for_status()


@pytest.fixture
def server_stack(
    emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
    lambda_context: Any,
    lambda_logs: None,
    moto_server: str,
) -> Iterator[Stack]:
    """A stack on moto's server over HTTP, wired to the emulator over HTTP."""
    yield _open_stack(emulator, monkeypatch, lambda_context)
    runtime.reset()
