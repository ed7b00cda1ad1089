"""The two secret documents: strict parsing, round trips, and fields of other writers kept."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cmstoken.aws.documents import (
    SCHEMA_VERSION,
    STATUS_ACTIVE,
    STATUS_REAUTHORIZATION_REQUIRED,
    Lease,
    PendingAuthorization,
    RawAccessToken,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.core.errors import DocumentError
from cmstoken.core.refresh_backoff import Failures

REFRESH_TOKEN = "v1.refresh-token-secret-0123456789"
DEVICE_CODE = "device-code-secret-0123456789"
SERVICE_TOKEN = "eyJservice.token.secret"

CREDENTIAL = RefreshCredential(
    refresh_token=REFRESH_TOKEN,
    client_id="client-abc",
    issuer_url="https://login.example.com",
    status=STATUS_ACTIVE,
    authorized_at=1_795_000_000,
    refreshed_at=1_795_086_400,
    reauthorize_by=1_797_592_000,
)
PENDING = PendingAuthorization(
    device_code=DEVICE_CODE,
    user_code="HHHJ-MMSZ",
    verification_uri="https://login.example.com/activate",
    verification_uri_complete="https://login.example.com/activate?user_code=HHHJ-MMSZ",
    client_id="client-trial",
    issuer_url="https://login.example.com",
    free_trial=True,
    interval=10,
    started_at=1_795_100_000,
    expires_at=1_795_100_900,
    next_poll_at=1_795_100_010,
)


def test_refresh_document_has_the_spec_fields_at_top_level() -> None:
    document = json.loads(RefreshSecret(credential=CREDENTIAL).to_json())
    assert document == {
        "schema_version": SCHEMA_VERSION,
        "refresh_token": REFRESH_TOKEN,
        "client_id": "client-abc",
        "issuer_url": "https://login.example.com",
        "status": "active",
        "authorized_at": "2026-11-18T11:06:40Z",
        "refreshed_at": "2026-11-19T11:06:40Z",
        "reauthorize_by": "2026-12-18T11:06:40Z",
        "free_trial": False,
    }


def test_refresh_document_round_trips_with_pending_and_foreign_fields() -> None:
    stored = json.loads(RefreshSecret(credential=CREDENTIAL, pending=PENDING).to_json())
    stored["pending_exchange"] = {"owner": "a later version"}
    parsed = RefreshSecret.from_json(json.dumps(stored))
    assert parsed.credential == CREDENTIAL
    assert parsed.pending == PENDING
    assert parsed.extra == {"pending_exchange": {"owner": "a later version"}}
    assert json.loads(parsed.to_json()) == stored


def test_replacing_the_credential_keeps_pending_and_foreign_fields() -> None:
    original = RefreshSecret(credential=CREDENTIAL, pending=PENDING, extra={"x": 1})
    updated = RefreshSecret(
        credential=RefreshCredential(
            refresh_token="v1.next-token-0123456789",
            client_id=CREDENTIAL.client_id,
            issuer_url=CREDENTIAL.issuer_url,
            status=STATUS_ACTIVE,
            authorized_at=CREDENTIAL.authorized_at,
            refreshed_at=CREDENTIAL.refreshed_at + 3600,
            reauthorize_by=CREDENTIAL.reauthorize_by,
        ),
        pending=original.pending,
        extra=original.extra,
    )
    parsed = RefreshSecret.from_json(updated.to_json())
    assert parsed.pending == PENDING
    assert parsed.extra == {"x": 1}


def test_pending_only_document_has_no_credential() -> None:
    parsed = RefreshSecret.from_json(RefreshSecret(pending=PENDING).to_json())
    assert parsed.credential is None
    assert parsed.pending == PENDING


def test_reauthorize_by_may_be_null() -> None:
    document = json.loads(RefreshSecret(credential=CREDENTIAL).to_json())
    document["reauthorize_by"] = None
    assert RefreshSecret.from_json(json.dumps(document)).credential is not None


def test_secrets_stay_out_of_repr() -> None:
    text = repr(RefreshSecret(credential=CREDENTIAL, pending=PENDING))
    assert REFRESH_TOKEN not in text
    assert DEVICE_CODE not in text
    service = ServiceTokenDocument(
        token=SERVICE_TOKEN, expires_at=1, api_url="https://api.example.com/api", issued_at=0
    )
    assert SERVICE_TOKEN not in repr(service)


def valid_refresh_document() -> dict[str, object]:
    return json.loads(RefreshSecret(credential=CREDENTIAL, pending=PENDING).to_json())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"schema_version": None}, "schema_version"),
        ({"schema_version": "1"}, "schema_version"),
        ({"schema_version": SCHEMA_VERSION + 1}, "newer version"),
        ({"status": "paused"}, "status"),
        ({"status": None}, "status"),
        ({"client_id": ""}, "client_id"),
        ({"issuer_url": 5}, "issuer_url"),
        ({"authorized_at": "yesterday"}, "authorized_at"),
        ({"refreshed_at": "2026-11-22T04:00:00"}, "refreshed_at"),
        ({"reauthorize_by": 12}, "reauthorize_by"),
        ({"free_trial": "yes"}, "free_trial"),
        ({"pending": "soon"}, "pending"),
        ({"pending": {"user_code": "HHHJ-MMSZ"}}, "pending authorization"),
    ],
)
def test_refresh_document_parsing_is_strict(change: dict[str, object], problem: str) -> None:
    document = {**valid_refresh_document(), **change}
    with pytest.raises(DocumentError, match=problem) as info:
        RefreshSecret.from_json(json.dumps(document))
    assert REFRESH_TOKEN not in str(info.value)
    assert DEVICE_CODE not in str(info.value)


@pytest.mark.parametrize("text", ["", "not json", "[]", '"x"', "null"])
def test_refresh_document_must_be_a_json_object(text: str) -> None:
    with pytest.raises(DocumentError):
        RefreshSecret.from_json(text)


def test_constructing_a_credential_with_an_unknown_status_fails() -> None:
    with pytest.raises(DocumentError, match="status"):
        RefreshCredential(
            refresh_token="x" * 10,
            client_id="c",
            issuer_url="https://i",
            status="broken",
            authorized_at=0,
            refreshed_at=0,
            reauthorize_by=None,
        )
    assert STATUS_REAUTHORIZATION_REQUIRED == "reauthorization_required"


def test_service_token_document_round_trips() -> None:
    document = ServiceTokenDocument(
        token=SERVICE_TOKEN,
        expires_at=1_795_086_400,
        api_url="https://api.example.com/api",
        issued_at=1_795_000_000,
    )
    stored = json.loads(document.to_json())
    assert stored == {
        "schema_version": SCHEMA_VERSION,
        "token": SERVICE_TOKEN,
        "token_type": "Bearer",
        "expires_at": "2026-11-19T11:06:40Z",
        "api_url": "https://api.example.com/api",
        "issued_at": "2026-11-18T11:06:40Z",
        "refreshed_at": None,
        "authorized_at": None,
        "reauthorize_by": None,
        "credential_status": "active",
    }
    assert ServiceTokenDocument.from_json(document.to_json()) == document


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"token": None}, "token"),
        ({"token_type": "MAC"}, "token_type"),
        ({"expires_at": 1795086400}, "expires_at"),
        ({"api_url": ""}, "api_url"),
        ({"credential_status": "paused"}, "credential_status"),
        ({"refreshed_at": "noon"}, "refreshed_at"),
        ({"min_refresh_interval_seconds": "600"}, "min_refresh_interval_seconds"),
        ({"min_refresh_interval_seconds": 1.5}, "min_refresh_interval_seconds"),
        ({"min_refresh_interval_seconds": True}, "min_refresh_interval_seconds"),
        ({"min_refresh_interval_seconds": -1}, "min_refresh_interval_seconds"),
    ],
)
def test_service_token_document_parsing_is_strict(change: dict[str, object], problem: str) -> None:
    document = {
        "schema_version": 1,
        "token": SERVICE_TOKEN,
        "token_type": "Bearer",
        "expires_at": "2026-11-19T11:06:40Z",
        "api_url": "https://api.example.com/api",
        "issued_at": "2026-11-18T11:06:40Z",
        **change,
    }
    with pytest.raises(DocumentError, match=problem) as info:
        ServiceTokenDocument.from_json(json.dumps(document))
    assert SERVICE_TOKEN not in str(info.value)


def test_the_stacks_minimum_refresh_interval_is_published_and_optional() -> None:
    document = ServiceTokenDocument(
        token=SERVICE_TOKEN,
        expires_at=1_795_086_400,
        api_url="https://api.example.com/api",
        issued_at=1_795_000_000,
        refreshed_at=1_795_000_000,
        min_refresh_interval_seconds=900,
    )
    stored = json.loads(document.to_json())
    assert stored["min_refresh_interval_seconds"] == 900
    assert ServiceTokenDocument.from_json(document.to_json()) == document
    # A document written before the field existed reads as unknown and is written back as it
    # was; one carrying it reads in a reader that keeps unknown fields (``extra``) unchanged.
    del stored["min_refresh_interval_seconds"]
    older = ServiceTokenDocument.from_json(json.dumps(stored))
    assert older.min_refresh_interval_seconds is None
    assert json.loads(older.to_json()) == stored
    stored["min_refresh_interval_seconds"] = None
    assert ServiceTokenDocument.from_json(json.dumps(stored)).min_refresh_interval_seconds is None


def test_lease_and_raw_access_token_round_trip_and_stay_out_of_repr() -> None:
    secret = RefreshSecret(
        credential=CREDENTIAL,
        lease=Lease(owner="request-1", expires_at=1_795_000_300),
        raw_access_token=RawAccessToken(token="eyJraw.access.secret", expires_at=1_795_086_400),
    )
    stored = json.loads(secret.to_json())
    assert stored["lease"] == {"owner": "request-1", "expires_at": "2026-11-18T11:11:40Z"}
    assert stored["raw_access_token"]["token"] == "eyJraw.access.secret"
    assert RefreshSecret.from_json(secret.to_json()) == secret
    assert "eyJraw" not in repr(secret)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"lease": "mine"}, "lease"),
        ({"lease": {"owner": "x"}}, "expires_at"),
        ({"raw_access_token": {"token": ""}}, "token"),
    ],
)
def test_lease_and_raw_access_token_parsing_is_strict(
    change: dict[str, object], problem: str
) -> None:
    document = {**valid_refresh_document(), **change}
    with pytest.raises(DocumentError, match=problem):
        RefreshSecret.from_json(json.dumps(document))


def test_a_candidate_round_trips_next_to_the_credential_and_stays_out_of_repr() -> None:
    from cmstoken.aws.documents import CandidateCredential

    candidate = CandidateCredential(
        credential=replace(
            CREDENTIAL, refresh_token="v1.candidate-secret-0123456789", subject_sha256="ab" * 32
        ),
        raw_access_token=RawAccessToken(token="eyJcandidate.raw.secret", expires_at=1_795_186_400),
    )
    secret = RefreshSecret(credential=CREDENTIAL, candidate=candidate)
    text = secret.to_json()
    document = json.loads(text)
    assert document["refresh_token"] == REFRESH_TOKEN  # the active credential stays on top
    assert document["candidate"]["refresh_token"] == "v1.candidate-secret-0123456789"
    assert document["candidate"]["subject_sha256"] == "ab" * 32
    assert document["candidate"]["raw_access_token"]["token"] == "eyJcandidate.raw.secret"
    parsed = RefreshSecret.from_json(text)
    assert parsed == secret
    assert parsed.to_json() == text
    assert "candidate-secret" not in repr(parsed)
    assert "eyJcandidate" not in repr(parsed)
    assert RefreshSecret.from_json(replace(secret, candidate=None).to_json()).candidate is None


def test_a_document_without_an_identity_reads_back_byte_for_byte() -> None:
    text = RefreshSecret(credential=CREDENTIAL, pending=PENDING).to_json()
    assert "subject_sha256" not in text
    parsed = RefreshSecret.from_json(text)
    assert parsed.credential is not None
    assert parsed.credential.subject_sha256 is None
    assert parsed.to_json() == text
    pinned = replace(CREDENTIAL, subject_sha256="cd" * 32)
    assert json.loads(RefreshSecret(credential=pinned).to_json())["subject_sha256"] == "cd" * 32


def test_the_new_identity_allowance_of_a_pending_authorization_round_trips() -> None:
    allowed = replace(PENDING, allow_new_identity=True)
    parsed = RefreshSecret.from_json(RefreshSecret(pending=allowed).to_json())
    assert parsed.pending == allowed
    assert RefreshSecret.from_json(RefreshSecret(pending=PENDING).to_json()).pending == PENDING


@pytest.mark.parametrize(
    ("candidate", "problem"),
    [
        ("yes", "field 'candidate' must be an object"),
        ({"refresh_token": "v1.x"}, "field 'client_id'"),
    ],
)
def test_a_candidate_is_parsed_strictly(candidate: object, problem: str) -> None:
    document = json.loads(RefreshSecret(credential=CREDENTIAL).to_json())
    document["candidate"] = candidate
    with pytest.raises(DocumentError, match=problem):
        RefreshSecret.from_json(json.dumps(document))


def test_a_streak_of_failures_round_trips_and_one_recorded_before_its_counters_reads() -> None:
    """The streak's ``owed`` and ``spared`` are stored; a streak a release before them recorded
    (no such fields) owes and spared nothing. A negative count is refused."""
    secret = RefreshSecret(
        credential=CREDENTIAL,
        failures=Failures(count=4, last_at=1_795_000_000, retry_at=1_795_000_000, owed=2, spared=1),
    )
    stored = json.loads(secret.to_json())
    assert (stored["failures"]["owed"], stored["failures"]["spared"]) == (2, 1)
    assert RefreshSecret.from_json(secret.to_json()) == secret
    del stored["failures"]["owed"], stored["failures"]["spared"]
    older = RefreshSecret.from_json(json.dumps(stored)).failures
    assert older == Failures(count=4, last_at=1_795_000_000, retry_at=1_795_000_000)
    stored["failures"]["spared"] = -1
    with pytest.raises(DocumentError, match="'spared' must not be negative"):
        RefreshSecret.from_json(json.dumps(stored))
