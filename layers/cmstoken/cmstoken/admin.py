"""``cmstoken-admin``: the operator's command for a deployed stack.

    cmstoken-admin --stack NAME bootstrap [--free-trial | --no-free-trial] [--new-identity]
    cmstoken-admin --stack NAME status
    cmstoken-admin --stack NAME rotate

It finds the functions from the stack's outputs and invokes them. The invocation goes through the
small ``Invoker`` interface, so that tests and the local demo run this same code against the
handlers in-process (``LocalInvoker``).

Everything printed from a function's result or error goes through ``printable``: the user code and
addresses come from the identity provider by way of a stored document, and no escape sequence in
them may reach the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Protocol, TextIO

from . import __version__
from .clock import parse_iso
from .redaction import displayable, printable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# One poll invocation waits at most this long, so progress can be shown between them.
POLL_SLICE_SECONDS = 20
BOOTSTRAP_OUTPUT = "BootstrapFunctionName"
ROTATOR_OUTPUT = "RotatorFunctionName"


class AdminError(Exception):
    """A failure to report to the operator (exit status 1); its message is made printable."""

    def __init__(self, message: str) -> None:
        super().__init__(printable(message))


class Invoker(Protocol):
    """Invokes a function synchronously and returns its JSON result."""

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """The function's result; ``AdminError`` when the function raised."""
        ...


@dataclass(frozen=True)
class StackFunctions:
    """The functions of one deployed stack."""

    bootstrap: str
    rotator: str


class LambdaInvoker:
    """Invokes deployed functions through the Lambda API."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """Invoke ``function`` with ``payload`` (RequestResponse) and decode its result."""
        answer = self.client.invoke(
            FunctionName=function,
            InvocationType="RequestResponse",
            Payload=json.dumps(payload).encode(),
        )
        body = json.loads(answer["Payload"].read() or b"null")
        if answer.get("FunctionError"):
            message = body.get("errorMessage") if isinstance(body, dict) else None
            kind = body.get("errorType") if isinstance(body, dict) else None
            raise AdminError(f"{function} failed: {kind or 'error'}: {message or body}")
        return body


class LocalInvoker:
    """Runs handlers in-process, by function name, with a Lambda-like context."""

    def __init__(
        self,
        handlers: Mapping[str, Callable[[Any, Any], Any]],
        *,
        timeout_seconds: Mapping[str, float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handlers = handlers
        self.timeout_seconds = timeout_seconds
        self.clock = clock

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """Call the handler; an exception it raises becomes ``AdminError`` as in Lambda."""
        ends = self.clock() + self.timeout_seconds[function]
        context = SimpleNamespace(
            function_name=function,
            function_version="$LATEST",
            memory_limit_in_mb=256,
            invoked_function_arn=f"arn:aws:lambda:local:000000000000:function:{function}",
            aws_request_id=f"local-{time.monotonic_ns()}",
            get_remaining_time_in_millis=lambda: int(max(0.0, ends - self.clock()) * 1000),
        )
        try:
            return self.handlers[function](dict(payload), context)
        except Exception as exc:
            raise AdminError(f"{function} failed: {type(exc).__name__}: {exc}") from exc


def locate(stack: str, cloudformation: Any) -> StackFunctions:
    """The stack's functions, from its outputs."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        message = exc.response.get("Error", {}).get("Message", "")
        if "does not exist" in message:
            raise AdminError(f"stack {stack!r} not found in this account and region") from exc
        raise AdminError(f"cannot read stack {stack!r}: {message or exc}") from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [key for key in (BOOTSTRAP_OUTPUT, ROTATOR_OUTPUT) if key not in outputs]
    if missing:
        raise AdminError(
            f"stack {stack!r} has no output {', '.join(missing)}: is it this product's stack?"
        )
    return StackFunctions(bootstrap=outputs[BOOTSTRAP_OUTPUT], rotator=outputs[ROTATOR_OUTPUT])


# --- commands ------------------------------------------------------------------------------


