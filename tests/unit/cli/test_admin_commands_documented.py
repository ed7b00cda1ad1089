"""docs/operate.md's table of `cmstoken-admin` commands is the parser's: every command is listed,
and every row's usage parses, its placeholders filled in."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from cmstoken.cli.admin.command import build_parser

OPERATE = Path(__file__).resolve().parents[3] / "docs" / "operate.md"
ROWS = re.findall(r"^\| `(cmstoken-admin [^`]+)` \|", OPERATE.read_text(), flags=re.MULTILINE)
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken/{}-AbCdEf"
FILLED = {  # a placeholder's value, by the option before it
    "--stack": "cmstoken",
    "--secret-arn": SECRET.format("service-token"),
    "--refresh-credential-arn": SECRET.format("refresh-credential"),
    "--replica-regions": "eu-west-1,us-west-2",
    "--bus-arn": "arn:aws:events:us-east-1:123456789012:event-bus/cmstoken-refresh-requests",
}


def commands() -> set[str]:
    parser = build_parser()
    (choices,) = (
        action.choices
        for action in parser._actions  # argparse keeps its subcommands there only
        if isinstance(action, argparse._SubParsersAction)
    )
    return set(choices)


def test_every_command_is_in_the_table() -> None:
    listed = {row.replace("--stack NAME ", "").split()[1] for row in ROWS}
    assert listed == commands()


def test_every_row_parses_with_its_options() -> None:
    for row in ROWS:
        words: list[str] = []
        for word in shlex.split(re.sub(r"\[|\]", " ", row))[1:]:
            placeholder = word.isupper() or word == "R1,R2"
            words.append(FILLED[words[-1]] if placeholder else word)
        arguments = build_parser().parse_args(words)
        assert arguments is not None, row
