"""The re-authorization messages are what ``sns.publish`` takes, for every kind of notice: a
``Message`` of the documented JSON structure (``default`` and a string per protocol), a chat
notification in the documented custom notification format (both written down as JSON Schemas
in ``tests/data/notifications``, see its README for the AWS pages), an e-mail text a person
can act on, facts for programs, and never a secret. Each check has a control showing it fails
on a message that breaks its rule."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import botocore.session
import jsonschema  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters

from cmstoken.cli.admin.command import build_parser
from cmstoken.core.clock import to_iso
from cmstoken.links import messages as m
from cmstoken.links.stack import Stack
from unit.links.link_notices import EXPECTED, LINK, NEEDS, NOTICES, STACK, fingerprints

SCHEMAS = Path(__file__).resolve().parents[2] / "data" / "notifications"
CHAT = json.loads((SCHEMAS / "custom-notification.schema.json").read_text())
STRUCTURE = json.loads((SCHEMAS / "sns-message-structure.schema.json").read_text())
TOPIC = "arn:aws:sns:eu-west-1:123456789012:cmstoken-prod-alarms"
PROGRAMS = ("sqs", "lambda", "email-json", "firehose")
KINDS = pytest.mark.parametrize("notice", NOTICES.values(), ids=NOTICES.keys())


def message(notice: m.Notice) -> dict[str, str]:
    return json.loads(m.publish_request(STACK, notice)["Message"])  # type: ignore[no-any-return]


def validate_request(request: Mapping[str, object]) -> None:
    """As botocore checks ``sns.publish``'s arguments against the SNS service model."""
    model = botocore.session.get_session().get_service_model("sns")
    shape = model.operation_model("Publish").input_shape
    assert shape is not None
    validate_parameters({"TopicArn": TOPIC, **request}, shape)


def validate(document: Any, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)


def test_every_kind_of_notice_is_tested() -> None:
    assert {type(notice) for notice in NOTICES.values()} == set(m.Notice.__subclasses__())


# -- the SNS request ---------------------------------------------------------------------------


@KINDS
def test_the_request_is_a_valid_sns_publish_with_a_json_message_structure(
    notice: m.Notice,
) -> None:
    request = m.publish_request(STACK, notice)
    validate_request(request)  # botocore's check of the arguments against the SNS model
    assert set(request) == {"Subject", "Message", "MessageStructure"}
    assert request["MessageStructure"] == "json"
    document = json.loads(request["Message"])
    validate(document, STRUCTURE)  # a JSON object, a string "default", strings per protocol
    assert all(isinstance(value, str) for value in document.values())
    assert len(request["Message"].encode("utf-8")) <= 262_144


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ({"email": "text"}, "'default' is a required property"),
        ({"default": {"text": "x"}}, "is not of type 'string'"),
        ({"default": "x", "htps": "x"}, "is not one of"),
    ],
)
def test_control_the_structure_schema_refuses_what_sns_refuses(
    broken: dict[str, Any], why: str
) -> None:
    with pytest.raises(jsonschema.ValidationError, match=why):
        validate(broken, STRUCTURE)


def test_control_botocore_refuses_a_malformed_request() -> None:
    request = {**m.publish_request(STACK, NOTICES["denied"]), "Message": {"default": "x"}}
    with pytest.raises(ParamValidationError, match="Invalid type for parameter Message"):
        validate_request(request)


@KINDS
def test_each_protocol_gets_its_form(notice: m.Notice) -> None:
    document = message(notice)
    assert document["default"] == document["email"] == m.plain_text(STACK, notice)
    assert document["http"] == document["https"]
    assert json.loads(document["https"]) == m.chat_notification(STACK, notice)
    facts = [json.loads(document[protocol]) for protocol in PROGRAMS]
    assert all(fact == facts[0] for fact in facts)
    assert all(isinstance(value, str) for value in facts[0].values())
    assert facts[0]["kind"] == notice.story().kind
    assert (facts[0]["stack"], facts[0]["account"], facts[0]["region"]) == (
        STACK.name,
        STACK.account,
        STACK.region,
    )
    if notice.link is not None:
        assert facts[0]["link"] == notice.link.url
        assert document["sms"].endswith(" " + notice.link.url)
    assert document["sms"].startswith(m.subject(STACK, notice))


