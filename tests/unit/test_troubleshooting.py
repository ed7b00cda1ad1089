"""docs/troubleshooting.md holds to the code (issue 20, item 10): for each of its problems the
code path is run (the functions' handlers on moto in-process and a scripted upstream, the consumer
helper, ``cmstoken-admin`` and ``get-token`` through their ``main``), and every symptom the
document quotes in the problem's **Symptom** (each inline code span and each line of a text
block, ``…`` standing for what differs) must be in what that run printed, logged or raised;
every exit status it names must be the run's; every alarm it names must be one whose metric the
run reported past its threshold (``template.yaml``'s definition), or, for ``RotatorSilentAlarm``,
the heartbeat that counts a silence as breaching. A few names that are no output (a header, a
log group) must be in the layer's source or the template. Every command the document shows
parses with its tool's own parser (``cmstoken-admin``, ``get-token``), against botocore's model
of the AWS CLI's service (``aws``), or compiles (``jq``); the schedule's fix is run on moto.
No sockets: TLS failures come from an in-memory handshake."""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import io
import itertools
import json
import operator
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws
from urllib3.exceptions import MaxRetryError
from urllib3.exceptions import SSLError as Urllib3SSLError

from cmstoken import runtime
from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.cli.admin import bootstrap as admin_bootstrap
from cmstoken.cli.admin import command as admin_command
from cmstoken.cli.admin import status as admin_status
from cmstoken.cli.admin.invokers import Invoker, LambdaInvoker, LocalInvoker
from cmstoken.cli.admin.stack import DeployedStack, StackFunctions
from cmstoken.cli.admin.status import StatusSources
from cmstoken.cli.get_token import command as get_token_command
from cmstoken.cli.get_token.parser import parse_args as get_token_args
from cmstoken.consumer import ConsumerError, ServiceTokenProvider
from cmstoken.upstream.service import ServiceClient
from harness import refuse_rotation_writes
from support import (
    DEVICE_DOCUMENT,
    PROVIDER_DOCUMENT,
    TOKENS_DOCUMENT,
    Answer,
    FakeClock,
    ScriptedTransport,
    check_aws_command,
    emitted_metrics,
    load_handler,
    make_jwt,
    no_spread,
    recipe,
    response,
    section,
)
from template_model import Resolver, parameter_values, source

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "troubleshooting.md"
LAYER = ROOT / "layers" / "cmstoken" / "cmstoken"
BASE_URL = "https://api.example.com"
ISSUER = PROVIDER_DOCUMENT["issuerUri"]
CLIENT_ID = PROVIDER_DOCUMENT["clientId"]
ACCOUNT, REGION, STACK_REGION = "123456789012", "us-east-1", "eu-west-1"
# The placeholders the document uses are the names these runs use, so that lines match as shown.
NAME = "NAME"
REFRESH_SECRET, TOKEN_SECRET = f"{NAME}/refresh-credential", f"{NAME}/service-token"
SECRETS = (REFRESH_SECRET, TOKEN_SECRET)
FUNCTIONS = StackFunctions(f"{NAME}-BootstrapFunction-1A2B3C", f"{NAME}-RotatorFunction-4D5E6F")
HOUR, DAY = 3600, 86400
INVALID_GRANT = {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."}
TOO_MANY = {"error": "too_many_requests", "error_description": "Global limit has been reached"}
FORBIDDEN = {
    "error": {"status": 403, "message": "Forbidden", "details": "no", "reference": "upmrid/1"}
}
EXPIRED_CODE = {"error": "expired_token", "error_description": "The device code has expired."}


# --- the document --------------------------------------------------------------------------------

FENCE = re.compile(r"^```(\w*)\s*$")
COMMAND = re.compile(r"^(?:\.venv/bin/)?(?:cmstoken-admin|get-token|aws|jq)\s")
ELLIPSIS = "…"


def problems_in(text: str) -> dict[str, str]:
    """The document's ``##`` sections by heading (a problem each)."""
    found: dict[str, str] = {}
    heading = None
    fenced = False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            heading = line[3:].strip()
            found[heading] = ""
        elif heading is not None:
            found[heading] += line
    return found


def part(body: str, name: str) -> str:
    """The **Symptom.**, **Cause.** or **Fix.** part of a problem (up to the next part)."""
    names = ["Symptom", "Cause", "Fix"]
    start = body.index(f"**{name}.**")
    ends = [body.index(f"**{other}.**") for other in names[names.index(name) + 1 :]]
    return body[start : min(ends, default=len(body))]


def prose_and_blocks(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The text outside fenced blocks, and the blocks (language, content)."""
    prose: list[str] = []
    blocks: list[tuple[str, str]] = []
    current: list[str] | None = None
    language = ""
    for line in text.splitlines(keepends=True):
        fence = FENCE.match(line)
        if fence and current is None:
            current, language = [], fence.group(1)
        elif fence and current is not None:
            blocks.append((language, "".join(current)))
            current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
    return "".join(prose), blocks


def spans(prose: str) -> list[str]:
    """The inline code spans of a text (a span may run over a line break)."""
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]


def matches(expected: str, texts: Iterable[str]) -> bool:
    """Whether ``expected`` (``…`` standing for any text) is in one of ``texts``, white space
    compared as single spaces."""
    pieces = " ".join(expected.split()).split(ELLIPSIS)
    pattern = re.compile(".+?".join(re.escape(piece) for piece in pieces))
    return any(pattern.search(" ".join(text.split())) for text in texts)


# --- what a run produced -------------------------------------------------------------------------


@dataclass
class Observed:
    """What the runs of one problem printed, logged or raised, their exit statuses, the metrics
    the rotator reported and the alarms they breach."""

    texts: list[str] = field(default_factory=list)
    exits: set[int] = field(default_factory=set)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    silent: bool = False  # nothing runs the rotator

    def logs(self, output: str) -> None:
        """Captured function output: the log records (each field's value too) and metrics."""
        self.texts.append(output)
        for line in output.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                self.texts.extend(str(value) for value in record.values())
        for name, values in emitted_metrics(output).items():
            self.metrics.setdefault(name, []).extend(values)

    def consumer(self, error: ConsumerError) -> None:
        self.texts += [error.reason, str(error)]

    @property
    def alarms(self) -> set[str]:
        return breached_alarms(self.metrics) | (silent_alarms() if self.silent else set())


COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": operator.ge,
    "GreaterThanThreshold": operator.gt,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}


def breached_alarms(metrics: dict[str, list[float]]) -> set[str]:
    """The template's alarms (with actions: the heartbeat is only an input) whose metric the
    runs reported past the threshold, with the default parameters."""
    resolver = Resolver(parameter_values(), template=source())
    found = set()
    for name, resource in source()["Resources"].items():
        if resource["Type"] != "AWS::CloudWatch::Alarm" or not resolver.present(resource):
            continue
        alarm = resolver.resolve(resource["Properties"])
        if not alarm.get("AlarmActions"):
            continue
        compare = COMPARISONS[alarm["ComparisonOperator"]]
        threshold = float(alarm["Threshold"])
        if any(compare(value, threshold) for value in metrics.get(alarm["MetricName"], [])):
            found.add(name)
    return found


def silent_alarms() -> set[str]:
    """The alarm that a rotator nothing runs raises: the composite over a heartbeat that counts
    missing data (no run reports) as breaching."""
    resources = source()["Resources"]
    heartbeat = resources["RotatorHeartbeatAlarm"]["Properties"]
    rule = Resolver(parameter_values(), template=source()).resolve(
        resources["RotatorSilentAlarm"]["Properties"]["AlarmRule"]
    )
    assert heartbeat["TreatMissingData"] == "breaching"
    assert heartbeat["MetricName"] == "RotationFailed"  # every run reports it, 0 or 1
    assert 'ALARM("<RotatorHeartbeatAlarm>")' in rule
    return {"RotatorSilentAlarm"}


def symptom_problems(symptom: str, observed: Observed, named: Sequence[str] = ()) -> list[str]:
    """What the problem's symptom quotes that its runs did not produce (empty: it holds).
    ``named``: spans that are names rather than output (checked elsewhere)."""
    prose, blocks = prose_and_blocks(symptom)
    alarms = {
        name
        for name, resource in source()["Resources"].items()
        if resource["Type"].startswith("AWS::CloudWatch::") and "Alarm" in resource["Type"]
    }
    wrong = []
    for span in spans(prose):
        if COMMAND.match(span) or span in named:
            continue
        if span in alarms:
            if span not in observed.alarms:
                wrong.append(f"alarm {span} not raised")
        elif not matches(span, observed.texts):
            wrong.append(span)
    for language, content in blocks:
        assert language == "text", f"a symptom's block is output: {language}"
        wrong += [line for line in content.splitlines() if not matches(line, observed.texts)]
    for code in re.findall(r"\bexit(?:s| status)? (\d+)", prose, re.IGNORECASE):
        if int(code) not in observed.exits:
            wrong.append(f"exit {code} (the runs exited {sorted(observed.exits)})")
    return wrong


# --- a stack: moto in-process, a scripted upstream, the handlers --------------------------------


@dataclass
class Bench:
    """A stack of ``NAME``: both secrets in moto (empty), the functions' environment, their
    upstream a script and their clock a fake one; the captured output; the fixtures."""

    clock: FakeClock
    transport: ScriptedTransport
    secrets: Any
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    context: Callable[[], Any]

    def rotate(self, script: Sequence[Answer] = ()) -> str:
        """One scheduled rotator run on ``script``; its output (logs and metrics)."""
        self.capsys.readouterr()
        self.transport.script = list(script)
        with contextlib.suppress(Exception):  # a failed run raises; its log says why
            load_handler("rotator")({}, self.context())
        assert self.transport.script == [], "the run did not use its whole script"
        return self.capsys.readouterr().out

    def invoker(self) -> Invoker:
        return LocalInvoker(
            {
                FUNCTIONS.bootstrap: load_handler("bootstrap"),
                FUNCTIONS.rotator: load_handler("rotator"),
            },
            timeout_seconds={FUNCTIONS.bootstrap: 900, FUNCTIONS.rotator: 120},
            clock=self.clock.now,
        )

    def admin(
        self,
        argv: list[str],
        script: Sequence[Answer] = (),
        *,
        invoker: Invoker | None = None,
        functions: StackFunctions = FUNCTIONS,
        sources: StatusSources | None = None,
    ) -> tuple[int, str, str]:
        """``cmstoken-admin ARGV`` through its ``main`` (its exit status and one-line errors),
        the stack located as given instead of through CloudFormation, its times the fake
        clock's; the exit status, standard output and standard error (the functions' logs
        included, as their log groups would hold them)."""
        self.capsys.readouterr()
        self.transport.script = list(script)
        used = invoker or self.invoker()
        with self.monkeypatch.context() as patch:
            now = self.clock.now
            patch.setattr(
                admin_command, "bootstrap", functools.partial(admin_bootstrap.bootstrap, now=now)
            )
            patch.setattr(admin_command, "status", functools.partial(admin_status.status, now=now))

            def against_aws(args: Any) -> int:
                out = sys.stdout if args.command == "status" else sys.stderr
                return admin_command.run(args, used, functions, out, sources=sources)

            patch.setattr(admin_command, "_against_aws", against_aws)
            code = admin_command.main(["--stack", NAME, *argv])
        assert self.transport.script == [], "the command did not use its whole script"
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def seed(self, *, subject: str | None = None, expires_in: float = 5 * HOUR) -> None:
        """What a bootstrap a day ago left: an active credential (authorized by ``subject``)
        and a published token that expires in ``expires_in`` (5 h: within the refresh margin,
        not yet near the expiry alarm's 2 h)."""
        now = self.clock.now()
        credential = RefreshCredential(
            refresh_token="v1.troubleshooting-refresh-token",
            client_id=CLIENT_ID,
            issuer_url=ISSUER.rstrip("/"),
            status=STATUS_ACTIVE,
            authorized_at=now - DAY,
            refreshed_at=now - DAY,
            reauthorize_by=now + 29 * DAY,
            subject_sha256=None if subject is None else identity(subject),
        )
        published = ServiceTokenDocument(
            token=make_jwt({"exp": now + expires_in}),
            expires_at=now + expires_in,
            api_url=f"{BASE_URL}/api",
            issued_at=now - DAY,
            refreshed_at=now - DAY,
            reauthorize_by=now + 29 * DAY,
            min_refresh_interval_seconds=600,
        )
        self.secrets.put_secret_value(
            SecretId=REFRESH_SECRET, SecretString=RefreshSecret(credential=credential).to_json()
        )
        self.secrets.put_secret_value(SecretId=TOKEN_SECRET, SecretString=published.to_json())

    def consumer(self, **options: Any) -> ServiceTokenProvider:
        options.setdefault("random_fraction", no_spread)
        return ServiceTokenProvider(
            TOKEN_SECRET, secrets_client=self.secrets, clock=self.clock, **options
        )


def identity(subject: str) -> str:
    """How the stack records who authorized it (``bootstrap.identity``)."""
    return hashlib.sha256(f"{ISSUER.rstrip('/')}\n{subject}".encode()).hexdigest()


@pytest.fixture
def bench(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    lambda_context: Any,
    lambda_logs: None,
    aws_credentials: None,
) -> Iterator[Bench]:
    with mock_aws():
        for name, value in {
            "SERVICE_BASE_URL": BASE_URL,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": TOKEN_SECRET,
        }.items():
            monkeypatch.setenv(name, value)
        clock = FakeClock()
        transport = ScriptedTransport(clock=clock)
        service = ServiceClient(BASE_URL, transport=transport, clock=clock)
        monkeypatch.setattr(runtime, "CLOCK", clock)
        monkeypatch.setattr(runtime, "service", functools.cache(lambda: service))
        runtime.reset()
        secrets = boto3.client("secretsmanager")
        secrets.create_secret(Name=REFRESH_SECRET)
        secrets.create_secret(Name=TOKEN_SECRET)
        yield Bench(clock, transport, secrets, capsys, monkeypatch, lambda: type(lambda_context)())
        runtime.reset()


# --- the upstream's answers ----------------------------------------------------------------------


def device_flow(answer: Answer) -> list[Answer]:
    """A bootstrap's or get-token's start (provider information, device code), then the poll's
    ``answer``."""
    return [response(200, PROVIDER_DOCUMENT), response(200, DEVICE_DOCUMENT), answer]


def approved_by(clock: FakeClock, subject: str) -> Answer:
    """The tokens of an approval by ``subject`` (its ID token names it)."""
    id_token = make_jwt({"iss": ISSUER, "sub": subject, "aud": CLIENT_ID})
    return response(
        200,
        {
            **TOKENS_DOCUMENT,
            "id_token": id_token,
            "access_token": make_jwt({"exp": clock.now() + DAY}),
            "refresh_token": f"v1.refresh-of-{subject}",
        },
    )


def exchanged(clock: FakeClock) -> Answer:
    return response(200, {"token": make_jwt({"exp": clock.now() + DAY})})


def refreshed(clock: FakeClock) -> Answer:
    return response(200, {**TOKENS_DOCUMENT, "access_token": make_jwt({"exp": clock.now() + DAY})})


# --- each problem, run -------------------------------------------------------------------------


def not_bootstrapped(bench: Bench) -> Observed:
    seen = Observed()
    seen.logs(bench.rotate())
    with pytest.raises(ConsumerError) as raised:
        bench.consumer().token()
    seen.consumer(raised.value)
    code, out, _ = bench.admin(["status"])
    seen.exits.add(code)
    seen.texts.append(out)
    # The verdict advises only the bootstrap: a rotation fails the same way until then.
    (verdict,) = [line for line in out.splitlines() if line.startswith("verdict")]
    assert verdict.endswith(f"not bootstrapped: run `cmstoken-admin --stack {NAME} bootstrap`")
    code, _, err = bench.admin(["rotate"])
    assert code == 1
    assert "NotBootstrappedError" in err
    return seen


def credential_refused(bench: Bench) -> Observed:
    seen = Observed()
    bench.seed()
    seen.logs(bench.rotate([response(403, INVALID_GRANT)]))
    later = bench.rotate()  # no upstream call: the script is empty
    assert "reauthorization required" in later
    seen.logs(later)
    code, out, _ = bench.admin(["status"])
    seen.exits.add(code)
    seen.texts.append(out)
    provider = bench.consumer()
    assert provider.token()  # the published token, until it expires
    bench.clock.advance(5 * HOUR)
    with pytest.raises(ConsumerError) as raised:
        provider.token()
    seen.consumer(raised.value)
    # A refusal of the token presented again after its answer was lost (a gateway's 502) says so.
    bench.seed()
    gateway = response(502, {"message": "Bad Gateway"})
    seen.logs(bench.rotate([gateway, response(403, INVALID_GRANT)]))
    return seen


def another_identity(bench: Bench) -> Observed:
    seen = Observed()
    bench.seed(subject="auth0|owner")
    before = bench.secrets.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"]
    code, out, err = bench.admin(
        ["bootstrap"], device_flow(approved_by(bench.clock, "auth0|someone-else"))
    )
    seen.exits.add(code)
    seen.texts += [err]
    seen.logs(out)
    # The advice names this command's flag once, and the line ends with it.
    assert err.count("--new-identity") == 1
    assert err.rstrip().endswith("--new-identity` to allow it")
    after = json.loads(bench.secrets.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"])
    assert after["refresh_token"] == json.loads(before)["refresh_token"]  # nothing changed
    return seen


def verification_refused(bench: Bench) -> Observed:
    seen = Observed()
    clock = bench.clock
    # A first bootstrap, approved by an account the service refuses.
    refused = [exchanged(clock), response(403, FORBIDDEN)]
    flow = device_flow(approved_by(clock, "auth0|no-access"))
    code, _, err = bench.admin(["bootstrap"], flow + refused)
    seen.exits.add(code)
    seen.texts.append(err)
    # Nothing was published before; the rotator cannot publish either (issue 20).
    assert "previous token" not in err
    assert "rotator publishes" not in err
    # The rotator exchanges the stored access token, and the service refuses it again.
    seen.logs(bench.rotate(refused))
    code, out, _ = bench.admin(["status"])
    seen.exits.add(code)
    seen.texts.append(out)
    (verdict,) = [line for line in out.splitlines() if line.startswith("verdict")]
    assert "--new-identity" in verdict
    assert "rotate" not in verdict  # it would be refused the same way
    # The fix: another account, with --new-identity (without it, that account is refused).
    clock.advance(HOUR)
    code, _, err = bench.admin(["bootstrap"], device_flow(approved_by(clock, "auth0|ok")))
    assert code == 1
    assert "different identity" in err
    clock.advance(HOUR)
    accepted = [exchanged(clock), response(200, {"data": []})]
    flow = device_flow(approved_by(clock, "auth0|ok"))
    code, _, _ = bench.admin(["bootstrap", "--new-identity"], flow + accepted)
    assert code == 0
    # Over that working credential, an approval the service refuses changes nothing.
    clock.advance(HOUR)
    before = [bench.secrets.get_secret_value(SecretId=secret) for secret in SECRETS]
    flow = device_flow(approved_by(clock, "auth0|no-access"))
    code, _, err = bench.admin(["bootstrap", "--new-identity"], flow + refused)
    seen.exits.add(code)
    seen.texts.append(err)
    after = [bench.secrets.get_secret_value(SecretId=secret) for secret in SECRETS]
    assert [value["SecretString"] for value in after] == [v["SecretString"] for v in before]
    return seen


def rate_limited(bench: Bench) -> Observed:
    seen = Observed()
    bench.seed()
    limited = response(429, TOO_MANY, headers={"Retry-After": "2"})
    seen.logs(bench.rotate([limited] * 4))
    # get-token: waits as asked, at most 45 s in all, then gives up.
    later = response(429, TOO_MANY, headers={"Retry-After": "20"})
    script = [response(200, PROVIDER_DOCUMENT), later, later, later]
    code, _, err = get_token(bench, ["-r", "v1.old-refresh-token"], FakeClock(), script)
    seen.exits.add(code)
    seen.texts.append(err)
    # cmstoken-admin rotate while a run holds the rotator's reserved concurrency.
    stack = deployed_stack()
    lambda_client = boto3.client("lambda", region_name=STACK_REGION)
    stubber = Stubber(lambda_client)
    stubber.add_client_error(
        "invoke",
        service_error_code="TooManyRequestsException",
        service_message="Rate Exceeded.",
        http_status_code=429,
        modeled_fields={
            "Reason": "ReservedFunctionConcurrentInvocationLimitExceeded",
            "Type": "User",
            "message": "Rate Exceeded.",
        },
    )
    with stubber:
        code, _, err = bench.admin(
            ["rotate"], invoker=LambdaInvoker(lambda_client, stack), functions=stack.functions
        )
    seen.exits.add(code)
    seen.texts.append(err)
    return seen


def get_token(
    bench: Bench,
    argv: list[str],
    clock: FakeClock,
    script: Sequence[Answer] | None,
    *,
    answer: str = "y\n",
    late: float = 0.0,
) -> tuple[int, str, str]:
    """``get-token ARGV`` through its ``main``, its upstream ``script`` on ``clock`` (``None``:
    the real transport), the (y/N) ``answer`` given ``late`` seconds after the question."""
    bench.capsys.readouterr()
    with bench.monkeypatch.context() as patch:
        if script is not None:
            transport = ScriptedTransport(script=list(script), clock=clock)

            def scripted(base_url: str, clock: Any = None) -> ServiceClient:
                return ServiceClient(base_url, transport=transport, clock=fake)

            fake = clock
            patch.setattr(get_token_command, "ServiceClient", scripted)
        patch.setattr(sys, "stdin", SlowAnswer(answer, clock, late))
        patch.delenv("CMS_REFRESH_TOKEN", raising=False)
        code = get_token_command.main(["--base-url", BASE_URL, *argv])
        if script is not None:
            assert transport.script == [], "the command did not use its whole script"
    captured = bench.capsys.readouterr()
    return code, captured.out, captured.err


class SlowAnswer:
    """Standard input (not a terminal) that answers ``text`` ``late`` seconds after the
    question."""

    def __init__(self, text: str, clock: FakeClock, late: float) -> None:
        self.text = text
        self.clock = clock
        self.late = late

    def readline(self) -> str:
        self.clock.advance(self.late)
        text, self.text = self.text, ""
        return text

    def isatty(self) -> bool:
        return False


def deployed_stack() -> DeployedStack:
    """The stack as DescribeStacks gives it, in ``STACK_REGION``."""
    arn = f"arn:aws:lambda:{STACK_REGION}:{ACCOUNT}:function:"
    return DeployedStack(
        name=NAME,
        stack_id=f"arn:aws:cloudformation:{STACK_REGION}:{ACCOUNT}:stack/{NAME}/1",
        region=STACK_REGION,
        account=ACCOUNT,
        outputs={
            "BootstrapFunctionName": FUNCTIONS.bootstrap,
            "BootstrapFunctionArn": arn + FUNCTIONS.bootstrap,
            "RotatorFunctionName": FUNCTIONS.rotator,
            "RotatorFunctionArn": arn + FUNCTIONS.rotator,
        },
    )


def key_disabled(bench: Bench) -> Observed:
    seen = Observed()
    bench.seed()
    # A write refused after a refresh: the rotated token is lost.
    refuse_rotation_writes("EncryptionFailure", 10**6)
    lost = bench.rotate([refreshed(bench.clock)])
    (critical,) = [record for record in records(lost) if record.get("level") == "CRITICAL"]
    assert (critical["error"], critical["aws_error"]) == ("StoreKeyError", "EncryptionFailure")
    seen.logs(lost)
    assert "CredentialLostAlarm" in breached_alarms(emitted_metrics(lost))
    bench.seed()
    provider = bench.consumer()
    assert provider.token()  # cached
    # Then every read is refused.
    decryption_failure = refuse_reads("DecryptionFailure")
    runtime.store().client.meta.events.register(READS, decryption_failure)
    bench.secrets.meta.events.register(READS, decryption_failure)
    run = bench.rotate()
    assert breached_alarms(emitted_metrics(run)) == {"RotationFailingAlarm"}  # the only one
    seen.logs(run)
    bench.clock.advance(5 * HOUR - 30)  # past the cache's freshness: still served
    assert provider.token()
    bench.clock.advance(60)
    with pytest.raises(ConsumerError) as raised:
        provider.token()
    seen.consumer(raised.value)
    code, out, _ = bench.admin(["status"])
    seen.exits.add(code)
    seen.texts.append(out)
    return seen


READS = "before-call.secrets-manager.GetSecretValue"


def records(output: str) -> list[dict[str, Any]]:
    """The log records of captured function output."""
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"level"')]


def refuse_reads(code: str) -> Callable[..., None]:
    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": code, "Message": "refused"}}, "GetSecretValue")

    return refuse


# The schedule as the template's ScheduleV2 event creates it (EventBridge Scheduler).
SCHEDULE: dict[str, Any] = {
    "Name": f"{NAME}-rotator",
    "Description": "Scheduled check of the service token",
    "ScheduleExpression": "rate(60 minutes)",
    "FlexibleTimeWindow": {"Mode": "OFF"},
    "Target": {
        "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{FUNCTIONS.rotator}",
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/{NAME}-RotatorFunctionScheduleRole-1",
        "Input": "{}",
        "RetryPolicy": {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600},
        "DeadLetterConfig": {"Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{NAME}-dlq"},
    },
}


def schedule_disabled(bench: Bench) -> Observed:
    seen = Observed(silent=True)
    bench.seed()
    scheduler = boto3.client("scheduler")
    scheduler.create_schedule(**SCHEDULE, State="DISABLED")
    stack = DeployedStack(
        name=NAME,
        stack_id=f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{NAME}/1",
        region=REGION,
        account=ACCOUNT,
        outputs={"MetricsNamespace": f"CmsToken/{NAME}"},
    )
    sources = StatusSources(stack, boto3.client("cloudwatch"), scheduler)
    code, out, _ = bench.admin(["status"], sources=sources)
    seen.exits.add(code)
    seen.texts.append(out)
    # The verdict advises the command the Fix shows (a deployment would not enable it).
    assert schedule_fix()[1].startswith("aws scheduler update-schedule ")
    assert "enable it with aws scheduler update-schedule" in out
    assert "or deploy the stack again" not in out
    bench.clock.advance(5 * HOUR)  # nothing rotated: the published token expires
    with pytest.raises(ConsumerError) as raised:
        bench.consumer().token()
    seen.consumer(raised.value)
    return seen


def another_region(bench: Bench) -> Observed:
    seen = Observed()
    stack_region = boto3.client("secretsmanager", region_name=STACK_REGION)
    arn = stack_region.create_secret(Name=TOKEN_SECRET)["ARN"]
    document = ServiceTokenDocument(
        token=make_jwt({"exp": bench.clock.now() + DAY}),
        expires_at=bench.clock.now() + DAY,
        api_url=f"{BASE_URL}/api",
        issued_at=bench.clock.now(),
    )
    stack_region.put_secret_value(SecretId=arn, SecretString=document.to_json())
    assert REGION != STACK_REGION
    here = boto3.client("secretsmanager")  # a client of the consumer's region, REGION
    with pytest.raises(ConsumerError) as raised:
        ServiceTokenProvider(arn, secrets_client=here, clock=bench.clock).token()
    seen.consumer(raised.value)
    with pytest.raises(ClientError) as failed:
        here.get_secret_value(SecretId=arn)
    seen.texts.append(str(failed.value))  # as the AWS CLI prints it
    # The fix: no client (the ARN's region), or a client of the ARN's region.
    assert ServiceTokenProvider(arn, clock=bench.clock).token() == document.token
    assert ServiceTokenProvider(arn, secrets_client=stack_region, clock=bench.clock).token() == (
        document.token
    )
    return seen


def code_expired(bench: Bench) -> Observed:
    seen = Observed()
    code, _, err = bench.admin(["bootstrap"], device_flow(response(403, EXPIRED_CODE)))
    seen.exits.add(code)
    seen.texts.append(err)
    started = [response(200, PROVIDER_DOCUMENT), response(200, DEVICE_DOCUMENT)]  # no poll left
    code, _, err = get_token(bench, [], FakeClock(), started, late=901)  # y after 15 minutes
    seen.exits.add(code)
    seen.texts.append(err)
    clock = FakeClock()
    code, _, err = get_token(bench, [], clock, device_flow(response(403, EXPIRED_CODE)))
    seen.exits.add(code)
    seen.texts.append(err)
    return seen


def wrong_clock(bench: Bench) -> Observed:
    seen = Observed()
    real = FakeClock().now()
    token = response(200, {"token": make_jwt({"exp": real + DAY})})
    renew = ["-o", "json", "-r", "v1.old-refresh-token"]
    ahead = FakeClock(real + DAY + HOUR)
    script = [response(200, PROVIDER_DOCUMENT), refreshed(ahead), token]
    code, out, _ = get_token(bench, renew, ahead, script)
    assert code == 0
    seen.texts.append(out)
    for certificate in (not_yet_valid(), expired()):
        with bench.monkeypatch.context() as patch:
            patch.setattr(requests.Session, "request", refusing(certificate))
            code, _, err = get_token(bench, [], FakeClock(), None)
        seen.exits.add(code)
        seen.texts.append(err)
    behind = FakeClock(real - 2 * 60)
    reset = response(429, TOO_MANY, headers={"X-RateLimit-Reset": str(int(real + 5))})
    code, _, err = get_token(bench, renew, behind, [response(200, PROVIDER_DOCUMENT), reset])
    assert "trying again" not in err  # it gave up at once
    seen.exits.add(code)
    seen.texts.append(err)
    return seen


def not_yet_valid() -> ssl.SSLCertVerificationError:
    """What verifying a certificate issued after the client's clock's time raises."""
    now = datetime.datetime.now(datetime.UTC)
    return handshake(now + datetime.timedelta(days=1), now + datetime.timedelta(days=90))


def expired() -> ssl.SSLCertVerificationError:
    now = datetime.datetime.now(datetime.UTC)
    return handshake(now - datetime.timedelta(days=90), now - datetime.timedelta(days=1))


def handshake(
    not_before: datetime.datetime, not_after: datetime.datetime
) -> ssl.SSLCertVerificationError:
    """A TLS handshake in memory with a server whose (trusted) certificate is valid from
    ``not_before`` to ``not_after``: the client's refusal, as OpenSSL words it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    host = BASE_URL.removeprefix("https://")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as directory:  # load_cert_chain reads only files
        (Path(directory) / "certificate.pem").write_text(pem)
        (Path(directory) / "key.pem").write_bytes(private)
        server.load_cert_chain(Path(directory) / "certificate.pem", Path(directory) / "key.pem")
    client = ssl.create_default_context(cadata=pem)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, from_client, server_hostname=host)
    server_side = server.wrap_bio(to_server, from_server, server_side=True)
    try:
        for _ in range(10):
            for side in (client_side, server_side):
                with contextlib.suppress(ssl.SSLWantReadError):
                    side.do_handshake()
            to_server.write(from_client.read())
            to_client.write(from_server.read())
    except ssl.SSLCertVerificationError as refused:
        return refused
    raise AssertionError("the client accepted the certificate")


def refusing(error: ssl.SSLCertVerificationError) -> Callable[..., Any]:
    """``requests.Session.request`` failing as it does when the handshake refuses the server's
    certificate (urllib3's error around the ``ssl`` one, in the pool's retry error)."""

    def request(*_: Any, **__: Any) -> Any:
        wrapped = Urllib3SSLError(error)
        wrapped.__cause__ = error
        no_pool: Any = None
        raise requests.exceptions.SSLError(MaxRetryError(no_pool, "/", wrapped))

    return request


# The document's problems (its ## headings), what runs each, and the spans of its symptom that
# are names rather than output.
PROBLEMS: dict[str, Callable[[Bench], Observed]] = {
    "AuthorizationRequiredAlarm on a new stack: not bootstrapped": not_bootstrapped,
    "AuthorizationRequiredAlarm on a working stack: the credential was refused": (
        credential_refused
    ),
    "bootstrap says the code was approved by a different identity": another_identity,
    "The service refuses the new token (verification)": verification_refused,
    "Rate limits and throttling": rate_limited,
    "cannot read secret: DecryptionFailure (a KMS key disabled)": key_disabled,
    "RotatorSilentAlarm: the schedule is disabled": schedule_disabled,
    "secret_not_found: a consumer in another region": another_region,
    "The code expired": code_expired,
    "get-token on a laptop whose clock is wrong": wrong_clock,
}
NAMED: dict[str, tuple[str, ...]] = {
    "bootstrap says the code was approved by a different identity": ("/cmstoken/NAME/bootstrap",),
    "get-token on a laptop whose clock is wrong": ("X-RateLimit-Reset",),
}


def document_problems() -> dict[str, str]:
    return problems_in(DOCUMENT.read_text())


# --- the tests ----------------------------------------------------------------------------------


def test_the_document_has_the_ten_problems_each_with_symptom_cause_and_fix() -> None:
    text = DOCUMENT.read_text()
    assert len(text.splitlines()) < 200
    found = document_problems()
    assert list(found) == list(PROBLEMS)
    for heading, body in found.items():
        order = [body.find(f"**{name}.**") for name in ("Symptom", "Cause", "Fix")]
        assert -1 not in order, heading
        assert order == sorted(order), heading


@pytest.mark.parametrize("heading", list(PROBLEMS))
def test_every_symptom_is_what_the_code_produces(heading: str, bench: Bench) -> None:
    observed = PROBLEMS[heading](bench)
    symptom = part(document_problems()[heading], "Symptom")
    assert symptom_problems(symptom, observed, NAMED.get(heading, ())) == []


def test_the_names_a_symptom_quotes_are_the_codes_and_the_templates() -> None:
    template = (ROOT / "template.yaml").read_text().replace("${AWS::StackName}", NAME)
    code = "\n".join(path.read_text() for path in LAYER.rglob("*.py"))
    for names in NAMED.values():
        for name in names:
            assert name in template or name in code, name


def test_a_symptom_that_the_code_does_not_produce_is_caught() -> None:
    """Controls: a misspelled message, a wrong exit status and an alarm the runs did not raise
    are each reported; the same text as produced is not."""
    produced = Observed(
        texts=['{"message": "rotation failed", "kind": "NotBootstrappedError"}'],
        exits={1},
        metrics={"AuthorizationRequired": [1.0], "RotationFailed": [0.0]},
    )
    holds = (
        "**Symptom.** `rotation failed`, kind `NotBootstrappedError…` exits 1;"
        " `AuthorizationRequiredAlarm`."
    )
    assert symptom_problems(holds, produced) == []
    for wrong in (
        holds.replace("rotation failed", "rotation faild"),
        holds.replace("exits 1", "exits 2"),
        holds.replace("AuthorizationRequiredAlarm", "RotationFailingAlarm"),
        holds + "\n\n```text\ncredential     absent\n```\n",
    ):
        assert symptom_problems(wrong, produced) != [], wrong
    assert matches("a … c", ["a b c"])
    assert not matches("a … c", ["a c"])


# --- the commands -------------------------------------------------------------------------------


def shown_commands(text: str) -> list[list[str]]:
    """Every command the document shows: inline (`aws ...`, `cmstoken-admin ...`, `get-token
    ...`) and in its sh blocks (continuation lines joined, comments dropped, pipelines split,
    redirections left out)."""
    prose, blocks = prose_and_blocks(text)
    lines = [span for span in spans(prose) if COMMAND.match(span)]
    for language, content in blocks:
        if language == "sh":
            lines += content.replace("\\\n", " ").splitlines()
    found = []
    for line in lines:
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|>")
        lexer.whitespace_split = True
        words: list[str] = []
        redirect = False
        for word in [*lexer, "|"]:
            if word == "|":
                if words:
                    found.append(words)
                words = []
            elif word == ">":
                redirect = True
            elif redirect:
                redirect = False
            else:
                words.append(word)
    return found


def check_command(words: list[str], *, supplied: Iterable[str] = ()) -> None:
    """``words`` is a command its tool takes (``SystemExit`` or ``AssertionError`` if not)."""
    import jmespath  # type: ignore[import-untyped]

    program = words[0].removeprefix(".venv/bin/")
    if program == "cmstoken-admin":
        admin_command.parse_args(words[1:])
    elif program == "get-token":
        get_token_args(words[1:], {"SERVICE_BASE_URL": BASE_URL}, io.StringIO())
    elif program == "aws":
        check_aws_command(words, supplied=supplied)
        for option, value in itertools.pairwise(words):
            if option == "--query":
                jmespath.compile(value)
    elif program == "jq":
        if shutil.which("jq") is not None:
            subprocess.run(["jq", "-n", *words[1:]], check=True, capture_output=True)
    else:
        raise AssertionError(f"not a command the document may show: {words}")


def test_every_command_the_document_shows_is_one_its_tool_takes(aws_credentials: None) -> None:
    shown = shown_commands(DOCUMENT.read_text())
    assert len(shown) >= 20
    for words in shown:
        supplied = schedule_update() if "--cli-input-json" in words else {}
        check_command(words, supplied=supplied)


def test_a_command_no_tool_takes_is_caught() -> None:
    with pytest.raises(AssertionError, match="no option"):
        check_command(["aws", "kms", "enable-key", "--key", "KEY_ARN"])
    with pytest.raises(AssertionError, match="missing"):
        check_command(["aws", "kms", "enable-key"])
    with pytest.raises(ValueError, match="unpack"):
        check_command(["aws", "kms", "enable-keys", "--key-id", "KEY_ARN"])
    with pytest.raises(SystemExit):
        check_command(["cmstoken-admin", "--stack", "NAME", "bootstrap", "--new-identities"])
    with pytest.raises(SystemExit):
        check_command(["get-token", "--base-url", "https://api.example.com", "-o", "yaml"])
    with pytest.raises(AssertionError, match="may show"):
        check_command(["curl", "https://api.example.com"])
    assert shown_commands(
        "`aws kms enable-key --key-id K` and\n\n```sh\na | jq '.x | .y' > f\n```"
    ) == [
        ["aws", "kms", "enable-key", "--key-id", "K"],
        ["a"],
        ["jq", ".x | .y"],
    ]


def schedule_fix() -> tuple[str, str]:
    """The two AWS CLI commands of the schedule's fix: the jq program, and the update."""
    fix = part(document_problems()["RotatorSilentAlarm: the schedule is disabled"], "Fix")
    (commands,) = [content for language, content in prose_and_blocks(fix)[1] if language == "sh"]
    words = shown_commands(f"```sh\n{commands}```\n")
    (program,) = [command[1] for command in words if command[0] == "jq"]
    (update,) = [" ".join(command) for command in words if "update-schedule" in command]
    return program, update


def schedule_update() -> dict[str, Any]:
    """What the document's jq program makes of ``get-schedule``'s answer for the disabled
    schedule (as the AWS CLI prints it: JSON, times in ISO 8601)."""
    if shutil.which("jq") is None:
        pytest.skip("no jq on PATH")
    program, _ = schedule_fix()
    with mock_aws():
        scheduler = boto3.client("scheduler", region_name=REGION)
        scheduler.create_schedule(**SCHEDULE, State="DISABLED")
        answer = scheduler.get_schedule(Name=SCHEDULE["Name"])
    answer.pop("ResponseMetadata")
    printed = json.dumps(answer, default=lambda value: value.isoformat())
    made = subprocess.run(
        ["jq", program],
        input=printed,
        capture_output=True,
        text=True,
        check=True,
    )
    document: dict[str, Any] = json.loads(made.stdout)
    return document


def test_the_schedule_fix_enables_the_schedule_with_its_own_settings(aws_credentials: None) -> None:
    """The jq program keeps only members of UpdateSchedule's input (the AWS CLI refuses any
    other key in --cli-input-json), leaves out empty ones, and sets State; the update then
    enables the schedule and keeps its expression, target and description."""
    update = schedule_update()
    _, command = schedule_fix()
    assert command == "aws scheduler update-schedule --cli-input-json file://schedule.json"
    check_aws_command(command.split(), supplied=update)
    assert update["State"] == "ENABLED"
    assert None not in update.values()
    with mock_aws():
        scheduler = boto3.client("scheduler", region_name=REGION)
        scheduler.create_schedule(**SCHEDULE, State="DISABLED")
        scheduler.update_schedule(**update)
        after = scheduler.get_schedule(Name=SCHEDULE["Name"])
    assert after["State"] == "ENABLED"
    for key in ("ScheduleExpression", "Description", "FlexibleTimeWindow"):
        assert after[key] == SCHEDULE[key]
    assert {key: after["Target"][key] for key in SCHEDULE["Target"]} == SCHEDULE["Target"]


def test_the_code_expired_fix_runs_get_token_with_the_documented_refresh_file() -> None:
    """The fix is the same line as docs/get-token.md's, its ``--refresh-file`` included (it
    was dropped: the login that follows would print a token that no file keeps)."""
    fix = section("The code expired").split("**Fix.**")[1]
    (line,) = [words for words in shown_commands(fix) if words[0] == "get-token"]
    documented = shlex.split(recipe("get-token-file").split("|")[0])
    path = documented[documented.index("--refresh-file") + 1]
    assert line[line.index("--refresh-file") + 1] == path
