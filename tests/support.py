"""Test helpers shared by unit and integration tests: a controllable clock and a scripted
transport that answers with prepared responses instead of opening sockets."""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from requests.structures import CaseInsensitiveDict

from cmstoken.errors import CmsTokenError
from cmstoken.http import HttpResponse, HttpTransport

# Sample upstream documents, shaped as service-api.md section 2 and SPEC section 2 describe.
PROVIDER_DOCUMENT: dict[str, Any] = {
    "clientId": "client-abc",
    "freetrialClientId": "client-trial",
    "issuerUri": "https://login.example.com/",
    "scope": "openid profile email offline_access",
    "audience": "https://api.example.com/api",
}
DEVICE_DOCUMENT: dict[str, Any] = {
    "device_code": "device-code-secret-0123456789",
    "user_code": "HHHJ-MMSZ",
    "verification_uri": "https://login.example.com/activate",
    "verification_uri_complete": "https://login.example.com/activate?user_code=HHHJ-MMSZ",
    "expires_in": 900,
    "interval": 5,
}
TOKENS_DOCUMENT: dict[str, Any] = {
    "access_token": "eyJ.access.token",
    "id_token": "eyJ.id.token",
    "refresh_token": "v1.refresh-secret-0123456789",
    "scope": "openid profile email offline_access",
    "expires_in": 86400,
    "token_type": "Bearer",
}


class FakeClock:
    """A clock that only moves when told to, or when something sleeps on it."""

    def __init__(self, start: float = 1_795_000_000.0) -> None:
        self.current = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds > 0:
            self.current += seconds

    def advance(self, seconds: float) -> None:
        self.current += seconds


def response(
    status: int = 200,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    content_type: str = "application/json",
) -> HttpResponse:
    """An ``HttpResponse`` with a JSON body (or ``raw`` bytes)."""
    all_headers = CaseInsensitiveDict({"Content-Type": content_type, **(headers or {})})
    data = raw if raw is not None else json.dumps(body).encode()
    return HttpResponse(status=status, headers=all_headers, body=data)


@dataclass
class SentRequest:
    method: str
    url: str
    endpoint: str
    form: Mapping[str, str] | None
    json_body: Any
    headers: Mapping[str, str] | None
    time_limit: float | None
    at: float


Answer = HttpResponse | CmsTokenError | Callable[[SentRequest], HttpResponse]


@dataclass
class ScriptedTransport(HttpTransport):
    """An ``HttpTransport`` that answers from a script, one entry per request, in order.

    An entry is a response, an error to raise, or a function of the request. ``latency``
    seconds pass on ``clock`` for every request, as on a real network.
    """

    script: list[Answer] = field(default_factory=list)
    clock: FakeClock | None = None
    latency: float = 0.0
    sent: list[SentRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def request(
        self,
        method: str,
        url: str,
        *,
        endpoint: str,
        form: Mapping[str, str] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        time_limit: float | None = None,
    ) -> HttpResponse:
        at = self.clock.now() if self.clock else 0.0
        request = SentRequest(method, url, endpoint, form, json_body, headers, time_limit, at)
        self.sent.append(request)
        if not self.script:
            raise AssertionError(f"unexpected request to {endpoint} ({method} {url})")
        answer = self.script.pop(0)
        if self.clock:
            self.clock.advance(self.latency)
        if isinstance(answer, CmsTokenError):
            raise answer
        if isinstance(answer, HttpResponse):
            return answer
        return answer(request)


def make_jwt(claims: object) -> str:
    """An unsigned-looking JWT with the given payload (for parsing tests only)."""

    def part(value: object) -> str:
        raw = json.dumps(value).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


class EmulatorClock:
    """A clock that is the emulator's: sleeping moves the emulator's time instead of waiting.

    ``at(seconds, action)`` runs ``action`` once the clock has moved that far from its creation
    (an approval arriving while a poller waits, for example).
    """

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator
        self.start = emulator.now()
        self.sleeps: list[float] = []
        self._actions: list[tuple[float, Callable[[], object]]] = []

    def now(self) -> float:
        return float(self.emulator.now())

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds > 0:
            self.emulator.advance(seconds)
        due = [item for item in self._actions if item[0] <= self.now() - self.start]
        for item in due:
            self._actions.remove(item)
            item[1]()

    def at(self, seconds: float, action: Callable[[], object]) -> None:
        self._actions.append((seconds, action))


_LOADING = threading.Lock()


def load_handler(function: str) -> Any:
    """The ``lambda_handler`` of ``functions/<function>/app.py`` (both files are named app.py,
    so each is loaded under its own module name)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "functions" / function / "app.py"
    name = f"{function}_app"
    with _LOADING:
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None
            assert spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
    return sys.modules[name].lambda_handler


def load_event(name: str) -> Any:
    """A sample event from ``events/<name>.json``."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "events" / f"{name}.json"
    return json.loads(path.read_text())


def emitted_metrics(output: str) -> dict[str, list[float]]:
    """Metric values by name from the embedded-metric-format documents in captured output."""
    values: dict[str, list[float]] = {}
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if not isinstance(document, dict) or "_aws" not in document:
            continue
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                values.setdefault(metric["Name"], []).extend(
                    value if isinstance(value, list) else [value]
                )
    return values


class _Request(Protocol):
    """A request as the emulator and the models log it."""

    @property
    def endpoint(self) -> str: ...
    @property
    def credential(self) -> str | None: ...
    @property
    def status(self) -> int | None: ...
    @property
    def at(self) -> float: ...


def replayed_refresh_tokens(
    requests: Iterable[_Request], reuse_interval: float = 0.0
) -> list[str | None]:
    """Refresh tokens presented again, outside the reuse interval, after the identity provider
    had acted on them (answered 2xx, or dropped the answer after acting): the replays that
    revoke a family (invariant I1). ``requests``: the emulator's or the model's log."""
    spent: dict[str | None, float] = {}
    replayed = []
    for request in requests:
        if request.endpoint != "refresh":
            continue
        if request.credential in spent:
            elapsed = request.at - spent[request.credential]
            if not (reuse_interval > 0 and elapsed <= reuse_interval):
                replayed.append(request.credential)
        elif request.status is None or 200 <= request.status < 300:
            spent[request.credential] = request.at
    return replayed