def bootstrap(
    invoker: Invoker,
    functions: StackFunctions,
    *,
    free_trial: bool | None,
    out: TextIO,
    now: Callable[[], float] = time.time,
    qr: bool = False,
    new_identity: bool = False,
    command: str = "cmstoken-admin bootstrap",
) -> int:
    """Start the device authorization, show where to approve it, and wait until it ends.
    ``new_identity`` lets the approval switch the stack to another account (identity);
    ``command`` is how the operator runs this again (named in failure messages)."""
    event: dict[str, Any] = {"action": "start"}
    if free_trial is not None:
        event["free_trial"] = free_trial
    if new_identity:
        event["allow_new_identity"] = True
    started = invoker.invoke(functions.bootstrap, event)
    if started.get("status") != "pending":
        raise AdminError(f"start failed: {started.get('message', started)}")
    _announce(started, out, qr=qr)
    expires_at = parse_iso(started["expires_at"])
    approved = False
    while True:
        left = expires_at - now()
        wait = max(1, min(POLL_SLICE_SECONDS, int(left)))
        if approved:
            result = invoker.invoke(functions.bootstrap, {"action": "poll"})
        else:
            with _Countdown(out, expires_at, now):
                result = invoker.invoke(
                    functions.bootstrap, {"action": "poll", "max_wait_seconds": wait}
                )
        status = result.get("status")
        if status == "pending":
            if result.get("approved") and not approved:
                approved = True
                out.write("\nApproved; verifying the new credential and publishing its token.\n")
            continue
        if status == "authorized":
            identity = result.get("identity")
            out.write(
                f"\nAuthorized{f' (identity {_shown(identity)})' if identity else ''}. The "
                f"service token is published (expires "
                f"{_shown(result.get('service_token_expires_at'))}); re-authorize by "
                f"{_shown(result.get('reauthorize_by') or 'no fixed date')}.\n"
            )
            return EXIT_OK
        if status == "none" and approved and _published(invoker, functions):
            # The rotator finished the approved authorization between two polls.
            out.write("\nAuthorized. The service token is published.\n")
            return EXIT_OK
        raise AdminError(f"{status}: {_in_admin_terms(str(result.get('message', '')), command)}")


def _in_admin_terms(message: str, command: str) -> str:
    """The bootstrap function's advice, which names its own actions ("run start again"),
    worded for the operator of this command."""
    return message.replace("run start again", f"run `{command}` again").replace(
        "start again allowing it", f"run `{command} --new-identity` to allow it"
    )


def _published(invoker: Invoker, functions: StackFunctions) -> bool:
    """True when the stack's credential is active and its service token published."""
    credential = invoker.invoke(functions.bootstrap, {"action": "status"}).get("credential") or {}
    return credential.get("status") == "active" and bool(credential.get("service_token_expires_at"))


def status(invoker: Invoker, functions: StackFunctions, *, out: TextIO) -> int:
    """Print the credential's state and any pending authorization; 1 unless it is active."""
    report = invoker.invoke(functions.bootstrap, {"action": "status"})
    credential = report.get("credential") or {}
    rows = [
        ("credential", credential.get("status")),
        ("authorized at", credential.get("authorized_at")),
        ("refreshed at", credential.get("refreshed_at")),
        ("re-authorize by", credential.get("reauthorize_by")),
        ("service token expires", credential.get("service_token_expires_at")),
    ]
    pending = report.get("pending")
    if pending:
        rows.append(("pending code", f"{pending['user_code']} until {pending['expires_at']}"))
        rows.append(("approve at", pending["verification_uri_complete"]))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        out.write(f"{name:<{width}}  {_shown(value) if value is not None else '-'}\n")
    return EXIT_OK if credential.get("status") == "active" else EXIT_FAILED


def rotate(invoker: Invoker, functions: StackFunctions, *, out: TextIO) -> int:
    """Force a rotation now (debounced by the stack's minimum interval)."""
    result = invoker.invoke(functions.rotator, {"force": True})
    out.write(f"{_shown(result.get('outcome'))}: {_shown(result.get('reason'))}\n")
    if result.get("service_token_expires_at"):
        out.write(f"service token expires {_shown(result['service_token_expires_at'])}\n")
    return EXIT_OK if result.get("outcome") in ("rotated", "skipped") else EXIT_FAILED


def _announce(started: Mapping[str, Any], out: TextIO, *, qr: bool) -> None:
    line = "=" * 64
    address = str(started["verification_uri_complete"])
    # No QR code of an address that does not print as what it is.
    if qr and displayable(address):
        _qr_code(address, out)
    out.write(
        f"\n{line}\n"
        f"  Open:   {_shown(address)}\n"
        f"  or go to {_shown(started['verification_uri'])} and enter the code\n\n"
        f"          {_shown(started['user_code'])}\n\n"
        f"  Approve: Continue, then Confirm, then Confirm.\n"
        f"  The code expires at {_shown(started['expires_at'])}.\n"
        f"{line}\n\n"
    )
    out.flush()


def _shown(value: object) -> str:
    """A value from a function's result, safe to print on a terminal."""
    return printable(str(value))


def _qr_code(address: str, out: TextIO) -> None:
    """The address as a QR code in block characters, for a phone's camera (needs segno)."""
    try:
        import segno
    except ImportError:
        return
    segno.make(address, error="l").terminal(out=out, compact=True, border=2)


