"""Property: whatever an approved device-code poll's answer looks like (valid, RFC-minimal,
sloppy, hostile), the real bootstrap (moto, the emulator over HTTP) polls the spent code once
(twice when the answer holds no usable refresh token: a lost answer is polled again), keeps
every refresh token the answer carries when nothing else is active (a first authorization),
replaces an active credential only with a new one it has verified, and never drops a usable
approval because an optional field (``expires_in``, ``scope``, ``id_token``) was missing or
sloppy (RFC 6749 5.1). The same answer shapes as the refresh's property test.

``make verify`` runs the 80 examples, ``make test`` a third (``support.examples``)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from answer_shapes import DROP, KEEP, AnswerShape, answer_shapes, set_
from cmstoken.aws.documents import RefreshSecret
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack, secret_values
from support import examples

pytestmark = pytest.mark.integration

HOUR = 3600
EXAMPLES = examples(80)


def usable_access_token(answer: AnswerShape) -> bool:
    """Whether the answer's access token can be exchanged (a bearer token, present)."""
    return (
        answer.carries_refresh_token
        and answer.edits["access_token"] == KEEP
        and answer.edits["token_type"] in (KEEP, DROP, set_("bearer"))
    )


def start_over(stack: Stack, first: bool) -> None:
    """A stack never authorized (both documents empty), or one with an active credential."""
    stack.emulator.clear_faults()
    if first:
        stack.secretsmanager.put_secret_value(
            SecretId=REFRESH_SECRET, SecretString=RefreshSecret().to_json()
        )
        stack.secretsmanager.put_secret_value(SecretId=SERVICE_SECRET, SecretString="{}")
    else:
        stack.seed()
    stack.emulator.advance(HOUR)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(answer=answer_shapes(), first=st.booleans())
def test_every_approved_answer_keeps_the_approval(
    stack: Stack, capsys: pytest.CaptureFixture[str], answer: AnswerShape, first: bool
) -> None:
    start_over(stack, first)
    before = stack.refresh_document().credential
    started = stack.invoke("bootstrap", {"action": "start"})
    stack.emulator.approve(started["user_code"])
    rewrite = answer.rewrite()
    if rewrite is not None:
        stack.emulator.inject("device_token", "rewrite", **rewrite)
    polls_before = stack.emulator.counts["device_token"]
    capsys.readouterr()

    result = stack.invoke("bootstrap", {"action": "poll"})  # a result, never a raised error

    output = capsys.readouterr().out
    credential = stack.refresh_document().credential
    # A usable answer ends the polls. One without a usable refresh token is a lost answer
    # (SPEC 4.2b): the code is polled once more, which meets invalid_grant (it is spent).
    polls = 1 if answer.carries_refresh_token else 2
    assert stack.emulator.counts["device_token"] - polls_before == polls
    assert stack.refresh_document().candidate is None
    if first and answer.carries_refresh_token:
        # Nothing else is active: the answer's refresh token is the credential.
        assert credential is not None
        assert stack.emulator.refresh_token_valid(credential.refresh_token)
        expected = "authorized" if usable_access_token(answer) else "failed"
        assert result["status"] == expected, result
    elif not first and usable_access_token(answer):
        assert result["status"] == "authorized", result
        assert credential is not None
        assert before is not None
        assert credential.refresh_token != before.refresh_token
        assert stack.emulator.refresh_token_valid(credential.refresh_token)
    else:
        # Nothing usable (or nothing verifiable over an active credential): nothing changes.
        assert result["status"] == "failed", result
        assert credential == before
    if result["status"] == "authorized":
        assert stack.published_token_works()
    assert started["user_code"] not in output
    for value in secret_values(stack):
        assert value not in output
