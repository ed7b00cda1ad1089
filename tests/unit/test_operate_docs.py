"""docs/operate.md's command table names what operators set and what the commands return:
stack parameters by the names ``sam deploy`` takes (not the functions' environment variables),
and every exit status of ``rotate`` (it listed 0 only)."""

from __future__ import annotations

import re
from pathlib import Path

from template_model import source

ROOT = Path(__file__).resolve().parents[2]
OPERATE = ROOT / "docs" / "operate.md"


def command_rows() -> dict[str, list[str]]:
    """The command table's rows, by command (its first cell), split into cells."""
    rows = {}
    for line in OPERATE.read_text().splitlines():
        found = re.match(r"^\| `cmstoken-admin (?:--stack NAME )?([\w-]+)", line)
        if found:
            rows[found.group(1)] = [cell.strip() for cell in line.strip("|").split(" | ")]
    return rows


def test_the_table_names_parameters_not_environment_variables() -> None:
    parameters = set(source()["Parameters"])
    for command, cells in command_rows().items():
        text = " ".join(cells)
        assert not re.search(r"`[A-Z][A-Z0-9]*_[A-Z0-9_]+`", text), (command, text)
        for name in re.findall(r"`([A-Z][A-Za-z]+Seconds)`", text):
            assert name in parameters, name
    assert "`MinRefreshIntervalSeconds`" in command_rows()["rotate"][1]


def test_rotates_row_lists_every_exit_status_it_returns() -> None:
    statuses = command_rows()["rotate"][2]
    for code in ("0 rotated or skipped", "1 otherwise", "2 usage", "130 interrupted"):
        assert code in statuses, statuses
