"""EventBridge on 127.0.0.1 refusing every entry inside a successful answer, as it does for a role
not allowed the event's source: HTTP 200 with ``FailedEntryCount`` 1 and the entry's
``ErrorCode`` and ``ErrorMessage`` (PutEventsResultEntry,
https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEventsResultEntry.html).
moto refuses entries only for a missing source, detail type or detail, or malformed detail,
none of which the helpers and recipes send. A client reaches it through
``AWS_ENDPOINT_URL_EVENTBRIDGE``."""

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


class StubEventBridge(http.server.ThreadingHTTPServer):
    """Answers every PutEvents with ``REFUSAL`` and keeps the requests' entries."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: StubEventBridge

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.headers["X-Amz-Target"] == "AWSEvents.PutEvents"
        self.server.entries.extend(body["Entries"])
        answer = json.dumps(REFUSAL).encode()
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
    stub = StubEventBridge()
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub.shutdown()
        stub.server_close()
        thread.join(timeout=10)
