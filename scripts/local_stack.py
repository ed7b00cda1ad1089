"""A stack on this machine, for the demo and the benchmark: the emulator and moto's Secrets
Manager server on 127.0.0.1, the functions' environment pointed at them, and the real handlers
run in-process through the operator command's invoker."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from local_aws import Background, LocalAlarms, create_refresh_requests

ROOT = Path(__file__).resolve().parents[1]
STACK = "cmstoken-local"
BOOTSTRAP, ROTATOR = "local-bootstrap", "local-rotator"
# Named as a deployed stack names them (template.yaml: ${AWS::StackName}/...).
REFRESH_SECRET, SERVICE_SECRET = f"{STACK}/refresh-credential", f"{STACK}/service-token"
TIMEOUTS = {BOOTSTRAP: 900.0, ROTATOR: 120.0}
# The functions' log groups, as template.yaml names them (cmstoken-admin logs reads them).
LOG_GROUPS = {BOOTSTRAP: f"/cmstoken/{STACK}/bootstrap", ROTATOR: f"/cmstoken/{STACK}/rotator"}


def load_handler(function: str) -> Callable[[Any, Any], Any]:
    """``functions/<function>/app.py``'s handler, loaded as its own module."""
    path = ROOT / "functions" / function / "app.py"
    spec = importlib.util.spec_from_file_location(f"{function}_app", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    handler: Callable[[Any, Any], Any] = module.lambda_handler
    return handler


class EmulatorTime:
    """The functions' clock: the emulator's time (real time plus its offset). Waiting either
    sleeps for real (a person is involved) or moves the emulator's clock (no one is)."""

    def __init__(self, emulator: Any, *, real_waits: bool) -> None:
        self.emulator = emulator
        self.real_waits = real_waits

    def now(self) -> float:
        return float(self.emulator.now())

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.real_waits:
            time.sleep(seconds)
        else:
            self.emulator.advance(seconds)


@contextmanager
def local_servers(**emulator_config: Any) -> Iterator[tuple[Any, str]]:
    """The emulator and moto's server on 127.0.0.1 (ephemeral ports), stopped on the way out
    (Ctrl-C included)."""
    from moto.server import ThreadedMotoServer

    from cmsemu import Emulator, EmulatorConfig

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: no request lines
    emulator = Emulator(EmulatorConfig(**emulator_config)).start()
    moto: Any = None
    try:
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        yield emulator, f"http://{host}:{port}"
    finally:
        if moto is not None:
            moto.stop()
        emulator.stop()


def configure_environment(
    emulator: Any, aws_endpoint: str, extra: Mapping[str, str] | None = None
) -> None:
    """What the template sets for the functions, pointed at the local servers, with dummy
    credentials (nothing can reach an AWS account) and Powertools kept quiet."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        os.environ.pop(name, None)
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "SERVICE_BASE_URL": emulator.base_url,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
            "POWERTOOLS_SERVICE_NAME": "cmstoken",
            "POWERTOOLS_METRICS_NAMESPACE": "CmsToken/local",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            **(extra or {}),
        }
    )


def create_secrets(client: Any) -> None:
    """The stack's two secrets, empty, as the template creates them."""
    client.create_secret(Name=REFRESH_SECRET)
    client.create_secret(Name=SERVICE_SECRET)


class ApprovingInvoker:
    """The operator command's in-process invoker for the local functions; when ``approve`` is
    given, it is called with a new pending authorization (the start result)."""

    def __init__(
        self, clock: EmulatorTime, approve: Callable[[Mapping[str, Any]], None] | None
    ) -> None:
        from cmstoken.cli.admin.invokers import LocalInvoker

        handlers = {BOOTSTRAP: load_handler("bootstrap"), ROTATOR: load_handler("rotator")}
        self.local = LocalInvoker(handlers, timeout_seconds=TIMEOUTS, clock=clock.now)
        self.approve = approve

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """Invoke, then approve a freshly started authorization if asked to."""
        result = self.local.invoke(function, payload)
        started = payload.get("action") == "start" and result.get("status") == "pending"
        if started and self.approve is not None:
            self.approve(result)
        return result


# --- a stack cmstoken-admin can operate (`make demo KEEP=1`) ----------------------------------

ACCOUNT, REGION = "123456789012", "us-east-1"  # moto's default account; the demo's region
INTERVAL_MINUTES = 5  # the shortest RotationIntervalMinutes the template allows


def function_arn(function: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}"


def describe_stack(
    emulator: Any, alarms: LocalAlarms, *, interval_minutes: int = INTERVAL_MINUTES
) -> None:
    """What `cmstoken-admin` and the runbook read of a deployed stack, in moto (at
    ``AWS_ENDPOINT_URL``): the stack's outputs and parameters, its alarms (``alarms``), the
    rotator's schedule, the refresh requests' rule and queues, the dead letter queues. moto
    cannot deploy the SAM template, so this is the part of it that they read."""
    import boto3

    from cmstoken import __version__

    namespace = os.environ["POWERTOOLS_METRICS_NAMESPACE"]
    secrets = boto3.client("secretsmanager")
    outputs = {
        "Version": __version__,
        "ServiceBaseUrl": emulator.base_url,
        "BootstrapFunctionName": BOOTSTRAP,
        "BootstrapFunctionArn": function_arn(BOOTSTRAP),
        "RotatorFunctionName": ROTATOR,
        "RotatorFunctionArn": function_arn(ROTATOR),
        "RefreshCredentialSecretArn": secrets.describe_secret(SecretId=REFRESH_SECRET)["ARN"],
        "ServiceTokenSecretArn": secrets.describe_secret(SecretId=SERVICE_SECRET)["ARN"],
        "MetricsNamespace": namespace,
        **create_refresh_requests(STACK, ACCOUNT),
    }
    template = {
        "Parameters": {
            "RotationIntervalMinutes": {"Type": "Number", "Default": interval_minutes},
            # Off here (no links' key): commands that need it say so, not "a release before it".
            "OneClickReauthorization": {"Type": "String", "Default": "false"},
        },
        "Resources": {"AlarmTopic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {
            **{key: {"Value": value} for key, value in outputs.items()},
            "AlarmTopicArn": {"Value": {"Ref": "AlarmTopic"}},
        },
    }
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(StackName=STACK, TemplateBody=json.dumps(template))
    logs = boto3.client("logs")
    for group in LOG_GROUPS.values():
        logs.create_log_group(logGroupName=group)
    described = cloudformation.describe_stacks(StackName=STACK)["Stacks"][0]
    topic = next(
        o["OutputValue"] for o in described["Outputs"] if o["OutputKey"] == "AlarmTopicArn"
    )
    alarms.create(topic)
    boto3.client("scheduler").create_schedule(
        Name=f"{STACK}-rotator",
        ScheduleExpression=f"rate({interval_minutes} minutes)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": function_arn(ROTATOR),
            "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/{STACK}-scheduler",
            "Input": "{}",
        },
    )