class _Countdown:
    """While a poll runs: a live ``waiting ... mm:ss left`` line on a terminal, a plain line
    per poll elsewhere."""

    def __init__(self, out: TextIO, expires_at: float, now: Callable[[], float]) -> None:
        self.out = out
        self.expires_at = expires_at
        self.now = now
        self.live = bool(getattr(out, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def _line(self) -> str:
        left = max(0, int(self.expires_at - self.now()))
        return f"waiting for approval: {left // 60:02d}:{left % 60:02d} left"

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self.out.write(f"\r{self._line()}  ")
            self.out.flush()

    def __enter__(self) -> _Countdown:
        if self.live:
            self._thread.start()
        else:
            self.out.write(self._line() + "\n")
            self.out.flush()
        return self

    def __exit__(self, *_: object) -> None:
        if self.live:
            self._stop.set()
            self._thread.join()
            self.out.write("\n")  # whatever is printed next starts on a line of its own
            self.out.flush()


# --- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; argparse exits 2 on a usage error. ``--stack`` and ``--region`` are
    accepted before or after the command, as the AWS CLI accepts its global options."""
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("stack")
    where.add_argument(
        "--stack", default=argparse.SUPPRESS, help="the CloudFormation stack name (required)"
    )
    where.add_argument(
        "--region",
        default=argparse.SUPPRESS,
        help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, or your AWS profile's)",
    )
    parser = argparse.ArgumentParser(
        prog="cmstoken-admin",
        parents=[common],
        description="Operate a deployed Cluster Management Service token stack: authorize it "
        "(bootstrap), check it (status), rotate now (rotate).",
        epilog="Uses your AWS credentials and region (AWS_PROFILE, AWS_REGION, ...). Exit "
        "status: 0 success, 1 failure, 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    start = commands.add_parser(
        "bootstrap", parents=[common], help="authorize the stack with the device flow"
    )
    trial = start.add_mutually_exclusive_group()
    trial.add_argument(
        "--free-trial",
        dest="free_trial",
        action="store_true",
        default=None,
        help="authorize with the free-trial client id (default: the stack's FreeTrial setting)",
    )
    trial.add_argument(
        "--no-free-trial",
        dest="free_trial",
        action="store_false",
        help="authorize with the regular client id, whatever the stack's FreeTrial setting",
    )
    start.add_argument(
        "--no-qr", dest="qr", action="store_false", help="do not print the address as a QR code"
    )
    start.add_argument(
        "--new-identity",
        action="store_true",
        help="let the approval switch the stack to another account (by default an approval "
        "by an identity other than the one the stack is authorized as is refused)",
    )
    commands.add_parser(
        "status", parents=[common], help="show the credential's state (exit 1 unless active)"
    )
    commands.add_parser("rotate", parents=[common], help="force a rotation now")
    args = parser.parse_args(argv)
    if not getattr(args, "stack", "").strip():
        parser.error("the following arguments are required: --stack")
    args.region = getattr(args, "region", None)
    return args


def run(args: argparse.Namespace, invoker: Invoker, functions: StackFunctions, out: TextIO) -> int:
    """Run the parsed command against ``functions``."""
    if args.command == "bootstrap":
        return bootstrap(
            invoker,
            functions,
            free_trial=args.free_trial,
            out=out,
            qr=args.qr,
            new_identity=args.new_identity,
            command=f"cmstoken-admin --stack {args.stack} bootstrap",
        )
    if args.command == "status":
        return status(invoker, functions, out=out)
    return rotate(invoker, functions, out=out)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cmstoken-admin``."""
    args = parse_args(argv)
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, NoCredentialsError, NoRegionError

        try:
            # boto3 reads AWS_DEFAULT_REGION but not AWS_REGION, which the AWS CLI honours.
            region = args.region or os.environ.get("AWS_REGION") or None
            session = boto3.Session(region_name=region)
            functions = locate(args.stack, session.client("cloudformation"))
            lambda_client = session.client(
                "lambda", config=Config(read_timeout=910, retries={"max_attempts": 0})
            )
            return run(args, LambdaInvoker(lambda_client), functions, sys.stderr)
        except NoCredentialsError as exc:
            raise AdminError(
                "no AWS credentials found: configure them (aws configure, AWS_PROFILE, or "
                "environment variables) and retry"
            ) from exc
        except NoRegionError as exc:
            raise AdminError(
                "no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or set "
                "a region in your AWS profile"
            ) from exc
        except BotoCoreError as exc:
            raise AdminError(f"AWS call failed: {exc}") from exc
    except AdminError as exc:
        sys.stderr.write(f"cmstoken-admin: {exc}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        sys.stderr.write("\ncmstoken-admin: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
