"""A device code response whose user code or verification addresses carry control characters,
bidirectional or other invisible formatting characters, or whitespace is refused (such text would
be printed for a person: it could rewrite the terminal or disguise the address), with an error
that names the field and never quotes it."""

from __future__ import annotations

import io
from typing import Any

import pytest

from cmstoken.cli.get_token.command import run
from cmstoken.cli.get_token.options import Options
from cmstoken.core.errors import MalformedResponseError
from cmstoken.upstream.models import DeviceAuthorization
from cmstoken.upstream.service import ServiceClient
from support import DANGEROUS_CHARACTERS as DANGEROUS
from support import (
    DEVICE_DOCUMENT,
    PROVIDER_DOCUMENT,
    Answer,
    FakeClock,
    ScriptedTransport,
    response,
)
from support import HOSTILE_TEXT as HOSTILE

NOW = 1_795_000_000.0
BASE_URL = "https://cms.example.com"
FIELDS = ["user_code", "verification_uri", "verification_uri_complete"]


def hostile_document(field: str, text: str) -> dict[str, Any]:
    value = DEVICE_DOCUMENT[field]
    if field == "user_code":
        hostile = value[:4] + text + value[4:]
    else:
        hostile = value.replace("example.com/", "example.com/" + text)
    return {**DEVICE_DOCUMENT, field: hostile}


def assert_harmless(text: str) -> None:
    for char in DANGEROUS:
        assert char not in text, repr(char)


# -- the device code response ------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE, ids=repr)
@pytest.mark.parametrize("field", FIELDS)
def test_a_device_code_response_with_hostile_text_is_refused(field: str, text: str) -> None:
    with pytest.raises(MalformedResponseError, match=field) as raised:
        DeviceAuthorization.parse(hostile_document(field, text), received_at=NOW)
    message = str(raised.value)
    assert "owned" not in message
    assert "example.com" not in message
    assert "HHHJ" not in message
    assert_harmless(message)


def test_surrounding_whitespace_is_refused_too() -> None:
    for field in FIELDS:
        with pytest.raises(MalformedResponseError, match=field):
            DeviceAuthorization.parse(
                {**DEVICE_DOCUMENT, field: DEVICE_DOCUMENT[field] + " "}, received_at=NOW
            )


def test_ordinary_values_are_accepted() -> None:
    authorization = DeviceAuthorization.parse(
        {**DEVICE_DOCUMENT, "verification_uri_complete": None}, received_at=NOW
    )
    assert authorization.verification_uri_complete == (
        "https://login.example.com/activate?user_code=HHHJ-MMSZ"
    )
    international = {
        **DEVICE_DOCUMENT,
        "user_code": "ÄÖÜ-ß中文",
        "verification_uri": "https://bücher.example/aktivieren",
    }
    parsed = DeviceAuthorization.parse(international, received_at=NOW)
    assert parsed.user_code == "ÄÖÜ-ß中文"


# -- get-token --------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE[:4], ids=repr)
@pytest.mark.parametrize("field", FIELDS)
def test_get_token_refuses_a_hostile_device_code_response(field: str, text: str) -> None:
    clock = FakeClock()
    script: list[Answer] = [
        response(200, PROVIDER_DOCUMENT),
        response(200, hostile_document(field, text)),
    ]
    service = ServiceClient(
        BASE_URL, transport=ScriptedTransport(script=script, clock=clock), clock=clock
    )
    stderr = io.StringIO()
    options = Options(base_url=BASE_URL, free_trial=False, output_format="json")
    with pytest.raises(MalformedResponseError, match=field) as raised:
        run(options, service, stdin=io.StringIO("y\n"), stdout=io.StringIO(), stderr=stderr)
    assert_harmless(stderr.getvalue() + str(raised.value))
    assert "owned" not in stderr.getvalue() + str(raised.value)
