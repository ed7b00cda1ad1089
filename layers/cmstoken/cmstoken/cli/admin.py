"""``cmstoken-admin``: the operator's command for a deployed stack.

    cmstoken-admin --stack NAME bootstrap [--free-trial | --no-free-trial] [--new-identity]
    cmstoken-admin --stack NAME status [--json]
    cmstoken-admin --stack NAME rotate

It finds the functions from the stack's outputs and invokes them. The invocation goes through the
small ``Invoker`` interface, so that tests and the local demo run this same code against the
handlers in-process (``LocalInvoker``). Its AWS side (the session, the stack, the Lambda invoker,
every AWS error as one line) is ``admin_aws``; the ``status`` report is ``admin_status``.

Everything printed from a function's result or error goes through ``printable``: the user code and
addresses come from the identity provider by way of a stored document, and no escape sequence in
them may reach the terminal.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, TextIO

from cmstoken import __version__
from cmstoken.cli.admin_aws import (
    EXIT_FAILED,
    EXIT_OK,
    AdminError,
    Invoker,
    LambdaInvoker,
    StackFunctions,
    locate,
    open_session,
)
from cmstoken.cli.admin_status import StatusSources, status
from cmstoken.core.clock import parse_iso
from cmstoken.core.redaction import displayable, printable

# Re-exported: the command's interface as tests and the local stack use it.
__all__ = ["AdminError", "LambdaInvoker", "StackFunctions", "locate", "status"]

EXIT_INTERRUPTED = 130
# One poll invocation waits at most this long, so progress can be shown between them.
POLL_SLICE_SECONDS = 20


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

EXIT_STATUS_HELP = (
    "Exit status: 0 success (status: healthy); 1 failure (status: needs attention); 2 usage "
    "error (a missing or malformed option, no AWS region, an unknown AWS profile); 130 "
    "interrupted. An AWS error ends in one line naming the action, the resource, the account "
    "and region, and what to do."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; argparse exits 2 on a usage error. ``--stack``, ``--region`` and
    ``--debug`` are accepted before or after the command, as the AWS CLI accepts its global
    options."""
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
    where.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on failure, print the traceback before the one-line message",
    )
    parser = argparse.ArgumentParser(
        prog="cmstoken-admin",
        parents=[common],
        description="Operate a deployed Cluster Management Service token stack: authorize it "
        "(bootstrap), check its health (status), rotate now (rotate).",
        epilog="Uses your AWS credentials, region and endpoints as the AWS CLI does "
        "(AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...). " + EXIT_STATUS_HELP,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    start = commands.add_parser(
        "bootstrap",
        parents=[common],
        help="authorize the stack with the device flow",
        epilog=EXIT_STATUS_HELP,
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
    check = commands.add_parser(
        "status",
        parents=[common],
        help="say whether the stack is healthy (exit 0) or needs attention (exit 1)",
        description="The credential and its re-authorization date, the published token's "
        "expiry, the rotator's last and next run, the stack's alarms in ALARM, and the deployed "
        "version, then a one-line verdict. Metadata only: never a token or a code. A line "
        "whose source your AWS permissions cannot read says so (the verdict is then 'needs "
        "attention'): status needs cloudformation:DescribeStacks, lambda:InvokeFunction on the "
        "bootstrap function, cloudwatch:GetMetricData, cloudwatch:DescribeAlarms and "
        "scheduler:GetSchedule.",
        epilog=EXIT_STATUS_HELP,
    )
    check.add_argument(
        "--json",
        action="store_true",
        help="print the report as one JSON object on standard output (for scripts)",
    )
    commands.add_parser(
        "rotate", parents=[common], help="force a rotation now", epilog=EXIT_STATUS_HELP
    )
    args = parser.parse_args(argv)
    if not getattr(args, "stack", "").strip():
        parser.error("the following arguments are required: --stack")
    args.region = getattr(args, "region", None)
    args.debug = getattr(args, "debug", False)
    return args


def run(
    args: argparse.Namespace,
    invoker: Invoker,
    functions: StackFunctions,
    out: TextIO,
    *,
    sources: StatusSources | None = None,
) -> int:
    """Run the parsed command against ``functions`` (``sources``: what ``status`` reads
    besides the functions)."""
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
        return status(invoker, functions, out=out, sources=sources, as_json=args.json)
    return rotate(invoker, functions, out=out)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cmstoken-admin``: every failure ends in one line on standard error
    (a traceback only with ``--debug``), with the exit status the help text promises."""
    args = parse_args(argv)
    try:
        return _against_aws(args)
    except AdminError as exc:
        _fail(args, str(exc))
        return exc.exit_status
    except KeyboardInterrupt:
        sys.stderr.write("\ncmstoken-admin: interrupted\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, never a traceback
        _fail(
            args,
            f"unexpected error: {type(exc).__name__}: {printable(str(exc))[:300]} (rerun with "
            "--debug for the traceback, and report it)",
        )
        return EXIT_FAILED


def _against_aws(args: argparse.Namespace) -> int:
    """Find the stack's functions in its region and account, and run the command."""
    from botocore.config import Config

    session = open_session(args.region)
    # Reads: standard retries (throttling, connection errors). The invocation: no retry (a
    # bootstrap start is not idempotent) and a read timeout past the functions' 900 s limit.
    reads = Config(
        connect_timeout=10, read_timeout=30, retries={"mode": "standard", "total_max_attempts": 3}
    )
    invocations = Config(
        connect_timeout=10, read_timeout=910, retries={"mode": "standard", "total_max_attempts": 1}
    )
    stack = locate(args.stack, session.client("cloudformation", config=reads), session=session)
    invoker = LambdaInvoker(session.client("lambda", config=invocations), stack)
    if args.command != "status":
        return run(args, invoker, stack.functions, sys.stderr)
    sources = StatusSources(
        stack, session.client("cloudwatch", config=reads), session.client("scheduler", config=reads)
    )
    return run(args, invoker, stack.functions, sys.stdout, sources=sources)


def _fail(args: argparse.Namespace, message: str) -> None:
    if args.debug:
        traceback.print_exc()
    sys.stderr.write(f"cmstoken-admin: {message}\n")


if __name__ == "__main__":
    sys.exit(main())
