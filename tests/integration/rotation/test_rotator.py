"""The rotator against the emulator (over HTTP) and moto: SPEC section 4, guarantee by guarantee."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from cmstoken import runtime
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import CredentialVault
from cmstoken.core.errors import (
    CmsTokenError,
    ConfigurationError,
    InsufficientTimeError,
    LeaseHeldError,
    NotBootstrappedError,
    ReauthorizationRequiredError,
    ServerError,
    VerificationFailedError,
)
from cmstoken.rotation.rotator import Rotator
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.service import ServiceClient
from harness import (
    REFRESH_SECRET,
    SERVICE_SECRET,
    Stack,
    secret_values,
)
from support import LogScan, emitted_metrics, load_event, replayed_refresh_tokens

pytestmark = pytest.mark.integration

HOUR = 3600


class SimulatedCrash(BaseException):
    """The process dies here (not an ``Exception``: nothing in the product may catch it)."""


def assert_healthy(stack: Stack) -> None:
    """The stored refresh token is the family's newest and usable, the published token is
    accepted, and no used refresh token was ever presented again."""
    newest = stack.newest_refresh_token()
    assert stack.emulator.refresh_token_valid(newest)
    assert not stack.emulator.family_revoked(newest)
    assert stack.published_token_works()
    assert replayed_refresh_tokens(stack.emulator.requests) == []


def make_due(stack: Stack) -> None:
    """Move the clock so that the service token is inside the refresh margin."""
    stack.emulator.advance(19 * HOUR)


# --- refresh only when due (guarantee 6) and the trigger events -----------------------------


def test_a_no_op_check_makes_one_aws_call_and_no_upstream_call(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    before = stack.emulator.counts
    result = stack.invoke("rotator", load_event("rotator-scheduled"))
    assert result["outcome"] == "skipped"
    assert result["reason"] == "service token is fresh"
    assert stack.aws_calls == Counter({"GetSecretValue": 1})
    assert stack.emulator.counts == before
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["RotationSkipped"] == [1]
    assert metrics["RotationSucceeded"] == [0]
    assert metrics["RotationFailed"] == [0]
    assert metrics["AuthorizationRequired"] == [0]
    assert metrics["ServiceTokenSecondsToExpiry"] == [pytest.approx(86400, abs=5)]
    assert metrics["SecondsUntilReauthorization"] == [pytest.approx(30 * 86400, abs=5)]


def test_a_classic_scheduled_rule_event_is_a_scheduled_run(stack: Stack) -> None:
    stack.seed()
    assert stack.invoke("rotator", load_event("rotator-scheduled-rule"))["outcome"] == "skipped"
    assert stack.emulator.counts["refresh"] == 0


def test_a_due_run_rotates_with_only_the_calls_the_guarantees_need(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    old_refresh = stack.newest_refresh_token()
    old_token = stack.service_document().token
    make_due(stack)
    result = stack.invoke("rotator", load_event("rotator-scheduled"))
    assert result["outcome"] == "rotated"
    assert result["refreshed"] is True
    assert_healthy(stack)
    assert stack.newest_refresh_token() != old_refresh
    assert not stack.emulator.refresh_token_valid(old_refresh)
    document = stack.service_document()
    assert document.token != old_token
    assert document.expires_at == pytest.approx(stack.clock.now() + 86400, abs=5)
    assert document.api_url == stack.emulator.api_url
    stored = stack.refresh_document()
    assert stored.raw_access_token is not None
    # The lease covers the exchange and publication and ends with the invocation (+30 s).
    assert stored.lease is not None
    assert stored.lease.expires_at <= stack.clock.now() + 120 + 30
    counts = stack.emulator.counts
    assert (counts["refresh"], counts["exchange"], counts["projects"]) == (1, 2, 1)
    # read published, read credential, count its versions, claim, store the rotation, publish
    assert stack.aws_calls == Counter(
        {"GetSecretValue": 2, "ListSecretVersionIds": 1, "PutSecretValue": 3}
    )
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["RotationSucceeded"] == [1]
    # The token was refreshed in this run: its age is the run's own seconds since the refresh
    # (the stack's clock keeps real time; a busy machine takes a second or more), not hours.
    [age] = metrics["RefreshTokenAgeSeconds"]
    assert 0 <= age <= 30


def test_forced_runs_are_debounced_by_the_minimum_interval(stack: Stack) -> None:
    stack.seed()
    before = stack.emulator.counts
    result = stack.invoke("rotator", load_event("rotator-force"))
    assert result["outcome"] == "skipped"
    assert "debounced" in result["reason"]
    assert stack.aws_calls == Counter({"GetSecretValue": 1})
    assert stack.emulator.counts == before
    stack.emulator.advance(601)
    assert stack.invoke("rotator", load_event("rotator-force"))["outcome"] == "rotated"
    assert_healthy(stack)


def assert_forced_run_debounced(stack: Stack) -> dict[str, int]:
    """A minute later, a forced run is skipped as debounced, with no upstream call at all;
    returns the emulator's counts."""
    stack.emulator.advance(60)
    before = stack.emulator.counts
    result = stack.invoke("rotator", load_event("rotator-force"))
    assert result["outcome"] == "skipped"
    assert "debounced" in result["reason"]
    assert stack.emulator.counts == before  # no call to the identity provider, nor any other
    return before


