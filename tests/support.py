"""Test helpers shared by unit and integration tests: a controllable clock and a scripted
transport that answers with prepared responses instead of opening sockets."""

from __future__ import annotations

import ast
import base64
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from requests.structures import CaseInsensitiveDict

from cmstoken.core.errors import CmsTokenError
from cmstoken.upstream.http import HttpResponse, HttpTransport

# ``make verify`` (SIMULATION_BOUNDS=verify) runs what is deeper: the explorations' bounds, the
# long runs, and the property tests' full counts of examples (``examples``).
DEEPER = os.environ.get("SIMULATION_BOUNDS") == "verify"


def examples(full: int) -> int:
    """A property test's examples: ``full`` in ``make verify``, a third of them in ``make
    test`` (each search derandomized: the same examples every run)."""
    return full if DEEPER else max(10, full // 3)


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


def no_spread() -> float:
    """The consumer helper's ``random_fraction`` for tests of its rules without spreading
    (``cmstoken.consumer.spread``): every wait its full length, a refused token re-read at once."""
    return 0.0


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


# --- leak scans: every record a logger produced, and every secret that crossed the wire -------

# The JSON fields that carry a secret in an upstream request or answer.
SECRET_FIELDS = frozenset(
    {"access_token", "refresh_token", "id_token", "token", "device_code", "user_code"}
)
# A JWT (header.payload.), as raw access tokens, ID tokens and service tokens are.
JWT_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.")
_SHORTEST_SECRET = 8


class RecordKeeper(logging.Handler):
    """A handler that keeps every record it is given, whatever its level, for leak scans."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        """Everything the records hold: the message, every attribute (``extra`` fields, args,
        exception and stack text included) and the formatted exception with its chain."""
        formatter = logging.Formatter()
        parts: list[str] = []
        for record in list(self.records):
            try:
                parts.append(record.getMessage())
            except Exception as exc:  # a bad format string is still scanned through vars
                parts.append(f"<unformattable: {type(exc).__name__}>")
            for key, value in vars(record).items():
                parts.append(f"{key}={value!s}")
                parts.append(f"{key}={value!r}")
            if record.exc_info:
                parts.append(formatter.formatException(record.exc_info))
        return "\n".join(parts)


class WireSecrets:
    """Every secret value that crossed the wire through ``HttpTransport.request`` (any transport
    in this process): the token fields of request forms, JSON bodies and ``Authorization``
    headers, and of JSON answers. Leak scans look for these: they include tokens that were
    never stored (an answer whose write failed, a device code) or that no test held."""

    def __init__(self) -> None:
        self.by_field: dict[str, set[str]] = {}
        self.requests = 0

    def values(self, *, except_fields: Iterable[str] = ()) -> set[str]:
        skipped = set(except_fields)
        return {v for name, found in self.by_field.items() if name not in skipped for v in found}

    def add(self, name: str, value: object) -> None:
        if isinstance(value, str) and len(value.strip()) >= _SHORTEST_SECRET:
            self.by_field.setdefault(name, set()).add(value)

    def harvest(self, document: object) -> None:
        if isinstance(document, Mapping):
            for key, value in document.items():
                if key in SECRET_FIELDS:
                    self.add(str(key), value)
                self.harvest(value)
        elif isinstance(document, list | tuple):
            for item in document:
                self.harvest(item)

    def install(self, monkeypatch: Any) -> None:
        """Wrap ``HttpTransport.request`` (undone by ``monkeypatch``)."""
        original = HttpTransport.request
        wire = self

        def request(transport: HttpTransport, method: str, url: str, **kwargs: Any) -> Any:
            wire.requests += 1
            wire.harvest(kwargs.get("form"))
            wire.harvest(kwargs.get("json_body"))
            for name, value in (kwargs.get("headers") or {}).items():
                if name.lower() == "authorization" and isinstance(value, str):
                    wire.add("authorization", value.split(" ", 1)[-1])
            answer = original(transport, method, url, **kwargs)
            with contextlib.suppress(ValueError, UnicodeDecodeError, RecursionError):
                wire.harvest(json.loads(answer.body))
            return answer

        monkeypatch.setattr(HttpTransport, "request", request)


@dataclass
class LogScan:
    """The loggers at ``level`` (``"INFO"`` as the template sets it, or ``"DEBUG"``), a
    ``RecordKeeper`` on them, and the secrets seen on the wire: ``assert_clean`` scans
    captured output and every record for every secret."""

    level: str
    keeper: RecordKeeper
    wire: WireSecrets

    @property
    def debug(self) -> bool:
        return self.level == "DEBUG"

    def leaks(
        self,
        texts: Iterable[str],
        secrets: Iterable[str | None] = (),
        except_fields: Iterable[str] = (),
    ) -> list[str]:
        """Fingerprints of the secrets (given, and seen on the wire except ``except_fields``)
        found in ``texts``, and the start of any JWT-shaped string found there."""
        from cmstoken.core.redaction import fingerprint

        text = "\n".join(texts)
        values = {s for s in secrets if s} | self.wire.values(except_fields=except_fields)
        found = sorted(fingerprint(value) for value in values if value in text)
        found += [f"JWT-shaped {match.group(0)[:12]}..." for match in JWT_SHAPE.finditer(text)]
        return found

    def assert_clean(
        self,
        *captured: str,
        secrets: Iterable[str | None] = (),
        shown: Iterable[str] = (),
        upstream: bool = True,
    ) -> None:
        """No secret in ``captured`` (stdout, stderr, messages, results...) nor in any record.
        ``shown``: wire fields that ``captured`` may hold on purpose (get-token shows the user
        code); records may not. At DEBUG, ``upstream`` (calls were made): the library's and
        urllib3's DEBUG records must have been captured, so that the scan is not vacuous."""
        secrets = list(secrets)
        records = self.keeper.text()
        assert self.wire.requests or not upstream, "no upstream call was seen"
        assert not self.leaks([records], secrets), f"secret in a log record at {self.level}"
        assert not self.leaks(captured, secrets, shown), (
            f"secret in captured output at {self.level}"
        )
        if self.debug and upstream:
            names = {r.name for r in self.keeper.records if r.levelno == logging.DEBUG}
            assert any(name.startswith("cmstoken.") for name in names), names
            assert any(name.startswith("urllib3") for name in names), names


# The loggers of the upstream HTTP libraries: urllib3 logs every request line at DEBUG.
HTTP_LIBRARY_LOGGERS = ("urllib3", "requests")


@contextlib.contextmanager
def scan_logs(level: str, monkeypatch: Any, *, functions: bool) -> Iterator[LogScan]:
    """The loggers at ``level`` (``"INFO"`` or ``"DEBUG"``) with a ``RecordKeeper`` on them,
    and ``HttpTransport`` wrapped to collect the secrets on the wire.

    ``functions``: as in the Lambda functions, ``POWERTOOLS_LOG_LEVEL`` is ``level``, the
    Powertools logger takes it as at a cold start, and the library's ``cmstoken`` loggers
    follow it (as ``route_library_logs`` sets them; routed to the Powertools handler by the
    ``lambda_logs`` fixture). Otherwise, as in a command-line process that configured logging
    at ``level``: the library's records propagate to the root logger, nothing routes them.

    At DEBUG the upstream HTTP libraries' loggers are at DEBUG too. botocore is left as it is:
    at DEBUG it logs whole AWS requests, ``SecretString`` included, by its own design, and
    nothing in the product turns that on."""
    library = logging.getLogger("cmstoken")
    saved_library = (list(library.handlers), library.propagate, library.level)
    http_loggers = [logging.getLogger(name) for name in HTTP_LIBRARY_LOGGERS]
    saved_http = [each.level for each in http_loggers]
    keeper = RecordKeeper()
    kept = [logging.getLogger(), library]
    powertools: Any = None
    saved_powertools = logging.NOTSET
    if functions:
        from cmstoken.observability import logger as powertools

        monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", level)
        saved_powertools = powertools.log_level
        powertools.setLevel(None)  # from POWERTOOLS_LOG_LEVEL, as a cold start does
        assert logging.getLevelName(powertools.log_level) == level
        library.setLevel(powertools.log_level)
        if not logging.getLogger(powertools.name).propagate:
            kept.append(logging.getLogger(powertools.name))
    else:
        library.handlers = [logging.NullHandler()]  # as the package leaves it on import
        library.propagate = True
        library.setLevel(level)
    if level == "DEBUG":
        for each in http_loggers:
            each.setLevel(logging.DEBUG)
    for each in kept:
        each.addHandler(keeper)
    wire = WireSecrets()
    wire.install(monkeypatch)
    try:
        yield LogScan(level=level, keeper=keeper, wire=wire)
    finally:
        for each in kept:
            each.removeHandler(keeper)
        for each, saved in zip(http_loggers, saved_http, strict=True):
            each.setLevel(saved)
        if powertools is not None:
            powertools.setLevel(saved_powertools)
        library.handlers, library.propagate = saved_library[0], saved_library[1]
        library.setLevel(saved_library[2])


# Provider text that must never reach a terminal as it is: escape sequences, bidirectional
# overrides, invisible and white-space characters. DANGEROUS: what a printed line must not hold.
HOSTILE_TEXT = [
    "\x1b]0;owned\x07",  # retitles the terminal window
    "\x1b[2J",  # clears the screen
    "\u202e",  # right-to-left override
    "\x9b31m",  # a C1 control sequence introducer
    "\u2066",  # a bidirectional isolate
    "\u200b",  # a zero-width space
    "\u200f",  # a right-to-left mark
    "\r",
    "\n",
    "\t",
    " ",
    "\u00a0",  # a no-break space
    "\u2028",  # a line separator
]
DANGEROUS_CHARACTERS = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\r")


# A name that must not resolve, and a resolver that says so without asking any name server:
# tests reach no outside address, not even the machine's DNS server.
UNRESOLVABLE_HOST = "nonexistent.invalid"
_NO_DNS_SITECUSTOMIZE = """\
import socket

_getaddrinfo = socket.getaddrinfo


def _local_only(host, *args, **kwargs):
    name = host.decode("ascii") if isinstance(host, bytes) else host
    if isinstance(name, str) and name.endswith(".invalid"):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return _getaddrinfo(host, *args, **kwargs)


socket.getaddrinfo = _local_only
"""


def refuse_invalid_names(monkeypatch: Any) -> None:
    """In this process, ``*.invalid`` fails to resolve at once, as a name server would say."""
    import socket

    resolve = socket.getaddrinfo

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode("ascii") if isinstance(host, bytes) else host
        if isinstance(name, str) and name.endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)