def test_a_message_over_the_sns_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    longest = Stack(name="S" + "-a1" * 42 + "b", account="999999999999", region="ap-southeast-3")
    link = m.Link(url="https://x.example/l/" + "A" * (m.MAX_URL_LENGTH - 20), expires_at=0)
    notice = m.IdentityRefused(
        expected_fingerprint="0" * 16, approving_fingerprint="f" * 16, link=link, deadline=0
    )
    assert len(m.publish_request(longest, notice)["Message"]) < 262_144  # the longest inputs fit
    monkeypatch.setattr(m, "MAX_MESSAGE_BYTES", 4096)  # control: the limit is checked
    with pytest.raises(ValueError, match="over 4096 bytes"):
        m.publish_request(longest, notice)


# -- the chat notification ---------------------------------------------------------------------


@KINDS
def test_the_chat_notification_follows_the_documented_custom_notification_schema(
    notice: m.Notice,
) -> None:
    chat = json.loads(message(notice)["https"])
    validate(chat, CHAT)
    content, metadata = chat["content"], chat["metadata"]
    assert content["textType"] == "client-markdown"
    assert STACK.name in content["title"]
    if notice.link is not None:
        assert any(notice.link.url in step for step in content["nextSteps"])
        assert f"({notice.link.url}" not in json.dumps(chat)  # a bare link, not [text](url)
    assert metadata["summary"] == m.subject(STACK, notice)
    assert re.fullmatch(r"[A-Za-z0-9-]{1,100}", metadata["eventType"])


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda c: c.update(version="1"), "'1.0' was expected"),
        (lambda c: c.update(source="aws"), "'custom' was expected"),
        (lambda c: c.pop("version"), "'version' is a required property"),
        (lambda c: c.update(contents=c.pop("content")), "'content' is a required property"),
        (lambda c: c["content"].update(textType="markdown"), "'client-markdown' was expected"),
        (lambda c: c["content"].update(nextSteps="one step"), "is not of type 'array'"),
        (lambda c: c["content"].pop("description"), "'description' is a required property"),
        (lambda c: c["metadata"].update(thread="x"), "Additional properties are not allowed"),
        (lambda c: c["metadata"]["additionalContext"].update(n=1), "is not of type 'string'"),
    ],
)
def test_control_the_chat_schema_refuses_what_the_format_does_not_allow(
    change: Any, why: str
) -> None:
    chat = copy.deepcopy(m.chat_notification(STACK, NOTICES["warning-window"]))
    change(chat)
    with pytest.raises(jsonschema.ValidationError, match=why):
        validate(chat, CHAT)


def test_one_chat_thread_per_stack_so_an_outcome_follows_its_need() -> None:
    threads = {m.chat_notification(STACK, n)["metadata"]["threadId"] for n in NOTICES.values()}  # type: ignore[index]
    other = Stack(name=STACK.name, account=STACK.account, region="us-east-1")
    elsewhere = m.chat_notification(other, NOTICES["warning-window"])["metadata"]["threadId"]  # type: ignore[index]
    assert len(threads) == 1
    assert elsewhere not in threads


# -- the e-mail --------------------------------------------------------------------------------


def command(text: str, line: str) -> list[str]:
    """The command on the line after ``line`` in ``text``, parsed by cmstoken-admin."""
    lines = text.splitlines()
    found = lines[lines.index(line) + 1].split()
    assert found[0] == "cmstoken-admin"
    return found[1:]


@KINDS
def test_the_email_says_what_is_needed_by_when_with_the_link_and_the_fallback(
    notice: m.Notice,
) -> None:
    text = message(notice)["email"]
    first, *rest = text.splitlines()
    body = "\n".join(rest)
    if notice.deadline is not None:
        assert to_iso(notice.deadline) in text
        if notice.story().kind in NEEDS:
            assert f"needed by {to_iso(notice.deadline)}" in first
    elif notice.story().kind in NEEDS:
        assert "needed now" in first
    for line in (f"Stack:   {STACK.name}", f"Account: {STACK.account}", f"Region:  {STACK.region}"):
        assert line in rest
    if notice.link is not None:
        assert notice.link.url in rest
        assert f"until {to_iso(notice.link.expires_at)}" in body
        assert "nothing changes until you press its button" in body
    else:
        assert "http" not in text
    if isinstance(notice, m.Authorized):
        args = build_parser().parse_args(command(text, "To check the stack:"))
        assert args.command == "status"
        assert notice.identity_fingerprint is None or notice.identity_fingerprint in first
    else:
        line = f"Or from a terminal with AWS credentials for account {STACK.account}:"
        args = build_parser().parse_args(command(text, line))
        assert args.command == "bootstrap"
    assert (args.stack, args.region) == (STACK.name, STACK.region)


