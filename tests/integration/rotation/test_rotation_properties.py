"""Property: whatever a 2xx refresh answer looks like (valid, RFC-minimal, sloppy, hostile) and
however Secrets Manager treats the write that follows, the real rotator (moto's server over
HTTP, the emulator over HTTP) keeps every refresh token an answer carries, never sends a refresh
token twice, publishes nothing unverified, and fails only with the project's errors.

``make verify`` runs the 120 examples, ``make test`` a third (``support.examples``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from answer_shapes import AnswerShape, answer_shapes
from cmstoken import runtime
from cmstoken.aws.documents import RefreshSecret
from cmstoken.core.clock import to_iso
from cmstoken.core.errors import (
    CmsTokenError,
    CredentialLostError,
    DocumentError,
    ReauthorizationRequiredError,
)
from cmstoken.core.redaction import fingerprint
from harness import Stack, not_at_risk
from support import emitted_metrics, examples, replayed_refresh_tokens

pytestmark = pytest.mark.integration

HOUR = 3600
EXAMPLES = examples(120)
STORE_CODES = [
    "ThrottlingException",
    "LimitExceededException",
    "KMSInvalidStateException",
    "InvalidRequestException",
    "InternalServiceError",
    "DocumentError",
]


@dataclass(frozen=True)
class Case:
    """One generated answer and what Secrets Manager does with the write after it."""

    answer: AnswerShape
    store_code: str | None
    store_failures: int  # -1: every write of the rotated token fails

    @property
    def carries_refresh_token(self) -> bool:
        return self.answer.carries_refresh_token


@st.composite
def cases(draw: st.DrawFn) -> Case:
    store = draw(st.sampled_from(["none", "none", "transient", "forever"]))
    return Case(
        answer=draw(answer_shapes()),
        store_code=None if store == "none" else draw(st.sampled_from(STORE_CODES)),
        store_failures=-1 if store == "forever" else draw(st.integers(1, 4)),
    )


@dataclass
class StoreFaults:
    """Refuses the writes of a refresh token other than ``seeded`` (the rotated one)."""

    seeded: str | None = None
    code: str | None = None
    left: int = 0

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        if self.code is None or self.left == 0:
            return
        document = json.loads(params.get("SecretString", "{}"))
        token = document.get("refresh_token")
        if token is None or token == self.seeded:
            return
        self.left -= 1
        if self.code == "DocumentError":
            raise DocumentError("refresh credential: cannot be written")
        answer: Any = {
            "Error": {"Code": self.code, "Message": "refused"},
            "ResponseMetadata": {
                "HTTPStatusCode": 500 if self.code == "InternalServiceError" else 400
            },
        }
        raise ClientError(answer, "PutSecretValue")


@pytest.fixture
def faults(server_stack: Stack) -> StoreFaults:
    faults = StoreFaults()
    runtime.store().client.meta.events.register(
        "provide-client-params.secrets-manager.PutSecretValue", faults
    )
    return faults


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_every_refresh_answer_keeps_the_credential(
    server_stack: Stack, faults: StoreFaults, capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    stack = server_stack
    stack.emulator.clear_faults()
    faults.code = None
    stack.seed()
    old_refresh = stack.newest_refresh_token()
    old_token = stack.service_document().token
    stack.emulator.advance(19 * HOUR)
    rewrite = case.answer.rewrite()
    if rewrite is not None:
        stack.emulator.inject("refresh", "rewrite", **rewrite)
    faults.seeded, faults.code, faults.left = old_refresh, case.store_code, case.store_failures
    refreshes_before = stack.emulator.counts["refresh"]
    requests_before = len(stack.emulator.requests)  # the examples share the emulator
    started = stack.clock.now()
    capsys.readouterr()

    error: BaseException | None = None
    try:
        result = stack.invoke("rotator", {}, remaining_ms=120_000)
    except Exception as exc:
        error = exc
    faults.code = None
    output = capsys.readouterr().out
    metrics = emitted_metrics(output)
    stored = stack.refresh_document()
    newest = stack.newest_refresh_token()

    # Every failure is the project's, and counted.
    assert error is None or isinstance(error, CmsTokenError), repr(error)
    failed = error is not None and not isinstance(error, ReauthorizationRequiredError)
    assert metrics["RotationFailed"] == [1 if failed else 0]
    # One refresh; a token sent twice only after a 2xx answer whose new refresh token could
    # not be read (the answer lost): at once, once, and refused (no reuse interval here).
    refreshes = stack.emulator.counts["refresh"] - refreshes_before
    if case.carries_refresh_token:
        assert refreshes == 1
        assert replayed_refresh_tokens(stack.emulator.requests[requests_before:]) == []
    else:
        assert refreshes == 2
        replayed = replayed_refresh_tokens(stack.emulator.requests[requests_before:])
        assert replayed == [fingerprint(old_refresh)]
        assert isinstance(error, ReauthorizationRequiredError)
    # An answer carrying a refresh token ends with it stored, or CredentialLost.
    lost = case.carries_refresh_token and case.store_code is not None and case.store_failures < 0
    if lost:
        assert isinstance(error, CredentialLostError)
        assert metrics["CredentialLost"] == [1]
        assert newest == old_refresh
    else:
        assert metrics.get("CredentialLost", [0]) == [0]  # 0 on a rotation, else absent
    if case.carries_refresh_token and not lost:
        assert newest != old_refresh
        assert stack.emulator.refresh_token_valid(newest)
        assert not stack.emulator.family_revoked(newest)
    if not case.carries_refresh_token:
        assert error is not None
        assert newest == old_refresh
    # Nothing unverified is published; a failed run leaves the old token and no lease over
    # the stored token (a stored answer's lapses by itself).
    assert stack.published_token_works()
    if error is not None:
        assert stack.service_document().token == old_token
        assert not_at_risk(stored)
    else:
        assert result["outcome"] == "rotated"
    # Every stored time is sane and printable.
    for when in (
        stack.service_document().expires_at,
        *([stored.raw_access_token.expires_at] if stored.raw_access_token else []),
    ):
        assert started - 1 <= when <= stack.clock.now() + 7 * 86400 + 5
        to_iso(when)
    RefreshSecret.from_json(stored.to_json())
    for secret in (old_refresh, newest, old_token):
        assert secret not in output
