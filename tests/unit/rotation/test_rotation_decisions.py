"""The rotator's decisions (``cmstoken.rotation.decisions``), table by table: pure functions of
what a run read and the time it read it, so no store, no clock and no upstream here."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    STATUS_REAUTHORIZATION_REQUIRED,
    Lease,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.core.errors import (
    MalformedResponseError,
    RateLimitedError,
    ServerError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
)
from cmstoken.core.redaction import fingerprint
from cmstoken.rotation import decisions
from cmstoken.rotation.decisions import (
    DUE_EXPIRING,
    DUE_FORCED,
    DUE_MARKED,
    DUE_MISSING,
    SKIP_DEBOUNCED,
    SKIP_FRESH,
    SKIP_LEASE_HELD,
    Due,
    RefreshFailure,
    RotationResult,
)
from cmstoken.upstream.models import TokenAnswer

NOW = 1_800_000_000.0
MARGIN = 21_600.0
INTERVAL = 600.0
ME, OTHER = "this-invocation", "other-invocation"

CREDENTIAL = RefreshCredential(
    refresh_token="v1.old",
    client_id="cms-client",
    issuer_url="https://idp.example.com/",
    status=STATUS_ACTIVE,
    authorized_at=NOW - 86_400,
    refreshed_at=NOW - 3_600,
    reauthorize_by=NOW + 30 * 86_400,
)
PUBLISHED = ServiceTokenDocument(
    token="service-token",
    expires_at=NOW + 2 * MARGIN,
    api_url="https://cms.example.com/api",
    issued_at=NOW - 3_600,
    refreshed_at=NOW - 3_600,
    authorized_at=NOW - 86_400,
    reauthorize_by=NOW + 30 * 86_400,
)


def published(**changes: object) -> ServiceTokenDocument:
    return replace(PUBLISHED, **changes)  # type: ignore[arg-type]


def credential(**changes: object) -> RefreshCredential:
    return replace(CREDENTIAL, **changes)  # type: ignore[arg-type]


# --- is the run due -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "forced", "expected"),
    [
        (None, False, Due(DUE_MISSING)),
        (None, True, Due(DUE_MISSING)),
        (published(credential_status=STATUS_REAUTHORIZATION_REQUIRED), False, Due(DUE_MARKED)),
        (published(expires_at=NOW + MARGIN), False, Due(DUE_EXPIRING)),  # exactly the margin
        (published(expires_at=NOW + MARGIN - 1), True, Due(DUE_EXPIRING)),
        (published(expires_at=NOW - 1), False, Due(DUE_EXPIRING)),  # expired
        (published(expires_at=NOW + MARGIN + 1), False, Due(SKIP_FRESH, skipped=True)),
        (published(), True, Due(DUE_FORCED)),
        (published(refreshed_at=NOW - INTERVAL), True, Due(DUE_FORCED)),  # exactly the interval
        (published(refreshed_at=NOW - INTERVAL + 1), True, Due(SKIP_DEBOUNCED, skipped=True)),
        (published(refreshed_at=NOW), True, Due(SKIP_DEBOUNCED, skipped=True)),
        (published(refreshed_at=None), True, Due(DUE_FORCED)),  # unknown: not debounced
        # a forced run within the interval is still due when the token expires soon
        (published(refreshed_at=NOW, expires_at=NOW + 60), True, Due(DUE_EXPIRING)),
    ],
)
def test_whether_a_run_is_due(
    document: ServiceTokenDocument | None, forced: bool, expected: Due
) -> None:
    assert (
        decisions.due(document, forced=forced, now=NOW, margin=MARGIN, min_interval=INTERVAL)
        == expected
    )


@pytest.mark.parametrize(
    ("refreshed_at", "expected"),
    [
        (None, False),
        (NOW - INTERVAL - 1, False),
        (NOW - INTERVAL, False),
        (NOW - INTERVAL + 0.5, True),
        (NOW, True),
        (NOW + 5, True),  # a clock behind the writer's
    ],
)
def test_the_debounce_on_refreshed_at(refreshed_at: float | None, expected: bool) -> None:
    assert decisions.debounced(refreshed_at, now=NOW, min_interval=INTERVAL) is expected


HELD, FREE = decisions.LeaseVerdict.HELD, decisions.LeaseVerdict.FREE
TAKE_OVER = decisions.LeaseVerdict.TAKE_OVER


@pytest.mark.parametrize(
    ("due_reason", "refreshed_at", "lease", "expected"),
    [
        (DUE_EXPIRING, NOW - 3_600, FREE, None),
        (DUE_FORCED, NOW - 3_600, FREE, None),
        # the credential's own refreshed_at (newer than the published copy) debounces
        (DUE_FORCED, NOW - 60, FREE, SKIP_DEBOUNCED),
        (DUE_EXPIRING, NOW - 60, FREE, None),  # only a forced run is debounced
        (DUE_MISSING, NOW - 60, FREE, None),
        (DUE_EXPIRING, NOW - 3_600, HELD, SKIP_LEASE_HELD),
        (DUE_FORCED, NOW - 60, HELD, SKIP_LEASE_HELD),
        # a run that takes over presents a token that may be spent: never debounced
        (DUE_FORCED, NOW - 60, TAKE_OVER, None),
        (DUE_EXPIRING, NOW - 3_600, TAKE_OVER, None),
    ],
)
def test_why_a_due_run_stops_once_it_read_the_credential(
    due_reason: str, refreshed_at: float, lease: decisions.LeaseVerdict, expected: str | None
) -> None:
    assert (
        decisions.skip_reason(
            credential(refreshed_at=refreshed_at),
            lease,
            due_reason=due_reason,
            now=NOW,
            min_interval=INTERVAL,
        )
        == expected
    )


# --- the lease ----------------------------------------------------------------------------------

AT = fingerprint(CREDENTIAL.refresh_token)  # a lease over the stored token: it may be spent
STORED = "0123456789ab"  # a lease whose holder stored its refresh: the token stored is newer


@pytest.mark.parametrize(
    ("lease", "holds", "alone", "others"),
    [
        # no lease, this run's own, or lapsed: free, whatever else runs
        (None, False, "FREE", "FREE"),
        (Lease(ME, NOW + 60, AT), True, "FREE", "FREE"),
        (Lease(ME, NOW - 60, AT), True, "FREE", "FREE"),
        (Lease(OTHER, NOW, AT), False, "FREE", "FREE"),
        (Lease(OTHER, NOW - 60, AT), False, "FREE", "FREE"),
        # another's live lease over the stored token: its holder may have spent it. Alone
        # (reserved concurrency 1) the holder has ended: take over; else it may be running
        (Lease(OTHER, NOW + 60, AT), False, "TAKE_OVER", "AT_RISK"),
        (Lease(OTHER, NOW + 0.001, AT), False, "TAKE_OVER", "AT_RISK"),
        (Lease(OTHER, NOW + 60), False, "TAKE_OVER", "AT_RISK"),  # an older release's lease
        # another's live lease whose refresh is stored: nothing at risk
        (Lease(OTHER, NOW + 60, STORED), False, "FREE", "HELD"),
    ],
)
def test_what_a_run_does_about_the_lease_it_read(
    lease: Lease | None, holds: bool, alone: str, others: str
) -> None:
    assert decisions.holds(lease, ME) is holds
    for one_at_a_time, expected in ((True, alone), (False, others)):
        verdict = decisions.lease_verdict(
            lease, CREDENTIAL, owner=ME, now=NOW, one_at_a_time=one_at_a_time
        )
        assert verdict is decisions.LeaseVerdict[expected], one_at_a_time


def test_a_claimed_lease_outlives_the_deadline_by_the_grace_and_names_the_token() -> None:
    assert decisions.new_lease(ME, NOW + 120, CREDENTIAL) == Lease(
        owner=ME, expires_at=NOW + 120 + decisions.LEASE_GRACE_SECONDS, presents=AT
    )
    assert CREDENTIAL.refresh_token not in str(decisions.new_lease(ME, NOW, CREDENTIAL).to_dict())


# --- exchange or refresh ------------------------------------------------------------------------

RAW = RawAccessToken(token="raw", expires_at=NOW + 3_600)


@pytest.mark.parametrize(
    ("raw", "document", "expected"),
    [
        # the newest refresh (NOW - 3600) never reached the published document
        (RAW, None, True),
        (RAW, published(issued_at=NOW - 7_200), True),
        (RAW, published(credential_status=STATUS_REAUTHORIZATION_REQUIRED), True),
        # published at or after that refresh (compared to the second, as stored)
        (RAW, published(issued_at=NOW - 3_600), False),
        (RAW, published(issued_at=NOW - 3_600 + 0.9), False),
        (RAW, published(issued_at=NOW - 3_599.5), False),
        (RAW, published(issued_at=NOW - 3_601), True),
        # too little life left to exchange it
        (RawAccessToken("raw", NOW + decisions.RAW_TOKEN_MIN_SECONDS), None, True),
        (RawAccessToken("raw", NOW + decisions.RAW_TOKEN_MIN_SECONDS - 1), None, False),
        (RawAccessToken("raw", NOW - 1), None, False),
    ],
)
def test_whether_the_stored_raw_access_token_is_exchanged(
    raw: RawAccessToken, document: ServiceTokenDocument | None, expected: bool
) -> None:
    assert decisions.exchange_stored(raw, CREDENTIAL, document, now=NOW) is expected


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [(NOW + 60, False), (NOW + 59.9, True), (NOW + 600, False), (NOW, True), (NOW - 1, True)],
)
def test_whether_it_is_too_late_to_start_a_refresh(deadline: float, expected: bool) -> None:
    assert decisions.too_late_to_refresh(now=NOW, deadline=deadline, guard=60) is expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        # the provider acted: whatever else went wrong, the token sent is spent
        (MalformedResponseError("refresh: no token", endpoint="refresh", status=200), "SPENT"),
        (
            UpstreamTimeoutError("body", endpoint="refresh", status=200, outcome_unknown=True),
            "SPENT",
        ),
        # no answer: the provider may have acted
        (UpstreamTimeoutError("slow", endpoint="refresh", outcome_unknown=True), "UNKNOWN"),
        (UpstreamConnectionError("drop", endpoint="refresh", outcome_unknown=True), "UNKNOWN"),
        (ServerError("502", endpoint="refresh", status=502, outcome_unknown=True), "UNKNOWN"),
        # provably not acted on
        (UpstreamConnectionError("refused", endpoint="refresh"), "NOT_ACTED_ON"),
        (RateLimitedError("429", endpoint="refresh", status=429), "NOT_ACTED_ON"),
        (ServerError("503", endpoint="refresh", status=503), "NOT_ACTED_ON"),
        (RuntimeError("a bug"), "NOT_ACTED_ON"),
    ],
)
def test_what_a_failed_refresh_means(error: BaseException, expected: str) -> None:
    failure = decisions.refresh_failure(error)
    assert failure is RefreshFailure[expected]
    # the answer is lost (present the token again at once) exactly when the provider may
    # have acted on it
    assert failure.answer_lost is (expected != "NOT_ACTED_ON")


# --- what a refresh's answer makes of the credential ------------------------------------------


def answer(**changes: object) -> TokenAnswer:
    base = TokenAnswer(
        refresh_token="v1.new",
        access_token="access",
        scope="openid offline_access",
        access_token_expires_at=NOW + 86_400,
        expiry_source="expires_in",
        received_at=NOW + 1.5,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_rotated_credential_is_active_and_refreshed_when_the_answer_came() -> None:
    marked = credential(status=STATUS_REAUTHORIZATION_REQUIRED)
    assert decisions.rotated_credential(marked, answer()) == credential(
        refresh_token="v1.new", refreshed_at=NOW + 1.5
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, RawAccessToken("access", NOW + 86_400)),
        (
            {"expiry_source": "assumed"},
            RawAccessToken("access", NOW + 86_400, expires_at_assumed=True),
        ),
        ({"expiry_source": "jwt"}, RawAccessToken("access", NOW + 86_400)),
        ({"access_token": None}, None),
        ({"problems": ("token_type",)}, None),
    ],
)
def test_the_access_token_is_kept_only_when_usable(
    changes: dict[str, object], expected: RawAccessToken | None
) -> None:
    assert decisions.usable_raw_token(answer(**changes)) == expected


PENDING = PendingAuthorization(
    device_code="device",
    user_code="BCDF-GHJK",
    verification_uri="https://idp.example.com/activate",
    verification_uri_complete="https://idp.example.com/activate?user_code=BCDF-GHJK",
    client_id="cms-client",
    issuer_url="https://idp.example.com/",
    free_trial=False,
    interval=5,
    started_at=NOW - 60,
    expires_at=NOW + 900,
    next_poll_at=NOW + 5,
)
ROTATED = credential(refresh_token="v1.new", refreshed_at=NOW)
NEW_RAW = RawAccessToken("access", NOW + 86_400)
MINE = Lease(ME, NOW + 150)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            RefreshSecret(credential=CREDENTIAL, lease=MINE),
            RefreshSecret(credential=ROTATED, raw_access_token=NEW_RAW, lease=MINE),
        ),
        # another writer came between: its fields stay, the stale raw token is replaced
        (
            RefreshSecret(credential=CREDENTIAL, pending=PENDING, raw_access_token=RAW),
            RefreshSecret(
                credential=ROTATED, pending=PENDING, raw_access_token=NEW_RAW, lease=MINE
            ),
        ),
        # a new authorization replaced the credential meanwhile
        (RefreshSecret(credential=credential(refresh_token="v1.other")), None),
        (RefreshSecret(pending=PENDING), None),
    ],
)
def test_the_rotation_merged_into_the_newest_document(
    document: RefreshSecret, expected: RefreshSecret | None
) -> None:
    merged = decisions.merge_rotation(
        document, previous=CREDENTIAL, rotated=ROTATED, raw=NEW_RAW, lease=MINE
    )
    assert merged == expected


# --- a refused credential -----------------------------------------------------------------------

MARKED = credential(status=STATUS_REAUTHORIZATION_REQUIRED)
THEIRS = Lease(OTHER, NOW + 150)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (RefreshSecret(credential=CREDENTIAL, lease=MINE), RefreshSecret(credential=MARKED)),
        # another run's lease and a pending authorization stay
        (
            RefreshSecret(credential=CREDENTIAL, lease=THEIRS, pending=PENDING),
            RefreshSecret(credential=MARKED, lease=THEIRS, pending=PENDING),
        ),
        (
            RefreshSecret(credential=CREDENTIAL, raw_access_token=RAW),
            RefreshSecret(credential=MARKED, raw_access_token=RAW),
        ),
        # the refused token is no longer the stored one: a race, not a refusal
        (RefreshSecret(credential=credential(refresh_token="v1.newer"), lease=MINE), None),
        (RefreshSecret(), None),
    ],
)
def test_a_refused_credential_is_marked_in_the_newest_document(
    document: RefreshSecret, expected: RefreshSecret | None
) -> None:
    assert decisions.mark_refused(document, refused="v1.old", owner=ME) == expected


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (None, False),
        (published(), True),
        (published(credential_status=STATUS_REAUTHORIZATION_REQUIRED), False),
    ],
)
def test_whether_the_published_copy_of_a_refused_credential_is_still_to_mark(
    document: ServiceTokenDocument | None, expected: bool
) -> None:
    assert decisions.published_still_active(document) is expected


def test_the_marked_published_document_keeps_its_token() -> None:
    assert decisions.marked_published(PUBLISHED) == published(
        credential_status=STATUS_REAUTHORIZATION_REQUIRED
    )


# --- results ------------------------------------------------------------------------------------

LATER = credential(refresh_token="v1.new", refreshed_at=NOW)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (
            decisions.skipped(SKIP_FRESH, PUBLISHED),
            RotationResult(
                outcome="skipped",
                reason="service token is fresh",
                service_token_expires_at=PUBLISHED.expires_at,
                refreshed_at=PUBLISHED.refreshed_at,
                reauthorize_by=PUBLISHED.reauthorize_by,
            ),
        ),
        (decisions.skipped(SKIP_LEASE_HELD, None), RotationResult("skipped", SKIP_LEASE_HELD)),
        (
            decisions.rotated(DUE_EXPIRING, LATER, PUBLISHED, refreshed=True),
            RotationResult(
                outcome="rotated",
                reason="service token expires within the refresh margin",
                service_token_expires_at=PUBLISHED.expires_at,
                refreshed_at=NOW,
                authorized_at=CREDENTIAL.authorized_at,
                reauthorize_by=CREDENTIAL.reauthorize_by,
                refreshed=True,
            ),
        ),
        (
            decisions.rotated(decisions.EXCHANGED_STORED, CREDENTIAL, None, refreshed=False),
            RotationResult(
                outcome="rotated",
                reason="exchanged the stored raw access token",
                refreshed_at=CREDENTIAL.refreshed_at,
                authorized_at=CREDENTIAL.authorized_at,
                reauthorize_by=CREDENTIAL.reauthorize_by,
            ),
        ),
        (
            decisions.reauthorization_required(MARKED, PUBLISHED),
            RotationResult(
                outcome="reauthorization_required",
                reason="the refresh credential was refused; run the bootstrap again",
                service_token_expires_at=PUBLISHED.expires_at,
                refreshed_at=MARKED.refreshed_at,
                authorized_at=MARKED.authorized_at,
                reauthorize_by=MARKED.reauthorize_by,
            ),
        ),
    ],
)
def test_the_result_a_run_returns(result: RotationResult, expected: RotationResult) -> None:
    assert result == expected


def test_the_functions_json_result_names_times_in_iso_and_leaves_out_authorized_at() -> None:
    result = decisions.rotated(DUE_FORCED, LATER, PUBLISHED, refreshed=True)
    assert result.to_dict() == {
        "outcome": "rotated",
        "reason": "forced",
        "refreshed": True,
        "service_token_expires_at": "2027-01-15T20:00:00Z",
        "refreshed_at": "2027-01-15T08:00:00Z",
        "reauthorize_by": "2027-02-14T08:00:00Z",
    }


def test_a_refresh_too_late_says_how_long_is_left_and_needed() -> None:
    assert decisions.too_late_refusal(now=NOW, deadline=NOW + 100, guard=90) is None
    refusal = decisions.too_late_refusal(now=NOW, deadline=NOW + 80, guard=90)
    assert refusal == (
        "only 80 s left of the invocation; not starting a refresh (needs 90 s to wait for its "
        "answer and store it); retry later"
    )