def test_a_refused_identity_names_both_fingerprints_and_how_to_switch_on_purpose() -> None:
    notice = NOTICES["identity-refused"]
    text = m.plain_text(STACK, notice)
    assert fingerprints(notice) <= set(re.findall(r"[0-9a-f]{12}", text.splitlines()[0]))
    args = build_parser().parse_args([*STACK.bootstrap_command.split()[1:], "--new-identity"])
    assert args.new_identity
    assert "--new-identity" in text


def test_control_the_email_checks_see_another_link_and_deadline() -> None:
    text = m.plain_text(STACK, NOTICES["warning-window"])
    other = m.Link(url=LINK.url.replace("AbC", "XyZ"), expires_at=LINK.expires_at + 60)
    assert other.url not in text
    assert f"until {to_iso(other.expires_at)}" not in text
    assert "needed by 2026-11-22T04:00:01Z" not in text


# -- no secret ---------------------------------------------------------------------------------

SECRET_NAMES = re.compile(r"token|secret|password|code|refresh|device|user|subject|identity$")


def test_no_input_can_carry_a_token_or_a_code() -> None:
    """No function or field takes a token, a code or an identity: only metadata, the link
    and fingerprints (checked for their form: a short hash)."""
    import dataclasses
    import inspect

    names = {
        field.name
        for kind in (Stack, m.Link, *m.Notice.__subclasses__())
        for field in dataclasses.fields(kind)
    }
    functions = (m.publish_request, m.subject, m.subject_text, m.plain_text, m.chat_notification)
    names |= {name for f in functions for name in inspect.signature(f).parameters}
    assert not {name for name in names if SECRET_NAMES.search(name)}
    # Control: the names a token or a code would come under are caught.
    for name in ("refresh_token", "device_code", "user_code", "id_token", "identity"):
        assert SECRET_NAMES.search(name)


@pytest.mark.parametrize(
    "value",
    [
        "v1.MTestOnlyRefreshToken-0123456789_abcdefghijklmnopq",  # a refresh token
        "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.",  # an ID token
        "0123456789abcdef" * 4,  # a whole subject hash: the identity, not its short form
        "alice@example.com",
        "HHHJ-MMSZ",  # a user code
        "0123456789ABCDEF",
    ],
)
def test_a_fingerprint_must_be_a_short_hash(value: str) -> None:
    for make in (
        lambda: m.Authorized(identity_fingerprint=value),
        lambda: m.IdentityRefused(expected_fingerprint=value, approving_fingerprint=EXPECTED),
        lambda: m.IdentityRefused(expected_fingerprint=EXPECTED, approving_fingerprint=value),
    ):
        with pytest.raises(ValueError, match="fingerprint is not of the expected form") as info:
            make()
        assert value not in str(info.value)


def test_a_notice_is_one_of_the_kinds() -> None:
    with pytest.raises(TypeError, match="one of the kinds"):
        m.Notice(link=LINK)


HEX_RUN = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{8,}(?![0-9A-Za-z])")
USER_CODE = re.compile(r"\b[A-Z]{4}-[A-Z]{4}\b")


def unexplained(text: str, notice: m.Notice) -> set[str]:
    """Hash-like runs in ``text`` besides the notice's fingerprints, the account and the link."""
    if notice.link is not None:
        text = text.replace(notice.link.url, "")
    return set(HEX_RUN.findall(text.replace(STACK.account, ""))) - fingerprints(notice)


def everything(notice: m.Notice) -> str:
    request = m.publish_request(STACK, notice)
    document = json.loads(request["Message"])
    return "\n".join([request["Subject"], *document.values(), json.dumps(document)])


@KINDS
def test_the_message_carries_no_value_but_metadata_the_link_and_the_fingerprints(
    notice: m.Notice,
) -> None:
    text = everything(notice)
    assert not unexplained(text, notice)
    assert not USER_CODE.search(text)
    assert not re.search(r"eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{2,}\.", text.replace(LINK.url, ""))
    assert fingerprints(notice) <= set(HEX_RUN.findall(text))


