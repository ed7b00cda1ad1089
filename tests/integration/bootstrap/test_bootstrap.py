"""The bootstrap function against the emulator (over HTTP) and moto: start, poll, status, and
living next to the rotator."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from cmstoken.aws.secrets import SecretStore
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import (
    ConfigurationError,
    ReauthorizationRequiredError,
    VerificationFailedError,
)
from cmstoken.upstream.identity import IdentityClient
from harness import (
    REFRESH_SECRET,
    SERVICE_SECRET,
    Stack,
    approve_pending,
    record_secret_writes,
    secret_values,
)
from support import LogScan, emitted_metrics, load_event

pytestmark = pytest.mark.integration

HOUR = 3600
USER_CODE = re.compile(r"^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")


def start(stack: Stack, sample: str = "bootstrap-start") -> dict[str, Any]:
    result: dict[str, Any] = stack.invoke("bootstrap", load_event(sample))
    return result


def poll(stack: Stack, *, remaining_ms: int = 120_000, **fields: Any) -> dict[str, Any]:
    event = {**load_event("bootstrap-poll"), **fields}
    result: dict[str, Any] = stack.invoke("bootstrap", event, remaining_ms=remaining_ms)
    return result


def device_code(stack: Stack) -> str:
    pending = stack.refresh_document().pending
    assert pending is not None
    return pending.device_code


def test_start_returns_the_address_and_code_and_keeps_the_device_code_private(
    stack: Stack,
) -> None:
    result = start(stack)
    assert result["status"] == "pending"
    assert USER_CODE.match(result["user_code"])
    assert result["verification_uri"] == stack.emulator.issuer_url.rstrip("/") + "/activate"
    assert result["verification_uri_complete"].endswith(f"?user_code={result['user_code']}")
    assert result["expires_at"].endswith("Z")
    secret = stack.refresh_document()
    assert secret.credential is None
    assert secret.pending is not None
    assert secret.pending.device_code not in str(result)
    assert secret.pending.client_id == stack.emulator.config.client_id


def test_the_whole_flow_authorizes_and_publishes_a_verified_token(
    stack: Stack, log_level: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    user_code = start(stack)["user_code"]
    code = device_code(stack)
    writes: list[str] = []
    write = SecretStore.write

    def record(self: SecretStore, secret_id: str, text: str, **kwargs: Any) -> str:
        writes.append(secret_id)
        return write(self, secret_id, text, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SecretStore, "write", record)
        approve_pending(stack)
        result = poll(stack)
    assert result["status"] == "authorized", result
    assert writes == [REFRESH_SECRET, SERVICE_SECRET]  # the credential first
    secret = stack.refresh_document()
    assert secret.pending is None
    assert secret.credential is not None
    assert secret.credential.status == "active"
    assert secret.credential.reauthorize_by == pytest.approx(
        secret.credential.authorized_at + 30 * 86400
    )
    assert stack.emulator.refresh_token_valid(secret.credential.refresh_token)
    assert stack.published_token_works()
    captured = capsys.readouterr()
    output = captured.out
    assert code not in output
    assert user_code not in output  # whoever reads the logs could approve it first
    for value in secret_values(stack):
        assert value not in output
        assert value not in str(result)
    # At INFO and DEBUG: every record, and every secret that crossed the wire (the device and
    # user codes, the raw tokens, the service token).
    assert {"device_code", "user_code", "refresh_token", "token"} <= set(log_level.wire.by_field)
    log_level.assert_clean(output, captured.err, secrets=[code, user_code, *secret_values(stack)])
    metrics = emitted_metrics(output)
    assert metrics["BootstrapAuthorized"] == [0, 1]  # start, then poll
    # The authorization clears the alarms at once, without waiting for a rotator run.
    assert metrics["AuthorizationRequired"] == [0]
    assert metrics["ServiceTokenSecondsToExpiry"] == [pytest.approx(86400, abs=5)]
    assert metrics["RefreshFamilyAgeSeconds"] == [pytest.approx(0, abs=5)]


def test_polls_keep_the_interval_across_invocations(stack: Stack) -> None:
    start(stack)
    for _ in range(4):
        assert poll(stack, max_wait_seconds=7)["status"] == "pending"
    polls = [r for r in stack.emulator.requests if r.endpoint == "device_token"]
    assert polls
    assert all(r.error == "authorization_pending" for r in polls)
    gaps = [b.at - a.at for a, b in itertools.pairwise(polls)]
    assert all(gap >= 5 for gap in gaps), gaps
    approve_pending(stack)
    assert poll(stack)["status"] == "authorized"


def test_a_poll_stops_before_the_invocation_ends(stack: Stack) -> None:
    start(stack)
    before = stack.clock.now()
    result = poll(stack)  # 120 s invocation, never approved
    assert result["status"] == "pending"
    assert stack.clock.now() - before <= 120 - 2


def test_a_second_start_while_pending_returns_the_same_code(stack: Stack) -> None:
    first = start(stack)
    second = start(stack)
    assert second["user_code"] == first["user_code"]
    assert "already pending" in second["message"]
    assert stack.emulator.counts["device_code"] == 1


def test_denial_ends_the_authorization(stack: Stack) -> None:
    first = start(stack)
    stack.emulator.deny(first["user_code"])
    result = poll(stack)
    assert result["status"] == "denied"
    assert "start again" in result["message"]
    assert stack.refresh_document().pending is None
    assert poll(stack)["status"] == "none"


def test_expiry_ends_the_authorization(stack: Stack) -> None:
    start(stack)
    stack.emulator.advance(901)
    result = poll(stack)
    assert result["status"] == "expired"
    assert "start again" in result["message"]
    assert stack.refresh_document().pending is None
    again = start(stack)
    assert again["status"] == "pending"


def test_poll_with_nothing_pending_says_so(stack: Stack) -> None:
    assert poll(stack) == {"status": "none", "message": "nothing is pending: run start first"}


def test_free_trial_uses_the_free_trial_client(stack: Stack) -> None:
    start(stack, "bootstrap-start-free-trial")
    pending = stack.refresh_document().pending
    assert pending is not None
    assert pending.client_id == stack.emulator.config.freetrial_client_id
    approve_pending(stack)
    assert poll(stack)["status"] == "authorized"
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.free_trial is True
    assert credential.client_id == stack.emulator.config.freetrial_client_id
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"


def test_free_trial_default_comes_from_the_stack(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cmstoken import runtime

    monkeypatch.setenv("FREE_TRIAL", "true")
    runtime.settings.cache_clear()
    start(stack)
    pending = stack.refresh_document().pending
    assert pending is not None
    assert pending.client_id == stack.emulator.config.freetrial_client_id


def test_a_transient_failure_while_polling_keeps_the_authorization(stack: Stack) -> None:
    start(stack)
    stack.emulator.inject("device_token", "status", times=20, status=503)
    result = poll(stack)
    assert result["status"] == "failed"
    assert "poll again" in result["message"]
    assert stack.refresh_document().pending is not None
    stack.emulator.clear_faults()
    approve_pending(stack)
    assert poll(stack)["status"] == "authorized"


def test_a_lost_poll_answer_while_pending_is_polled_again_and_the_poll_goes_on(
    stack: Stack,
) -> None:
    """SPEC 4.2b: the poll's answer was lost (the provider answered pending): the invocation
    polls once more at the interval and goes on to the approval."""
    start(stack)
    code = stack.refresh_document().pending
    assert code is not None
    stack.emulator.inject("device_token", "drop")
    stack.clock.at(12, lambda: stack.emulator.approve(code.user_code))
    result = poll(stack)
    assert result["status"] == "authorized", result
    assert device_polls(stack) == 3  # dropped, pending, the tokens
    assert stack.published_token_works()


def test_a_poll_answer_lost_with_the_tokens_fails_at_once_naming_the_lost_answer(
    stack: Stack,
) -> None:
    """The provider handed out the tokens and the answer was lost: the poll sent again meets
    the spent code, so the invocation says so and forgets the authorization (no retry)."""
    start(stack)
    approve_pending(stack)
    stack.emulator.inject("device_token", "drop")
    result = poll(stack)
    assert result["status"] == "failed", result
    assert "retry" not in result
    assert "the poll sent again was refused" in result["message"]
    assert "run start again" in result["message"]
    assert device_polls(stack) == 2
    assert stack.refresh_document().pending is None
    assert poll(stack)["status"] == "none"


def test_two_lost_poll_answers_keep_the_authorization_for_another_poll(stack: Stack) -> None:
    start(stack)
    stack.emulator.inject("device_token", "drop", times=2)
    result = poll(stack)
    assert result["status"] == "failed", result
    assert result["retry"] is True
    assert "Poll again" in result["message"]
    assert "not sent again" not in result["message"]
    assert device_polls(stack) == 2
    assert stack.refresh_document().pending is not None
    approve_pending(stack)
    assert poll(stack)["status"] == "authorized"


def test_a_refused_exchange_after_approval_keeps_the_credential_for_the_rotator(
    stack: Stack,
) -> None:
    start(stack)
    approve_pending(stack)
    stack.emulator.inject("exchange", "status", times=20, status=500)
    result = poll(stack)
    assert result["status"] == "failed"
    assert "rotator publishes it" in result["message"]
    credential = stack.refresh_document().credential
    assert credential is not None
    stack.emulator.clear_faults()
    refreshes = stack.emulator.counts["refresh"]
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == refreshes  # the stored raw token was exchanged
    assert stack.published_token_works()


def refused_first_authorization(stack: Stack) -> dict[str, Any]:
    """A first bootstrap whose new token the service refuses (the verification's 403)."""
    start(stack)
    approve_pending(stack)
    stack.emulator.inject("projects", "status", times=100, status=403)
    result = poll(stack)
    assert result["status"] == "failed", result
    return result


def test_a_first_authorization_the_service_refuses_says_what_is_true_and_what_helps(
    stack: Stack,
) -> None:
    """Nothing was published before, the rotator is refused too, and only another account,
    allowed as a new identity, gets out (issue 20); ``status`` says so until then."""
    message = refused_first_authorization(stack)["message"]
    assert "not published: the service refused the new service token" in message
    assert "no service token is published" in message
    assert "previous token" not in message
    assert "rotator publishes" not in message
    assert "the rotator's runs are refused too" in message
    assert '"allow_new_identity": true' in message
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.service_refused_at is not None
    status = stack.invoke("bootstrap", {"action": "status"})["credential"]
    assert status["status"] == "active"
    assert status["service_refused_at"] == to_iso(credential.service_refused_at)
    with pytest.raises(VerificationFailedError, match=r"; no service token is published$"):
        stack.invoke("rotator", {})
    assert stack.refresh_document().credential == credential  # the rotator keeps the note
    stack.emulator.advance(HOUR)
    stack.emulator.clear_faults()
    assert bootstrap(stack, subject="auth0|another")["status"] == "failed"  # identity pinning
    accepted = bootstrap(stack, subject="auth0|another", allow_new_identity=True)
    assert accepted["status"] == "authorized", accepted
    assert "service_refused_at" not in stack.invoke("bootstrap", {"action": "status"})["credential"]
    assert stack.published_token_works()


def test_a_token_published_after_the_refusal_answers_it(stack: Stack) -> None:
    """The account was given access: the rotator publishes, and ``status`` no longer reports
    the refusal (the note stays on the credential, older than the token)."""
    refused_first_authorization(stack)
    stack.emulator.clear_faults()
    stack.emulator.advance(60)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.service_refused_at is not None
    assert "service_refused_at" not in stack.invoke("bootstrap", {"action": "status"})["credential"]
    assert stack.published_token_works()


def test_status_reports_metadata_only(stack: Stack) -> None:
    status = stack.invoke("bootstrap", load_event("bootstrap-status"))
    assert status == {
        "credential": {
            "status": "absent",
            "authorized_at": None,
            "refreshed_at": None,
            "reauthorize_by": None,
            "service_token_expires_at": None,
        },
        "pending": None,
    }
    started = start(stack)
    status = stack.invoke("bootstrap", load_event("bootstrap-status"))
    assert status["pending"] == {
        "user_code": started["user_code"],
        "verification_uri_complete": started["verification_uri_complete"],
        "expires_at": started["expires_at"],
    }
    approve_pending(stack)
    poll(stack)
    status = stack.invoke("bootstrap", load_event("bootstrap-status"))
    assert status["pending"] is None
    assert status["credential"]["status"] == "active"
    assert status["credential"]["service_token_expires_at"] is not None
    for value in secret_values(stack):
        assert value not in str(status)


@pytest.mark.parametrize(
    "event",
    [
        {"action": "begin"},
        {},
        {"action": "start", "free_trial": "yes"},
        [],
        {"action": "poll", "max_wait_seconds": 0},
        {"action": "poll", "max_wait_seconds": -5},
        {"action": "poll", "max_wait_seconds": "30"},
        json.loads('{"action": "poll", "max_wait_seconds": 1e400}'),
        json.loads('{"action": "poll", "max_wait_seconds": -1e400}'),
        json.loads('{"action": "poll", "max_wait_seconds": NaN}'),
        json.loads('{"action": "poll", "max_wait_seconds": Infinity}'),
        {"action": "poll", "max_wait_seconds": 10**400},
    ],
)
def test_bad_events_are_refused(
    stack: Stack, event: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused with the project's error, one clear line, and counted like any failure."""
    with pytest.raises(ConfigurationError, match="bootstrap event") as info:
        stack.invoke("bootstrap", event)
    assert "\n" not in str(info.value)
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics.get("BootstrapFailed") == [1.0], metrics


# --- re-authorization, and never writing at once with the rotator ---------------------------


def test_reauthorizing_over_an_active_credential_leaves_it_working_until_approved(
    stack: Stack,
) -> None:
    stack.seed()
    old = stack.newest_refresh_token()
    stack.emulator.advance(19 * HOUR)
    start(stack)
    assert stack.newest_refresh_token() == old
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.refresh_document().pending is not None  # the rotator kept it
    approve_pending(stack)
    assert poll(stack)["status"] == "authorized"
    new = stack.newest_refresh_token()
    assert stack.emulator.refresh_token_valid(new)
    assert stack.invoke("rotator", {})["outcome"] == "skipped"
    stack.emulator.advance(601)
    assert stack.invoke("rotator", {"force": True})["outcome"] == "rotated"
    assert stack.published_token_works()


def test_reauthorizing_after_reauthorization_required_recovers(stack: Stack) -> None:
    stack.seed()
    stack.emulator.revoke_family(stack.newest_refresh_token())
    stack.emulator.advance(19 * HOUR)
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})
    start(stack)
    approve_pending(stack)
    assert poll(stack)["status"] == "authorized"
    assert stack.service_document().credential_status == "active"
    assert stack.invoke("rotator", {})["outcome"] == "skipped"
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.published_token_works()


