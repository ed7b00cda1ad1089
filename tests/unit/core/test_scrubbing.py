"""Secrets echoed in upstream error text are scrubbed before the text is cut, in every form a
provider may echo them (plain, or percent-encoded as a form body carries them)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cmstoken.core.errors import UpstreamError
from cmstoken.core.redaction import REDACTED, scrub
from cmstoken.upstream.responses import oauth_error, service_error
from support import response

NOW = 1_795_000_000.0
# Shaped like the provider's refresh tokens (53 characters), test data only.
REFRESH_TOKEN = "v1.MTestOnlyRefreshToken-0123456789_abcdefghijklmnopq"
# A base64 one: "+", "/" and "=" change when percent-encoded.
ENCODABLE_TOKEN = "v1.MTestOnly+Refresh/Token=0123456789+abcdefghijklmn=="
WINDOW = 8  # no run of this many characters of a secret may survive


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group().lower(), text)


ENCODINGS: dict[str, Callable[[str], str]] = {
    "plain": lambda secret: secret,
    "quote": quote,
    "quote-nothing-safe": lambda secret: quote(secret, safe=""),
    "quote_plus": quote_plus,
    "quote_plus-lower-hex": lambda secret: _lower_hex(quote_plus(secret)),
    "quote-lower-hex": lambda secret: _lower_hex(quote(secret, safe="")),
}


def leaked_runs(secret: str, text: str, *, exempt: str = "") -> list[str]:
    """The runs of ``WINDOW`` characters of ``secret`` found in ``text`` (and not in
    ``exempt``, the message's own words)."""
    runs = {secret[i : i + WINDOW] for i in range(len(secret) - WINDOW + 1)}
    return sorted(run for run in runs if run in text and run not in exempt)


def refresh_error(description: str, *secrets: str) -> UpstreamError:
    body = {"error": "invalid_grant", "error_description": description}
    return oauth_error(response(403, body), endpoint="refresh", now=NOW, secrets=secrets)


# -- examples --------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [230, 250, 260, 270, 280, 290, 296, 299])
def test_a_token_echoed_near_the_cut_leaves_no_prefix(offset: int) -> None:
    description = "x" * offset + REFRESH_TOKEN + " was refused" + "y" * 200
    message = str(refresh_error(description, REFRESH_TOKEN))
    assert leaked_runs(REFRESH_TOKEN, message) == []
    assert len(message) < 450


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_percent_encoded_echoes_are_scrubbed(encoding: str) -> None:
    echoed = ENCODINGS[encoding](ENCODABLE_TOKEN)
    description = f"bad form: grant_type=refresh_token&refresh_token={echoed}&client_id=abc"
    message = str(refresh_error(description, ENCODABLE_TOKEN))
    assert leaked_runs(ENCODABLE_TOKEN, message) == []
    assert REDACTED in message
    assert "client_id=abc" in message


@pytest.mark.parametrize("encoding", ["quote", "quote_plus", "quote_plus-lower-hex"])
def test_service_errors_scrub_encoded_echoes_in_every_field(encoding: str) -> None:
    echoed = ENCODINGS[encoding](ENCODABLE_TOKEN)
    body = {
        "error": {
            "status": 500,
            "message": "m" * 280 + echoed,
            "errors": [{"message": "d" * 250 + echoed}],
            "reference": "r" * 290 + echoed,
        }
    }
    error = service_error(
        response(500, body), endpoint="exchange", now=NOW, secrets=[ENCODABLE_TOKEN]
    )
    assert leaked_runs(ENCODABLE_TOKEN, str(error)) == []


def test_scrub_matches_each_character_plain_or_percent_encoded_in_any_case() -> None:
    secret = "pass word+é/€~9"
    for text in (
        secret,
        quote(secret),
        quote(secret, safe=""),
        quote_plus(secret),
        _lower_hex(quote_plus(secret)),
        "pass%20word%2Bé/%E2%82%ac~9",  # mixed: some characters encoded, some not
    ):
        assert scrub(f"<{text}>", [secret]) == f"<{REDACTED}>", text
    assert scrub("pass word", [secret]) == "pass word"  # a part is not the secret
    assert scrub("short", ["short"]) == "short"  # too short to be treated as a secret


def test_the_advice_and_the_code_survive_scrubbing() -> None:
    error = refresh_error("Unknown or invalid refresh token.", REFRESH_TOKEN)
    assert str(error) == (
        "refresh: HTTP 403 invalid_grant: Unknown or invalid refresh token. (the credential "
        "is no longer valid; authorize again with the device flow)"
    )
    assert error.code == "invalid_grant"


def test_a_huge_hostile_description_is_read_quickly() -> None:
    # A JWT-like prefix repeated: scanning a whole 1 MB body for JWTs would be quadratic.
    description = "eyJ" * 350_000
    started = time.monotonic()
    message = str(refresh_error(description, REFRESH_TOKEN))
    assert time.monotonic() - started < 30  # a quadratic scan would take many minutes
    assert len(message) < 450


# -- properties ------------------------------------------------------------------------------

# Tokens: base64, base64url and JWT characters. The filler around them shares none of these
# (nor "%"), so that a run found in the message can only have come from the secret.
SECRET_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/="
FILLER_ALPHABET = " \t\n,;:!?()[]{}<>'\"*#&@^|`$\\éü€中\x1b\x07\u202e"
secrets = st.text(alphabet=SECRET_ALPHABET, min_size=8, max_size=120)
fillers = st.text(alphabet=FILLER_ALPHABET, max_size=1500)
encodings = st.sampled_from(sorted(ENCODINGS))
PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def place(filler: str, offset: int, text: str) -> str:
    offset = min(offset, len(filler))
    return filler[:offset] + text + filler[offset:]


def skeleton(error: UpstreamError) -> str:
    """The message's own words, which a secret made of letters may share."""
    return str(error) + REDACTED


@PROPERTY_SETTINGS
@given(
    secret=secrets,
    filler=fillers,
    offset=st.integers(min_value=0, max_value=1500),
    encoding=encodings,
    status=st.sampled_from([400, 401, 403, 500, 503]),
    code=st.sampled_from(["invalid_grant", "invalid_request", "server_error", "slow_down"]),
)
@example(
    secret=REFRESH_TOKEN, filler="x" * 600, offset=260, encoding="plain", status=403,
    code="invalid_grant",
)  # fmt: skip
def test_no_run_of_an_echoed_secret_survives_in_an_oauth_error(
    secret: str, filler: str, offset: int, encoding: str, status: int, code: str
) -> None:
    description = place(filler, offset, ENCODINGS[encoding](secret))
    body = {"error": code, "error_description": description}
    error = oauth_error(response(status, body), endpoint="refresh", now=NOW, secrets=[secret])
    bare = oauth_error(
        response(status, {"error": code, "error_description": "-"}), endpoint="refresh", now=NOW
    )
    assert leaked_runs(secret, str(error), exempt=skeleton(bare)) == []
    assert leaked_runs(secret, error.code or "", exempt=skeleton(bare)) == []


@PROPERTY_SETTINGS
@given(
    secret=secrets,
    filler=fillers,
    offset=st.integers(min_value=0, max_value=1500),
    encoding=encodings,
    field=st.sampled_from(["message", "details", "errors", "reference", "bare"]),
    status=st.sampled_from([400, 401, 403, 500]),
)
def test_no_run_of_an_echoed_secret_survives_in_a_service_error(
    secret: str, filler: str, offset: int, encoding: str, field: str, status: int
) -> None:
    text = place(filler, offset, ENCODINGS[encoding](secret))
    body: dict[str, object]
    if field == "bare":
        body = {"error": text}
    elif field == "errors":
        body = {"error": {"message": "failed", "errors": [{"message": "a"}, {"message": text}]}}
    else:
        body = {"error": {"message": "failed", field: text}}
    error = service_error(response(status, body), endpoint="exchange", now=NOW, secrets=[secret])
    bare = service_error(
        response(status, {"error": {"message": "failed", "details": "-", "reference": "-"}}),
        endpoint="exchange",
        now=NOW,
    )
    assert leaked_runs(secret, str(error), exempt=skeleton(bare)) == []


@pytest.mark.parametrize("encoding", ["plain", "quote-nothing-safe"])
def test_many_echoes_cannot_pull_an_unscrubbed_one_into_view(encoding: str) -> None:
    # Each echo shrinks to "[redacted]" when scrubbed, so text from far behind the start moves
    # into view: it must have been scrubbed too.
    secret = ("v1.M+/=" * 20)[:100]
    description = " ".join([ENCODINGS[encoding](secret)] * 400)
    error = refresh_error(description, secret)
    assert leaked_runs(secret, str(error)) == []
    assert str(error).count(REDACTED) > 20
