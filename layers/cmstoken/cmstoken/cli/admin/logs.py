"""``cmstoken-admin logs``: the recent log events of one of the stack's functions, from the log
group the template names for it (``/cmstoken/STACK/FUNCTION``), one event per line on standard
output (``logs:FilterLogEvents``). What the alarms' runbook reads first."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from typing import Any, TextIO

from cmstoken.cli.admin.errors import Call, explain
from cmstoken.cli.admin.stack import DeployedStack
from cmstoken.cli.console import EXIT_OK, say, shown
from cmstoken.core.clock import to_iso

type Commands = argparse._SubParsersAction[argparse.ArgumentParser]

LOGS = "logs"
FUNCTIONS = ("rotator", "bootstrap", "links")
DEFAULT_SINCE = "1h"
_SINCE = re.compile(r"([1-9]\d{0,5})([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def log_group(stack: str, function: str) -> str:
    """The log group template.yaml gives ``function`` of the stack named ``stack``."""
    return f"/cmstoken/{stack}/{function}"


def since_seconds(text: str) -> int:
    """``--since``: a number and a unit (s, m, h, d, w), as ``aws logs tail --since`` takes."""
    found = _SINCE.fullmatch(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            "expects a number and a unit: s, m, h, d or w (30m, 1h, 2d)"
        )
    return int(found.group(1)) * _UNIT_SECONDS[found.group(2)]


def add_logs(commands: Commands, common: argparse.ArgumentParser, epilog: str) -> None:
    """The ``logs`` command's parser."""
    logs = commands.add_parser(
        LOGS,
        parents=[common],
        help="print a function's recent log events (default: the rotator's, last hour)",
        description="The log events of one of the stack's functions, from the log group "
        "the template names for it (/cmstoken/STACK/FUNCTION), oldest first, one per line: "
        "the time (UTC) and the message, which is a JSON record (never a token). Needs "
        "logs:FilterLogEvents on that log group.",
        epilog=epilog,
    )
    logs.add_argument(
        "--function",
        choices=FUNCTIONS,
        default=FUNCTIONS[0],
        help="whose log to print (default: rotator; links exists only with "
        "OneClickReauthorization=true)",
    )
    logs.add_argument(
        "--since",
        type=since_seconds,
        default=since_seconds(DEFAULT_SINCE),
        metavar="DURATION",
        help=f"how far back: a number and a unit, s, m, h, d or w (default: {DEFAULT_SINCE})",
    )


def print_logs(
    stack: DeployedStack,
    client: Any,
    *,
    function: str,
    since: int,
    out: TextIO,
    err: TextIO,
    now: Callable[[], float] = time.time,
) -> int:
    """The events of ``function``'s log group of the last ``since`` seconds, on ``out``; a
    line on ``err`` when there are none. An AWS error is one ``AdminError`` line."""
    from botocore.exceptions import BotoCoreError, ClientError

    group = log_group(stack.name, function)
    printed = 0
    try:
        pages = client.get_paginator("filter_log_events").paginate(
            logGroupName=group, startTime=int((now() - since) * 1000)
        )
        for page in pages:
            for event in page.get("events", []):
                out.write(f"{_when(event)} {_one_line(event.get('message', ''))}\n")
                printed += 1
    except (BotoCoreError, ClientError) as exc:
        raise explain(exc, _call(stack, group, function)) from exc
    out.flush()
    if not printed:
        say(err, f"cmstoken-admin: no events in {group} in the last {_duration(since)}")
    return EXIT_OK


def _when(event: Any) -> str:
    stamp = event.get("timestamp")
    return to_iso(stamp / 1000) if isinstance(stamp, int | float) else "-"


def _one_line(message: object) -> str:
    """A message on one line, safe to print (Lambda's own lines hold tabs)."""
    text = str(message).rstrip("\r\n").replace("\t", " ")
    return shown(" ".join(text.splitlines()))


def _call(stack: DeployedStack, group: str, function: str) -> Call:
    partition = stack.stack_id.split(":")[1] if stack.stack_id.startswith("arn:") else "aws"
    arn = f"arn:{partition}:logs:{stack.region}:{stack.account or '*'}:log-group:{group}"
    missing = "the stack creates it with the function"
    if function == "links":
        missing += " (links: only with OneClickReauthorization=true)"
    return Call("logs:FilterLogEvents", arn, stack.where, missing=missing)


def _duration(seconds: int) -> str:
    for unit, size in sorted(_UNIT_SECONDS.items(), key=lambda item: -item[1]):
        if seconds % size == 0:
            count = seconds // size
            name = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week"}[unit]
            return f"{count} {name}{'s' if count != 1 else ''}"
    return f"{seconds} s"
