"""``cmstoken-admin``: the operator's command for a deployed stack.

    cmstoken-admin --stack NAME bootstrap [--free-trial | --no-free-trial] [--new-identity]
    cmstoken-admin --stack NAME status [--json]
    cmstoken-admin --stack NAME rotate
    cmstoken-admin --stack NAME rotate-link-key
    cmstoken-admin --stack NAME logs [--function rotator|bootstrap|links] [--since 1h]
    cmstoken-admin check-consumer --secret-arn ARN --refresh-credential-arn ARN
        [--replica-regions R1,R2] [--bus-arn ARN [--send-refresh-request]]

It finds the functions from the stack's outputs and invokes them (``rotate-link-key`` writes
the secret an output names instead: ``link_key``; ``logs`` reads a function's log group). The
invocation goes through the small ``Invoker`` interface (``invokers``), so that tests and the
local demo run this same code against the handlers in-process (``LocalInvoker``). This module is
the command line and ``rotate``; the package's docstring lists the other parts.
``check-consumer`` runs in a consumer account, on ARNs, with no stack of its own
(``consumer_command``).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import traceback
from typing import TextIO

from cmstoken import __version__
from cmstoken.cli.admin.bootstrap import bootstrap
from cmstoken.cli.admin.consumer_command import (
    CHECK_CONSUMER,
    add_check_consumer,
    check_consumer,
    consumer_check,
)
from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.invokers import Invoker, LambdaInvoker
from cmstoken.cli.admin.link_key import LINK_KEY_OUTPUT, ONE_CLICK_PARAMETER, rotate_link_key
from cmstoken.cli.admin.logs import LOGS, add_logs, print_logs
from cmstoken.cli.admin.stack import StackFunctions, locate, open_session
from cmstoken.cli.admin.status import StatusSources, status
from cmstoken.cli.console import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, say, shown
from cmstoken.core.clock import parse_iso, to_iso

EXIT_STATUS_HELP = (
    "Exit status: 0 success (status: healthy); 1 failure (status: needs attention); 2 usage "
    "error (a missing or malformed option, no AWS region, an unknown AWS profile); 130 "
    "interrupted. An AWS error ends in one line naming the action, the resource, the account "
    "and region, and what to do."
)
MIN_INTERVAL_PARAMETER = "MinRefreshIntervalSeconds"
# The rotator's reason for a forced run it skips (rotation.decisions, not imported: cli sits
# beside it, not above it; a test checks they agree).
SKIP_DEBOUNCED = "forced refresh debounced (refreshed recently)"
DEFAULT_MIN_REFRESH_INTERVAL = 600.0  # the template's default
# Each a valid command line (a test parses every one): the top-level help's examples.
EXAMPLES = (
    ("authorize the stack (open the address it prints, approve)", "--stack cmstoken bootstrap"),
    ("is it healthy? (exit 0 healthy, 1 needs attention)", "--stack cmstoken status"),
    (
        "with a named AWS profile and region",
        "--profile ops --region eu-west-1 --stack cmstoken status --json",
    ),
    ("rotate now", "--stack cmstoken rotate"),
    ("the rotator's log of the last hour", "--stack cmstoken logs"),
    (
        "the bootstrap's log of the last day",
        "--stack cmstoken logs --function bootstrap --since 1d",
    ),
    ("void every re-authorization link sent", "--stack cmstoken rotate-link-key"),
)
type Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _examples() -> str:
    lines = ["examples:"]
    for what, words in EXAMPLES:
        lines += [f"  # {what}", f"  cmstoken-admin {words}"]
    return "\n".join(lines)


def rotate(
    invoker: Invoker,
    functions: StackFunctions,
    *,
    out: TextIO,
    min_interval: float = DEFAULT_MIN_REFRESH_INTERVAL,
) -> int:
    """Force a rotation now (debounced by the stack's minimum interval, ``min_interval``
    seconds after the last refresh: a debounced run says when a forced one works)."""
    result = invoker.invoke(functions.rotator, {"force": True})
    out.write(f"{shown(result.get('outcome'))}: {shown(result.get('reason'))}\n")
    if result.get("reason") == SKIP_DEBOUNCED:
        out.write(_debounce_ends(result.get("refreshed_at"), min_interval))
    if result.get("service_token_expires_at"):
        out.write(f"service token expires {shown(result['service_token_expires_at'])}\n")
    return EXIT_OK if result.get("outcome") in ("rotated", "skipped") else EXIT_FAILURE


def _debounce_ends(refreshed_at: object, min_interval: float) -> str:
    """The line saying from when a forced rotation works (the debounce's end)."""
    interval = f"{MIN_INTERVAL_PARAMETER}, {min_interval:.0f} s"
    try:
        ends = to_iso(parse_iso(str(refreshed_at)) + min_interval)
    except (TypeError, ValueError):
        return f"a forced rotation works {interval} after the last refresh\n"
    return f"a forced rotation works from {ends} ({interval} after the last refresh)\n"


# --- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; argparse exits 2 on a usage error. ``--stack``, ``--region``,
    ``--profile`` and ``--debug`` are accepted before or after the command, as the AWS CLI
    accepts its global options."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == CHECK_CONSUMER:
        if hasattr(args, "stack"):
            parser.error("check-consumer takes the stack's ARNs, not --stack")
        if args.send_refresh_request and not args.bus_arn:
            parser.error("--send-refresh-request needs --bus-arn")
    elif not getattr(args, "stack", "").strip():
        parser.error("the following arguments are required: --stack")
    args.region = getattr(args, "region", None)
    args.profile = getattr(args, "profile", None)
    args.debug = getattr(args, "debug", False)
    return args


def build_parser() -> argparse.ArgumentParser:
    """The parser of the command and of each of its commands."""
    common = _global_options()
    prose = textwrap.TextWrapper(width=88)
    parser = argparse.ArgumentParser(
        prog="cmstoken-admin",
        parents=[common],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=prose.fill(
            "Operate a deployed Cluster Management Service token stack: authorize it "
            "(bootstrap), check its health (status), rotate now (rotate), read a function's "
            "log (logs), void every re-authorization link sent so far (rotate-link-key); from "
            "a consumer account, check what it can do with the stack's secrets "
            "(check-consumer)."
        ),
        epilog=_examples()
        + "\n\n"
        + prose.fill(
            "Uses your AWS credentials, region and endpoints as the AWS CLI does (--profile or "
            "AWS_PROFILE, --region or AWS_REGION, AWS_ENDPOINT_URL, ...). " + EXIT_STATUS_HELP
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_bootstrap(commands, common)
    _add_status(commands, common)
    commands.add_parser(
        "rotate", parents=[common], help="force a rotation now", epilog=EXIT_STATUS_HELP
    )
    _add_rotate_link_key(commands, common)
    add_logs(commands, common, EXIT_STATUS_HELP)
    add_check_consumer(commands, EXIT_STATUS_HELP)
    return parser


def _global_options() -> argparse.ArgumentParser:
    """``--stack``, ``--region``, ``--profile`` and ``--debug``, for the command and each of
    its commands (suppressed defaults: given on either side, they are kept)."""
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("stack")
    where.add_argument(
        "--stack",
        default=argparse.SUPPRESS,
        help="the CloudFormation stack name (every command but check-consumer needs it)",
    )
    where.add_argument(
        "--region",
        default=argparse.SUPPRESS,
        help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, or your AWS profile's)",
    )
    where.add_argument(
        "--profile",
        default=argparse.SUPPRESS,
        help="the AWS profile whose credentials and region to use (default: AWS_PROFILE, or "
        "the default profile)",
    )
    where.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on failure, print the traceback before the one-line message",
    )
    return common


def _add_bootstrap(commands: Commands, common: argparse.ArgumentParser) -> None:
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


def _add_status(commands: Commands, common: argparse.ArgumentParser) -> None:
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


def _add_rotate_link_key(commands: Commands, common: argparse.ArgumentParser) -> None:
    commands.add_parser(
        "rotate-link-key",
        parents=[common],
        help="replace the key that signs re-authorization links: every link sent so far is void",
        description="Writes a new random key (64 letters and digits) to the secret the stack's "
        f"output {LINK_KEY_OUTPUT} names (secretsmanager:PutSecretValue, and "
        "kms:GenerateDataKey on the stack's KmsKeyArn when it has one): every re-authorization "
        "link sent before now is void, and the next notice carries a new link. Use it when a "
        "link leaked or a person who received them left, or routinely. The key is never "
        f'printed. A stack with {ONE_CLICK_PARAMETER} "false" has no such key: the command '
        "says so and exits 2.",
        epilog=EXIT_STATUS_HELP,
    )


# --- running a command -----------------------------------------------------------------------


def run(
    args: argparse.Namespace,
    invoker: Invoker,
    functions: StackFunctions,
    out: TextIO,
    *,
    sources: StatusSources | None = None,
    min_interval: float = DEFAULT_MIN_REFRESH_INTERVAL,
) -> int:
    """Run the parsed command against ``functions`` (``sources``: what ``status`` reads
    besides the functions; ``min_interval``: the stack's minimum refresh interval)."""
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
    if args.command == "rotate":
        return rotate(invoker, functions, out=out, min_interval=min_interval)
    raise AdminError(f"{args.command} writes a deployed stack's secret: it has no local run")


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
        say(sys.stderr, "\ncmstoken-admin: interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the boundary: one line, never a traceback
        _fail(
            args,
            f"unexpected error: {type(exc).__name__}: {shown(exc)[:300]} (rerun with "
            "--debug for the traceback, and report it)",
        )
        return EXIT_FAILURE


def _against_aws(args: argparse.Namespace) -> int:
    """Find the stack's functions in its region and account, and run the command."""
    from botocore.config import Config

    if args.command == CHECK_CONSUMER:  # its clients are in the regions its ARNs name
        check = consumer_check(args)
        return check_consumer(check, open_session(check.region, args.profile))
    session = open_session(args.region, args.profile)
    # Reads: standard retries (throttling, connection errors). The invocation: no retry (a
    # bootstrap start is not idempotent) and a read timeout past the functions' 900 s limit.
    reads = Config(
        connect_timeout=10, read_timeout=30, retries={"mode": "standard", "total_max_attempts": 3}
    )
    invocations = Config(
        connect_timeout=10, read_timeout=910, retries={"mode": "standard", "total_max_attempts": 1}
    )
    stack = locate(args.stack, session.client("cloudformation", config=reads), session=session)
    if args.command == LOGS:
        logs = session.client("logs", config=reads)
        return print_logs(
            stack, logs, function=args.function, since=args.since, out=sys.stdout, err=sys.stderr
        )
    if args.command == "rotate-link-key":
        # PutSecretValue may be retried: boto3 gives it one ClientRequestToken for all tries.
        secretsmanager = session.client("secretsmanager", config=reads)
        return rotate_link_key(stack, secretsmanager, out=sys.stderr)
    invoker = LambdaInvoker(session.client("lambda", config=invocations), stack)
    if args.command != "status":
        minimum = stack.number(MIN_INTERVAL_PARAMETER, DEFAULT_MIN_REFRESH_INTERVAL)
        return run(args, invoker, stack.functions, sys.stderr, min_interval=minimum)
    sources = StatusSources(
        stack, session.client("cloudwatch", config=reads), session.client("scheduler", config=reads)
    )
    return run(args, invoker, stack.functions, sys.stdout, sources=sources)


def _fail(args: argparse.Namespace, message: str) -> None:
    if args.debug:
        traceback.print_exc()
    say(sys.stderr, f"cmstoken-admin: {message}")
