"""One click from the alert to an authorized stack, over HTTP: the links function behind a
local function URL, the real bootstrap behind a local Lambda API (queued invocations and their
destination included), moto's server for the key, the table and the topic (a queue
subscribed), and the emulator as the identity provider. A scanner's fetches change nothing;
refusals leave both secrets byte for byte as they were."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from harness import REFRESH_SECRET, secret_values
from links_harness import CODE, OneClick, PersonPacedClock, scan, secrets_now

pytestmark = pytest.mark.integration


def test_one_click_from_the_notice_to_an_authorized_stack(
    one_click: OneClick, person_paced: PersonPacedClock
) -> None:
    """The person approves after the button; the background poll keeps real time meanwhile
    (``person_paced``), as it would in Lambda. The provider asks for a poll every second (the
    emulator's default is 5 s), so that the poll after the approval comes soon."""
    stack = one_click.stack
    stack.emulator.config.poll_interval = 1
    assert one_click.invoker.invoke("links", {"action": "remind"}) == {
        "done": "not_bootstrapped: sent"
    }
    (notice,) = one_click.notices()
    assert notice["kind"] == "never-bootstrapped"
    link = notice["link"]
    assert link.startswith(one_click.url.origin + "/l/")

    # a mail scanner and a chat unfurler fetch every link in the message first: nothing changes
    before = secrets_now(stack)
    (message,) = one_click.published()
    assert scan(one_click, message) == [link]
    assert secrets_now(stack) == before
    assert before[REFRESH_SECRET] is None  # still empty: not bootstrapped

    # the person presses the button, sees the code, approves it at the identity provider
    started = one_click.press(link)
    assert started.status_code == 200, started.text
    code = CODE.search(started.text)
    assert code is not None
    pending = stack.refresh_document().pending
    assert pending is not None
    assert pending.user_code == code[1]
    assert f"user_code={code[1]}" in started.text
    stack.emulator.approve(code[1])

    # the bootstrap polls in the background and the outcome reaches the topic
    one_click.endpoint.drain()
    outcome = one_click.notices()
    assert [n["kind"] for n in outcome] == ["authorized"]
    assert stack.refresh_document().credential is not None
    assert stack.published_token_works()

    # the link is void now that a new authorization succeeded
    again = requests.get(one_click.local(link), timeout=30)
    assert again.status_code == 403
    assert "no longer needed" in again.text


@pytest.mark.parametrize(
    "change",
    [
        lambda link: link[:-1] + ("A" if link[-1] != "A" else "B"),
        lambda link: link.replace("/l/v1.", "/l/v2."),
        lambda link: link + "x" * 600,
    ],
    ids=["tampered", "forged", "oversized"],
)
def test_a_refused_link_changes_neither_secret(one_click: OneClick, change: Any) -> None:
    one_click.stack.seed()
    secrets = one_click.stack.secretsmanager
    document = json.loads(secrets.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"])
    document["status"] = "reauthorization_required"  # the identity provider refused it
    secrets.put_secret_value(SecretId=REFRESH_SECRET, SecretString=json.dumps(document))
    assert one_click.invoker.invoke("links", {"action": "remind"})["done"] == "refused: sent"
    (notice,) = one_click.notices()
    before, values = secrets_now(one_click.stack), secret_values(one_click.stack)
    bad = change(one_click.local(notice["link"]))
    for method in ("GET", "POST"):
        answer = requests.request(method, bad, data={"proof": "x"}, timeout=30)
        assert answer.status_code in (403, 404)
    assert secrets_now(one_click.stack) == before
    assert secret_values(one_click.stack) == values
    assert one_click.stack.refresh_document().pending is None
