"""The bootstrap function against the emulator (over HTTP) and moto: start, poll, status, and
living next to the rotator."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from cmstoken.errors import ConfigurationError, ReauthorizationRequiredError
from cmstoken.identity import IdentityClient
from cmstoken.store import SecretStore
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack, approve_pending, secret_values
from support import emitted_metrics, load_event

pytestmark = pytest.mark.integration

HOUR = 3600
USER_CODE = re.compile(r"^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")


def start(stack: Stack, sample: str = "bootstrap-start") -> dict[str, Any]:
    result: dict[str, Any] = stack.invoke("bootstrap", load_event(sample))
    return result


def poll(stack: Stack, **fields: Any) -> dict[str, Any]:
    result: dict[str, Any] = stack.invoke("bootstrap", {**load_event("bootstrap-poll"), **fields})
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
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    start(stack)
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
    output = capsys.readouterr().out
    assert code not in output
    for value in secret_values(stack):
        assert value not in output
        assert value not in str(result)
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
    ],
)
def test_bad_events_are_refused(stack: Stack, event: Any) -> None:
    with pytest.raises(ConfigurationError, match="bootstrap event"):
        stack.invoke("bootstrap", event)


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
