"""Fixtures shared by every test: a fake Lambda context, Powertools and logging state reset
between tests, and the run's summary lines (the explorations' counts)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from support import LogScan

# As the template sets them, before any module creates the shared Powertools objects.
os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "cmstoken-test")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "CmsToken")


@dataclass
class FakeLambdaContext:
    """The attributes of a Lambda context object that the handlers and Powertools read."""

    function_name: str = "cmstoken-rotator"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 256
    remaining_millis: int = 120_000
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/cmstoken-rotator"
    log_stream_name: str = "2026/11/22/[$LATEST]0123456789abcdef"
    qualifier: str | None = None  # the alias (or version) the caller named, if any

    @property
    def invoked_function_arn(self) -> str:
        arn = f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"
        return arn if self.qualifier is None else f"{arn}:{self.qualifier}"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_millis


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    """A fresh context (new request id) with two minutes left."""
    return FakeLambdaContext()


@pytest.fixture(autouse=True)
def _isolated_logging_and_metrics(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep Powertools' process-wide state (buffered metrics, logger wiring) from leaking
    between tests, and give every test the same Powertools environment."""
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "cmstoken-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "CmsToken")
    library = logging.getLogger("cmstoken")
    saved = (list(library.handlers), library.propagate, library.level)
    yield
    observability = sys.modules.get("cmstoken.observability")
    if observability is not None:
        observability.metrics.clear_metrics()
    library.handlers, library.propagate = saved[0], saved[1]
    library.setLevel(saved[2])


@pytest.fixture(autouse=True, scope="session")
def _moto_modules_listed_once() -> Iterator[None]:
    """moto's server lists moto's package directory (a stat of each of its hundreds of entries)
    for every request it serves, to see whether the Host header names a service; the package
    does not change while the tests run, so it is listed once. (Where moto is not imported, as
    in a run of unit tests alone, there is nothing to do.)"""
    backends = sys.modules.get("moto.backends")
    if backends is None:
        yield
        return
    names = vars(backends)
    listing = names["list_of_moto_modules"]
    listed = tuple(listing())
    names["list_of_moto_modules"] = lambda: listed
    yield
    names["list_of_moto_modules"] = listing


@pytest.fixture
def lambda_logs(capsys: pytest.CaptureFixture[str]) -> None:
    """Route the handlers' structured logs (Powertools' handler, which the library's loggers
    share) to the test's captured stdout, as Lambda sends them to CloudWatch."""
    from cmstoken.observability import logger, route_library_logs

    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    handler.stream = _CurrentStdout()  # not setStream: it would flush a stream pytest closed
    route_library_logs()


@pytest.fixture(params=["INFO", "DEBUG"])
def log_level(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, lambda_logs: None
) -> Iterator[LogScan]:
    """Each leak scan twice: ``POWERTOOLS_LOG_LEVEL`` as the template sets it (INFO) and as an
    operator may set it while investigating (DEBUG), with every record kept and every secret
    that crosses the wire collected (``support.scan_logs``)."""
    from support import scan_logs

    with scan_logs(str(request.param), monkeypatch, functions=True) as scan:
        yield scan


class _CurrentStdout:
    """Writes to whatever ``sys.stdout`` is at the time (pytest swaps it between phases)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and a region, so that nothing can reach a real account."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


# Lines a test states for the run's summary (``say``): the explorations' counts, where the
# screenshots are. They travel in the test's report, so they are printed at the end of the run
# whether the tests ran in this process or in pytest-xdist's workers (whose output is not shown).
_SAID = "said"


@pytest.fixture
def say(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a line for the summary printed at the end of the run."""

    def record(text: str) -> None:
        request.node.user_properties.append((_SAID, text))

    return record


class _Said:
    """Collects the said lines from the reports, in the order the tests end, and prints them."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.lines += [str(text) for name, text in report.user_properties if name == _SAID]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.lines:
            terminalreporter.section("what the tests said")
            for line in self.lines:
                terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Said(), "said")
    # Ctrl-C reaches every process the tests start as it reaches a command typed at a terminal:
    # a shell's background job (`make test &`, a CI runner's) starts with SIGINT ignored, every
    # child inherits that, and Python keeps it ignored, so a test of Ctrl-C would wait forever.
    # A handler (unlike "ignored") is reset to the default in a child.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
