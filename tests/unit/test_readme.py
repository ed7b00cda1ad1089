"""The documentation says what the tools really do: the make targets it lists are the
Makefile's, and the output formats it describes are the ones get-token prints."""

from __future__ import annotations

import re
from pathlib import Path

from support import documentation

ROOT = Path(__file__).resolve().parents[2]
README = documentation()


def test_the_listed_make_targets_are_the_makefiles() -> None:
    documented = {
        match.group(1)
        for match in re.finditer(r"^([a-z-]+):.*## ", (ROOT / "Makefile").read_text(), re.M)
    }
    sentence = re.search(r"`make help` lists the other\s+targets \(([^)]*)\)", README)
    assert sentence is not None
    listed = set(re.findall(r"`([a-z-]+)`", sentence.group(1)))
    assert listed == documented - {"help", "test", "demo"}  # the two commands are named above


def test_the_plain_output_is_described_as_printed() -> None:
    sentence = re.search(r"`-o plain` prints three lines, (.*?) \(no scope", README, re.S)
    assert sentence is not None
    assert re.findall(r"`(\w+): \.\.\.`", sentence.group(1)) == [
        "access_token",
        "refresh_token",
        "expires_in",
    ]