def test_a_forced_run_is_debounced_by_the_credentials_refresh_when_the_document_predates_it(
    stack: Stack,
) -> None:
    """A published document written before ``refreshed_at`` existed says nothing about the last
    refresh: the credential's own ``refreshed_at`` (the bootstrap, here) debounces."""
    stack.seed()
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
    )
    del document["refreshed_at"]
    stack.secretsmanager.put_secret_value(
        SecretId=SERVICE_SECRET, SecretString=json.dumps(document)
    )
    assert stack.service_document().refreshed_at is None
    before = assert_forced_run_debounced(stack)
    assert stack.refresh_document().lease is None
    stack.emulator.advance(541)  # 601 s after the bootstrap
    result = stack.invoke("rotator", load_event("rotator-force"))
    assert result["outcome"] == "rotated"
    assert result["refreshed"] is True
    assert stack.emulator.counts["refresh"] == before["refresh"] + 1
    assert_healthy(stack)


def test_a_forced_run_is_debounced_by_a_stored_refresh_whose_publication_failed(
    stack: Stack,
) -> None:
    """A forced refresh was stored but not published (its answer had no usable access token):
    the published document still carries the older ``refreshed_at``, so only the credential's
    says that a refresh happened a minute ago. A second forced run within the interval must not
    refresh again."""
    stack.seed()
    stack.emulator.advance(700)  # the published document's refreshed_at is out of the interval
    stack.emulator.inject("refresh", "rewrite", drop=["access_token"])
    with pytest.raises(CmsTokenError, match="new refresh token is stored"):
        stack.invoke("rotator", load_event("rotator-force"))
    credential = stack.refresh_document().credential
    assert credential is not None
    published = stack.service_document()
    assert published.refreshed_at is not None
    assert credential.refreshed_at - published.refreshed_at == pytest.approx(700, abs=5)
    before = assert_forced_run_debounced(stack)
    assert stack.refresh_document().credential == credential
    stack.emulator.advance(541)  # 601 s after the stored refresh
    result = stack.invoke("rotator", load_event("rotator-force"))
    assert result["outcome"] == "rotated"
    assert result["refreshed"] is True
    assert stack.emulator.counts["refresh"] == before["refresh"] + 1
    assert_healthy(stack)


def test_a_refresh_request_event_forces_a_run_and_duplicates_are_no_ops(stack: Stack) -> None:
    stack.seed()
    stack.emulator.advance(700)
    event = load_event("rotator-refresh-requested")
    assert stack.invoke("rotator", event)["outcome"] == "rotated"
    duplicate = stack.invoke("rotator", event)
    assert duplicate["outcome"] == "skipped"
    assert stack.emulator.counts["refresh"] == 1
    assert_healthy(stack)


