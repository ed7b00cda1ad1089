"""cmstoken-admin: the operator command, run against the handlers in-process (LocalInvoker) on
moto and the emulator, and its AWS-facing parts against moto and stubs."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws

from cmstoken.cli.admin import command
from cmstoken.cli.admin.command import main, parse_args, run
from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.invokers import LambdaInvoker, LocalInvoker
from cmstoken.cli.admin.stack import StackFunctions, locate
from cmstoken.core.clock import to_iso
from cmstoken.rotation import decisions
from harness import Stack, approve_pending, record_secret_writes
from support import load_handler

pytestmark = pytest.mark.integration

FUNCTIONS = StackFunctions(bootstrap="stack-bootstrap", rotator="stack-rotator")
USER_CODE = re.compile(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}")


@pytest.fixture
def invoker(stack: Stack) -> LocalInvoker:
    return LocalInvoker(
        {
            FUNCTIONS.bootstrap: load_handler("bootstrap"),
            FUNCTIONS.rotator: load_handler("rotator"),
        },
        timeout_seconds={FUNCTIONS.bootstrap: 900, FUNCTIONS.rotator: 120},
        clock=stack.clock.now,
    )


def admin(invoker: LocalInvoker, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = run(parse_args(["--stack", "s", *argv]), invoker, FUNCTIONS, out)
    return code, out.getvalue()


def test_bootstrap_shows_the_code_waits_and_authorizes(stack: Stack, invoker: LocalInvoker) -> None:
    stack.clock.at(45, lambda: approve_pending(stack))
    code, output = admin(invoker, "bootstrap")
    assert code == 0
    pending_code = [line for line in output.splitlines() if line.strip() and "-" in line.strip()]
    assert any(len(line.strip()) == 9 for line in pending_code)  # the user code, on its own
    assert "/idp/activate?user_code=" in output
    assert "waiting for approval" in output
    assert "Authorized" in output
    assert "\u2588" in output  # the QR code's full blocks
    assert stack.published_token_works()
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.refresh_token not in output
    assert stack.service_document().token not in output


def test_bootstrap_reports_denial(stack: Stack, invoker: LocalInvoker) -> None:
    def deny() -> None:
        pending = stack.refresh_document().pending
        assert pending is not None
        stack.emulator.deny(pending.user_code)

    stack.clock.at(12, deny)
    with pytest.raises(AdminError, match="denied") as info:
        admin(invoker, "bootstrap")
    # The operator is told the command to run, not the bootstrap function's action name.
    assert "run `cmstoken-admin --stack s bootstrap` again" in str(info.value)
    assert "run start again" not in str(info.value)


def test_bootstrap_reports_expiry(stack: Stack, invoker: LocalInvoker) -> None:
    with pytest.raises(AdminError, match="expired"):
        admin(invoker, "bootstrap")
    assert stack.refresh_document().pending is None


def test_bootstrap_free_trial_flag(stack: Stack, invoker: LocalInvoker) -> None:
    stack.clock.at(10, lambda: approve_pending(stack))
    code, output = admin(invoker, "bootstrap", "--free-trial", "--no-qr")
    assert code == 0
    assert "\u2588" not in output
    credential = stack.refresh_document().credential
    assert credential is not None
    assert credential.client_id == stack.emulator.config.freetrial_client_id


def test_status_is_1_until_authorized_and_shows_metadata(
    stack: Stack, invoker: LocalInvoker
) -> None:
    code, output = admin(invoker, "status")
    assert code == 1
    assert "credential" in output
    assert "absent" in output
    stack.seed()
    code, output = admin(invoker, "status")
    assert code == 0
    assert "active" in output
    assert re.search(r"^service token  expires \S+Z \(in 23 h", output, re.M)
    assert output.splitlines()[-1].split() == ["verdict", "healthy"]


def test_rotate_knows_the_rotators_debounce_reason() -> None:
    assert command.SKIP_DEBOUNCED == decisions.SKIP_DEBOUNCED


def test_rotate_forces_a_debounced_rotation(stack: Stack, invoker: LocalInvoker) -> None:
    stack.seed()
    code, output = admin(invoker, "rotate")
    assert (code, output.split(":")[0]) == (0, "skipped")
    # says until when: the last refresh plus MinRefreshIntervalSeconds (the template's 600 s)
    refreshed_at = stack.service_document().refreshed_at
    assert refreshed_at is not None
    ends = to_iso(refreshed_at + 600)
    assert output.splitlines()[1] == (
        f"a forced rotation works from {ends} (MinRefreshIntervalSeconds, 600 s after the "
        "last refresh)"
    )
    stack.emulator.advance(601)
    code, output = admin(invoker, "rotate")
    assert (code, output.split(":")[0]) == (0, "rotated")


def test_a_function_error_is_reported(stack: Stack, invoker: LocalInvoker) -> None:
    with pytest.raises(AdminError, match=r"NotBootstrappedError: .*run the bootstrap"):
        admin(invoker, "rotate")


def test_a_tty_gets_a_live_countdown(stack: Stack, invoker: LocalInvoker) -> None:
    from cmstoken.cli.admin.bootstrap import _Countdown

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    now = [1000.0]
    with _Countdown(out, expires_at=1900.0, now=lambda: now[0]) as countdown:
        assert countdown.live
        countdown._stop.wait(1.3)
    assert "\rwaiting for approval: 15:00 left" in out.getvalue()
    # Whatever comes next (the result, or main()'s error message) starts on a line of its own.
    assert out.getvalue().endswith(" left  \n")


# --- the AWS-facing parts -------------------------------------------------------------------


@pytest.fixture
def cloudformation(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("cloudformation")


def create_stack(client: Any, name: str, outputs: dict[str, str]) -> None:
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    client.create_stack(StackName=name, TemplateBody=json.dumps(template))


def test_locate_reads_the_function_names_from_the_outputs(cloudformation: Any) -> None:
    create_stack(
        cloudformation,
        "tokens",
        {"BootstrapFunctionName": "tokens-boot", "RotatorFunctionName": "tokens-rot"},
    )
    stack = locate("tokens", cloudformation)
    assert stack.functions == StackFunctions("tokens-boot", "tokens-rot")
    assert (stack.name, stack.region, stack.account) == ("tokens", "us-east-1", "123456789012")
    # Without an ARN output, the function's ARN is built from the stack's account and region.
    assert stack.function_arn("tokens-rot") == (
        "arn:aws:lambda:us-east-1:123456789012:function:tokens-rot"
    )


def test_locate_explains_a_missing_stack_and_a_foreign_one(cloudformation: Any) -> None:
    with pytest.raises(AdminError, match="stack 'nope' not found in account 123456789012, reg"):
        locate("nope", cloudformation)
    create_stack(cloudformation, "other", {"Something": "else"})
    with pytest.raises(AdminError, match="has no output BootstrapFunctionName"):
        locate("other", cloudformation)


def test_main_exits_1_when_the_stack_is_missing(
    cloudformation: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--stack", "nope", "--region", "us-east-1", "status"]) == 1
    assert one_line(capsys) == (
        "cmstoken-admin: stack 'nope' not found in account 123456789012, region us-east-1 "
        "(cloudformation:DescribeStacks): check --stack and --region (aws cloudformation "
        "list-stacks --region us-east-1)"
    )


def test_main_exits_1_without_aws_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    assert main(["--stack", "s", "--region", "us-east-1", "status"]) == 1
    line = one_line(capsys)
    assert line.startswith("cmstoken-admin: no AWS credentials found")
    assert "(cloudformation:DescribeStacks, region us-east-1)" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["--stack", "s", "--region", "eu-west-1", "status"],
        ["status", "--stack", "s", "--region", "eu-west-1"],
        ["--region", "eu-west-1", "status", "--stack", "s"],
    ],
)
def test_stack_and_region_go_before_or_after_the_command(argv: list[str]) -> None:
    args = parse_args(argv)
    assert (args.command, args.stack, args.region) == ("status", "s", "eu-west-1")


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["status"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["--stack", "s", "explode"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["--stack", "s", "rotate", "--json"])  # --json is status's
    assert info.value.code == 2


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--region", "no where"], {}, "Provided region_name 'no where' doesn't match"),
        ([], {"AWS_PROFILE": "nobody"}, "the AWS profile 'nobody' is not in your AWS"),
    ],
)
def test_a_malformed_region_and_an_unknown_profile_are_usage_errors(
    aws_credentials: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["--stack", "s", *argv, "status"]) == 2
    line = one_line(capsys)
    assert expected in line
    assert line.endswith(
        "check --region, AWS_REGION and AWS_PROFILE"
        if argv
        else "check --profile and AWS_PROFILE (aws configure list-profiles lists the profiles)"
    )


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line main() printed on standard error (nothing else, no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def lambda_answer(payload: dict[str, Any], function_error: str | None = None) -> dict[str, Any]:
    body = json.dumps(payload).encode()
    answer: dict[str, Any] = {
        "StatusCode": 200,
        "Payload": StreamingBody(io.BytesIO(body), len(body)),
    }
    if function_error:
        answer["FunctionError"] = function_error
    return answer


def test_lambda_invoker_returns_the_result_and_reports_function_errors(
    aws_credentials: None,
) -> None:
    client = boto3.client("lambda", region_name="us-east-1")
    with Stubber(client) as stubber:
        stubber.add_response(
            "invoke",
            lambda_answer({"outcome": "skipped"}),
            {
                "FunctionName": "f",
                "InvocationType": "RequestResponse",
                "Payload": b'{"force": true}',
            },
        )
        stubber.add_response(
            "invoke",
            lambda_answer(
                {"errorType": "ReauthorizationRequiredError", "errorMessage": "run the bootstrap"},
                function_error="Unhandled",
            ),
        )
        invoker = LambdaInvoker(client)
        assert invoker.invoke("f", {"force": True}) == {"outcome": "skipped"}
        with pytest.raises(AdminError, match="f failed: ReauthorizationRequiredError: run the"):
            invoker.invoke("f", {"force": True})


# --- version churn, identity, and what the logs never hold -------------------------------------


def test_a_14_minute_bootstrap_writes_few_versions_and_never_logs_the_user_code(
    stack: Stack,
    invoker: LocalInvoker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness import REFRESH_SECRET, SERVICE_SECRET

    writes = record_secret_writes(monkeypatch)
    polls: list[int] = []  # refresh secret writes per poll invocation
    invoke = invoker.invoke

    def counting(function: str, payload: Any) -> Any:
        before = writes.count(REFRESH_SECRET)
        result = invoke(function, payload)
        if payload.get("action") == "poll" and result.get("status") == "pending":
            polls.append(writes.count(REFRESH_SECRET) - before)
        return result

    monkeypatch.setattr(invoker, "invoke", counting)
    stack.clock.at(14 * 60, lambda: approve_pending(stack))
    code, output = admin(invoker, "bootstrap", "--no-qr")
    assert code == 0
    assert len(polls) >= 14 * 60 / 20 - 2  # one poll invocation every 20 s or so
    assert max(polls) <= 1
    assert writes.count(REFRESH_SECRET) <= 20
    assert writes.count(REFRESH_SECRET) == 2  # the pending authorization, the credential
    assert writes.count(SERVICE_SECRET) == 1
    user_code = next(
        line.strip() for line in output.splitlines() if USER_CODE.fullmatch(line.strip())
    )
    logs = capsys.readouterr().out
    assert user_code not in logs
    assert stack.published_token_works()


def test_a_reauthorization_writes_few_versions(
    stack: Stack, invoker: LocalInvoker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness import REFRESH_SECRET

    stack.clock.at(10, lambda: approve_pending(stack))
    assert admin(invoker, "bootstrap", "--no-qr")[0] == 0
    writes = record_secret_writes(monkeypatch)
    stack.emulator.advance(3600)
    stack.clock.at(stack.clock.now() - stack.clock.start + 600, lambda: approve_pending(stack))
    assert admin(invoker, "bootstrap", "--no-qr")[0] == 0
    # the pending authorization, the candidate, its promotion
    assert writes.count(REFRESH_SECRET) == 3
    assert stack.published_token_works()


def test_bootstrap_by_another_identity_needs_new_identity(
    stack: Stack, invoker: LocalInvoker
) -> None:
    stack.clock.at(10, lambda: approve_pending(stack))
    assert admin(invoker, "bootstrap", "--no-qr")[0] == 0
    pinned = stack.refresh_document().credential
    assert pinned is not None

    def approve_as_someone_else() -> None:
        pending = stack.refresh_document().pending
        assert pending is not None
        stack.emulator.approve(pending.user_code, subject="auth0|someone-else")

    stack.clock.at(stack.clock.now() - stack.clock.start + 10, approve_as_someone_else)
    with pytest.raises(AdminError, match=r"different identity.*--new-identity"):
        admin(invoker, "bootstrap", "--no-qr")
    assert stack.refresh_document().credential == pinned
    stack.clock.at(stack.clock.now() - stack.clock.start + 10, approve_as_someone_else)
    code, output = admin(invoker, "bootstrap", "--no-qr", "--new-identity")
    assert code == 0
    assert "identity" in output
    switched = stack.refresh_document().credential
    assert switched is not None
    assert switched.subject_sha256 != pinned.subject_sha256
    assert stack.published_token_works()
