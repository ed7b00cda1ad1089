"""Provider text shown to a person (the user code, the verification addresses) cannot rewrite
the terminal: get-token and cmstoken-admin print such values made harmless, although a device
code response carrying control characters is refused when parsed (test_hostile_device_codes):
the admin prints what the bootstrap function returned, read from a stored document that may
predate that check."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import pytest

from cmstoken.cli.admin import bootstrap as admin_bootstrap
from cmstoken.cli.admin import command as admin
from cmstoken.cli.admin import status as admin_status
from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.invokers import LambdaInvoker
from cmstoken.cli.admin.stack import StackFunctions
from cmstoken.cli.get_token import flows as get_token_flows
from cmstoken.cli.get_token.flows import AbortedError
from cmstoken.core.redaction import displayable, printable
from cmstoken.upstream.device_flow import StartedAuthorization
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.models import DeviceAuthorization, ProviderInfo
from cmstoken.upstream.service import ServiceClient
from support import DANGEROUS_CHARACTERS as DANGEROUS
from support import DEVICE_DOCUMENT, PROVIDER_DOCUMENT, FakeClock, ScriptedTransport
from support import HOSTILE_TEXT as HOSTILE

NOW = 1_795_000_000.0
BASE_URL = "https://cms.example.com"


def assert_harmless(text: str) -> None:
    for char in DANGEROUS:
        assert char not in text, repr(char)


# -- the check itself -----------------------------------------------------------------------


def test_displayable() -> None:
    assert displayable("HHHJ-MMSZ")
    assert displayable("https://login.example.com/activate?user_code=HHHJ-MMSZ")
    assert displayable("ÄÖÜ-ß中文")
    for text in HOSTILE:
        assert not displayable(f"a{text}b"), repr(text)


# -- get-token ---------------------------------------------------------------------------------


def scripted_service(script: list[Any]) -> ServiceClient:
    clock = FakeClock()
    transport = ScriptedTransport(script=script, clock=clock)
    return ServiceClient(BASE_URL, transport=transport, clock=clock)


@pytest.mark.parametrize("text", HOSTILE[:6], ids=repr)
def test_get_token_prints_the_address_and_code_harmlessly(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An authorization that did not come through parse (as if the check were missed).
    service = scripted_service([])
    authorization = DeviceAuthorization(
        device_code="device-code-test-only",
        user_code=f"HHHJ{text}MMSZ",
        verification_uri=f"https://login.example.com/{text}activate",
        verification_uri_complete=f"https://login.example.com/{text}activate?user_code=x",
        expires_in=900,
        interval=5,
        received_at=service.clock.now(),
    )
    started = StartedAuthorization(
        provider=ProviderInfo.parse(PROVIDER_DOCUMENT),
        client_id="client",
        authorization=authorization,
        identity=IdentityClient("https://login.example.com", transport=service.transport),
    )
    monkeypatch.setattr(get_token_flows, "start_device_authorization", lambda *_, **__: started)
    stderr = io.StringIO()
    with pytest.raises(AbortedError):
        get_token_flows.run_device_flow(
            service, free_trial=False, stdin=io.StringIO("n\n"), stderr=stderr
        )
    shown = stderr.getvalue()
    assert_harmless(shown)
    assert printable(authorization.user_code) in shown
    assert printable(authorization.verification_uri_complete) in shown


# -- cmstoken-admin ----------------------------------------------------------------------------

FUNCTIONS = StackFunctions(bootstrap="b", rotator="r")
TITLE = "\x1b]0;owned\x07"
CLEAR = "\x1b[2J"
RLO = "\u202e"
PENDING = {
    "status": "pending",
    "user_code": f"HHHJ{CLEAR}-MMSZ",
    "verification_uri": f"https://login.example.com/{RLO}activate",
    "verification_uri_complete": f"https://login.example.com/activate?user_code={TITLE}",
    "expires_at": "2026-11-22T04:00:00Z",
}


class ScriptedInvoker:
    """Answers each action of the bootstrap function and the rotator from a script."""

    def __init__(self, answers: Mapping[str, list[Any]]) -> None:
        self.answers = {action: list(results) for action, results in answers.items()}

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        action = "rotate" if function == FUNCTIONS.rotator else payload["action"]
        return self.answers[action].pop(0)


def test_admin_status_prints_a_stored_report_harmlessly_and_never_the_code() -> None:
    report = {
        "credential": {
            "status": f"active{TITLE}",
            "authorized_at": "2026-11-01T00:00:00Z",
            "refreshed_at": f"{CLEAR}2026-11-02T00:00:00Z",
            "reauthorize_by": None,
            "service_token_expires_at": "2026-11-03T00:00:00Z",
        },
        "pending": {
            "user_code": PENDING["user_code"],
            "verification_uri_complete": PENDING["verification_uri_complete"],
            "expires_at": f"2026-11-22T04:00:00Z{CLEAR}",
        },
    }
    out = io.StringIO()
    admin_status.status(ScriptedInvoker({"status": [report]}), FUNCTIONS, out=out)
    shown = out.getvalue()
    assert_harmless(shown)
    assert "active?]0;owned?" in shown
    assert "refreshed ?[2J2026-11-02T00:00:00Z" in shown
    assert "2026-11-22T04:00:00Z?[2J" in shown
    # status never shows the user code or the address that carries it (issue 18, item 7)
    assert "HHHJ" not in shown
    assert "user_code=" not in shown


@pytest.mark.parametrize("qr", [True, False])
def test_admin_bootstrap_prints_the_started_authorization_harmlessly(qr: bool) -> None:
    invoker = ScriptedInvoker(
        {
            "start": [PENDING],
            "poll": [
                {
                    "status": "authorized",
                    "identity": f"id{TITLE}",
                    "service_token_expires_at": f"2026-11-23T00:00:00Z{CLEAR}",
                    "reauthorize_by": RLO,
                }
            ],
        }
    )
    out = io.StringIO()
    code = admin_bootstrap.bootstrap(
        invoker, FUNCTIONS, free_trial=None, out=out, now=lambda: NOW, qr=qr
    )
    assert code == 0
    shown = out.getvalue()
    assert_harmless(shown)
    assert "HHHJ?[2J-MMSZ" in shown
    assert "https://login.example.com/?activate" in shown
    # No QR code of an address that is not what it shows.
    assert "\u2588" not in shown


def test_admin_bootstrap_shows_the_qr_code_of_an_ordinary_address() -> None:
    started = {**PENDING, "verification_uri_complete": DEVICE_DOCUMENT["verification_uri_complete"]}
    invoker = ScriptedInvoker({"start": [started], "poll": [{"status": "authorized"}]})
    out = io.StringIO()
    admin_bootstrap.bootstrap(
        invoker, FUNCTIONS, free_trial=None, out=out, now=lambda: NOW, qr=True
    )
    assert "\u2588" in out.getvalue()


@pytest.mark.parametrize(
    "failure",
    [
        {"status": "denied", "message": f"{TITLE}denied{CLEAR}"},
        {"status": f"odd{TITLE}", "message": RLO},
    ],
)
def test_admin_failures_are_reported_harmlessly(failure: dict[str, str]) -> None:
    invoker = ScriptedInvoker({"start": [PENDING], "poll": [failure]})
    with pytest.raises(AdminError) as raised:
        admin_bootstrap.bootstrap(
            invoker, FUNCTIONS, free_trial=None, out=io.StringIO(), now=lambda: NOW, qr=False
        )
    assert_harmless(str(raised.value))
    refused = ScriptedInvoker({"start": [{"status": "failed", "message": TITLE}]})
    with pytest.raises(AdminError) as raised:
        admin_bootstrap.bootstrap(refused, FUNCTIONS, free_trial=None, out=io.StringIO(), qr=False)
    assert_harmless(str(raised.value))


def test_admin_rotate_prints_harmlessly() -> None:
    result = {"outcome": "rotated", "reason": TITLE, "service_token_expires_at": CLEAR}
    out = io.StringIO()
    assert admin.rotate(ScriptedInvoker({"rotate": [result]}), FUNCTIONS, out=out) == 0
    assert_harmless(out.getvalue())


def test_a_function_error_is_reported_harmlessly() -> None:
    class Client:
        def invoke(self, **_: Any) -> dict[str, Any]:
            body = {"errorType": "RotationError", "errorMessage": f"{TITLE}failed{CLEAR}"}
            return {"FunctionError": "Unhandled", "Payload": io.BytesIO(json.dumps(body).encode())}

    with pytest.raises(AdminError) as raised:
        LambdaInvoker(Client()).invoke("r", {"force": True})
    assert_harmless(str(raised.value))
    assert "failed" in str(raised.value)
