"""The documentation says what the tools really do: the make targets it lists are the
Makefile's, the output formats it describes are the ones get-token prints, and the exit codes it
lists for get-token and cmstoken-admin are the ones their help texts list."""

from __future__ import annotations

import re
from pathlib import Path

from support import documentation, table

ROOT = Path(__file__).resolve().parents[2]
README = documentation()


def test_the_listed_make_targets_are_the_makefiles() -> None:
    documented = {
        match.group(1)
        for match in re.finditer(r"^([a-z-]+):.*## ", (ROOT / "Makefile").read_text(), re.M)
    }
    sentence = re.search(r"`make help` lists the other\s+targets \(([^)]*)\)", README)
    assert sentence is not None
    listed = set(re.findall(r"`([a-z-]+)`", sentence.group(1)))
    assert listed == documented - {"help", "test", "demo"}  # the two commands are named above


def test_the_plain_output_is_described_as_printed() -> None:
    sentence = re.search(r"`-o plain` prints three lines, (.*?) \(no scope", README, re.S)
    assert sentence is not None
    assert re.findall(r"`(\w+): \.\.\.`", sentence.group(1)) == [
        "access_token",
        "refresh_token",
        "expires_in",
    ]


def documented_exit_codes(command: str) -> dict[int, str]:
    return {
        int(code): " ".join(meaning.replace("`", "").split())
        for code, meaning in table(f"exit-codes: {command}")
    }


def test_get_tokens_documented_exit_codes_are_its_helps() -> None:
    from cmstoken.cli.get_token.parser import build_parser

    help_text = build_parser().format_help()
    listed = help_text.split("\nexit codes:\n", 1)[1]
    codes = {
        int(code): " ".join(meaning.replace(" (see above)", "").split())
        for code, meaning in re.findall(r"^  (\d+)\s+(.*?)(?=^  \d|\Z)", listed, re.M | re.S)
    }
    assert set(codes) == {0, 1, 2, 130}
    assert documented_exit_codes("get-token") == codes


def test_cmstoken_admins_documented_exit_codes_are_its_helps() -> None:
    from cmstoken.cli.admin.command import build_parser

    help_text = " ".join(build_parser().format_help().split())
    statement = re.search(r"Exit status: (.*?)\. An AWS error", help_text)
    assert statement is not None
    codes = {
        int(code): meaning
        for code, meaning in (item.split(" ", 1) for item in statement.group(1).split("; "))
    }
    assert set(codes) == {0, 1, 2, 130}
    assert documented_exit_codes("cmstoken-admin") == codes


def test_the_organisation_examples_call_of_the_helper_is_one_it_takes() -> None:
    """The README's inline ``ServiceTokenProvider(...)`` call: its keywords are the provider's,
    and with its placeholders filled in it constructs (no AWS call is made until a read)."""
    import ast
    import inspect

    from cmstoken.consumer import ServiceTokenProvider

    text = (ROOT / "README.md").read_text()
    (call_text,) = re.findall(r"`(ServiceTokenProvider\([^`]*\))`", text)
    call = ast.parse(call_text, mode="eval").body
    assert isinstance(call, ast.Call)
    keywords = {keyword.arg for keyword in call.keywords}
    assert keywords <= set(inspect.signature(ServiceTokenProvider).parameters)
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken/service-token-AbCdEf"
    bus = "arn:aws:events:us-east-1:123456789012:event-bus/cmstoken-refresh-requests"
    names = {"ServiceTokenProvider": ServiceTokenProvider, "ARN": arn, "BUS_ARN": bus}
    provider = eval(call_text, names)  # noqa: S307 (the README's own text, checked above)
    assert provider.replica_regions == ("eu-west-1",)
    assert provider.event_bus == bus


def test_the_organisation_examples_share_reaches_the_units_its_stack_set_deploys_to() -> None:
    """The README shares the token with an organisational unit and its StackSet recipe
    (docs/organisation-consumers.md) deploys the consumer policy to that unit: a StackSet
    deployed to an OU reaches the accounts of its child OUs too (CloudFormation User Guide,
    StackSets with service-managed permissions: "all accounts in the target OU and its child
    OUs"), so each unit path must end in ``/*`` (aws:PrincipalOrgPaths compared with StringLike;
    without it, accounts of a child unit get the policy and are refused by the secret). StackSets
    never deploy to the management account ("StackSets doesn't deploy stack instances to the
    organization's management account"): the recipe says so."""
    text = (ROOT / "README.md").read_text()
    (paths,) = re.findall(r"ConsumerOrganizationalUnitPaths=(\S+)", text)
    assert all(path.endswith("/*") for path in paths.split(","))
    recipe = " ".join((ROOT / "docs" / "organisation-consumers.md").read_text().split())
    assert "StackSets never deploy to the organisation's management account" in recipe
    assert "must end in `/*`" in recipe


