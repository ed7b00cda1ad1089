"""cmstoken-admin rotate-link-key: the command line, then the command through ``main`` against
moto in-process (stacks whose outputs and parameters are the template's contract: the output
``LinkSigningKeySecretArn`` only when ``OneClickReauthorization`` is "true"), its AWS errors
(botocore's Stubber, and refusals moto cannot produce injected with an event hook on the
command's session), and docs/operate.md's commands. Every output, log and error is scanned for
the key, which is never shown."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
import secrets
import shlex
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.stub import Stubber
from moto import mock_aws

from cmstoken.cli.admin import command as admin
from cmstoken.cli.admin import link_key
from cmstoken.cli.admin import stack as admin_stack
from cmstoken.cli.admin.command import build_parser, main, parse_args
from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.stack import DeployedStack

ACCOUNT, REGION = "123456789012", "eu-west-1"
WHERE = f"(account {ACCOUNT}, region {REGION})"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:user/operator"
KEY = re.compile(r"[A-Za-z0-9]{64}")
OPERATE = Path(__file__).resolve().parents[3] / "docs" / "operate.md"
ROTATED = (
    f"rotated the link signing key of stack 'tokens' {WHERE}: every re-authorization link "
    "sent before now is void; the next notice carries a new link"
)


# --- the stacks ---------------------------------------------------------------------------------


def template(one_click: str | None, secret_arn: str) -> str:
    """A stack with the functions' outputs and, as template.yaml has them, the parameter
    ``OneClickReauthorization`` and the output ``LinkSigningKeySecretArn`` only when it is on
    (``one_click`` None: a release before the parameter; "stale": the parameter but not yet
    the output, as DescribeStacks shows an update that turns it on)."""
    outputs: dict[str, Any] = {
        "BootstrapFunctionName": {"Value": "tokens-bootstrap"},
        "RotatorFunctionName": {"Value": "tokens-rotator"},
    }
    body: dict[str, Any] = {"Resources": {"Queue": {"Type": "AWS::SQS::Queue"}}}
    if one_click is not None:
        body["Parameters"] = {
            "OneClickReauthorization": {
                "Type": "String",
                "Default": "false",
                "AllowedValues": ["true", "false"],
            }
        }
        body["Conditions"] = {
            "OneClickEnabled": {"Fn::Equals": [{"Ref": "OneClickReauthorization"}, "true"]}
        }
        if one_click != "stale":
            outputs["LinkSigningKeySecretArn"] = {
                "Condition": "OneClickEnabled",
                "Value": secret_arn,
            }
    body["Outputs"] = outputs
    return json.dumps(body)


@dataclass
class Deployed:
    """The link signing key secret, read back through Secrets Manager."""

    secret_arn: str
    manager: Any

    def current(self) -> str:
        return str(self.manager.get_secret_value(SecretId=self.secret_arn)["SecretString"])

    def previous(self) -> str:
        answer = self.manager.get_secret_value(SecretId=self.secret_arn, VersionStage="AWSPREVIOUS")
        return str(answer["SecretString"])

    def versions(self) -> int:
        return len(self.manager.list_secret_version_ids(SecretId=self.secret_arn)["Versions"])


def deploy(one_click: str | None, secret_arn: str, name: str = "tokens") -> None:
    value = "true" if one_click == "stale" else one_click
    parameters = [] if value is None else [("OneClickReauthorization", value)]
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=name,
        TemplateBody=template(one_click, secret_arn),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters],
    )


@pytest.fixture
def key_secret(aws_credentials: None) -> Iterator[Deployed]:
    """The link signing key as the stack makes it (GenerateSecretString, 64 characters, no
    punctuation), before any stack names it."""
    with mock_aws():
        manager = boto3.client("secretsmanager", region_name=REGION)
        first = manager.get_random_password(PasswordLength=64, ExcludePunctuation=True)
        created = manager.create_secret(
            Name="tokens/link-signing-key", SecretString=first["RandomPassword"]
        )
        yield Deployed(created["ARN"], manager)


@pytest.fixture
def one_click_on(key_secret: Deployed) -> Deployed:
    deploy("true", key_secret.secret_arn)
    return key_secret


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main()'s exit status, standard output and its one line on standard error."""
    code = main(["--stack", "tokens", "--region", REGION, *argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert len(captured.err.splitlines()) == 1, captured.err
    return code, captured.out, captured.err.rstrip("\n")


def hook(monkeypatch: pytest.MonkeyPatch, event: str, handler: Callable[..., Any]) -> None:
    """Register ``handler`` for ``event`` on the session main() opens."""
    opened = admin_stack.open_session

    def open_session(region: str | None, profile: str | None = None) -> Any:
        session = opened(region, profile)
        session.events.register(event, handler)
        return session

    monkeypatch.setattr(admin, "open_session", open_session)


def refusing(error: Exception, sent: list[str]) -> Callable[..., None]:
    """A before-call handler that keeps the SecretString the call would send and raises."""

    def refuse(params: Any, **_: Any) -> None:
        sent.append(json.loads(params["body"])["SecretString"])
        raise error

    return refuse


def refusal(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "PutSecretValue")


def leaks(key: str, *texts: str) -> bool:
    return any(key in text for text in texts)


# --- the command line ---------------------------------------------------------------------------


def test_the_parser_takes_rotate_link_key_with_the_global_options_on_either_side() -> None:
    args = parse_args(["--stack", "tokens", "rotate-link-key"])
    assert (args.command, args.stack, args.region, args.debug) == (
        "rotate-link-key",
        "tokens",
        None,
        False,
    )
    args = parse_args(["rotate-link-key", "--stack", "tokens", "--region", REGION, "--debug"])
    assert (args.command, args.stack, args.region, args.debug) == (
        "rotate-link-key",
        "tokens",
        REGION,
        True,
    )
    # Controls: a misspelt command, an option it does not take (no other command asks for a
    # confirmation, so neither does this one), and no stack are usage errors.
    for argv in (
        ["--stack", "tokens", "rotate-link-keys"],
        ["--stack", "tokens", "rotate-link-key", "--yes"],
        ["rotate-link-key"],
    ):
        with pytest.raises(SystemExit) as exited:
            parse_args(argv)
        assert exited.value.code == 2, argv


def test_the_help_lists_it_among_the_commands_with_the_exit_statuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    listed = re.findall(r"^    ([a-z-]+)\s{2,}(\S.*)$", build_parser().format_help(), re.M)
    assert [name for name, _ in listed] == [
        "bootstrap",
        "status",
        "rotate",
        "rotate-link-key",
        "logs",
        "check-consumer",
    ]
    assert dict(listed)["rotate-link-key"].startswith("replace the key that signs")
    with pytest.raises(SystemExit) as exited:
        main(["rotate-link-key", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "LinkSigningKeySecretArn" in text
    assert "secretsmanager:PutSecretValue" in text
    assert "Exit status: 0 success (status: healthy); 1 failure" in text
    assert "2 usage error (a missing or malformed option, no AWS region" in text
    # Control: another command's help is not this one's.
    with pytest.raises(SystemExit):
        main(["rotate", "--help"])
    assert "LinkSigningKeySecretArn" not in capsys.readouterr().out


# --- the key ------------------------------------------------------------------------------------


def test_a_new_key_is_64_letters_and_digits_drawn_with_secrets_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GenerateSecretString with ExcludePunctuation leaves letters and digits.
    assert sorted(link_key.KEY_ALPHABET) == sorted(string.ascii_letters + string.digits)
    assert not set(link_key.KEY_ALPHABET) & set(string.punctuation + string.whitespace)
    keys = {link_key.new_link_key() for _ in range(20)}
    assert len(keys) == 20
    assert all(KEY.fullmatch(key) for key in keys)
    drawn: list[str] = []

    def choice(alphabet: str) -> str:
        drawn.append(alphabet)
        return "Q"

    monkeypatch.setattr(secrets, "choice", choice)
    assert link_key.new_link_key() == "Q" * 64
    assert drawn == [link_key.KEY_ALPHABET] * 64
    # Controls: the check refuses a short key and one with punctuation.
    assert not KEY.fullmatch("a" * 63)
    assert not KEY.fullmatch("a" * 63 + "-")


# --- rotating -----------------------------------------------------------------------------------


def test_it_writes_a_new_key_and_says_every_link_is_void_without_showing_it(
    one_click_on: Deployed, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="cmstoken")
    first = one_click_on.current()
    assert (one_click_on.versions(), KEY.fullmatch(first) is not None) == (1, True)  # control
    assert run(capsys, "rotate-link-key") == (0, "", ROTATED)
    second = one_click_on.current()
    assert second != first
    assert KEY.fullmatch(second)
    assert one_click_on.previous() == first  # PutSecretValue moved AWSCURRENT
    assert run(capsys, "rotate-link-key")[0] == 0
    third = one_click_on.current()
    assert len({first, second, third}) == 3
    assert one_click_on.versions() == 3
    # Neither key was printed or logged; control: the scan finds a key where there is one.
    assert not leaks(second, caplog.text)
    assert not leaks(third, caplog.text)
    assert leaks(third, f"x{third}y")


def test_its_one_line_goes_to_standard_error_as_rotates_does(
    one_click_on: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--stack", "tokens", "--region", REGION, "rotate-link-key"])
    captured = capsys.readouterr()
    key = one_click_on.current()
    assert (code, captured.out, captured.err) == (0, "", ROTATED + "\n")
    assert not leaks(key, captured.out, captured.err)
    # Control: the line names the stack, account and region it rotated, nothing more.
    assert re.fullmatch(r"[ -~]+", captured.err.rstrip("\n"))


@pytest.mark.parametrize(
    ("one_click", "code", "line"),
    [
        (
            "false",
            2,
            "stack 'tokens' has one-click re-authorization off (OneClickReauthorization is "
            '"false"), so no link signing key: nothing to rotate',
        ),
        (
            None,
            2,
            "stack 'tokens' has no one-click re-authorization (no parameter "
            "OneClickReauthorization: a release before it), so no link signing key: nothing to "
            "rotate",
        ),
        (
            "stale",
            1,
            "stack 'tokens' has OneClickReauthorization \"true\" but no output "
            "LinkSigningKeySecretArn yet: wait until its update completes (aws cloudformation "
            f"describe-stacks --stack-name tokens --region {REGION}) and retry",
        ),
    ],
    ids=["off", "older-release", "update-in-progress"],
)
def test_a_stack_without_the_output_has_nothing_to_rotate(
    key_secret: Deployed,
    capsys: pytest.CaptureFixture[str],
    one_click: str | None,
    code: int,
    line: str,
) -> None:
    deploy(one_click, key_secret.secret_arn)
    deploy("true", key_secret.secret_arn, name="other")
    first = key_secret.current()
    assert run(capsys, "rotate-link-key") == (code, "", f"cmstoken-admin: {line}")
    assert (key_secret.current(), key_secret.versions()) == (first, 1)
    # Control: a stack that has the output rotates the same secret.
    assert main(["--stack", "other", "--region", REGION, "rotate-link-key"]) == 0
    assert key_secret.current() != first


def test_a_secret_that_does_not_exist_is_one_line(
    one_click_on: Deployed, capsys: pytest.CaptureFixture[str]
) -> None:
    arn = one_click_on.secret_arn
    assert run(capsys, "rotate-link-key")[0] == 0  # control: while it exists, it rotates
    one_click_on.manager.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    assert run(capsys, "rotate-link-key") == (
        1,
        "",
        f"cmstoken-admin: {arn} not found (secretsmanager:PutSecretValue, account {ACCOUNT}, "
        f"region {REGION}): stack 'tokens' names it in its output LinkSigningKeySecretArn but "
        "it does not exist: check the stack (aws cloudformation describe-stack-events "
        f"--stack-name tokens --region {REGION}) or deploy it again",
    )


# --- AWS refusals -------------------------------------------------------------------------------


def test_access_denied_is_one_line_naming_the_call_and_the_secret(
    one_click_on: Deployed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arn = one_click_on.secret_arn
    first = one_click_on.current()
    message = (
        f"User: {OPERATOR} is not authorized to perform: secretsmanager:PutSecretValue on "
        f"resource: {arn} because no identity-based policy allows the "
        "secretsmanager:PutSecretValue action"
    )
    sent: list[str] = []
    hook(
        monkeypatch,
        "before-call.secrets-manager.PutSecretValue",
        refusing(refusal("AccessDeniedException", message), sent),
    )
    code, out, line = run(capsys, "rotate-link-key")
    assert (code, out, line) == (
        1,
        "",
        f"cmstoken-admin: secretsmanager:PutSecretValue denied on {arn} {WHERE}: grant "
        f"secretsmanager:PutSecretValue on {arn} to {OPERATOR}",
    )
    # The call was made with a fresh key (control), which the line does not show; nothing
    # was written.
    assert len(sent) == 1
    assert KEY.fullmatch(sent[0])
    assert sent[0] != first
    assert not leaks(sent[0], out, line)
    assert (one_click_on.current(), one_click_on.versions()) == (first, 1)


def test_with_debug_the_traceback_does_not_show_the_key_either(
    one_click_on: Deployed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: list[str] = []
    denied = refusal("AccessDeniedException", "Access Denied")
    hook(monkeypatch, "before-call.secrets-manager.PutSecretValue", refusing(denied, sent))
    code = main(["--stack", "tokens", "--region", REGION, "rotate-link-key", "--debug"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("Traceback (most recent call last):")  # control: it is the traceback
    assert "secretsmanager:PutSecretValue denied on" in err.splitlines()[-1]
    assert len(sent) == 1
    assert not leaks(sent[0], err)


def test_a_key_kms_refuses_names_the_kms_permission(
    one_click_on: Deployed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arn = one_click_on.secret_arn
    sent: list[str] = []
    denied = refusal("AccessDeniedException", "Access to KMS is not allowed")
    hook(monkeypatch, "before-call.secrets-manager.PutSecretValue", refusing(denied, sent))
    code, _, line = run(capsys, "rotate-link-key")
    assert (code, line) == (
        1,
        f"cmstoken-admin: secretsmanager:PutSecretValue on {arn} {WHERE}: KMS refused the "
        "secret's key (AccessDeniedException): grant kms:GenerateDataKey on the secret's KMS key "
        "(in its key policy or your IAM policy), or check that the key is enabled",
    )
    # Control: granting PutSecretValue, the advice for a plain denial, is not the advice here.
    assert "grant secretsmanager:PutSecretValue" not in line
    assert not leaks(sent[0], line)


def test_no_answer_says_the_key_may_be_stored_and_to_run_it_again(
    one_click_on: Deployed, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    arn = one_click_on.secret_arn
    sent: list[str] = []
    timeout = ReadTimeoutError(endpoint_url=f"https://secretsmanager.{REGION}.amazonaws.com/")
    hook(monkeypatch, "before-call.secrets-manager.PutSecretValue", refusing(timeout, sent))
    assert run(capsys, "rotate-link-key") == (
        1,
        "",
        f"cmstoken-admin: secretsmanager:PutSecretValue on {arn} {WHERE}: sent, but no answer "
        "came (ReadTimeoutError): the new key may or may not be stored: run the command again "
        "(a second rotation voids nothing more than the first)",
    )
    assert len(sent) == 1  # control: the call was attempted


def deployed_stack() -> DeployedStack:
    """A stack with one-click re-authorization on, as ``locate`` describes it."""
    arn = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:tokens/link-signing-key-AbCdEf"
    return DeployedStack(
        name="tokens",
        stack_id=f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/tokens/1",
        region=REGION,
        account=ACCOUNT,
        outputs={"LinkSigningKeySecretArn": arn},
        parameters={"OneClickReauthorization": "true"},
    )


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        (
            "AccessDeniedException",
            f"User: {OPERATOR} is not authorized to perform: secretsmanager:PutSecretValue",
            "secretsmanager:PutSecretValue denied on {arn} {where}: grant "
            "secretsmanager:PutSecretValue on {arn} to " + OPERATOR,
        ),
        (
            "ResourceNotFoundException",
            "Secrets Manager can't find the specified secret.",
            "{arn} not found (secretsmanager:PutSecretValue, {bare}): stack 'tokens' names it",
        ),
    ],
    ids=["denied", "missing"],
)
def test_the_function_turns_a_stubbed_refusal_into_one_admin_error(
    aws_credentials: None, code: str, message: str, expected: str
) -> None:
    stack = deployed_stack()
    arn = stack.outputs["LinkSigningKeySecretArn"]
    client = boto3.client("secretsmanager", region_name=REGION)
    key = link_key.new_link_key()
    out = io.StringIO()
    with Stubber(client) as stub:
        stub.add_client_error(
            "put_secret_value",
            service_error_code=code,
            service_message=message,
            http_status_code=400,
            expected_params={"SecretId": arn, "SecretString": key},
        )
        with pytest.raises(AdminError) as raised:
            link_key.rotate_link_key(stack, client, out=out, new_key=lambda: key)
        stub.assert_no_pending_responses()  # control: the call was the one expected
    text = expected.format(arn=arn, where=WHERE, bare=WHERE.strip("()"))
    assert raised.value.exit_status == 1
    assert str(raised.value).startswith(text)
    assert "\n" not in str(raised.value)
    assert not leaks(key, str(raised.value), raised.value.short, out.getvalue())
    assert out.getvalue() == ""


def test_an_error_whose_text_holds_the_parameters_does_not_show_the_key(
    aws_credentials: None,
) -> None:
    """botocore's own errors may quote what was sent (a stub's mismatch, a validation error):
    the key is taken out of the line, and the error is not chained (no --debug traceback)."""
    stack = deployed_stack()
    arn = stack.outputs["LinkSigningKeySecretArn"]
    client = boto3.client("secretsmanager", region_name=REGION)
    key = link_key.new_link_key()
    with Stubber(client) as stub:
        stub.add_response(
            "put_secret_value", {"ARN": arn}, expected_params={"SecretId": "another secret"}
        )
        with pytest.raises(AdminError) as raised:
            link_key.rotate_link_key(stack, client, out=io.StringIO(), new_key=lambda: key)
    # Control: the stub's own text quotes the key that was sent.
    context = raised.value.__context__
    assert leaks(key, str(context))
    assert raised.value.__suppress_context__
    assert raised.value.__cause__ is None
    assert not leaks(key, str(raised.value), raised.value.short)
    assert "[the new key]" in str(raised.value)
    assert str(raised.value).startswith(f"secretsmanager:PutSecretValue on {arn} failed {WHERE}")


# --- docs/operate.md ----------------------------------------------------------------------------


def shown_commands(text: str) -> list[list[str]]:
    """The `cmstoken-admin ...` commands a document shows, inline or in its sh blocks (an
    optional ``[--flag]`` given)."""
    lines = re.findall(r"(?<!`)`((?:\.venv/bin/)?cmstoken-admin [^`\n]+)`(?!`)", text)
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        lines += [line for line in block.splitlines() if "cmstoken-admin " in line]
    # The command only: what a pipe (`\|` in a table cell) feeds it to is not its own.
    lines = [re.split(r" \\?\| ", line, maxsplit=1)[0] for line in lines]
    return [shlex.split(re.sub(r"[][]", "", line), comments=True) for line in lines]


SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken/{}-AbCdEf"
# What a document's placeholder (an upper-case word, ``R1,R2``) stands for, by its option.
PLACEHOLDERS = {
    "--secret-arn": SECRET.format("service-token"),
    "--refresh-credential-arn": SECRET.format("refresh-credential"),
    "--replica-regions": "eu-west-1,us-west-2",
    "--bus-arn": "arn:aws:events:us-east-1:123456789012:event-bus/cmstoken-refresh-requests",
}


def taken(words: list[str]) -> str:
    """The command ``words`` run, as cmstoken-admin parses them, placeholders filled in
    (``help``: it prints its help and exits 0); ``SystemExit`` 2 for one it does not take."""
    filled = [
        PLACEHOLDERS.get(before, word) if word.isupper() or word == "R1,R2" else word
        for before, word in zip(["", *words], words, strict=False)
    ]
    try:
        return str(parse_args(filled[1:]).command)
    except SystemExit as exited:
        if exited.code == 0 and "--help" in words:
            return "help"
        raise


def test_every_command_operate_md_shows_is_one_cmstoken_admin_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    commands = {taken(words) for words in shown_commands(OPERATE.read_text())}
    assert commands == {
        "help",
        "bootstrap",
        "status",
        "rotate",
        "logs",
        "rotate-link-key",
        "check-consumer",
    }
    every = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert commands - {"help"} == set(every.choices)  # the table lists every command
    # Controls: the extraction sees a command in an sh block, and a misspelt one is refused.
    sample = (
        "`cmstoken-admin --stack NAME status [--json]`\n\n"
        "```sh\ncmstoken-admin --stack S rotate\n```"
    )
    assert shown_commands(sample) == [
        ["cmstoken-admin", "--stack", "NAME", "status", "--json"],
        ["cmstoken-admin", "--stack", "S", "rotate"],
    ]
    with pytest.raises(SystemExit):
        parse_args(["--stack", "NAME", "rotate-link-keys"])


def test_every_command_a_document_shows_is_one_cmstoken_admin_takes() -> None:
    """Every document (the README, docs/*.md) and the alarms' descriptions in template.yaml
    (which name the stack ${AWS::StackName}), with the single form `cmstoken-admin`."""
    from support import DOCUMENTS
    from template_model import source

    texts = [document.read_text() for document in DOCUMENTS]
    for resource in source()["Resources"].values():
        text = resource.get("Properties", {}).get("AlarmDescription")
        if isinstance(text, dict):
            texts.append(" ".join(str(text["Fn::Sub"]).split()).replace("${AWS::StackName}", "S"))
    shown = [words for text in texts for words in shown_commands(text)]
    assert len(shown) >= 40
    assert all(words[0] == "cmstoken-admin" for words in shown)
    every = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    named = {words[1] for words in shown if len(words) == 2} - {"--help"}  # `... bootstrap`
    assert named <= set(every.choices)
    run = {taken(words) for words in shown if len(words) > 2}  # whole command lines
    assert {"bootstrap", "status", "rotate", "logs"} <= run


def test_operate_md_has_a_row_and_a_section_for_it() -> None:
    text = OPERATE.read_text()
    rows = re.findall(r"^\| `cmstoken-admin --stack NAME ([a-z-]+)[^`]*` \|", text, re.M)
    assert rows == ["bootstrap", "status", "rotate", "logs", "rotate-link-key"]
    section = text.split("## Rotate the links' signing key\n", 1)[1].split("\n## ", 1)[0]
    assert "cmstoken-admin --stack NAME rotate-link-key" in section
    assert "exits 2" in section
    assert "](#rotate-the-links-signing-key)" in text  # the table links to the section
    # Control: the row pattern does not take a command the table does not have.
    assert "rotate-link-keys" not in rows
