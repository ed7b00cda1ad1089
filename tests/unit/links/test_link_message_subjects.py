"""Every subject keeps SNS's rules, old and new (see tests/data/notifications/README.md): the
Publish API reference now says "UTF-8 text with no line breaks or control characters, and less
than 100 characters long"; it said "ASCII text that begins with a letter, number, or
punctuation mark". Stack names of every shape CloudFormation allows, and any account and
region, give such a subject naming the stack (shortened with ``...`` only when it must be),
the account and the region in full."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmstoken.core.clock import to_iso
from cmstoken.links import messages as m
from cmstoken.links.stack import Stack
from unit.links.link_notices import DEADLINE, NOTICES, STACK

PRINTABLE_ASCII = frozenset(chr(code) for code in range(0x20, 0x7F))
FIRST = frozenset(string.ascii_letters + string.digits + string.punctuation)


def problems(subject: str) -> list[str]:
    """What is wrong with ``subject`` under SNS's documented rules (none: an empty list)."""
    found = []
    if not subject or subject[0] not in FIRST:
        found.append("does not begin with a letter, number or punctuation mark")
    if len(subject) >= 100:
        found.append("is not less than 100 characters long")
    if not set(subject) <= PRINTABLE_ASCII:
        found.append("has a line break, a control character or a character outside ASCII")
    return found


@pytest.mark.parametrize(
    "subject",
    [
        "",
        " cmstoken",
        "\tcmstoken",
        "c" * 100,
        "cmstoken\nBcc: x@example.com",
        "cmstoken\x1b[31m",
        "cmstoken caf\u00e9",
        "cmstoken \u202e",
    ],
)
def test_control_the_rule_refuses_bad_subjects(subject: str) -> None:
    assert problems(subject)


@pytest.mark.parametrize("notice", NOTICES.values(), ids=NOTICES.keys())
def test_each_kind_of_notice_has_a_valid_subject_naming_the_stack(notice: m.Notice) -> None:
    subject = m.publish_request(STACK, notice)["Subject"]
    assert not problems(subject)
    assert subject.startswith(f"cmstoken {STACK.name} ({STACK.account}, {STACK.region}): ")
    if notice.story().kind in ("credential-refused", "warning-window") and notice.deadline:
        assert subject.endswith(f"by {to_iso(DEADLINE)}")


PROPERTY_SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
names = st.from_regex(r"[A-Za-z][-A-Za-z0-9]{0,127}", fullmatch=True)
accounts = st.from_regex(r"[0-9]{12}", fullmatch=True)
regions = st.from_regex(r"[a-z]{2,4}(?:-[a-z]{1,12}){1,3}-[0-9]{1,2}", fullmatch=True).filter(
    lambda region: len(region) <= 20
)
notices = st.sampled_from(list(NOTICES.values()))


@PROPERTY_SETTINGS
@given(name=names, account=accounts, region=regions, notice=notices)
def test_any_stack_gives_a_valid_subject_shortening_only_the_name(
    name: str, account: str, region: str, notice: m.Notice
) -> None:
    stack = Stack(name=name, account=account, region=region)
    subject = m.subject(stack, notice)
    assert not problems(subject)
    tail = f" ({account}, {region}): {notice.story().short}"
    assert subject.startswith("cmstoken ")
    assert subject.endswith(tail)  # the account, the region and what happened, whole
    shown = subject.removeprefix("cmstoken ").removesuffix(tail)
    if len(f"cmstoken {name}{tail}") < 100:
        assert shown == name
    else:  # shortened at the end, marked, and no shorter than it must be
        assert shown.endswith("...")
        assert name.startswith(shown.removesuffix("..."))
        assert len(subject) == 99


@PROPERTY_SETTINGS
@given(text=st.text())
def test_any_text_becomes_a_valid_subject(text: str) -> None:
    assert not problems(m.subject_text(text))


def test_a_region_longer_than_any_of_aws_is_refused() -> None:
    with pytest.raises(ValueError, match="region"):
        Stack(name="s", account="123456789012", region="abcd-abcdefghijkl-abcdefghijkl-1")
    assert Stack(name="s", account="123456789012", region="us-isob-east-1")


def test_a_long_name_is_shortened_cleanly() -> None:
    stack = Stack(name="a" * 128, account="123456789012", region="ap-southeast-3")
    subject = m.subject(stack, NOTICES["credential-refused"])
    assert len(subject) == 99
    assert subject.startswith("cmstoken aaa")
    assert "... (123456789012, ap-southeast-3): refused: re-authorize by " in subject
