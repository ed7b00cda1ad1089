"""Refresh answers that are RFC-minimal, sloppy, hostile or slow, and Secrets Manager refusing
the write after a refresh: the rotator against the emulator (over HTTP) and moto."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import requests

from cmsemu import Emulator
from cmstoken import runtime
from cmstoken.aws.documents import RefreshSecret
from cmstoken.core.errors import (
    CredentialLostError,
    MalformedResponseError,
    ReauthorizationRequiredError,
    ServerError,
    UpstreamTimeoutError,
    VerificationFailedError,
)
from cmstoken.core.redaction import fingerprint
from cmstoken.upstream.http import HttpTransport, Timeouts
from cmstoken.upstream.service import ServiceClient
from harness import REFRESH_SECRET, Stack, not_at_risk, refuse_rotation_writes, secret_values
from support import LogScan, emitted_metrics, make_jwt

pytestmark = pytest.mark.integration

HOUR = 3600
DEEP = "[" * 100_000 + "]" * 100_000


def token_url(emulator: Emulator) -> str:
    return emulator.issuer_url.rstrip("/") + "/oauth/token"


def refresh(emulator: Emulator, token: str) -> requests.Response:
    data = {
        "grant_type": "refresh_token",
        "refresh_token": token,
        "client_id": emulator.config.client_id,
    }
    return requests.post(token_url(emulator), data=data, timeout=10)


def refreshes_sent(stack: Stack) -> list[str | None]:
    return [record.credential for record in stack.emulator.requests if record.endpoint == "refresh"]


def make_due(stack: Stack) -> None:
    stack.emulator.advance(19 * HOUR)


def log_lines(output: str) -> list[dict[str, Any]]:
    lines = []
    for line in output.splitlines():
        if line.startswith("{") and '"level"' in line:
            lines.append(json.loads(line))
    return lines


# --- the emulator's new faults ------------------------------------------------------------


def test_rewrite_acts_then_drops_and_rewrites_fields(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject(
        "refresh",
        "rewrite",
        drop=["expires_in", "scope"],
        set={"token_type": "bearer"},
        raw={"extra": "NaN", "huge": "1e400"},
    )
    answer = refresh(emulator, token)
    assert answer.status_code == 200
    assert not emulator.refresh_token_valid(token)  # the rotation happened
    assert "expires_in" not in answer.text
    assert "scope" not in answer.text
    assert '"extra":NaN' in answer.text
    assert '"huge":1e400' in answer.text
    document = answer.json()
    assert document["token_type"] == "bearer"
    assert emulator.refresh_token_valid(document["refresh_token"])


def test_rewrite_can_replace_the_whole_body(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "rewrite", body="[[[")
    answer = refresh(emulator, token)
    assert (answer.status_code, answer.text) == (200, "[[[")
    assert not emulator.refresh_token_valid(token)


def test_trickle_acts_and_sends_the_real_answer_slowly(emulator: Emulator) -> None:
    token = emulator.issue_tokens()["refresh_token"]
    emulator.inject("refresh", "trickle", interval=0.002, chunk=64)
    started = time.monotonic()
    answer = refresh(emulator, token)
    size = len(answer.content)
    assert time.monotonic() - started >= 0.002 * (size // 64)
    assert emulator.refresh_token_valid(answer.json()["refresh_token"])
    assert not emulator.refresh_token_valid(token)


@pytest.mark.parametrize(
    "params",
    [
        {"drop": "expires_in"},
        {"set": ["x"]},
        {"raw": {"x": 1}},
        {"body": 5},
        {"colour": "red"},
    ],
)
def test_rewrite_parameters_are_validated(emulator: Emulator, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"rewrite|unknown parameters"):
        emulator.inject("refresh", "rewrite", **params)


def test_trickle_parameters_are_validated(emulator: Emulator) -> None:
    with pytest.raises(ValueError, match="trickle"):
        emulator.inject("refresh", "trickle", chunk=0)


# --- one total time limit per upstream call -------------------------------------------------


def test_a_trickled_answer_ends_at_the_total_time_limit(emulator: Emulator) -> None:
    transport = HttpTransport(timeouts=Timeouts(connect=1, total=1.0))
    service = ServiceClient(emulator.base_url, transport=transport)
    emulator.inject("provider", "trickle", interval=0.05, chunk=1)  # ~300 bytes: ~15 s
    started = time.monotonic()
    with pytest.raises(UpstreamTimeoutError, match="no complete answer") as info:
        service.provider_info()
    assert time.monotonic() - started < 12  # the trickle alone would take about 15 s
    assert info.value.outcome_unknown
    # The next call works (a fresh connection pool).
    assert service.provider_info().client_id


def test_a_callers_deadline_shortens_the_whole_call(emulator: Emulator) -> None:
    transport = HttpTransport(timeouts=Timeouts(connect=1, total=30))
    service = ServiceClient(emulator.base_url, transport=transport)
    token = emulator.issue_tokens()["access_token"]
    emulator.inject("exchange", "trickle", interval=0.05, chunk=1)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeoutError):
        service.exchange(token, fallback_expires_at=0, time_limit=0.5)
    assert time.monotonic() - started < 12  # the trickle alone would take about 15 s


def test_a_trickled_refresh_ends_before_the_deadline_and_is_presented_again_once(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    old_refresh = stack.newest_refresh_token()
    make_due(stack)
    runtime.service().transport.timeouts = Timeouts(connect=1, total=1.0)
    stack.emulator.inject("refresh", "trickle", interval=0.05, chunk=1)
    started = time.monotonic()
    with pytest.raises(ReauthorizationRequiredError, match="answer to its refresh was lost"):
        stack.invoke("rotator", {})
    assert time.monotonic() - started < 12  # the trickle alone would take about 15 s
    # Its status line said 200 and the rest never came: the provider rotated the token and the
    # answer is lost, so the token went again at once; with no reuse interval it is refused.
    assert len(refreshes_sent(stack)) == 2
    assert stack.refresh_document().lease is None
    assert stack.newest_refresh_token() == old_refresh
    assert stack.emulator.family_revoked(old_refresh)
    output = capsys.readouterr().out
    assert [line["level"] for line in log_lines(output)].count("CRITICAL") == 0


def test_the_refresh_call_ends_in_time_to_store_its_answer(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.seed()
    make_due(stack)
    transport = runtime.service().transport
    send = transport.request
    budgets: dict[str, list[float | None]] = {}

    def recording(*args: Any, **kwargs: Any) -> Any:
        budgets.setdefault(kwargs["endpoint"], []).append(kwargs.get("time_limit"))
        return send(*args, **kwargs)

    monkeypatch.setattr(transport, "request", recording)
    rotator = runtime.rotator("test")
    remaining = rotator.refresh_guard + 1
    assert stack.invoke("rotator", {}, remaining_ms=int(remaining * 1000))["outcome"] == "rotated"
    (refresh_budget,) = budgets["refresh"]
    assert refresh_budget is not None
    # The refresh gets its whole time limit, and after it a second whole call (the token
    # presented again after a lost answer) and the write keep their time.
    assert 2 * transport.timeouts.total <= refresh_budget <= remaining - rotator.write_reserve
    assert all(b is not None and b <= remaining for b in budgets["exchange"] + budgets["projects"])


def wait_for_refreshes(stack: Stack, count: int) -> None:
    """The emulator logs a delayed request once it has answered it: wait (bounded) for that."""
    for _ in range(500):
        if len(refreshes_sent(stack)) >= count:
            return
        time.sleep(0.02)


@pytest.mark.parametrize("reuse_interval", [0, 600])
def test_a_refresh_answered_after_its_limit_is_presented_again_at_once(
    stack: Stack, reuse_interval: int
) -> None:
    """No status line within the total limit: the provider acted, and its answer can no longer
    reach the run, so the run presents the token again at once: within a reuse interval the
    family goes on, without one the provider refuses the spent token and the run reports the
    loss (SPEC 4.2b)."""
    stack.emulator.config.refresh_reuse_interval = reuse_interval
    stack.seed()
    make_due(stack)
    runtime.service().transport.timeouts = Timeouts(connect=1, total=0.3)
    stack.emulator.inject("refresh", "delay", seconds=0.6, acted=True)
    if reuse_interval:
        assert stack.invoke("rotator", {})["outcome"] == "rotated"
        assert stack.published_token_works()
    else:
        with pytest.raises(ReauthorizationRequiredError, match="lost"):
            stack.invoke("rotator", {})
    wait_for_refreshes(stack, 2)
    assert len(refreshes_sent(stack)) == 2


# --- standards-conforming, sloppy and broken 2xx answers ------------------------------------


@pytest.mark.parametrize(
    "rewrite",
    [
        {"drop": ["expires_in", "scope"]},
        {"set": {"expires_in": "86400", "scope": ""}},
        {"set": {"token_type": "bearer", "expires_in": 86400.0}},
        {"drop": ["token_type", "expires_in", "scope", "id_token"]},
        {"raw": {"expires_in": "NaN"}},
        {"raw": {"expires_in": "1e400"}},
        {"set": {"expires_in": 10**12}},
        {"set": {"expires_in": -1}},
        {"raw": {"padding": DEEP[:2000] + DEEP[-2000:]}},
    ],
    ids=[
        "rfc-minimal",
        "sloppy",
        "float",
        "no-token-type",
        "nan",
        "1e400",
        "1e12",
        "negative",
        "nested-extra",
    ],
)
def test_conforming_and_sloppy_answers_rotate_once(stack: Stack, rewrite: dict[str, Any]) -> None:
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "rewrite", **rewrite)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert len(refreshes_sent(stack)) == 1
    newest = stack.newest_refresh_token()
    assert stack.emulator.refresh_token_valid(newest)
    assert not stack.emulator.family_revoked(newest)
    assert stack.published_token_works()
    raw = stack.refresh_document().raw_access_token
    assert raw is not None
    assert stack.clock.now() <= raw.expires_at <= stack.clock.now() + 7 * 86400 + 5


@pytest.mark.parametrize(
    "rewrite",
    [
        {"drop": ["access_token"]},
        {"set": {"access_token": ""}},
        {"set": {"token_type": "mac"}},
    ],
    ids=["no-access-token", "empty-access-token", "mac"],
)
def test_an_answer_otherwise_unusable_keeps_its_refresh_token(
    stack: Stack, rewrite: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    old_token = stack.service_document().token
    make_due(stack)
    stack.emulator.inject("refresh", "rewrite", **rewrite)
    with pytest.raises(MalformedResponseError, match="new refresh token is stored"):
        stack.invoke("rotator", {})
    assert len(refreshes_sent(stack)) == 1  # never sent again after a 2xx answer
    stored = stack.refresh_document()
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    assert not_at_risk(stored)  # its lease lapses by itself: no write after the store
    assert stored.raw_access_token is None  # not usable: not kept
    assert stack.service_document().token == old_token
    assert emitted_metrics(capsys.readouterr().out)["RotationFailed"] == [1]
    # The next run refreshes with the stored token and recovers.
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert len(refreshes_sent(stack)) == 2
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    assert stack.published_token_works()


@pytest.mark.parametrize(
    "rewrite",
    [
        {"drop": ["refresh_token"]},
        {"set": {"refresh_token": None}},
        {"set": {"refresh_token": 12345}},
        {"body": DEEP},
        {"body": "<html>ok</html>"},
        {"body": "NaN"},
    ],
    ids=["dropped", "null", "number", "deeply-nested", "html", "nan"],
)
@pytest.mark.parametrize("reuse_interval", [0, 30])
def test_a_2xx_answer_without_a_usable_refresh_token_is_presented_again_once(
    stack: Stack, rewrite: dict[str, Any], reuse_interval: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The provider rotated the token and its new one cannot be read: the answer is lost as
    surely as a dropped one, so the token goes again at once. Inside a reuse interval that
    recovers the family; without one the provider refuses it, and the run reports the loss."""
    stack.emulator.config.refresh_reuse_interval = reuse_interval
    stack.seed()
    old_refresh = stack.newest_refresh_token()
    make_due(stack)
    stack.emulator.inject("refresh", "rewrite", **rewrite)
    if reuse_interval:
        assert stack.invoke("rotator", {})["outcome"] == "rotated"
        assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    else:
        with pytest.raises(ReauthorizationRequiredError, match="lost"):
            stack.invoke("rotator", {})
        assert stack.newest_refresh_token() == old_refresh
        assert stack.emulator.family_revoked(old_refresh)
    assert len(refreshes_sent(stack)) == 2
    output = capsys.readouterr().out
    lost = [line for line in log_lines(output) if "presenting the same" in line["message"]]
    assert [line["previous"] for line in lost] == [fingerprint(old_refresh)]
    assert lost[0]["answered_2xx"] is True
    assert emitted_metrics(output)["ReauthorizationRequired"] == [0 if reuse_interval else 1]