class ReportingInvoker:
    """Runs one invocation at a time (Powertools' metrics are process-wide) and does what
    Lambda and CloudWatch do with a function's output: the embedded-metric-format records it
    prints become metrics (PutMetricData to moto), so that `cmstoken-admin status` sees the
    runs, and its other lines (its log records, at the local stack's level), between Lambda's
    START and END lines, go to the function's log group (LOG_GROUPS), so that
    `cmstoken-admin logs` reads them. ``alarms`` is given each datapoint and evaluated after
    each invocation."""

    def __init__(self, invoker: Any, alarms: LocalAlarms | None = None) -> None:
        import boto3

        self.invoker = invoker
        self.alarms = alarms
        self.cloudwatch = boto3.client("cloudwatch")
        self.logs = boto3.client("logs")
        self.lock = threading.Lock()

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        printed = io.StringIO()
        request = f"local-{time.monotonic_ns()}"
        with self.lock:
            try:
                with contextlib.redirect_stdout(printed), _function_logs_to(printed):
                    print(f"START RequestId: {request} Version: $LATEST")
                    return self.invoker.invoke(function, payload)
            finally:
                print(f"END RequestId: {request}", file=printed)
                self._publish(function, printed.getvalue())
                if self.alarms is not None:
                    self.alarms.update()

    def _publish(self, function: str, output: str) -> None:
        lines: list[str] = []
        for line in output.splitlines():
            try:
                record = json.loads(line)
                directives = record["_aws"]["CloudWatchMetrics"]
                stamp = datetime.fromtimestamp(record["_aws"]["Timestamp"] / 1000, tz=UTC)
            except (ValueError, TypeError, KeyError):
                lines.append(line)  # not a metric record: a log line, kept as Lambda keeps it
                continue
            for directive in directives:
                dimensions = [
                    {"Name": name, "Value": str(record[name])}
                    for names in directive["Dimensions"]
                    for name in names
                ]
                data = [
                    {
                        "MetricName": metric["Name"],
                        "Dimensions": dimensions,
                        "Timestamp": stamp,
                        "Value": float(value),
                        "Unit": metric.get("Unit", "None"),
                    }
                    for metric in directive["Metrics"]
                    for value in _values(record[metric["Name"]])
                ]
                self.cloudwatch.put_metric_data(Namespace=directive["Namespace"], MetricData=data)
                for datum in data if self.alarms is not None else []:
                    name, value = str(datum["MetricName"]), float(datum["Value"])
                    self._record(directive["Namespace"], name, stamp.timestamp(), value)
        self._log(function, lines)

    def _record(self, namespace: str, metric: str, stamp: float, value: float) -> None:
        if self.alarms is not None:
            self.alarms.record(namespace, metric, stamp, value)

    def _log(self, function: str, lines: list[str]) -> None:
        group = LOG_GROUPS.get(function.partition(":")[0])
        if group is None or not lines:
            return
        stream = time.strftime("%Y/%m/%d/[$LATEST]") + "local"
        with contextlib.suppress(self.logs.exceptions.ResourceAlreadyExistsException):
            self.logs.create_log_stream(logGroupName=group, logStreamName=stream)
        now = int(time.time() * 1000)
        events = [{"timestamp": now, "message": line} for line in lines]
        self.logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


