"""What a lost refresh answer or a crash costs, on Lambda's real retry semantics (issue 28).

The identity provider rotates the refresh token and the answer never reaches the rotator: the
connection closes without one, a gateway answers 502 or 504 after the provider acted, the call's
total time limit passes, or the function dies right after the answer arrived. Each cell of the
table in ``docs/how-rotation-works.md`` ("What a lost answer costs") is one case of
``test_what_a_lost_answer_costs``: the fault, the tenant's refresh-token reuse interval (0, 30 s,
300 s) and what the user keeps.

Lambda, as AWS documents it (invocation-async-error-handling): "If the function returns an
error, by default Lambda attempts to run it two more times, with a one-minute wait between the
first two attempts, and two minutes between the second and third attempts. Function errors
include errors returned by the function's code and errors returned by the function's runtime,
such as timeouts." A run that returns is not retried, whatever its result. ``on_lambda`` plays
exactly that; then the schedule's next run comes an hour later.

The provider (SPEC section 2): reusing an already-used refresh token revokes the whole
family, except that an optional reuse interval lets the immediately previous token be reused
for N seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cmstoken import runtime
from cmstoken.core.errors import UpstreamConnectionError
from cmstoken.upstream.http import HttpTransport, Timeouts
from cmstoken.upstream.identity import IdentityClient
from harness import Stack

pytestmark = pytest.mark.integration

HOUR = 3600
# Lambda's waits before its two retries of a failed asynchronous invocation.
RETRY_WAITS = (60.0, 120.0)
# The refresh call's whole time limit in production, which the "limit" fault stands for, and
# the second request's own way to the provider: it arrives that much after the limit passed.
PRODUCTION_LIMIT = Timeouts().total
SECOND_REQUEST_LATENCY = 0.5
REUSE_INTERVALS = (0, 30, 300)


class SimulatedCrash(BaseException):
    """The process dies here (not an ``Exception``: nothing in the product may catch it)."""


def on_lambda(stack: Stack, event: dict[str, Any]) -> list[str]:
    """One asynchronous invocation of the rotator as Lambda runs it: the event, and while the
    run fails (raises or dies), the retries one and then two minutes later. Each attempt's
    outcome: the result's ``outcome``, or the type of what it raised."""
    outcomes: list[str] = []
    for wait in (0.0, *RETRY_WAITS):
        stack.emulator.advance(wait)
        try:
            result = stack.invoke("rotator", event)
        except (Exception, SimulatedCrash) as exc:
            outcomes.append(type(exc).__name__)
            continue
        outcomes.append(str(result["outcome"]))
        break
    return outcomes


