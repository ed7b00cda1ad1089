"""The local stack's Lambda endpoint (scripts/local_stack.py) when its client goes away: an
interrupted `cmstoken-admin bootstrap` closes its connection while a poll runs; the endpoint
finishes the invocation and prints nothing about the client that left. Its schedule sends a run
that failed with its retries to the rotator's dead letter queue."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from local_stack import BOOTSTRAP, LambdaEndpoint

pytestmark = pytest.mark.integration


class SlowInvoker:
    """A poll that takes a while, as the bootstrap's does; ``done`` once it has returned."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        time.sleep(0.5)
        self.done.set()
        return {"status": "pending"}


def test_a_client_that_went_away_leaves_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    invoker = SlowInvoker()
    endpoint = LambdaEndpoint(invoker).start()
    try:
        host, port = "127.0.0.1", int(endpoint.server.server_address[1])
        body = json.dumps({"action": "poll"}).encode()
        with socket.create_connection((host, port)) as client:
            client.sendall(
                f"POST /2015-03-31/functions/{BOOTSTRAP}/invocations HTTP/1.1\r\n"
                f"Host: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            # Ctrl-C: the connection is reset (SO_LINGER 0), not closed in order.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert invoker.done.wait(timeout=30)
        time.sleep(0.5)  # the answer is written (and refused) after the invocation returns
        # The endpoint still serves the next client.
        with socket.create_connection((host, port)) as again:
            again.sendall(
                f"POST /2015-03-31/functions/{BOOTSTRAP}/invocations HTTP/1.1\r\n"
                f"Host: {host}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            answer = b""
            while chunk := again.recv(65536):
                answer += chunk
        assert answer.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200"))
        assert answer.endswith(b'{"status": "pending"}')
    finally:
        endpoint.stop(drain=5)
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err
    assert "Error" not in captured.err
    assert captured.err == ""


class FailingInvoker:
    """A rotator whose every run fails, as the operator command's invoker reports it."""

    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        from cmstoken.cli.admin.errors import AdminError

        self.calls += 1
        raise AdminError("the rotator failed") from RuntimeError("upstream down")


def test_a_scheduled_run_that_keeps_failing_lands_in_the_dead_letter_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The schedule's invocation is retried twice, then its record goes to the rotator's dead
    letter queue, as Lambda's on-failure destination sends it (the runbook reads its depth)."""
    import local_stack

    monkeypatch.setattr(local_stack, "RETRY_DELAYS", (0.05, 0.05))
    invoker = FailingInvoker()
    letters: list[Mapping[str, Any]] = []
    schedule = local_stack.LocalSchedule(invoker, 0.2, time.time(), letters.append).start()
    try:
        deadline = time.monotonic() + 30
        while not letters and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        schedule.stop()
    assert invoker.calls >= 3
    (record, *_) = letters
    assert record["requestContext"]["condition"] == "RetriesExhausted"
    assert record["requestContext"]["approximateInvokeCount"] == 3
    assert record["responsePayload"] == {
        "errorType": "RuntimeError",
        "errorMessage": "upstream down",
    }
