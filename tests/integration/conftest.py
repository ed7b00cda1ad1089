"""Fixtures for integration tests: the upstream emulator on 127.0.0.1, and a stack (the two
secrets in moto, the environment the template sets, the handlers) wired to it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from cmsemu import Emulator
from cmstoken import runtime
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack
from support import EmulatorClock


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started emulator (fresh state, ephemeral port), stopped after the test."""
    with Emulator() as emu:
        yield emu


@pytest.fixture
def stack(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, lambda_context: Any, lambda_logs: None
) -> Iterator[Stack]:
    """Both secrets created empty in moto (in-process), the functions' environment pointing at
    the emulator, and the functions' clock being the emulator's."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SERVICE_BASE_URL": emulator.base_url,
        "REFRESH_SECRET_ID": REFRESH_SECRET,
        "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    clock = EmulatorClock(emulator)
    monkeypatch.setattr(runtime, "CLOCK", clock)
    runtime.reset()
    with mock_aws():
        client = boto3.client("secretsmanager")
        client.create_secret(Name=REFRESH_SECRET)
        client.create_secret(Name=SERVICE_SECRET)
        stack = Stack(
            emulator=emulator,
            clock=clock,
            secretsmanager=client,
            context_factory=lambda: type(lambda_context)(),
        )
        store_client = runtime.store().client
        store_client.meta.events.register(
            "before-call.secrets-manager.*",
            lambda model, **_: stack.aws_calls.update([model.name]),
        )
        yield stack
    runtime.reset()
