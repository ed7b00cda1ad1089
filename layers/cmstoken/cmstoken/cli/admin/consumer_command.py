"""``cmstoken-admin check-consumer``'s command line (its parser, with no ``--stack``: it runs
in a consumer account on the stack's ARNs) and its run: the checks' lines
(``cmstoken.consumer.check``) on standard output, exit 1 when one fails."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from cmstoken.cli.console import EXIT_FAILURE, EXIT_OK, say, shown
from cmstoken.consumer.check import FAIL, ConsumerCheck, run_checks
from cmstoken.consumer.regions import REGION_PATTERN, region_names
from cmstoken.core.clock import SystemClock
from cmstoken.core.errors import ConfigurationError

type Commands = argparse._SubParsersAction[argparse.ArgumentParser]

CHECK_CONSUMER = "check-consumer"
_SECRET_ARN = re.compile(
    rf"arn:aws[a-z-]*:secretsmanager:{REGION_PATTERN}:\d{{12}}:secret:[\w/+=.@-]+-\w{{6}}"
)
_BUS_ARN = re.compile(rf"arn:aws[a-z-]*:events:{REGION_PATTERN}:\d{{12}}:event-bus/[\w.-]+")


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return value

    return check


def _regions(value: str) -> tuple[str, ...]:
    try:
        return region_names(value.split(","))
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_check_consumer(commands: Commands, epilog: str) -> None:
    """The ``check-consumer`` command's parser (no ``--stack``: it runs on ARNs)."""
    local = argparse.ArgumentParser(add_help=False)  # no --region: the ARNs name theirs
    local.add_argument(
        "--profile",
        default=argparse.SUPPRESS,
        help="the AWS profile whose credentials to use (default: AWS_PROFILE, or the default "
        "profile)",
    )
    local.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on failure, print the traceback before the one-line message",
    )
    check = commands.add_parser(
        CHECK_CONSUMER,
        parents=[local],
        help="from a consumer account: prove it can read the service token and cannot read "
        "the refresh credential",
        description="Run with the consumer's credentials. One line per check (ok, FAIL with "
        "what to fix, skip), never a token: read, decrypt and token in the secret's region and "
        "each replica region, and each replica against the primary (one behind it fails); a "
        "refresh request on the stack's bus (sent only with "
        "--send-refresh-request: PutEvents has no dry run, and a request forces a rotation "
        "unless the stack refreshed within its minimum interval); and GetSecretValue on the "
        "refresh credential, which must be denied. Exit 1 when a check fails.",
        epilog=epilog,
    )
    full_arn = "a secret's full ARN (ending in a hyphen and six characters)"
    check.add_argument(
        "--secret-arn",
        required=True,
        type=_matching(_SECRET_ARN, full_arn),
        help="the stack's ServiceTokenSecretArn output",
    )
    check.add_argument(
        "--refresh-credential-arn",
        required=True,
        type=_matching(_SECRET_ARN, full_arn),
        help="the stack's RefreshCredentialSecretArn output: reading it must be denied",
    )
    check.add_argument(
        "--replica-regions",
        type=_regions,
        default=(),
        metavar="R1,R2",
        help="the stack's ServiceTokenReplicaRegions output: each replica is checked too, and "
        "compared with the primary",
    )
    check.add_argument(
        "--bus-arn",
        type=_matching(_BUS_ARN, "an event bus ARN"),
        help="the stack's RefreshRequestBusArn output",
    )
    check.add_argument(
        "--send-refresh-request",
        action="store_true",
        help="send one real refresh request on --bus-arn (without it, that check is skipped)",
    )


def consumer_check(args: argparse.Namespace) -> ConsumerCheck:
    """What ``check-consumer``'s options ask to check."""
    return ConsumerCheck(
        secret_arn=args.secret_arn,
        refresh_credential_arn=args.refresh_credential_arn,
        replica_regions=args.replica_regions,
        bus_arn=args.bus_arn,
        send_refresh_request=args.send_refresh_request,
    )


def check_consumer(check: ConsumerCheck, session: Any, out: TextIO | None = None) -> int:
    """``check-consumer``: its lines on ``out`` (standard output); 1 when one says FAIL."""
    from botocore.config import Config

    config = Config(
        connect_timeout=5, read_timeout=10, retries={"mode": "standard", "total_max_attempts": 3}
    )

    def clients(service: str, region: str) -> Any:
        return session.client(service, region_name=region or None, config=config)

    lines = run_checks(check, clients, session, SystemClock())
    for line in lines:
        say(out or sys.stdout, shown(line))
    return EXIT_FAILURE if any(line.status == FAIL for line in lines) else EXIT_OK
