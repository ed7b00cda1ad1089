"""How many consumers fit: the quotas the sharing parameters meet, which moto enforces on none
of them (it takes any parameter value and any policy length).

- A parameter value is at most 4,096 bytes (AWS CloudFormation User Guide, "AWS CloudFormation
  quotas": Parameter value), which bounds how many account ids and OU paths a stack can list.
- A secret's resource-based policy is at most 20,480 characters (AWS Secrets Manager User
  Guide, "Secrets Manager quotas": Length of a resource-based policy - JSON text).
- A key policy is at most 32 KB (AWS KMS Developer Guide, "Resource quotas": Key policy
  document size, 32,768 bytes).
- An event bus's policy is at most 10,240 characters by default, adjustable (Amazon
  EventBridge User Guide, "Amazon EventBridge quotas": Event bus policy size).

The policies are measured as JSON indented by two spaces, more whitespace than any
serialization CloudFormation might send, so that the bound holds however they are written.
docs/organisation.md states the numbers these tests hold it to."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from template_model import resolved_resources, source

DOC = Path(__file__).resolve().parents[3] / "docs" / "organisation.md"
PARAMETER_VALUE_BYTES = 4096
ORGANISATION = "o-a1b2c3d4e5"
# Each policy the sharing parameters grow, and its quota in characters (KMS counts bytes: the
# policies are ASCII).
QUOTAS = {
    ("ServiceTokenSecretPolicy", "ResourcePolicy"): 20_480,
    ("ServiceTokenKey", "KeyPolicy"): 32_768,
    ("RefreshRequestBus", "Policy"): 10_240,
}


def longest_list(item: Callable[[int], str]) -> tuple[int, str]:
    """How many distinct items ``item(i)`` (all of one length) a comma-separated parameter value
    holds, and that value."""
    count = (PARAMETER_VALUE_BYTES + 1) // (len(item(0)) + 1)
    return count, ",".join(item(i) for i in range(count))


# The shortest forms the template's AllowedPatterns take: 12 digits; an OU path of the
# shortest ids (o- and 10, r- and 4, ou- 4 and 8), without the trailing * (more of them fit).
MAX_ACCOUNTS, ACCOUNTS = longest_list(lambda i: f"{100_000_000_000 + i}")
MAX_UNITS, UNITS = longest_list(lambda i: f"o-a1b2c3d4e5/r-ab12/ou-ab12-{i:08d}/")
LONGEST = {
    "every account a parameter holds": {
        "ConsumerAccountIds": ACCOUNTS,
        "ConsumerOrganizationId": ORGANISATION,
    },
    "every OU path a parameter holds": {
        "ConsumerOrganizationId": ORGANISATION,
        "ConsumerOrganizationalUnitPaths": UNITS,
    },
}


def size(policy: Any) -> int:
    return len(json.dumps(policy, indent=2))


def test_the_longest_lists_are_what_a_parameter_value_holds() -> None:
    assert (MAX_ACCOUNTS, MAX_UNITS) == (315, 107)
    for value in (ACCOUNTS, UNITS):
        assert len(value.encode()) <= PARAMETER_VALUE_BYTES
        assert len(value.encode()) + len(value.split(",")[0]) + 1 > PARAMETER_VALUE_BYTES
        assert len(set(value.split(","))) == len(value.split(","))
    # the template's own patterns take every item
    assert all(re.fullmatch(r"[0-9]{12}", item) for item in ACCOUNTS.split(","))
    unit = r"o-[a-z0-9]{10,32}/r-[0-9a-z]{4,32}(/ou-[0-9a-z]{4,32}-[a-z0-9]{8,32})+/\*?"
    assert all(re.fullmatch(unit, item) for item in UNITS.split(","))


@pytest.mark.parametrize(
    ("parameter", "items"),
    [("ConsumerAccountIds", ACCOUNTS), ("ConsumerOrganizationalUnitPaths", UNITS)],
)
def test_the_templates_pattern_takes_no_item_shorter_than_the_longest_lists(
    parameter: str, items: str
) -> None:
    """The longest lists are the template's: its pattern (read from template.yaml, not copied
    here) takes their items and refuses each of them a character shorter, so that no parameter
    value holds more items than the quotas below were measured with."""
    pattern = source()["Parameters"][parameter]["AllowedPattern"]
    item = items.split(",")[0]
    assert re.fullmatch(pattern, item)
    shorter = {item[:i] + item[i + 1 :] for i in range(len(item))}
    assert [each for each in sorted(shorter) if re.fullmatch(pattern, each)] == []


@pytest.mark.parametrize("longest", LONGEST)
@pytest.mark.parametrize(("resource", "prop"), QUOTAS, ids=[r for r, _ in QUOTAS])
def test_each_list_at_its_longest_keeps_every_policy_within_its_quota(
    longest: str, resource: str, prop: str
) -> None:
    found = resolved_resources(**LONGEST[longest])
    policy = found[resource]["Properties"][prop]
    assert size(policy) <= QUOTAS[resource, prop]


@pytest.mark.parametrize(("resource", "prop"), QUOTAS, ids=[r for r, _ in QUOTAS])
def test_a_policy_grows_with_each_account_by_its_id_alone(resource: str, prop: str) -> None:
    """The control of the bound: each account is in each policy once, as its bare id (a
    statement that listed the accounts again, or as ARNs, would show here and above)."""
    one, two = (
        len(
            json.dumps(
                resolved_resources(ConsumerAccountIds=accounts)[resource]["Properties"][prop],
                separators=(",", ":"),
            )
        )
        for accounts in ("111111111111", "111111111111,222222222222")
    )
    assert two - one == len(',"222222222222"')


def test_the_documentation_states_these_numbers() -> None:
    text = " ".join(DOC.read_text().split())
    assert f"at most {MAX_ACCOUNTS} account ids" in text
    assert f"at most {MAX_UNITS} OU paths" in text
    assert "PolicyLengthExceededException" in text
