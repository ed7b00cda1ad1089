"""Logs at DEBUG: the leak scans see what DEBUG adds (the upstream HTTP libraries' request lines,
the library's ``extra`` fields, exception text), and ``get-token`` leaks nothing when the program
around it logs at DEBUG. The functions' own leak scans run at INFO and DEBUG through the
``log_level`` fixture (test_rotator, test_bootstrap, test_refresh_answers, test_upstream)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from cmsemu import Emulator
from cmstoken.cli.get_token import command as get_token
from cmstoken.core.redaction import fingerprint
from cmstoken.upstream.http import HttpTransport, Timeouts
from support import LogScan, scan_logs

pytestmark = pytest.mark.integration

CANARY = "v1.canary-refresh-token-0123456789"


# --- the scan itself bites: a secret where only DEBUG shows it is found ----------------------


@pytest.mark.parametrize("log_level", ["DEBUG"], indirect=True)
def test_a_token_in_a_url_is_caught_in_urllib3s_debug_lines(
    emulator: Emulator, log_level: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    """The product never puts a token in a URL; if it did, urllib3's DEBUG request line (which
    the scans keep) would show it."""
    transport = HttpTransport(timeouts=Timeouts(connect=2, total=10))
    try:
        transport.request(
            "GET",
            f"{emulator.base_url}/api/v3/auth/provider?refresh_token={CANARY}",
            endpoint="provider",
        )
    finally:
        transport.close()
    captured = capsys.readouterr()
    lines = [r.getMessage() for r in log_level.keeper.records if r.name.startswith("urllib3")]
    assert any("/api/v3/auth/provider" in line for line in lines), lines
    assert log_level.leaks([log_level.keeper.text()], [CANARY]) == [fingerprint(CANARY)]
    with pytest.raises(AssertionError, match="secret in a log record at DEBUG"):
        log_level.assert_clean(captured.out, captured.err, secrets=[CANARY])


@pytest.mark.parametrize("log_level", ["DEBUG"], indirect=True)
def test_a_token_in_a_debug_records_extra_fields_or_exception_is_caught(
    stack: Any, log_level: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header or a body in ``extra`` (what a careless ``logger.debug`` in http.py would add),
    or in an exception's text: the record keeper and the functions' JSON lines both hold it."""
    library = logging.getLogger("cmstoken.upstream.http")
    library.debug("request", extra={"headers": {"Authorization": f"Bearer {CANARY}"}})
    captured = capsys.readouterr()
    assert f"Bearer {CANARY}" in captured.out  # the Powertools handler writes extra fields
    assert log_level.leaks([captured.out], [CANARY]) == [fingerprint(CANARY)]
    assert log_level.leaks([log_level.keeper.text()], [CANARY]) == [fingerprint(CANARY)]

    log_level.keeper.records.clear()
    try:
        raise ValueError("refused")
    except ValueError as inner:
        try:
            raise RuntimeError("wrapped") from RuntimeError(f"quoting {CANARY}")
        except RuntimeError:
            library.debug("failed", exc_info=True)
        del inner
    assert log_level.leaks([log_level.keeper.text()], [CANARY]) == [fingerprint(CANARY)]
    with pytest.raises(AssertionError, match="secret in a log record"):
        log_level.assert_clean(secrets=[CANARY], upstream=False)


def test_the_wire_collects_the_secrets_of_requests_and_answers(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the scans look for beyond the stored secrets: every token field sent or received."""
    from cmstoken.upstream.identity import IdentityClient
    from cmstoken.upstream.service import ServiceClient

    with scan_logs("INFO", monkeypatch, functions=False) as scan:
        issued = emulator.issue_tokens()
        transport = HttpTransport(timeouts=Timeouts(connect=2, total=10))
        identity = IdentityClient(emulator.issuer_url, transport=transport)
        service = ServiceClient(emulator.base_url, transport=transport)
        rotated = identity.refresh(
            client_id=emulator.config.client_id, refresh_token=issued["refresh_token"]
        )
        assert rotated.access_token is not None
        token = service.exchange(rotated.access_token, fallback_expires_at=0)
        service.list_projects(token.token)
        transport.close()
    wire = scan.wire.by_field
    assert wire["refresh_token"] == {issued["refresh_token"], rotated.refresh_token}
    assert rotated.access_token in wire["access_token"]
    assert wire["token"] == {rotated.access_token, token.token}  # the exchange's in and out
    assert wire["authorization"] == {token.token}


# --- get-token inside a program that logs at DEBUG -------------------------------------------


@pytest.fixture(params=["INFO", "DEBUG"])
def cli_logs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[LogScan]:
    """The loggers as a program that configured logging at INFO or DEBUG leaves them (nothing
    routes the library's records: they reach the root logger), every record kept."""
    with scan_logs(str(request.param), monkeypatch, functions=False) as scan:
        yield scan


@pytest.fixture
def emu(emulator: Emulator) -> Emulator:
    """The emulator with a 1 s polling interval, so that a device flow is quick."""
    emulator.config.poll_interval = 1
    return emulator


class ApprovingStdin:
    """Standard input (not a terminal) of someone who approves the code shown, then answers
    ``y``."""

    def __init__(self, emulator: Emulator, scan: LogScan) -> None:
        self.emulator = emulator
        self.scan = scan

    def readline(self) -> str:
        (user_code,) = self.scan.wire.by_field["user_code"]
        self.emulator.approve(user_code)
        return "y\n"

    def isatty(self) -> bool:
        return False


def test_get_token_device_flow_leaks_nothing_at_debug(
    emu: Emulator,
    cli_logs: LogScan,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", ApprovingStdin(emu, cli_logs))
    code = get_token.main(["--base-url", emu.base_url, "-o", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    document = json.loads(captured.out)
    assert emu.service_token_valid(document["access_token"])
    assert {"device_code", "user_code", "access_token", "token"} <= set(cli_logs.wire.by_field)
    # Standard error shows the user code on purpose; no record may hold it.
    cli_logs.assert_clean(
        captured.err,
        secrets=[document["access_token"], document["refresh_token"]],
        shown=["user_code"],
    )


def test_get_token_refresh_and_a_refused_exchange_leak_nothing_at_debug(
    emu: Emulator, cli_logs: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    old = emu.issue_tokens()["refresh_token"]
    assert get_token.main(["--base-url", emu.base_url, "-r", old]) == 0
    renewed = json.loads(capsys.readouterr().out)
    emu.inject("exchange", "status", status=400, error="bad_request")
    assert get_token.main(["--base-url", emu.base_url, "-r", renewed["refresh_token"]]) == 1
    captured = capsys.readouterr()
    kept = json.loads(captured.out)  # the new refresh token is printed, not lost
    assert emu.refresh_token_valid(kept["refresh_token"])
    assert "exchange" in captured.err
    cli_logs.assert_clean(
        captured.err,
        secrets=[old, renewed["access_token"], renewed["refresh_token"], kept["refresh_token"]],
    )
