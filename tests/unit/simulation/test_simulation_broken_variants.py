"""The exploration must bite: each deliberately broken rotator (test-side monkeypatches, the
library unchanged) yields a counterexample with a numbered trace. Each test passes only when the
harness finds one."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from cmstoken.aws.documents import Lease, RefreshCredential
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.vault import CredentialVault, Snapshot
from cmstoken.core.errors import VersionConflictError
from cmstoken.rotation import decisions, refreshing
from cmstoken.rotation.publishing import Publisher
from cmstoken.rotation.refreshing import Refresher
from cmstoken.rotation.rotator import Rotator
from cmstoken.upstream.identity import IdentityClient
from simulation.exploration import TWO_ROTATORS, Bounds, Report, explore, on_lambda

BOUNDS = Bounds(crashes=1, lost=1, stale=1)


class BlindStore(SecretStore):
    """Every write gets a fresh version id, not one derived from the version it replaces."""

    def write(self, secret_id: str, text: str, *, replacing: str | None) -> str:
        return super().write(secret_id, text, replacing=str(uuid.uuid4()))


def found(report: Report, say: Callable[[str], None], *invariants: str) -> None:
    say(f"[exploration, broken] {report.line()}\n{report.counterexample}")
    assert report.counterexample is not None, "the harness found no counterexample"
    assert any(f"VIOLATION {name} " in report.counterexample for name in invariants)
    assert "\n   1. " in report.counterexample  # numbered steps


def test_a_version_id_not_derived_from_the_version_read_is_caught(
    say: Callable[[str], None],
) -> None:
    found(explore(TWO_ROTATORS, BOUNDS, store=BlindStore), say, "I1", "I2", "I4")


def test_a_skipped_claim_is_caught(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    monkeypatch.setattr(Rotator, "_claim", lambda self, snapshot, deadline, credential: snapshot)
    found(explore(TWO_ROTATORS, BOUNDS), say, "I1", "I4")


def test_storing_the_rotated_token_after_the_exchange_is_caught(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    store = Refresher.store
    publish = Publisher.publish

    def deferred(self: Refresher, claimed: Snapshot, *args: Any) -> Snapshot:
        self.publisher._deferred = lambda: store(self, claimed, *args)  # type: ignore[attr-defined]
        return claimed

    def late(self: Publisher, *args: Any, before_write: Callable[[], None] | None = None) -> Any:
        later = getattr(self, "_deferred", None) or before_write
        self._deferred = None  # type: ignore[attr-defined]
        return publish(self, *args, before_write=later)  # stored after exchange and listing

    monkeypatch.setattr(Refresher, "store", deferred)
    monkeypatch.setattr(Publisher, "publish", late)
    found(explore(TWO_ROTATORS, BOUNDS), say, "I2")


def test_an_ignored_lease_is_caught(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    read = CredentialVault.read_refresh

    def without_lease(self: CredentialVault, deadline: float) -> Snapshot:
        snapshot = read(self, deadline)
        return Snapshot(replace(snapshot.secret, lease=None), snapshot.version_id)

    monkeypatch.setattr(CredentialVault, "read_refresh", without_lease)
    found(explore(TWO_ROTATORS, BOUNDS), say, "I1", "I4")


SLOW = Bounds(crashes=0, lost=0, stale=0, slow=1)


def test_a_refresh_cut_short_and_sent_again_is_caught(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    """A per-read timeout shorter than the call's whole limit (10 s of 30 s): a 25 s answer is
    given up on while it could still arrive, and the token presented again beside it."""
    refresh = IdentityClient.refresh

    def impatient(self: IdentityClient, **kwargs: Any) -> Any:
        return refresh(self, **{**kwargs, "time_limit": min(10.0, kwargs["time_limit"])})

    monkeypatch.setattr(IdentityClient, "refresh", impatient)
    found(explore(TWO_ROTATORS, SLOW), say, "I1")


def test_a_lease_skipped_instead_of_taken_over_is_caught(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    """The rule before issue 28: a run that met another invocation's live lease skipped,
    returning success; with reserved concurrency the holder had died after spending the token,
    and Lambda does not retry a run that returns."""
    verdict = decisions.lease_verdict

    def skip_any_live_lease(lease: Lease | None, *args: Any, **kwargs: Any) -> Any:
        judged = verdict(lease, *args, **kwargs)
        taken = decisions.LeaseVerdict.TAKE_OVER
        return decisions.LeaseVerdict.HELD if judged is taken else judged

    monkeypatch.setattr(decisions, "lease_verdict", skip_any_live_lease)
    found(explore(on_lambda(300.0), Bounds(crashes=1, lost=0, stale=0)), say, "I2")


def test_a_lease_that_expires_a_second_after_the_claim_is_caught(
    monkeypatch: pytest.MonkeyPatch, say: Callable[[str], None]
) -> None:
    """Time passes during a slow call: a lease shorter than the run lets a second rotator claim
    the credential mid-run and present the token the first one is refreshing."""

    def short_lease(
        self: Rotator, snapshot: Snapshot, deadline: float, credential: RefreshCredential
    ) -> Snapshot:
        lease = Lease(owner=self.owner, expires_at=self.clock.now() + 1)
        claimed = replace(snapshot.secret, lease=lease)
        try:
            return self.vault.write_refresh(claimed, snapshot.version_id, deadline)
        except VersionConflictError as exc:
            raise refreshing.RaceLostError from exc

    monkeypatch.setattr(Rotator, "_claim", short_lease)
    found(explore(TWO_ROTATORS, SLOW), say, "I1", "I2", "I4")