def test_control_the_scan_finds_a_planted_hash_and_code() -> None:
    notice = NOTICES["authorized"]
    planted = everything(notice) + " deadbeefcafe0042 ABCD-EFGH"
    assert unexplained(planted, notice) == {"deadbeefcafe0042"}
    assert USER_CODE.search(planted)


# -- inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://links.example.com/l/x",  # plain http off loopback
        "https://links.example.com/l/x?token=1",
        "https://user:pw@links.example.com/l/x",
        "https://links.example.com/l/x#f",
        "https://links.example.com/l/" + "x" * m.MAX_URL_LENGTH,
        "https://links.example.com/l/\u00e9",
        "https://links.example.com/l/a b",
        "",
    ],
)
def test_a_link_must_be_an_https_url_without_query_or_credentials(url: str) -> None:
    with pytest.raises(ValueError, match="link URL"):
        m.Link(url=url, expires_at=0)


def test_a_loopback_link_is_allowed_for_the_emulator_and_the_demo() -> None:
    assert m.Link(url="http://127.0.0.1:8080/l/v1.a.b", expires_at=0).url.startswith("http://")


@pytest.mark.parametrize(
    "error", ["invalid_grant\nBcc: x@example.com", "<https://evil.example|click>", "`x`", ""]
)
def test_a_refusal_code_must_be_a_short_code(error: str) -> None:
    with pytest.raises(ValueError, match="error is not of the expected form"):
        m.CredentialRefused(error=error, link=LINK)


@pytest.mark.parametrize(
    ("name", "account", "region"),
    [
        ("1stack", "123456789012", "eu-west-1"),
        ("stack_name", "123456789012", "eu-west-1"),
        ("s" * 129, "123456789012", "eu-west-1"),
        ("stack\nBcc", "123456789012", "eu-west-1"),
        ("stack", "12345678901", "eu-west-1"),
        ("stack", "123456789012", "EU-WEST-1"),
        ("stack", "123456789012", "eu-west-1\n"),
    ],
)
def test_a_stack_must_have_the_shape_aws_gives_it(name: str, account: str, region: str) -> None:
    with pytest.raises(ValueError, match="is not of the expected form"):
        Stack(name=name, account=account, region=region)


# -- an ending without a new link ----------------------------------------------------------------

WITHHELD = {name: n for name, n in NOTICES.items() if n.withheld is not None}


@pytest.mark.parametrize("notice", WITHHELD.values(), ids=WITHHELD.keys())
def test_an_ending_without_a_new_link_says_so_when_the_reminder_brings_one_and_the_fallback(
    notice: m.Notice,
) -> None:
    assert notice.withheld is not None
    document = message(notice)
    text, facts = document["email"], json.loads(document["sqs"])
    flat = " ".join(text.split())
    assert "No new link comes with this message" in flat
    assert "at most once in 24 hours" in flat
    reminder = notice.withheld.next_reminder_at
    if reminder is None:
        assert "the schedule's next daily run, within 24 hours" in flat
        assert "nextReminderAt" not in facts
    else:
        assert f"first daily run after {to_iso(reminder)}" in flat
        assert facts["nextReminderAt"] == to_iso(reminder)
    assert facts["linkWithheld"] == "true"
    assert "link" not in facts
    assert "use the new link" not in (text + m.subject(STACK, notice))
    line = f"Or from a terminal with AWS credentials for account {STACK.account}:"
    assert build_parser().parse_args(command(text, line)).command == "bootstrap"
    chat = json.loads(document["https"])
    assert "No new link comes with this message" in chat["content"]["description"]
    assert any(STACK.bootstrap_command in step for step in chat["content"]["nextSteps"])


def test_the_subject_says_whether_a_new_link_comes() -> None:
    assert m.subject(STACK, NOTICES["expired"]).endswith("code expired, use the new link")
    assert m.subject(STACK, NOTICES["expired, link withheld"]).endswith("code expired, no new link")


def test_a_notice_cannot_both_carry_a_link_and_say_none_comes() -> None:
    with pytest.raises(ValueError, match="not both"):
        m.Expired(link=LINK, withheld=m.Withheld())