def test_an_unexpected_exception_counts_as_a_failed_run_and_its_message_is_not_logged(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug or a library error is still a failed run for the alarms; its message may quote
    data (``int("eyJ...")`` quotes its argument), so only its type reaches the log."""
    stack.seed()
    leaked = "eyJ.not-to-be-logged"

    def broken(**_: Any) -> Any:
        raise ValueError(f"invalid literal for int() with base 10: {leaked!r}")

    monkeypatch.setattr(runtime.store().client, "get_secret_value", broken)
    with pytest.raises(ValueError, match="invalid literal"):
        stack.invoke("rotator", {})
    output = capsys.readouterr().out
    assert leaked not in output
    assert "rotation failed unexpectedly" in output
    metrics = emitted_metrics(output)
    assert metrics["RotationFailed"] == [1]
    assert "AuthorizationRequired" not in metrics


@pytest.mark.parametrize("event", [{"force": "true"}, {"force": 1}, [], "force"])
def test_malformed_events_are_refused_clearly(
    stack: Stack, event: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    with pytest.raises(ConfigurationError, match="rotator event"):
        stack.invoke("rotator", event)
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["RotationFailed"] == [1]
    assert "AuthorizationRequired" not in metrics  # the run never learned the credential's state
    assert stack.emulator.counts["refresh"] == 0


@pytest.mark.parametrize("published", ["", "not json", '{"schema_version": 1, "token": 5}'])
def test_a_missing_or_unreadable_service_token_is_due(stack: Stack, published: str) -> None:
    stack.seed()
    if published:
        stack.secretsmanager.put_secret_value(SecretId=SERVICE_SECRET, SecretString=published)
    else:
        stack.secretsmanager.delete_secret(SecretId=SERVICE_SECRET, ForceDeleteWithoutRecovery=True)
        stack.secretsmanager.create_secret(Name=SERVICE_SECRET)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert_healthy(stack)


def test_not_bootstrapped_fails_clearly_without_upstream_calls(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(NotBootstrappedError, match="run the bootstrap"):
        stack.invoke("rotator", {})
    assert sum(stack.emulator.counts.values()) == 0
    metrics = emitted_metrics(capsys.readouterr().out)
    # A person must authorize: that is AuthorizationRequired's incident, not a failed rotation
    # that a retry could repair, and there is no token whose expiry could be reported.
    assert metrics["NotBootstrapped"] == [1]
    assert metrics["AuthorizationRequired"] == [1]
    assert metrics["RotationFailed"] == [0]
    assert "ServiceTokenSecondsToExpiry" not in metrics


# --- crash at every step boundary (guarantees 1, 2, 4) --------------------------------------


def crash_after(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, when: Callable[..., bool]
) -> None:
    """Make ``owner.name`` do its work and then crash the process, once: on the first call for
    which ``when(*args, **kwargs)``, judged before the call, is true."""
    original = getattr(owner, name)
    fired = threading.Event()

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        crash = not fired.is_set() and when(*args, **kwargs)
        result = original(self, *args, **kwargs)
        if crash:
            fired.set()
            raise SimulatedCrash(name)
        return result

    monkeypatch.setattr(owner, name, wrapper)


def stored_refresh_token(stack: Stack) -> str | None:
    credential = stack.refresh_document().credential
    return credential.refresh_token if credential else None


def crash_point(stack: Stack, point: str) -> tuple[Any, str, Callable[..., bool]]:
    """Where each step boundary is: the call that ends the step, and which call it is."""

    def refresh_write(secret_id: str, text: str, **_: Any) -> dict[str, Any] | None:
        return json.loads(text) if secret_id == REFRESH_SECRET else None

    def is_claim(secret_id: str, text: str, **kwargs: Any) -> bool:
        document = refresh_write(secret_id, text)
        return bool(document and document["refresh_token"] == stored_refresh_token(stack))

    def is_rotation_write(secret_id: str, text: str, **kwargs: Any) -> bool:
        document = refresh_write(secret_id, text)
        return bool(document and document["refresh_token"] != stored_refresh_token(stack))

    def is_publish(secret_id: str, text: str, **_: Any) -> bool:
        return secret_id == SERVICE_SECRET

    return {
        "after the claim": (SecretStore, "write", is_claim),
        "after the write": (SecretStore, "write", is_rotation_write),
        "after the exchange": (ServiceClient, "exchange", lambda *a, **k: True),
        "after verification": (ServiceClient, "list_projects", lambda *a, **k: True),
        "after publishing": (SecretStore, "write", is_publish),
    }[point]


CRASH_POINTS = [
    "after the claim",
    "after the write",
    "after the exchange",
    "after verification",
    "after publishing",
]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_at_a_step_boundary_loses_nothing(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    stack.seed()
    make_due(stack)
    owner, name, when = crash_point(stack, point)
    with monkeypatch.context() as patch:
        crash_after(patch, owner, name, when)
        with pytest.raises(SimulatedCrash):
            stack.invoke("rotator", {})
    refreshes = stack.emulator.counts["refresh"]
    stack.emulator.advance(HOUR)  # the next scheduled run
    result = stack.invoke("rotator", {})
    assert result["outcome"] in ("rotated", "skipped")
    assert_healthy(stack)
    if point in ("after the write", "after the exchange", "after verification"):
        # The stored raw access token is exchanged: no second refresh is spent.
        assert stack.emulator.counts["refresh"] == refreshes == 1
        assert result["outcome"] == "rotated"
        assert result["refreshed"] is False
    if point == "after publishing":
        assert result["outcome"] == "skipped"
    assert stack.invoke("rotator", {})["outcome"] == "skipped"


def test_a_crash_between_the_refresh_answer_and_the_write_is_the_residual_window(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.seed()
    make_due(stack)
    with monkeypatch.context() as patch:
        crash_after(patch, IdentityClient, "refresh", lambda *a, **k: True)
        with pytest.raises(SimulatedCrash):
            stack.invoke("rotator", {})
    stack.emulator.advance(HOUR)
    # The used refresh token is all that is stored: the identity provider revokes the family,
    # the run reports it, and later runs do not call the identity provider again.
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.status == "reauthorization_required"
    calls = stack.emulator.counts["refresh"]
    stack.emulator.advance(HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "reauthorization_required"
    assert stack.emulator.counts["refresh"] == calls


def test_the_residual_window_is_recovered_when_the_provider_allows_a_reuse_interval(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.emulator.config.refresh_reuse_interval = 2 * HOUR
    stack.seed()
    make_due(stack)
    with monkeypatch.context() as patch:
        crash_after(patch, IdentityClient, "refresh", lambda *a, **k: True)
        with pytest.raises(SimulatedCrash):
            stack.invoke("rotator", {})
    stack.emulator.advance(HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    newest = stack.newest_refresh_token()
    assert stack.emulator.refresh_token_valid(newest)
    assert stack.published_token_works()


# --- one writer at a time (guarantee 3) -----------------------------------------------------


def unreserved(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack deployed with RotatorReservedConcurrency=0: invocations may overlap."""
    monkeypatch.setenv("ROTATOR_RESERVED_CONCURRENCY", "0")
    runtime.settings.cache_clear()


def test_two_overlapping_invocations_refresh_exactly_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without reserved concurrency two invocations overlap: one refreshes; the other meets
    its lease and skips (the refresh stored) or fails for Lambda to retry (not yet stored)."""
    unreserved(monkeypatch)
    stack.seed()
    make_due(stack)
    barrier = threading.Barrier(2, timeout=10)
    original = CredentialVault.read_refresh
    first_reads: set[int] = set()

    def read_then_wait(self: CredentialVault, deadline: float) -> Any:
        snapshot = original(self, deadline)
        if id(self) not in first_reads:
            first_reads.add(id(self))
            barrier.wait()  # both have read the same version before either claims
        return snapshot

    monkeypatch.setattr(CredentialVault, "read_refresh", read_then_wait)
    results: list[Any] = []

    def invoke() -> None:
        try:
            results.append(stack.invoke("rotator", {}))
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=invoke) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    outcomes = sorted(r["outcome"] if isinstance(r, dict) else type(r).__name__ for r in results)
    assert outcomes in (["rotated", "skipped"], ["LeaseHeldError", "rotated"]), results
    assert stack.emulator.counts["refresh"] == 1
    assert_healthy(stack)


def claim_as_another_invocation(stack: Stack) -> None:
    """A lease over the stored token, as an invocation that claimed and then died leaves it."""
    now = stack.clock.now()
    rotator = Rotator(
        runtime.settings(),
        store=runtime.store(),
        service=runtime.service(),
        clock=stack.clock,
        owner="other-invocation",
    )
    snapshot = rotator.vault.read_refresh(now + 120)
    credential = snapshot.secret.credential
    assert credential is not None
    rotator._claim(snapshot, now + 120, credential)


def test_a_lease_whose_holder_ended_is_taken_over(stack: Stack) -> None:
    """Reserved concurrency 1: a lease of another invocation means it has ended, maybe after
    spending the stored token: the run presents it at once instead of returning success."""
    stack.seed()
    make_due(stack)
    claim_as_another_invocation(stack)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == 1
    assert_healthy(stack)


def test_a_live_lease_of_a_maybe_running_invocation_fails_the_run_for_lambda_to_retry(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without reserved concurrency the holder may still be refreshing: presenting its token
    beside it would be a reuse, and skipping would return success over a token it may have
    spent. The run fails, so that Lambda retries it; once the lease lapses a run refreshes."""
    unreserved(monkeypatch)
    stack.seed()
    make_due(stack)
    claim_as_another_invocation(stack)
    with pytest.raises(LeaseHeldError, match="Lambda retries"):
        stack.invoke("rotator", {})
    assert stack.emulator.counts["refresh"] == 0
    stack.emulator.advance(151)  # the lease ends 30 s after its invocation's deadline
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert_healthy(stack)


def test_a_live_lease_over_a_stored_refresh_is_skipped(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without reserved concurrency, a lease whose holder already stored its refresh risks
    nothing: the holder may be publishing, so the run skips (a duplicate delivery's no-op)."""
    unreserved(monkeypatch)
    stack.seed()
    make_due(stack)
    claim_as_another_invocation(stack)
    document = stack.refresh_document()
    credential = document.credential
    assert credential is not None
    rotated = replace(credential, refresh_token=stack.emulator.issue_tokens()["refresh_token"])
    store = runtime.store()
    store.write(
        REFRESH_SECRET,
        replace(document, credential=rotated).to_json(),
        replacing=store.read(REFRESH_SECRET).version_id,
    )
    result = stack.invoke("rotator", {})
    assert result == {**result, "outcome": "skipped", "reason": "another rotation holds the lease"}
    assert stack.emulator.counts["refresh"] == 0


# --- exchange and verification failures (guarantee 4) ---------------------------------------


def test_a_failed_exchange_keeps_the_rotated_token_and_the_old_service_token(
    stack: Stack,
) -> None:
    stack.seed()
    old = stack.service_document()
    make_due(stack)
    stack.emulator.inject("exchange", "status", times=50, status=500)
    with pytest.raises(ServerError, match="exchange"):
        stack.invoke("rotator", {})
    assert stack.service_document() == old
    assert stack.emulator.service_token_valid(old.token)
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    stack.emulator.clear_faults()
    refreshes = stack.emulator.counts["refresh"]
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == refreshes  # only the exchange was retried
    assert_healthy(stack)


def test_a_refused_verification_fails_the_run_and_keeps_the_old_token(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    old = stack.service_document()
    make_due(stack)
    stack.emulator.inject("projects", "status", status=401)
    with pytest.raises(VerificationFailedError, match="previous token stays published"):
        stack.invoke("rotator", {})
    assert stack.service_document() == old
    assert emitted_metrics(capsys.readouterr().out)["RotationFailed"] == [1]
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert_healthy(stack)


# --- classify failures (guarantee 5) --------------------------------------------------------


def test_invalid_grant_marks_reauthorization_and_later_runs_stay_quiet(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    stack.emulator.revoke_family(stack.newest_refresh_token())
    make_due(stack)
    with pytest.raises(ReauthorizationRequiredError, match="run the bootstrap"):
        stack.invoke("rotator", {})
    output = capsys.readouterr().out
    assert "reauthorization required" in output
    metrics = emitted_metrics(output)
    assert metrics["ReauthorizationRequired"] == [1]
    assert metrics["AuthorizationRequired"] == [1]
    assert metrics["RotationFailed"] == [0]
    assert "ServiceTokenSecondsToExpiry" not in metrics  # the incident is the authorization
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.status == "reauthorization_required"
    assert stack.service_document().credential_status == "reauthorization_required"
    calls = sum(stack.emulator.counts.values())
    for _ in range(3):
        stack.emulator.advance(HOUR)
        result = stack.invoke("rotator", {})
        assert result["outcome"] == "reauthorization_required"
    assert sum(stack.emulator.counts.values()) == calls
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["ReauthorizationRequired"] == [1, 1, 1]
    assert metrics["AuthorizationRequired"] == [1, 1, 1]
    assert metrics["RotationFailed"] == [0, 0, 0]
    assert "ServiceTokenSecondsToExpiry" not in metrics


def test_invalid_client_is_terminal_too(stack: Stack) -> None:
    stack.seed()
    document = json.loads(
        stack.secretsmanager.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"]
    )
    document["client_id"] = "unknown-client"
    stack.secretsmanager.put_secret_value(
        SecretId=REFRESH_SECRET, SecretString=json.dumps(document)
    )
    make_due(stack)
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})
    assert stack.emulator.counts["refresh"] == 1


def test_invalid_grant_after_another_writer_replaced_the_credential_ends_in_success(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.seed()
    old = stack.newest_refresh_token()
    stack.emulator.revoke_family(old)
    make_due(stack)
    original = IdentityClient.refresh

    def bootstrap_meanwhile(self: IdentityClient, **kwargs: Any) -> Any:
        if kwargs["refresh_token"] == old:
            stack.seed()  # an operator re-authorized while this run was refreshing
        return original(self, **kwargs)

    monkeypatch.setattr(IdentityClient, "refresh", bootstrap_meanwhile)
    result = stack.invoke("rotator", {})
    assert result["outcome"] in ("skipped", "rotated")
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.status == "active"
    assert credential.refresh_token != old
    assert stack.emulator.refresh_token_valid(credential.refresh_token)
    assert stack.published_token_works()


@pytest.mark.parametrize("status", [502, 504])
def test_a_gateway_error_on_the_refresh_is_presented_again_once(stack: Stack, status: int) -> None:
    """A gateway's 502 or 504 says nothing of whether the provider behind it acted: no answer
    can come any more, so the token goes again at once, once; a second gateway error fails the
    run with its lease given back, for Lambda's retry to present it."""
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "status", times=3, status=status)
    with pytest.raises(ServerError):
        stack.invoke("rotator", {})
    assert stack.emulator.counts["refresh"] == 2
    assert stack.refresh_document().lease is None


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_on_the_refresh_is_retried_with_backoff(stack: Stack, status: int) -> None:
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "status", times=2, status=status)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.emulator.counts["refresh"] == 3
    assert len([s for s in stack.clock.sleeps if s > 0]) >= 2
    assert_healthy(stack)


def test_429_waits_as_long_as_retry_after_says(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "rate_limit", retry_after=7)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert 7.0 in stack.clock.sleeps
    assert_healthy(stack)


def test_429_waits_until_x_ratelimit_reset(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    stack.emulator.inject("refresh", "rate_limit", reset_in=9)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert any(9 <= s < 10 for s in stack.clock.sleeps), stack.clock.sleeps  # reset is whole s
    assert_healthy(stack)


def test_timeouts_on_the_exchange_and_verification_are_retried(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.seed()
    transport = runtime.service().transport
    send = transport.request

    def short_limits(*args: Any, **kwargs: Any) -> Any:
        # Only the exchange and the listing get a short limit (sending them again is safe).
        if kwargs["endpoint"] in ("exchange", "projects"):
            kwargs["time_limit"] = 0.2
        return send(*args, **kwargs)

    monkeypatch.setattr(transport, "request", short_limits)
    make_due(stack)
    stack.emulator.inject("exchange", "delay", seconds=0.6)
    stack.emulator.inject("projects", "delay", seconds=0.6)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert_healthy(stack)


def test_transient_failures_stop_before_the_invocation_runs_out(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    stack.emulator.inject("exchange", "status", times=1000, status=503)
    start = stack.clock.now()
    with pytest.raises(ServerError):
        stack.invoke("rotator", {}, remaining_ms=120_000)
    assert stack.clock.now() - start < 120
    assert stack.emulator.counts["exchange"] <= 5
    # The rotated refresh token was stored before the exchange was tried.
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())


def test_no_refresh_starts_without_time_to_store_its_answer(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    with pytest.raises(InsufficientTimeError, match="retry later"):
        stack.invoke("rotator", {}, remaining_ms=85_000)
    assert stack.emulator.counts["refresh"] == 0
    assert stack.refresh_document().lease is None


def test_secrets_manager_throttling_on_the_write_is_retried(stack: Stack) -> None:
    stack.seed()
    make_due(stack)
    throttled = {"left": 3}

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if '"raw_access_token"' in params.get("SecretString", "") and throttled["left"]:
            throttled["left"] -= 1
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
                "PutSecretValue",
            )

    runtime.store().client.meta.events.register(
        "provide-client-params.secrets-manager.PutSecretValue", throttle
    )
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert throttled["left"] == 0
    assert_healthy(stack)


# --- a response lost after the upstream rotated: test_lost_answers_on_lambda.py -------------


# --- no secret in logs, metrics or results (guarantee 7) ------------------------------------


@pytest.fixture
def every_path(stack: Stack, log_level: LogScan) -> Stack:
    """A stack driven through rotation, a failed exchange, a refused verification and a
    revocation, so that every log line and metric of those paths is captured (at INFO and at
    DEBUG: ``log_level``)."""
    stack.seed()
    make_due(stack)
    stack.invoke("rotator", {})
    stack.emulator.advance(19 * HOUR)
    stack.emulator.inject("exchange", "status", times=50, status=500)
    with pytest.raises(ServerError):
        stack.invoke("rotator", {})
    stack.emulator.clear_faults()
    stack.emulator.inject("projects", "status", status=403)
    with pytest.raises(VerificationFailedError):
        stack.invoke("rotator", {})
    stack.emulator.revoke_family(stack.newest_refresh_token())
    stack.emulator.advance(25 * HOUR)  # the stored raw access token has expired too
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})
    return stack


def test_no_secret_reaches_logs_metrics_or_results(
    every_path: Stack, log_level: LogScan, capsys: pytest.CaptureFixture[str]
) -> None:
    output = capsys.readouterr()
    secrets = secret_values(every_path)
    assert len(secrets) >= 6
    assert "rotation failed" in output.out
    for secret in secrets:
        assert secret not in output.out
        assert secret not in output.err
    # Every record (extra fields and exception text included) and every secret that crossed
    # the wire (the ID tokens of the refresh answers were never stored), at INFO and at DEBUG.
    assert log_level.wire.values() - set(secrets)
    log_level.assert_clean(output.out, output.err, secrets=secrets)
    if log_level.debug:
        assert '"level":"DEBUG"' in output.out  # the functions' own DEBUG lines were captured


# --- events and metrics for operators (no secret in them) -----------------------------------


@pytest.fixture
def sent_events(stack: Stack) -> list[dict[str, Any]]:
    """Every EventBridge entry the functions send."""
    entries: list[dict[str, Any]] = []
    runtime.notifier().client.meta.events.register(
        "provide-client-params.events.PutEvents",
        lambda params, **_: entries.extend(params["Entries"]),
    )
    return entries


def test_a_rotation_announces_itself_without_secrets(
    stack: Stack, sent_events: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    stack.seed()
    assert stack.invoke("rotator", {})["outcome"] == "skipped"
    assert sent_events == []
    make_due(stack)
    stack.invoke("rotator", {})
    (event,) = sent_events
    assert (event["Source"], event["DetailType"]) == ("cmstoken", "Service Token Rotated")
    detail = json.loads(event["Detail"])
    assert detail["serviceTokenSecret"] == SERVICE_SECRET
    assert (
        detail["expiresAt"]
        == json.loads(
            stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
        )["expires_at"]
    )
    for secret in secret_values(stack):
        assert secret not in event["Detail"]
    metrics = emitted_metrics(capsys.readouterr().out)
    assert len(metrics["UpstreamLatency"]) == 3  # refresh, exchange, verification
    assert metrics["RefreshFamilyAgeSeconds"][-1] == pytest.approx(19 * HOUR, abs=5)


def test_a_refused_credential_announces_reauthorization(
    stack: Stack, sent_events: list[dict[str, Any]]
) -> None:
    stack.seed()
    stack.emulator.revoke_family(stack.newest_refresh_token())
    make_due(stack)
    with pytest.raises(ReauthorizationRequiredError):
        stack.invoke("rotator", {})
    (event,) = sent_events
    assert event["DetailType"] == "Reauthorization Required"
    detail = json.loads(event["Detail"])
    assert detail["error"] == "invalid_grant"
    assert "bootstrap" in detail["action"]
    for secret in secret_values(stack):
        assert secret not in event["Detail"]


def test_a_crash_after_marking_the_credential_is_finished_by_the_next_due_run(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, sent_events: list[dict[str, Any]]
) -> None:
    """The credential is marked, then the run ends (a crash, a timeout) before the published
    copy says so: the next run that is due finds the marked credential, marks the published
    document and announces it, once."""
    stack.seed()
    stack.emulator.revoke_family(stack.newest_refresh_token())
    make_due(stack)

    def is_marking(secret_id: str, text: str, **_: Any) -> bool:
        return secret_id == REFRESH_SECRET and '"reauthorization_required"' in text

    with monkeypatch.context() as patch:
        crash_after(patch, SecretStore, "write", is_marking)
        with pytest.raises(SimulatedCrash):
            stack.invoke("rotator", {})
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.status == "reauthorization_required"
    assert stack.service_document().credential_status == "active"
    assert sent_events == []
    calls = sum(stack.emulator.counts.values())

    stack.emulator.advance(HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "reauthorization_required"
    assert stack.service_document().credential_status == "reauthorization_required"
    (event,) = sent_events
    assert event["DetailType"] == "Reauthorization Required"
    versions = stack.secretsmanager.list_secret_version_ids(SecretId=SERVICE_SECRET)["Versions"]
    stack.emulator.advance(HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "reauthorization_required"
    assert len(sent_events) == 1  # announced once
    later = stack.secretsmanager.list_secret_version_ids(SecretId=SERVICE_SECRET)["Versions"]
    assert len(later) == len(versions)  # and written once
    assert sum(stack.emulator.counts.values()) == calls  # no upstream call after the refusal


def test_an_event_bus_failure_does_not_fail_the_rotation(
    stack: Stack, sent_events: list[dict[str, Any]]
) -> None:
    stack.seed()
    make_due(stack)

    def refuse(**_: Any) -> None:
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "PutEvents"
        )

    runtime.notifier().client.meta.events.register("before-call.events.PutEvents", refuse)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert_healthy(stack)


def test_upstream_text_reaches_errors_and_logs_without_control_characters(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """An error description is upstream text: it must not drive the terminal of whoever reads
    the error or the decoded log line."""
    stack.seed()
    make_due(stack)
    hostile = "nope\x1b]0;owned\x07\x1b[2J\u202eevil"
    stack.emulator.inject(
        "refresh", "status", status=400, error="invalid_request", description=hostile
    )
    with pytest.raises(CmsTokenError) as info:
        stack.invoke("rotator", {})
    assert "nope?]0;owned??[2J?evil" in str(info.value)
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("{"):
            decoded = json.dumps(json.loads(line), ensure_ascii=False)
            assert "\x1b" not in decoded
            assert "\u202e" not in decoded