def lose_the_answer(stack: Stack, monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The next refresh is acted on by the provider and its answer never reaches the rotator."""
    if fault == "closed":
        stack.emulator.inject("refresh", "drop")
    elif fault in ("502", "504"):
        stack.emulator.inject("refresh", "status", status=int(fault), acted=True)
    elif fault == "limit":
        answer_after_the_limit(stack, monkeypatch)
    else:
        crash_after_the_refresh_answer(monkeypatch)


def answer_after_the_limit(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The provider acts at once and answers after the call's total limit: the limit is 0.5 s
    here, and when it passes the emulator's clock moves on as if the production limit (30 s) had
    passed, and the second request's way to the provider after it."""
    runtime.service().transport.timeouts = Timeouts(connect=1, total=0.5)
    stack.emulator.inject("refresh", "delay", seconds=1.5, acted=True)
    send = HttpTransport.request

    def waited(self: HttpTransport, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return send(self, *args, **kwargs)
        except Exception:
            if kwargs.get("endpoint") == "refresh":
                waited = time.monotonic() - started
                stack.emulator.advance(PRODUCTION_LIMIT - waited + SECOND_REQUEST_LATENCY)
            raise

    monkeypatch.setattr(HttpTransport, "request", waited)


def crash_after_the_refresh_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The function dies right after the first refresh answer arrived, before storing it."""
    refresh = IdentityClient.refresh
    crashed: list[bool] = []

    def refresh_then_die(self: IdentityClient, *args: Any, **kwargs: Any) -> Any:
        answer = refresh(self, *args, **kwargs)
        if not crashed:
            crashed.append(True)
            raise SimulatedCrash("after the refresh answer")
        return answer

    monkeypatch.setattr(IdentityClient, "refresh", refresh_then_die)


def keeps_the_family(stack: Stack) -> None:
    """The newest token is stored, usable, its family intact, a verified token published."""
    newest = stack.newest_refresh_token()
    assert stack.emulator.refresh_token_valid(newest)
    assert not stack.emulator.family_revoked(newest)
    assert stack.published_token_works()
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.status == "active"


def reports_the_loss(stack: Stack, spent: str) -> None:
    """The family is gone and the stack says so: the credential is marked, the published copy
    too, the old (still valid) service token stays for consumers, and the next scheduled run
    reports it without calling the identity provider."""
    assert stack.emulator.family_revoked(spent)
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.status == "reauthorization_required"
    assert stack.service_document().credential_status == "reauthorization_required"
    assert stack.published_token_works()
    calls = stack.emulator.counts["refresh"]
    stack.emulator.advance(HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "reauthorization_required"
    assert stack.emulator.counts["refresh"] == calls


def run_case(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fault: str, reuse: int
) -> tuple[list[str], str]:
    """The seeded stack, due; the fault on its refresh; the invocation on Lambda. Returns the
    attempts' outcomes and the refresh token that was stored before."""
    stack.emulator.config.refresh_reuse_interval = reuse
    stack.seed()
    spent = stack.newest_refresh_token()
    stack.emulator.advance(19 * HOUR)
    with monkeypatch.context() as patch:  # the fault's patches end with the invocation
        lose_the_answer(stack, patch, fault)
        outcomes = on_lambda(stack, {})
    runtime.service().transport.timeouts = Timeouts()
    return outcomes, spent


REPORTED_IN_THE_RUN = ["ReauthorizationRequiredError", "reauthorization_required"]
RECOVERED_RUN = "recovered in the run"
RECOVERED_RETRY = "recovered on Lambda's retry"
REPORTED_RUN = "reported in the run"
REPORTED_RETRY = "reported on Lambda's retry"
# docs/how-rotation-works.md, "What a lost answer costs": its rows, and what each fault costs at
# each reuse interval (test_the_documented_table_is_this_one holds the page to it).
FAULTS = {
    "closed": "connection closed after the provider acted",
    "502": "a gateway's 502 after the provider acted",
    "504": "a gateway's 504 after the provider acted",
    "limit": "the 30 s limit passed (the provider acted at once)",
    "crash": "the function dies right after the answer",
}
COSTS: dict[str, tuple[str, str, str]] = {
    "closed": (REPORTED_RUN, RECOVERED_RUN, RECOVERED_RUN),
    "502": (REPORTED_RUN, RECOVERED_RUN, RECOVERED_RUN),
    "504": (REPORTED_RUN, RECOVERED_RUN, RECOVERED_RUN),
    "limit": (REPORTED_RUN, REPORTED_RUN, RECOVERED_RUN),
    "crash": (REPORTED_RETRY, REPORTED_RETRY, RECOVERED_RETRY),
}
DOCUMENT = Path(__file__).resolve().parents[3] / "docs" / "how-rotation-works.md"


@pytest.mark.parametrize("reuse", REUSE_INTERVALS)
@pytest.mark.parametrize("fault", FAULTS)
def test_what_a_lost_answer_costs(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fault: str, reuse: int
) -> None:
    """One cell of the table: the fault on a due rotation's refresh, the tenant's reuse
    interval, the invocation on Lambda; what the user keeps."""
    cost = COSTS[fault][REUSE_INTERVALS.index(reuse)]
    outcomes, spent = run_case(stack, monkeypatch, fault, reuse)
    # the token is presented twice in all: once, then once again (in the run or its retry)
    assert stack.emulator.counts["refresh"] == 2
    if cost == RECOVERED_RUN:
        # the run presented the token again at once and the provider, inside its reuse
        # interval, answered: one run, the family kept
        assert outcomes == ["rotated"]
    elif cost == RECOVERED_RETRY:
        # the retry a minute later took the dead run's lease over (reserved concurrency 1: the
        # holder cannot be running) and presented the token inside the provider's interval
        assert outcomes == ["SimulatedCrash", "rotated"]
    elif cost == REPORTED_RUN:
        # refused (no reuse interval, or it had passed): the run raised the report, Lambda's
        # retry found the credential marked and returned quietly (no third presentation)
        assert outcomes == REPORTED_IN_THE_RUN
    else:
        assert outcomes == ["SimulatedCrash", *REPORTED_IN_THE_RUN]
    if cost.startswith("recovered"):
        keeps_the_family(stack)
        stack.emulator.advance(HOUR)
        assert stack.invoke("rotator", {})["outcome"] == "skipped"
    else:
        reports_the_loss(stack, spent)


def test_the_documented_table_is_this_one() -> None:
    """The page's table says what COSTS says, row by row."""
    text = DOCUMENT.read_text()
    table = text[text.index("| fault | no reuse interval | 30 s | 5 minutes |") :]
    table = table.split("\n\n", 1)[0]  # this table, not the page's next one
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    documented = {
        cells[0]: tuple(cells[1:])
        for cells in ([c.strip() for c in row.strip("|").split("|")] for row in rows)
    }
    assert documented == {FAULTS[fault]: cost for fault, cost in COSTS.items()}


# --- without reserved concurrency ---------------------------------------------------------------


def test_without_reserved_concurrency_a_crash_is_recovered_on_the_second_retry(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the rotator's concurrency not reserved the lease's holder might still be running:
    the first retry (a minute on, the lease still live) fails instead of presenting the token
    beside it, and the second (three minutes on, the lease lapsed) presents it, inside 5
    minutes. Skipping would have returned success and left the spent token to the schedule."""
    monkeypatch.setenv("ROTATOR_RESERVED_CONCURRENCY", "0")
    runtime.settings.cache_clear()
    outcomes, _ = run_case(stack, monkeypatch, "crash", 300)
    assert outcomes == ["SimulatedCrash", "LeaseHeldError", "rotated"]
    assert stack.emulator.counts["refresh"] == 2
    keeps_the_family(stack)


def test_a_second_lost_answer_in_a_row_is_left_to_lambdas_retry(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most one presentation again per run: after two lost answers the run fails with its
    lease given back, and Lambda's retry a minute later presents the token a third time,
    inside 5 minutes."""
    stack.emulator.config.refresh_reuse_interval = 300
    stack.seed()
    stack.emulator.advance(19 * HOUR)
    stack.emulator.inject("refresh", "drop", times=2)
    outcomes = on_lambda(stack, {})
    assert outcomes == ["UpstreamConnectionError", "rotated"]
    assert stack.emulator.counts["refresh"] == 3
    keeps_the_family(stack)


def test_no_presentation_again_without_time_for_a_whole_call(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first refresh's connection closes with too little left for another whole call and
    the write: the run fails (its lease given back) rather than cut the second call short, and
    Lambda's retry a minute later presents the token, inside 5 minutes."""
    stack.emulator.config.refresh_reuse_interval = 300
    stack.seed()
    stack.emulator.advance(19 * HOUR)
    stack.emulator.inject("refresh", "drop")
    rotator = runtime.rotator("test")
    remaining = rotator.refresh_guard + 1
    send = HttpTransport.request

    def late(self: HttpTransport, *args: Any, **kwargs: Any) -> Any:
        try:
            return send(self, *args, **kwargs)
        finally:
            if kwargs.get("endpoint") == "refresh" and stack.emulator.counts["refresh"] == 1:
                # the connection closed when only the write reserve and a second were left
                stack.emulator.advance(remaining - rotator.write_reserve - 1)

    with monkeypatch.context() as patch:
        patch.setattr(HttpTransport, "request", late)
        with pytest.raises(UpstreamConnectionError):
            stack.invoke("rotator", {}, remaining_ms=int(remaining * 1000))
    assert stack.emulator.counts["refresh"] == 1
    assert stack.refresh_document().lease is None
    stack.emulator.advance(RETRY_WAITS[0])
    result = stack.invoke("rotator", {})
    assert result["outcome"] == "rotated", result
    keeps_the_family(stack)
