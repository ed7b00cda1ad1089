"""EventBridge on 127.0.0.1 refusing every entry inside a successful answer, as it does for a role
not allowed the event's source: HTTP 200 with ``FailedEntryCount`` 1 and the entry's
``ErrorCode`` and ``ErrorMessage`` (PutEventsResultEntry,
https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html).
moto refuses entries only for a missing source, detail type or detail, or malformed detail,
none of which the helpers and recipes send. A client reaches it through
``AWS_ENDPOINT_URL_EVENTBRIDGE``. ``StubAws`` is the same server for any JSON-protocol call and
answer."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

REFUSAL = {
    "FailedEntryCount": 1,
    "Entries": [
        {
            "ErrorCode": "NotAuthorizedForSourceException",
            "ErrorMessage": "Not authorized for the source.",
        }
    ],
}


class StubAws(http.server.ThreadingHTTPServer):
    """An AWS JSON-protocol service on 127.0.0.1 giving every request ``answer``; keeps each
    request's ``X-Amz-Target`` and body. ``target``: the only operation it accepts (``None``:
    any)."""

    def __init__(self, answer: dict[str, Any], target: str | None = None) -> None:
        self.answer, self.target = answer, target
        self.targets: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class StubEventBridge(StubAws):
    """Answers every PutEvents with ``REFUSAL`` and keeps the requests' entries."""

    def __init__(self) -> None:
        super().__init__(REFUSAL, "AWSEvents.PutEvents")

    @property
    def entries(self) -> list[dict[str, Any]]:
        return [entry for body in self.bodies for entry in body["Entries"]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: StubAws

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        target = self.headers.get("X-Amz-Target", "")
        assert self.server.target in (None, target), target
        self.server.targets.append(target)
        self.server.bodies.append(body)
        answer = json.dumps(self.server.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def refusing_eventbridge() -> Iterator[StubEventBridge]:
    """The stub, serving until the block ends."""
    with serving(StubEventBridge()) as stub:
        yield stub


@contextmanager
def serving[S: StubAws](stub: S) -> Iterator[S]:
    """``stub`` serving on a thread until the block ends."""
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.shutdown()
        stub.server_close()
        thread.join(timeout=10)