def test_a_start_during_a_rotation_is_kept_and_the_rotation_too(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.seed()
    stack.emulator.advance(19 * HOUR)
    original = IdentityClient.refresh

    def start_meanwhile(self: IdentityClient, **kwargs: Any) -> Any:
        start(stack)  # the operator starts a bootstrap while the rotator is refreshing
        return original(self, **kwargs)

    monkeypatch.setattr(IdentityClient, "refresh", start_meanwhile)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    secret = stack.refresh_document()
    assert secret.pending is not None
    assert secret.credential is not None
    assert stack.emulator.refresh_token_valid(secret.credential.refresh_token)


def test_an_approval_during_a_rotation_wins_and_is_never_clobbered(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.seed()
    old = stack.newest_refresh_token()
    stack.emulator.advance(19 * HOUR)
    start(stack)
    approve_pending(stack)
    original = IdentityClient.refresh
    results: list[dict[str, Any]] = []

    def authorize_meanwhile(self: IdentityClient, **kwargs: Any) -> Any:
        if kwargs["refresh_token"] == old and not results:
            results.append(poll(stack))  # the bootstrap stores and publishes a new credential
        return original(self, **kwargs)

    monkeypatch.setattr(IdentityClient, "refresh", authorize_meanwhile)
    outcome = stack.invoke("rotator", {})
    assert results[0]["status"] == "authorized"
    assert outcome["outcome"] in ("skipped", "rotated")
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.refresh_token != old
    assert stack.emulator.refresh_token_valid(credential.refresh_token)
    assert stack.published_token_works()


# --- a re-authorization never clobbers a working credential ---------------------------------


def secret_texts(stack: Stack) -> tuple[str, str]:
    """Both secrets' current values, exactly as stored."""
    refresh, service = (
        stack.secretsmanager.get_secret_value(SecretId=secret)["SecretString"]
        for secret in (REFRESH_SECRET, SERVICE_SECRET)
    )
    return refresh, service


def bootstrap(stack: Stack, *, subject: str | None = None, **start_fields: Any) -> dict[str, Any]:
    """start, approve (as ``subject``, the emulator's user by default), poll."""
    started = stack.invoke("bootstrap", {"action": "start", **start_fields})
    assert started["status"] == "pending", started
    stack.emulator.approve(started["user_code"], subject=subject)
    return poll(stack)


@pytest.mark.parametrize(
    ("endpoint", "status", "reason"),
    [
        ("exchange", 500, "failed to get service token"),
        ("projects", 403, "refused the new service token"),
    ],
    ids=["refused-exchange", "refused-verification"],
)
def test_a_refused_reauthorization_leaves_both_secrets_byte_for_byte_as_they_were(
    stack: Stack,
    log_level: LogScan,
    capsys: pytest.CaptureFixture[str],
    endpoint: str,
    status: int,
    reason: str,
) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    stack.emulator.advance(HOUR)
    before = secret_texts(stack)
    old = stack.newest_refresh_token()
    started = start(stack)
    stack.emulator.approve(started["user_code"])
    stack.emulator.inject(endpoint, "status", times=20, status=status, description=reason)
    result = poll(stack)
    assert result["status"] == "failed", result
    assert reason in result["message"]
    assert "unchanged" in result["message"]
    assert secret_texts(stack) == before  # the pending authorization and the candidate are gone
    stack.emulator.clear_faults()
    assert stack.emulator.refresh_token_valid(old)
    assert stack.published_token_works()
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"  # the old credential still works
    assert start(stack)["status"] == "pending"  # and a new attempt can start at once
    captured = capsys.readouterr()
    output = captured.out
    assert started["user_code"] not in output
    for value in secret_values(stack):
        assert value not in output
    # The refused candidate's tokens were never stored: the wire knows them.
    log_level.assert_clean(output, captured.err, secrets=secret_values(stack))


@pytest.mark.parametrize(
    ("fault", "params"),
    [
        ("status", {"status": 500, "description": "Injected failure."}),
        ("status", {"status": 502}),
        ("status", {"status": 503}),
        ("status", {"status": 504}),
        ("rate_limit", {"retry_after": 1}),
        ("drop", {}),
    ],
    ids=["500-undocumented", "502", "503", "504", "429", "dropped-connection"],
)
def test_a_transient_exchange_failure_keeps_an_approved_reauthorization(
    stack: Stack, fault: str, params: dict[str, Any]
) -> None:
    """Only the service's documented refusal drops a new authorization: a service that is
    down, busy or unreachable keeps it for the next poll, and the message says what happened
    instead of blaming the account."""
    assert bootstrap(stack)["status"] == "authorized"
    stack.emulator.advance(HOUR)
    old = stack.newest_refresh_token()
    started = start(stack)
    stack.emulator.approve(started["user_code"])
    stack.emulator.inject("exchange", fault, times=50, **params)
    result = poll(stack)
    assert result["status"] == "failed", result
    assert "kept" in result["message"]
    assert "poll again" in result["message"]
    assert "account" not in result["message"]
    secret = stack.refresh_document()
    assert secret.candidate is not None  # the approval is kept
    assert secret.credential is not None
    assert secret.credential.refresh_token == old
    stack.emulator.clear_faults()
    assert poll(stack)["status"] == "authorized"
    promoted = stack.refresh_document()
    assert promoted.candidate is None
    assert promoted.credential == secret.candidate.credential
    assert stack.published_token_works()


def test_a_verified_reauthorization_replaces_the_credential_refresh_secret_first(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    old = stack.newest_refresh_token()
    stack.emulator.advance(HOUR)
    start(stack)
    approve_pending(stack)
    writes = record_secret_writes(monkeypatch)
    result = poll(stack)
    assert result["status"] == "authorized", result
    # the candidate, its promotion once verified, then the published token
    assert writes == [REFRESH_SECRET, REFRESH_SECRET, SERVICE_SECRET]
    secret = stack.refresh_document()
    assert secret.candidate is None
    assert secret.pending is None
    assert secret.credential is not None
    assert secret.credential.refresh_token != old
    assert secret.credential.authorized_at == pytest.approx(stack.clock.now(), abs=5)
    assert stack.published_token_works()
    assert stack.service_document().authorized_at == secret.credential.authorized_at


# --- polling until 2 s before the deadline --------------------------------------------------


def device_polls(stack: Stack) -> int:
    return stack.emulator.counts["device_token"]


def test_a_poll_invocation_with_6_seconds_left_still_polls(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(stack)
    stack.emulator.advance(5)  # the first poll's time has come
    writes = record_secret_writes(monkeypatch)
    before = stack.clock.now()
    result = poll(stack, remaining_ms=6000)
    assert result["status"] == "pending"
    assert device_polls(stack) == 1
    assert stack.clock.now() - before <= 6 - 2
    assert writes == [REFRESH_SECRET]  # the next poll's time, which comes after this invocation
    stored = stack.refresh_document().pending
    assert stored is not None
    assert stored.next_poll_at >= before + 5
    # The next invocation keeps to the interval although it starts at once.
    result = poll(stack, remaining_ms=6000)
    assert result["status"] == "pending"
    polls = [r for r in stack.emulator.requests if r.endpoint == "device_token"]
    assert all(r.error == "authorization_pending" for r in polls)
    assert all(b.at - a.at >= 5 for a, b in itertools.pairwise(polls))


def test_an_approval_too_late_to_publish_is_stored_and_published_by_the_next_poll(
    stack: Stack,
) -> None:
    start(stack)
    approve_pending(stack)
    stack.emulator.advance(5)
    result = poll(stack, remaining_ms=6000)
    assert result == {"status": "pending", "approved": True, "message": result["message"]}
    assert "poll again" in result["message"]
    secret = stack.refresh_document()
    assert secret.pending is None
    assert secret.credential is not None  # a first bootstrap: stored as the credential at once
    assert stack.emulator.refresh_token_valid(secret.credential.refresh_token)
    with pytest.raises(Exception, match="ResourceNotFound"):
        stack.service_document()
    assert poll(stack)["status"] == "authorized"
    assert stack.published_token_works()
    assert poll(stack)["status"] == "none"


def test_an_approval_too_late_to_publish_is_published_by_the_rotator(stack: Stack) -> None:
    start(stack)
    approve_pending(stack)
    stack.emulator.advance(5)
    assert poll(stack, remaining_ms=6000)["approved"] is True
    refreshes = stack.emulator.counts["refresh"]
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == refreshes  # the stored raw token was exchanged
    assert stack.published_token_works()
    assert poll(stack)["status"] == "none"  # already published


def test_a_reauthorization_approved_too_late_keeps_the_old_credential_until_the_next_poll(
    stack: Stack,
) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    stack.emulator.advance(HOUR)
    before = secret_texts(stack)
    old = stack.newest_refresh_token()
    start(stack)
    approve_pending(stack)
    stack.emulator.advance(5)
    assert poll(stack, remaining_ms=6000)["approved"] is True
    secret = stack.refresh_document()
    assert secret.candidate is not None
    assert secret.credential is not None
    assert secret.credential.refresh_token == old
    assert secret_texts(stack)[1] == before[1]
    # The rotator works on the active credential meanwhile, and keeps the candidate.
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    rotated = stack.refresh_document()
    assert rotated.candidate == secret.candidate
    assert rotated.credential is not None
    assert rotated.credential.refresh_token not in (old, secret.candidate.credential.refresh_token)
    # The next poll verifies and promotes the candidate over the rotated credential.
    assert poll(stack)["status"] == "authorized"
    promoted = stack.refresh_document()
    assert promoted.candidate is None
    assert promoted.credential == secret.candidate.credential
    assert stack.published_token_works()
    assert stack.service_document().authorized_at == promoted.credential.authorized_at
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.published_token_works()


def test_a_rotation_while_a_candidate_waits_writes_at_most_3_versions(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    start(stack)
    approve_pending(stack)
    stack.emulator.advance(5)
    assert poll(stack, remaining_ms=6000)["approved"] is True
    stack.emulator.advance(19 * HOUR)
    writes = record_secret_writes(monkeypatch)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert len(writes) <= 3, writes
    assert stack.refresh_document().candidate is not None


# --- identity pinning ------------------------------------------------------------------------


def test_the_credential_records_who_authorized_it_as_a_hash(stack: Stack) -> None:
    result = bootstrap(stack)
    assert result["status"] == "authorized"
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.subject_sha256 is not None
    assert re.fullmatch(r"[0-9a-f]{64}", credential.subject_sha256)
    assert result["identity"] == credential.subject_sha256[:12]
    text = stack.secretsmanager.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"]
    assert stack.emulator.subject not in text  # only the hash is kept
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    rotated = stack.refresh_document().credential
    assert rotated is not None
    assert rotated.subject_sha256 == credential.subject_sha256  # the rotator keeps it


def test_a_reauthorization_by_the_same_identity_needs_no_flag(stack: Stack) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    stack.emulator.advance(HOUR)
    assert bootstrap(stack)["status"] == "authorized"


def test_a_different_identity_is_refused_without_the_flag_and_accepted_with_it(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    pinned = stack.refresh_document().credential
    assert pinned is not None
    stack.emulator.advance(HOUR)
    before = secret_texts(stack)
    refused = bootstrap(stack, subject="auth0|someone-else")
    assert refused["status"] == "failed"
    assert "different identity" in refused["message"]
    assert pinned.subject_sha256 is not None
    assert pinned.subject_sha256[:12] in refused["message"]
    assert "allow_new_identity" in refused["message"]
    assert "--new-identity" in refused["message"]
    assert secret_texts(stack) == before
    assert stack.published_token_works()
    # The operator means it: the flag on start lets the next approval switch identity.
    accepted = bootstrap(stack, subject="auth0|someone-else", allow_new_identity=True)
    assert accepted["status"] == "authorized", accepted
    switched = stack.refresh_document().credential
    assert switched is not None
    assert switched.subject_sha256 not in (None, pinned.subject_sha256)
    assert stack.published_token_works()
    # From now on the new identity is the pinned one.
    stack.emulator.advance(HOUR)
    assert bootstrap(stack)["status"] == "failed"
    assert bootstrap(stack, subject="auth0|someone-else")["status"] == "authorized"
    output = capsys.readouterr().out
    assert "someone-else" not in output
    assert stack.emulator.subject not in output


def test_the_flag_may_also_come_with_the_poll(stack: Stack) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    started = start(stack)
    stack.emulator.approve(started["user_code"], subject="auth0|someone-else")
    assert poll(stack, allow_new_identity=True)["status"] == "authorized"


def test_a_credential_without_a_recorded_identity_records_the_first_one(stack: Stack) -> None:
    stack.seed()  # stored before identities were kept
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.subject_sha256 is None
    assert bootstrap(stack, subject="auth0|first-seen")["status"] == "authorized"
    recorded = stack.refresh_document().credential
    assert recorded is not None
    assert recorded.subject_sha256 is not None
    stack.emulator.advance(HOUR)
    assert bootstrap(stack)["status"] == "failed"  # the emulator's default user is another


# --- version churn ---------------------------------------------------------------------------


def test_pending_polls_write_nothing_while_they_can_wait_out_the_interval(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(stack)
    writes = record_secret_writes(monkeypatch)
    for _ in range(10):
        assert poll(stack, max_wait_seconds=20)["status"] == "pending"
    assert writes == []
    polls = [r for r in stack.emulator.requests if r.endpoint == "device_token"]
    assert len(polls) >= 30
    assert all(r.error == "authorization_pending" for r in polls)
    assert all(b.at - a.at >= 5 for a, b in itertools.pairwise(polls))


def test_a_slow_down_is_stored_once(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    start(stack)
    stack.emulator.inject("device_token", "status", times=1, status=429, error="slow_down")
    writes = record_secret_writes(monkeypatch)
    assert poll(stack, max_wait_seconds=20)["status"] == "pending"
    assert writes == [REFRESH_SECRET]
    pending = stack.refresh_document().pending
    assert pending is not None
    assert pending.interval == 10
    assert poll(stack, max_wait_seconds=20)["status"] == "pending"
    assert writes == [REFRESH_SECRET]


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "refused"])
def test_a_rotation_during_the_candidates_verification_is_never_written_back(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, verified: bool
) -> None:
    from cmstoken.upstream.service import ServiceClient

    assert bootstrap(stack)["status"] == "authorized"
    stack.emulator.advance(19 * HOUR)  # a rotation is due
    start(stack)
    approve_pending(stack)
    original = ServiceClient.list_projects
    rotations: list[dict[str, Any]] = []

    def rotate_meanwhile(self: ServiceClient, token: str, **kwargs: Any) -> Any:
        if not rotations:
            rotations.append({})
            rotations[0] = stack.invoke("rotator", {})  # while the bootstrap verifies
            if not verified:
                stack.emulator.inject("projects", "status", times=20, status=403)
        return original(self, token, **kwargs)

    monkeypatch.setattr(ServiceClient, "list_projects", rotate_meanwhile)
    result = poll(stack)
    assert rotations[0]["outcome"] == "rotated"
    secret = stack.refresh_document()
    assert secret.candidate is None
    assert secret.credential is not None
    assert stack.emulator.refresh_token_valid(secret.credential.refresh_token)
    if verified:
        assert result["status"] == "authorized", result
        assert stack.service_document().authorized_at == secret.credential.authorized_at
    else:
        assert result["status"] == "failed", result
        # the rotated credential and its published token, not the ones before the rotation
        assert secret.credential.refreshed_at > secret.credential.authorized_at
        stack.emulator.clear_faults()
    assert stack.published_token_works()
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.published_token_works()


def test_a_candidate_survives_a_crash_and_the_next_poll_finishes_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cmstoken.rotation.publishing import Publisher

    assert bootstrap(stack)["status"] == "authorized"
    old = stack.newest_refresh_token()
    published = stack.service_document()
    start(stack)
    approve_pending(stack)

    class Crash(BaseException):
        """The function dies (timeout, out of memory) right after storing the candidate."""

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(Publisher, "publish", crash)
        with pytest.raises(Crash):
            poll(stack)
    secret = stack.refresh_document()
    assert secret.candidate is not None  # persisted before the exchange
    assert secret.credential is not None
    assert secret.credential.refresh_token == old  # still the one in use
    assert stack.service_document() == published
    status = stack.invoke("bootstrap", load_event("bootstrap-status"))
    assert status["credential"]["status"] == "active"
    assert poll(stack)["status"] == "authorized"
    finished = stack.refresh_document()
    assert finished.candidate is None
    assert finished.credential == secret.candidate.credential
    assert stack.published_token_works()


def test_pending_polls_at_a_long_interval_write_nothing_either(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.emulator.config.poll_interval = 15
    start(stack)
    writes = record_secret_writes(monkeypatch)
    for _ in range(6):
        assert poll(stack, max_wait_seconds=20)["status"] == "pending"
    assert writes == []
    polls = [r for r in stack.emulator.requests if r.endpoint == "device_token"]
    assert len(polls) >= 6
    assert all(r.error == "authorization_pending" for r in polls)
    assert all(b.at - a.at >= 15 for a, b in itertools.pairwise(polls))


def approved_too_late(stack: Stack) -> None:
    """A re-authorization approved when its poll had no time left to finish it."""
    start(stack)
    approve_pending(stack)
    stack.emulator.advance(5)
    assert poll(stack, remaining_ms=6000)["approved"] is True
    assert stack.refresh_document().candidate is not None


def test_a_new_start_drops_an_unfinished_candidate(stack: Stack) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    credential = stack.refresh_document().credential
    approved_too_late(stack)
    assert start(stack)["status"] == "pending"
    secret = stack.refresh_document()
    assert secret.candidate is None
    assert secret.pending is not None
    assert secret.credential == credential


def test_a_candidate_whose_access_token_expired_is_dropped(stack: Stack) -> None:
    assert bootstrap(stack)["status"] == "authorized"
    before = secret_texts(stack)
    approved_too_late(stack)
    stack.emulator.advance(86400)
    result = poll(stack)
    assert result["status"] == "failed"
    assert "run start again" in result["message"]
    assert secret_texts(stack) == before