def test_a_service_token_with_a_hostile_exp_is_clamped_or_refused(stack: Stack) -> None:
    stack.seed()
    old_token = stack.service_document().token
    make_due(stack)
    stack.emulator.inject("exchange", "rewrite", set={"token": make_jwt({"exp": 1e30})})
    with pytest.raises(VerificationFailedError):  # the emulator does not know that token
        stack.invoke("rotator", {})
    assert stack.service_document().token == old_token
    assert not_at_risk(stack.refresh_document())


# --- Secrets Manager refusing the write after a refresh -------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "LimitExceededException",
        "KMSInvalidStateException",
        "InvalidRequestException",
        "ThrottlingException",
        None,
    ],
)
def test_every_failure_of_the_write_after_a_refresh_is_retried(
    stack: Stack, code: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    make_due(stack)
    left = refuse_rotation_writes(code, times=4)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert left["left"] == 0
    assert len(refreshes_sent(stack)) == 1
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    assert stack.published_token_works()
    assert emitted_metrics(capsys.readouterr().out).get("CredentialLost") == [0]


@pytest.mark.parametrize("code", ["KMSDisabledException", "AccessDeniedException", None])
def test_a_write_refused_until_the_deadline_reports_the_lost_credential(
    stack: Stack, code: str | None, log_level: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    old_refresh = stack.newest_refresh_token()
    old_token = stack.service_document().token
    make_due(stack)
    refuse_rotation_writes(code, times=10**9)
    started = stack.clock.now()
    with pytest.raises(CredentialLostError, match="lost") as raised:
        stack.invoke("rotator", {}, remaining_ms=120_000)
    # Retried until just before the deadline, and not past it.
    assert 110 <= stack.clock.now() - started <= 120
    assert len(refreshes_sent(stack)) == 1
    assert stack.refresh_document().lease is None
    assert stack.newest_refresh_token() == old_refresh
    assert stack.service_document().token == old_token
    captured = capsys.readouterr()
    output = captured.out
    metrics = emitted_metrics(output)
    assert metrics["CredentialLost"] == [1]
    assert metrics["RotationFailed"] == [1]
    critical = [line for line in log_lines(output) if line["level"] == "CRITICAL"]
    assert len(critical) == 1
    assert critical[0]["previous"] == fingerprint(old_refresh)
    assert len(critical[0]["lost"]) == len(fingerprint(old_refresh))
    # The CRITICAL line, the retries' warnings and the error name what refused the write: the
    # AWS error code when AWS answered (issue 20), not only the class.
    retries = [line for line in log_lines(output) if line["message"].startswith("retrying")]
    assert retries
    if code is None:
        assert critical[0]["error"] == "DocumentError"
        assert "aws_error" not in critical[0]
        assert all("aws_error" not in line for line in retries)
        assert "(DocumentError)" in str(raised.value)
    else:
        # A key Secrets Manager cannot use is a StoreKeyError, any other refusal a
        # StoreAccessError (issue 22: the fix is the key, not a secretsmanager permission).
        kind = "StoreKeyError" if code.startswith("KMS") else "StoreAccessError"
        assert critical[0]["error"] == kind
        assert critical[0]["aws_error"] == code
        assert {line["aws_error"] for line in retries} == {code}
        assert f"({kind}: {code})" in str(raised.value)
    for secret in [*secret_values(stack), old_refresh]:
        assert secret not in output
    # The lost refresh token was never stored anywhere but the wire: it is scanned for too, in
    # every record (the CRITICAL one's fields included), at INFO and at DEBUG.
    (lost,) = log_level.wire.by_field["refresh_token"] - {old_refresh}
    assert fingerprint(lost) == critical[0]["lost"]
    log_level.assert_clean(output, captured.err, secrets=[*secret_values(stack), old_refresh])
    # The next run finds the used token: the family is gone, reported as such.
    runtime.store().client.meta.events.unregister(
        "provide-client-params.secrets-manager.PutSecretValue"
    )
    stack.emulator.advance(HOUR)
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})


