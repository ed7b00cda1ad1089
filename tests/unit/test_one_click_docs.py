"""docs/one-click.md against what it describes: every command parses with its own tool (the
`sam deploy` lines are checked with the other documents' in test_deploy_docs), and every number,
name and field it states is the template's or the code's."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import template_model
from cmstoken.aws.link_state import LEASE_SECONDS
from cmstoken.cli.admin.command import build_parser
from cmstoken.links import messages, tokens
from cmstoken.links.notifying import (
    DAY,
    LINK_LIFETIME,
    OUTCOME_LINK_EVERY,
    REMINDER_EVERY,
    REMINDER_SLACK,
)
from cmstoken.links.portal import POLLS_PER_HOUR
from cmstoken.links.refusals import Refusal
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import Need
from cmstoken.links.web import PRESS_SECONDS
from support import check_aws_command

DOC = Path(__file__).resolve().parents[2] / "docs" / "one-click.md"
TEXT = DOC.read_text()


def commands(program: str) -> list[list[str]]:
    """The command lines of the document's shell blocks that run ``program``."""
    found = []
    for script in re.findall(r"```sh\n(.*?)```", TEXT, re.DOTALL):
        for line in script.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0].endswith(program):
                found.append(words)
    return found


def links_function() -> dict[str, object]:
    function: dict[str, object] = template_model.source()["Resources"]["LinksFunction"]
    return function


def test_the_operator_commands_parse_with_cmstoken_admin() -> None:
    (rotate,) = commands("cmstoken-admin")
    arguments = build_parser().parse_args(rotate[1:])
    assert (arguments.stack, arguments.command) == ("cmstoken", "rotate-link-key")


def test_the_aws_commands_are_operations_of_the_aws_cli() -> None:
    (suppress,) = commands("aws")
    check_aws_command(suppress)
    status = suppress[suppress.index("--workflow") + 1]
    assert status == "Status=SUPPRESSED"


def test_the_limits_and_lifetimes_stated_are_the_templates_and_the_codes() -> None:
    properties = links_function()["Properties"]
    assert isinstance(properties, dict)
    starts = properties["Environment"]["Variables"]["LINKS_STARTS_PER_HOUR"]
    concurrency = properties["ReservedConcurrentExecutions"]
    assert f"at most {starts} authorizations started from links an hour" in TEXT
    assert f"{starts} starts an hour, {concurrency} concurrent" in " ".join(TEXT.split())
    assert f"and {concurrency} concurrent executions of the function" in " ".join(TEXT.split())
    hours = LINK_LIFETIME // 3600
    assert hours == tokens.MAX_LIFETIME // 3600 == 24
    assert f"valid for {hours}\nhours at most" in TEXT or f"valid for {hours} hours" in TEXT
    schedule = properties["Events"]["Reminder"]["Properties"]["Name"]
    assert schedule == {"Fn::Sub": "${AWS::StackName}-remind"}
    assert "`NAME-remind`" in TEXT
    flat = " ".join(TEXT.split())
    assert f"at most {POLLS_PER_HOUR} polls an hour" in flat
    # "sends it again on Lambda's retry, a minute later": a claim outlives the function's run
    # and lapses before Lambda's first retry of a failed asynchronous invocation
    assert "on Lambda's retry, a minute later" in flat
    assert properties["Timeout"] < LEASE_SECONDS < 60


def test_the_outputs_parameters_and_alarms_named_exist() -> None:
    template = template_model.source()
    for output in re.findall(r"`(\w+)` output", TEXT):
        assert output in template["Outputs"], output
    for name in ("OneClickReauthorization", "AlarmEmail", "ReauthorizationWarningSeconds"):
        assert name in template["Parameters"]
    for alarm in ("AuthorizationRequiredAlarm", "RefreshFamilyAgingAlarm"):
        assert alarm in template["Resources"]
    assert "LinksUrl" in template["Outputs"]


def test_the_fields_promised_to_programs_are_the_ones_they_get() -> None:
    stack = Stack(name="cmstoken", account="123456789012", region="eu-west-1")
    link = messages.Link(url="https://example.lambda-url.eu-west-1.on.aws/l/x", expires_at=9)
    request = messages.publish_request(stack, messages.WarningWindow(link=link, deadline=99))
    facts = json.loads(json.loads(request["Message"])["sqs"])
    promised = re.search(r"the facts as JSON \(([^)]*)\)", " ".join(TEXT.split()))
    assert promised is not None
    assert set(re.findall(r"`(\w+)`", promised[1])) <= set(facts)


def test_every_refusal_the_pages_give_is_described() -> None:
    described = " ".join(TEXT.split())
    for words in ("forged", "altered", "revoked", "expired", "re-authorized since", "already used"):
        assert words in described
    assert len(Refusal) == 6  # one description each, above


def test_the_warning_is_described_as_the_age_the_template_means() -> None:
    described = " ".join(TEXT.split())
    default = int(template_model.source()["Parameters"]["ReauthorizationWarningSeconds"]["Default"])
    assert f"`ReauthorizationWarningSeconds` old, {default // 86_400} days by default" in described


def test_the_days_links_and_the_press_window_stated_are_the_codes() -> None:
    flat = " ".join(TEXT.split())
    assert OUTCOME_LINK_EVERY == DAY == 86_400
    assert "brings a new link at most once in 24 hours" in flat
    # a credential with authorized_at has these needs; the never-bootstrapped one is alone
    needs = len(set(Need) - {Need.NOT_BOOTSTRAPPED})
    assert f"so at most {needs}, on the day" in flat
    assert f"**at most {needs + 1}; 2 while one need lasts**" in flat
    assert REMINDER_EVERY == DAY - REMINDER_SLACK == 22 * 3600
    assert "in any 22 hours, none while an authorization is pending" in flat
    assert f"starts at most {needs + 1} authorizations in any 22 hours" in flat
    # PRESS_SECONDS is the template's timeout: test_link_presses
    assert f"({PRESS_SECONDS} seconds, the function's timeout)" in flat