@contextmanager
def _function_logs_to(stream: io.StringIO) -> Iterator[None]:
    """The functions' log records (the Powertools handler, which holds the stdout of its
    creation) written to ``stream`` meanwhile, as Lambda collects a function's output."""
    from cmstoken.observability import logger

    handler = logger.registered_handler
    if not isinstance(handler, logging.StreamHandler):
        yield
        return
    previous = handler.setStream(stream)
    try:
        yield
    finally:
        if previous is not None:
            handler.setStream(previous)


def _values(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


class LambdaEndpoint:
    """The Lambda API on 127.0.0.1 (``AWS_ENDPOINT_URL_LAMBDA``), running the local functions
    in-process: ``Invoke`` (a function's exception is a ``FunctionError`` result, an unknown
    function or alias a ``ResourceNotFoundException``, as in Lambda); with ``InvocationType``
    ``Event``, 202 at once and the invocation run on a thread, its invocation record then sent
    to the destination of the function or alias invoked (``destinations``: ``name`` or
    ``name:alias`` -> function; Lambda keeps a destination per qualifier) as Lambda sends one;
    and ``GetFunctionUrlConfig`` for the functions in ``urls``. A function is invoked by name
    or ARN, qualified (``:alias``, ``:$LATEST``, or ``?Qualifier=``) or not; ``aliases`` names
    each function's aliases, whose invocations the handler sees in ``invoked_function_arn``."""

    def __init__(
        self,
        invoker: Any,
        functions: tuple[str, ...] = (BOOTSTRAP, ROTATOR),
        *,
        destinations: Mapping[str, str] | None = None,
        urls: Mapping[str, str] | None = None,
        aliases: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.invoker = invoker
        self.functions = functions
        self.aliases = dict(aliases or {})
        self.destinations = dict(destinations or {})
        self.urls = dict(urls or {})
        self.queued: list[threading.Thread] = []
        self.server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LambdaEndpoint:
        self.thread.start()
        return self

    def stop(self, drain: float = 60) -> None:
        """Stop serving, then wait up to ``drain`` seconds for each queued invocation."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        self.drain(drain)

    def drain(self, timeout: float = 60) -> None:
        """Wait for the queued invocations (and their destinations) to finish."""
        for thread in list(self.queued):
            thread.join(timeout)

    def answer(self, function: str, body: bytes) -> tuple[int, dict[str, str], Any]:
        """Status, headers and JSON body of one invocation."""
        name = self._qualified(function)
        if name is None:
            return self._missing(function)
        failed, result = self._run(name, json.loads(body or b"{}"))
        return 200, {"X-Amz-Function-Error": "Unhandled"} if failed else {}, result

    def queue(self, function: str, body: bytes) -> tuple[int, dict[str, str], Any]:
        """Accept an ``Event`` invocation: run it on a thread, then send its record on."""
        name = self._qualified(function)
        if name is None:
            return self._missing(function)
        payload = json.loads(body or b"{}")
        # A daemon: an invocation still running when the process ends (Ctrl-C) does not hold it.
        thread = threading.Thread(target=self._deliver, args=(name, payload), daemon=True)
        self.queued.append(thread)
        thread.start()
        return 202, {}, None

    def function_url(self, function: str) -> tuple[int, dict[str, str], Any]:
        name = _name(function)
        if name not in self.urls:
            return self._missing(name)
        config = {"FunctionUrl": self.urls[name], "FunctionArn": function_arn(name)}
        return 200, {}, {**config, "AuthType": "NONE", "InvokeMode": "BUFFERED"}

    def _qualified(self, function: str) -> str | None:
        """``name`` or ``name:alias`` of what ``function`` (a name or ARN, qualified or not)
        invokes; ``None``: no such function or alias here."""
        name, _, qualifier = _name(function).partition(":")
        if name not in self.functions:
            return None
        if qualifier in ("", "$LATEST"):
            return name
        return f"{name}:{qualifier}" if qualifier in self.aliases.get(name, ()) else None

    def _run(self, name: str, payload: Any) -> tuple[bool, Any]:
        from cmstoken.cli.admin.errors import AdminError

        try:
            return False, self.invoker.invoke(name, payload)
        except AdminError as exc:
            raised = exc.__cause__ or exc
            return True, {"errorType": type(raised).__name__, "errorMessage": str(raised)}

    def _deliver(self, name: str, payload: Any) -> None:
        failed, result = self._run(name, payload)
        destination = self.destinations.get(name)
        if destination is None:
            return
        record = invocation_record(name, payload, failed, result)
        self._run(destination, record)

    @staticmethod
    def _missing(function: str) -> tuple[int, dict[str, str], Any]:
        error = {"Type": "User", "Message": f"Function not found: {function_arn(_name(function))}"}
        return 404, {"x-amzn-ErrorType": "ResourceNotFoundException"}, error

    def _handler(self) -> Any:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                parts = self.path.split("?")[0].split("/")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if len(parts) != 5 or parts[2] != "functions" or parts[4] != "invocations":
                    self._send(404, {"x-amzn-ErrorType": "UnknownOperation"}, {})
                    return
                function = unquote(parts[3])
                qualifier = parse_qs(urlsplit(self.path).query).get("Qualifier")
                if qualifier:
                    function = f"{_name(function).partition(':')[0]}:{qualifier[0]}"
                if self.headers.get("X-Amz-Invocation-Type") == "Event":
                    self._send(*endpoint.queue(function, body))
                else:
                    self._send(*endpoint.answer(function, body))

            def do_GET(self) -> None:
                parts = self.path.split("?")[0].split("/")
                if len(parts) == 5 and parts[2] == "functions" and parts[4] == "url":
                    self._send(*endpoint.function_url(unquote(parts[3])))
                else:
                    self._send(404, {"x-amzn-ErrorType": "UnknownOperation"}, {})

            def _send(self, status: int, headers: dict[str, str], answer: Any) -> None:
                data = b"" if status == 202 else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    for key, value in {**headers, "Content-Type": "application/json"}.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except ConnectionError:
                    # The client went away (cmstoken-admin interrupted while it waited for a
                    # poll): nobody is left to answer; what the invocation did stands.
                    self.close_connection = True

            def log_message(self, *_: Any) -> None:
                pass  # no request lines

        return Handler


class _QuietServer(ThreadingHTTPServer):
    """A client that goes away before its answer (a broken pipe, a reset) is not an error of
    the server's: no traceback for it. Anything else is reported as the standard library
    does."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def invocation_record(
    name: str, payload: Any, failed: bool, result: Any, attempts: int = 1
) -> dict[str, Any]:
    """The record Lambda sends to an asynchronous invocation's destination (``name``:
    ``function`` or ``function:alias``)."""
    response: dict[str, Any] = {"statusCode": 200, "executedVersion": "$LATEST"}
    if failed:
        response["functionError"] = "Unhandled"
    qualified = name if ":" in name else name + ":$LATEST"
    return {
        "version": "1.0",
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
        "requestContext": {
            "requestId": f"local-{time.monotonic_ns()}",
            "functionArn": function_arn(qualified),
            "condition": "RetriesExhausted" if failed else "Success",
            "approximateInvokeCount": attempts,
        },
        "requestPayload": payload,
        "responseContext": response,
        "responsePayload": result,
    }


def _name(function: str) -> str:
    """A function's name, with its qualifier when it has one (``name:qualifier``), from its
    name or ARN."""
    if not function.startswith("arn:"):
        return function
    return ":".join(function.split(":")[6:8])


# Lambda's two retries of a failed asynchronous invocation, about one and two minutes apart.
RETRY_DELAYS = (60.0, 120.0)


class LocalSchedule(Background):
    """The rotator's schedule, run locally: ``{}`` every ``interval`` seconds from ``start``
    (the schedule's creation), as EventBridge Scheduler's rate expression does, each an
    asynchronous invocation: retried twice when it fails, then its record sent to
    ``dead_letter`` (the rotator's on-failure destination, its dead letter queue)."""

    def __init__(
        self,
        invoker: Any,
        interval: float,
        start: float,
        dead_letter: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        super().__init__()
        self.invoker = invoker
        self.interval = interval
        self.start_at = start
        self.dead_letter = dead_letter

    def _run(self) -> None:
        while True:
            elapsed = time.time() - self.start_at
            due = self.start_at + (elapsed // self.interval + 1) * self.interval
            if self.stopping.wait(max(0.0, due - time.time())) or not self._attempts():
                return

    def _attempts(self) -> bool:
        """One scheduled invocation and its retries; ``False``: stopped meanwhile."""
        from cmstoken.cli.admin.errors import AdminError

        error: dict[str, str] = {}
        delays = (0.0, *RETRY_DELAYS)
        for delay in delays:
            if self.stopping.wait(delay):
                return False
            try:
                self.invoker.invoke(ROTATOR, {})
                return True
            except AdminError as exc:
                print(f"local schedule: the rotator run failed: {exc}", file=sys.stderr)
                raised = exc.__cause__ or exc
                error = {"errorType": type(raised).__name__, "errorMessage": str(raised)}
        if self.dead_letter is not None:
            self.dead_letter(invocation_record(ROTATOR, {}, True, error, attempts=len(delays)))
        return True