def test_the_document_never_holds_a_hostile_time(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "rewrite", set={"expires_in": 10**30})
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    RefreshSecret.from_json(
        stack.secretsmanager.get_secret_value(SecretId="cmstoken/refresh-credential")[
            "SecretString"
        ]
    )


def test_an_assumed_lifetime_is_recorded_as_assumed(stack: Stack) -> None:
    """No expires_in and an access token that is not a JWT: the lifetime is the conservative
    default, and the stored raw token says it was assumed."""
    stack.seed()
    make_due(stack)
    stack.emulator.inject(
        "refresh", "rewrite", drop=["expires_in"], set={"access_token": "opaque-access-token"}
    )
    # The service refuses the opaque token (exchange 500); the answer was stored before that.
    with pytest.raises(ServerError, match="exchange"):
        stack.invoke("rotator", {})
    raw = stack.refresh_document().raw_access_token
    assert raw is not None
    assert raw.expires_at_assumed
    assert raw.expires_at - stack.clock.now() == pytest.approx(3600, abs=120)
    assert len(refreshes_sent(stack)) == 1


def test_a_stated_lifetime_is_not_recorded_as_assumed(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    raw = stack.refresh_document().raw_access_token
    assert raw is not None
    assert not raw.expires_at_assumed
    assert (
        '"expires_at_assumed"'
        not in stack.secretsmanager.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"]
    )