def env_refusing_invalid_names(directory: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` for a Python subprocess in which ``*.invalid`` fails to resolve at once (a
    ``sitecustomize`` in ``directory``, first on ``PYTHONPATH``)."""
    (directory / "sitecustomize.py").write_text(_NO_DNS_SITECUSTOMIZE)
    path = env.get("PYTHONPATH", "")
    return {**env, "PYTHONPATH": f"{directory}{os.pathsep}{path}" if path else str(directory)}


def interruptible() -> None:
    """For ``subprocess.Popen(preexec_fn=...)`` of a process a test stops with SIGINT: restore
    SIGINT's default in the child. A shell starts background jobs with SIGINT ignored, the
    children inherit that, and Python then raises no ``KeyboardInterrupt``: a test run from
    such a job would wait forever for a Ctrl-C that never lands."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def kept_demo(folder: Path, **env: str) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    """`make demo KEEP=1` from ``folder``, laid out as a checkout's (its .venv/bin this
    interpreter's, its demo.err the demo's standard error), ``env`` added to this environment:
    the process, what it printed up to its serving line, and the file it writes for the user's
    shell (.venv/local-stack.env). Killed on the way out."""
    (folder / ".venv").mkdir()
    (folder / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    env_file = folder / ".venv" / "local-stack.env"
    with (folder / "demo.err").open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(_REPOSITORY / "scripts" / "demo.py")],
            env={**os.environ, "KEEP": "1", "LOCAL_STACK_ENV": str(env_file), **env},
            preexec_fn=interruptible,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            assert process.stdout is not None
            printed = ""
            for line in process.stdout:
                printed += line
                if "The rotator runs every" in line:
                    break
            yield process, printed, env_file
        finally:
            process.kill()
            process.wait()


# --- the documentation: README.md and docs/*.md ---------------------------------------------

_REPOSITORY = Path(__file__).resolve().parents[1]
# Every document a test may read: the README (the landing page), then docs/ by name.
DOCUMENTS: tuple[Path, ...] = (
    _REPOSITORY / "README.md",
    *sorted((_REPOSITORY / "docs").glob("*.md")),
)


@functools.cache
def tool_works(*command: str) -> bool:
    """Whether ``command`` (a tool asked for its version) runs from PATH: asked once per test
    process (the AWS CLI's answer alone takes most of a second)."""
    if shutil.which(command[0]) is None:
        return False
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


def documentation() -> str:
    """All of the documentation, for a sentence that must be said somewhere in it."""
    return "\n\n".join(path.read_text() for path in DOCUMENTS)


def block(marker: str) -> str:
    """The code block that follows ``<!-- marker -->``, in whichever document holds it: exactly
    one does, once. A block indented under a list item is dedented."""
    import textwrap

    pattern = re.compile(rf"<!-- {re.escape(marker)} -->\s*```\w*\n(.*?)```", re.DOTALL)
    found = [
        (path, match.group(1)) for path in DOCUMENTS for match in pattern.finditer(path.read_text())
    ]
    assert found, f"no document has a block after <!-- {marker} -->"
    assert len(found) == 1, f"<!-- {marker} --> is in {[str(path) for path, _ in found]}"
    return textwrap.dedent(found[0][1])


def recipe(name: str) -> str:
    """The code block that follows ``<!-- recipe: name -->`` in the documentation."""
    return block(f"recipe: {name}")


def section(heading: str) -> str:
    """The section under the heading whose text is ``heading`` (any level), up to the next
    heading of the same or a higher level, in whichever document holds it: exactly one does."""
    found = []
    for path in DOCUMENTS:
        lines = path.read_text().splitlines(keepends=True)
        fenced = False
        for start, line in enumerate(lines):
            fenced ^= line.lstrip().startswith("```")
            title = re.match(r"(#{1,6}) (.*?)\s*$", line)
            if fenced or title is None or title.group(2) != heading:
                continue
            level, end, inside = len(title.group(1)), len(lines), False
            for number in range(start + 1, len(lines)):
                inside ^= lines[number].lstrip().startswith("```")
                other = re.match(r"(#{1,6}) ", lines[number])
                if not inside and other and len(other.group(1)) <= level:
                    end = number
                    break
            found.append("".join(lines[start:end]))
    assert len(found) == 1, f"{len(found)} sections are headed {heading!r}"
    return found[0]


def table(marker: str) -> list[list[str]]:
    """The body rows (cells, stripped) of the Markdown table right after ``<!-- marker -->``,
    in whichever document holds it: exactly one does, once."""
    pattern = re.compile(rf"<!-- {re.escape(marker)} -->\n((?:\|.*\|\n)+)")
    found = [match.group(1) for path in DOCUMENTS for match in pattern.finditer(path.read_text())]
    assert len(found) == 1, f"{len(found)} tables follow <!-- {marker} -->"
    rows = [line.strip().strip("|").split(" | ") for line in found[0].splitlines()]
    return [[cell.strip() for cell in row] for row in rows[2:]]


def defined_tests(module: str) -> set[str]:
    """The tests the test module ``module`` (a path from the checkout) defines, as a pytest node
    id names them after ``module::``: each ``test_*`` function (one defined under a top-level
    ``if`` too), and each ``test_*`` method of a ``Test*`` class as ``Class::method``. What a
    deploy test names for what moto leaves out, and what docs/threat-model.md names for each
    limit, must be among them."""

    def found(body: list[ast.stmt], prefix: str) -> Iterator[str]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("test_"):
                    yield prefix + node.name
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                yield from found(node.body, f"{prefix}{node.name}::")
            elif isinstance(node, ast.If):
                yield from found(node.body + node.orelse, prefix)

    return set(found(ast.parse((_REPOSITORY / module).read_text()).body, ""))


# --- AWS CLI commands a document shows ----------------------------------------------------------

# The AWS CLI's global options (not members of an operation's input).
AWS_CLI_GLOBAL_OPTIONS = frozenset(
    {
        "--query",
        "--output",
        "--region",
        "--profile",
        "--debug",
        "--no-cli-pager",
        "--cli-input-json",
    }
)


def check_aws_command(words: list[str], *, supplied: Iterable[str] = ()) -> None:
    """The command names an operation (or waiter) of the service, each option a member of the
    operation's input (``--flag``/``--no-flag`` for a boolean), every required member given
    (``supplied``: the members a ``--cli-input-json`` document gives), checked against
    botocore's model of the service, from which the AWS CLI makes its commands."""
    import botocore.session
    from botocore import xform_name

    assert words[0] == "aws", words
    service, command = words[1], words[2]
    session = botocore.session.get_session()
    model = session.get_service_model(service)
    if command == "wait":
        waiters = session.get_waiter_model(service)
        (waiter,) = [w for w in waiters.waiter_names if xform_name(w, "-") == words[3]]
        operation = model.operation_model(waiters.get_waiter(waiter).operation)
        options = words[4:]
    else:
        (name,) = [o for o in model.operation_names if xform_name(o, "-") == command]
        operation = model.operation_model(name)
        options = words[3:]
    shape = operation.input_shape
    assert shape is not None, operation.name
    members = shape.members
    kebab = {xform_name(member, "-"): member for member in members}
    given = set(supplied)
    assert given <= set(members), f"{operation.name} has no member {given - set(members)}"
    for word in options:
        if not word.startswith("--") or word in AWS_CLI_GLOBAL_OPTIONS:
            continue
        option = word[2:]
        if option not in kebab and option.startswith("no-"):
            option = option[3:]
            assert members[kebab[option]].type_name == "boolean", word
        assert option in kebab, f"{' '.join(words[:3])}: {word} is no option of {operation.name}"
        given.add(kebab[option])
    missing = set(shape.required_members) - given
    assert not missing, f"{' '.join(words)}: missing {missing}"


def run_admin(*argv: str, env: Mapping[str, str]) -> Any:
    """``cmstoken-admin`` (the venv's console script) in a subprocess, no standard input."""
    import subprocess

    return subprocess.run(
        [str(Path(sys.executable).parent / "cmstoken-admin"), *argv],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def isolated_aws_env(directory: Path, **extra: str) -> dict[str, str]:
    """This process's environment without its AWS settings but ``AWS_ENDPOINT_URL`` (moto's
    server), with test credentials, no AWS configuration files (they would be in
    ``directory``), no instance metadata, and ``extra``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") or key == "AWS_ENDPOINT_URL"
    }
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_CONFIG_FILE=str(directory / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(directory / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        **extra,
    )
    return env


def client_error(code: str, status: int = 400, operation: str = "Op") -> Any:
    """The ``ClientError`` botocore raises for an AWS answer with ``code`` and ``status``."""
    from botocore.exceptions import ClientError

    answer: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(answer, operation)


def fail_with(client: Any, operation: str, error: Exception) -> None:
    """Make ``client``'s calls of ``operation`` (e.g. ``PutItem``) raise ``error``."""

    def raise_it(**_: Any) -> None:
        raise error

    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register(f"before-call.{service}.{operation}", raise_it)


def run_shell(script: str, directory: Path, env: dict[str, str]) -> str:
    """``script`` in one bash (``set -euo pipefail``), from ``directory``: its standard output;
    the test fails, with the end of its standard error, when it does."""
    ran = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout


# A user code as the identity provider (and the emulator) shows it: HHHJ-MMSZ.
USER_CODE_SHAPE = re.compile(r"\b[B-Z]{4}-[B-Z]{4}\b")


def run_approving(
    command: list[str],
    approve: Callable[[str], object],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    answer: str = "y\n",
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``command`` as a person at a terminal runs it: each new user code it prints on standard
    error is approved (``approve``: the emulator's), then ``answer`` (the (y/N) question's) is
    written to its standard input, once per login. Standard input closes when it ends."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    out: list[str] = []
    err: list[str] = []
    seen: set[str] = set()

    def pump_stdout() -> None:
        assert process.stdout is not None
        out.append(process.stdout.read())

    def pump_stderr() -> None:
        assert process.stderr is not None
        assert process.stdin is not None
        for line in process.stderr:
            err.append(line)
            found = USER_CODE_SHAPE.search(line)
            if found is None or found.group(0) in seen:
                continue
            seen.add(found.group(0))
            approve(found.group(0))
            with contextlib.suppress(OSError, ValueError):
                process.stdin.write(answer)
                process.stdin.flush()

    pumps = [threading.Thread(target=pump, daemon=True) for pump in (pump_stdout, pump_stderr)]
    for pump in pumps:
        pump.start()
    try:
        process.wait(timeout=timeout)
    finally:
        process.kill()
        process.wait()
        for pump in pumps:
            pump.join(timeout=10)
        assert process.stdin is not None
        with contextlib.suppress(OSError):
            process.stdin.close()
    return subprocess.CompletedProcess(command, process.returncode, "".join(out), "".join(err))


# --- get-token run in a subprocess -------------------------------------------------------------


@dataclass
class Finished:
    """A finished get-token run: its exit code and both streams."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        document = json.loads(self.stdout)
        assert isinstance(document, dict)
        return document


class OnATerminal:
    """``command`` with a pseudo-terminal as its controlling terminal, standard input and
    standard error (as in a person's shell); standard output stays a pipe. ``shown`` is what
    the terminal displayed; ``timeout`` bounds each wait."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], timeout: float) -> None:
        import fcntl
        import pty
        import termios

        self.timeout = timeout
        self.leader, follower = pty.openpty()

        def controlling_terminal() -> None:
            interruptible()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # after start_new_session's setsid

        self.process = subprocess.Popen(
            command,
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=follower,
            start_new_session=True,
            preexec_fn=controlling_terminal,
            env=env,
        )
        os.close(follower)
        self.parts: list[str] = []
        self.arrived = threading.Condition()
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        while True:
            try:
                data = os.read(self.leader, 4096)
            except OSError:
                data = b""
            with self.arrived:
                self.parts.append(data.decode(errors="replace") if data else "\0")
                self.arrived.notify_all()
            if not data:
                return

    @property
    def shown(self) -> str:
        with self.arrived:
            return "".join(self.parts).replace("\0", "")

    def wait_for(self, text: str) -> None:
        with self.arrived:
            self.arrived.wait_for(
                lambda: text in "".join(self.parts) or "\0" in self.parts, timeout=self.timeout
            )
        assert text in self.shown, self.shown

    def type(self, keys: bytes) -> None:
        os.write(self.leader, keys)

    def finish(self) -> tuple[int, str, list[str]]:
        """Exit code, standard output, and the lines the terminal showed."""
        try:
            stdout, _ = self.process.communicate(timeout=self.timeout)
        finally:
            self.process.kill()
            self.process.wait()
            self.reader.join(timeout=5)
            os.close(self.leader)
        return self.process.returncode, stdout.decode(), self.shown.splitlines()


@contextlib.contextmanager
def killed_if_running(process: subprocess.Popen[Any]) -> Iterator[None]:
    """On the way out, ``process`` killed and reaped if it still runs (the test failed, or
    timed out waiting for it, while it ran)."""
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def get_token_env(**overrides: str) -> dict[str, str]:
    """This environment without get-token's own settings (``SERVICE_BASE_URL``,
    ``CMS_REFRESH_TOKEN``), ``overrides`` added."""
    kept = ("SERVICE_BASE_URL", "CMS_REFRESH_TOKEN")
    return {k: v for k, v in os.environ.items() if k not in kept} | overrides


def token_file(directory: Path, token: str, name: str = "refresh-token.txt") -> Path:
    """A refresh file of mode 0600 in ``directory`` that holds ``token``."""
    path = directory / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path