def flat(text: str) -> str:
    """``text`` as one line of words, without Markdown's backticks."""
    return " ".join(text.replace("`", "").split())


def test_get_tokens_help_and_page_tell_the_same_retry_story() -> None:
    """One text (``RETRY_STORY``, built from the retry policy and held to the code by the
    get-token unit tests) in ``get-token --help`` and in docs/get-token.md."""
    from cmstoken.cli.get_token.parser import build_parser
    from cmstoken.cli.get_token.retries import RETRY_STORY

    story = flat(RETRY_STORY)
    assert story in flat(build_parser().format_help())
    assert story in flat((ROOT / "docs" / "get-token.md").read_text())


# --- the operator's first hour (issue 30) -----------------------------------------------------

PATH_LINE = 'export PATH="$PWD/.venv/bin:$PATH"'


def test_the_quickstart_names_everything_it_runs() -> None:
    """Its blocks run make, sam (from the venv), the AWS CLI and jq: each is named first, with
    the credentials and how the venv's commands get on PATH."""
    from support import section

    text = " ".join(section("Quickstart").split())
    needs = text.split(" 1. ", 1)[0]
    for what in ("Python 3.13", "`make`", "the AWS CLI", "`jq`", "AWS credentials"):
        assert what in needs, what
    assert PATH_LINE in needs
    assert "source .venv/bin/activate" in needs


def test_the_quickstart_deploy_subscribes_an_address_to_the_alarms() -> None:
    from support import recipe, section

    deploy = " ".join(recipe("quickstart-deploy").replace("\\\n", " ").split())
    assert "AlarmEmail=you@example.com" in deploy
    assert "ServiceBaseUrl=https://api.example.com" in deploy
    assert PATH_LINE in deploy  # the later steps' commands, pasted in order
    text = " ".join(section("Quickstart").split())
    assert "confirm the subscription from the mail AWS sends it" in text


def test_the_venvs_commands_are_shown_in_one_form() -> None:
    """`cmstoken-admin`, `get-token` and `cms-emulator` as commands on PATH, everywhere; the
    README and docs/operate.md say how to put them there."""
    from support import DOCUMENTS

    for document in DOCUMENTS:
        found = re.findall(
            r"\.venv/bin/(?:cmstoken-admin|get-token|cms-emulator)\b", document.read_text()
        )
        assert found == [], document.name
    for document in (ROOT / "README.md", ROOT / "docs" / "operate.md"):
        text = document.read_text()
        assert PATH_LINE in text, document.name
        assert "source .venv/bin/activate" in text, document.name


def test_every_alarm_of_the_runbook_has_a_command_to_paste() -> None:
    """Each alarm's "Do this" holds a whole command line; where it says to read the rotator's
    log, the command that prints it (no bare log group name to look up by hand)."""
    from support import section

    runbook = section("Alarms and what to do")
    alarms = re.split(r"^### ", runbook, flags=re.M)[1:]
    assert len(alarms) >= 6
    for alarm in alarms:
        name = alarm.split("\n", 1)[0]
        if "dead letter queue" in name:
            continue
        todo = alarm.split("**Do this:**", 1)[1]
        assert re.search(r"cmstoken-admin --stack NAME [a-z]", todo), name
        if "log" in todo:
            assert "cmstoken-admin --stack NAME logs" in todo, name
    for document in (ROOT / "README.md", ROOT / "docs" / "operate.md"):
        assert "read `/cmstoken/NAME/rotator`" not in document.read_text()


def test_the_operators_policy_lets_logs_read_each_functions_log_group() -> None:
    import json
    from fnmatch import fnmatchcase

    from cmstoken.cli.admin.logs import FUNCTIONS, log_group

    text = (ROOT / "docs" / "operate.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    (policy,) = [json.loads(block) for block in blocks if "FindTheStack" in block]
    (statement,) = [s for s in policy["Statement"] if s["Action"] == "logs:FilterLogEvents"]
    assert statement["Effect"] == "Allow"
    for function in FUNCTIONS:
        arn = f"arn:aws:logs:REGION:ACCOUNT:log-group:{log_group('NAME', function)}"
        assert fnmatchcase(arn, statement["Resource"]), function
    assert not fnmatchcase("arn:aws:logs:REGION:ACCOUNT:log-group:/other/x", statement["Resource"])
