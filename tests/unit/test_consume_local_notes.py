"""Each section of docs/consume.md that holds a recipe (a ``recipe`` or ``consumer-helper``
block) says how to point it at the local stack of `make demo KEEP=1`: a note that starts
``*On the local stack:*`` and names the file that sets the endpoint, Region and credentials, or
says that the local stack cannot run it (a new user found no such word, issue 37)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTE = "*On the local stack:*"


def sections_with_recipes() -> dict[str, str]:
    """Each section (heading to the next heading, code blocks skipped) that holds a recipe."""
    sections: dict[str, str] = {}
    heading, fenced = "", False
    for line in (ROOT / "docs" / "consume.md").read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        title = None if fenced else re.match(r"#{1,6} (.*)", line)
        if title is not None:
            heading = title.group(1)
        sections[heading] = sections.get(heading, "") + line + "\n"
    return {
        name: text
        for name, text in sections.items()
        if re.search(r"<!-- (recipe|consumer-helper): ", text)
    }


def test_each_recipe_section_says_how_to_point_it_at_the_local_stack() -> None:
    sections = sections_with_recipes()
    assert len(sections) >= 9
    missing = [name for name, text in sections.items() if NOTE not in text]
    assert missing == []
    for name, text in sections.items():
        note = text[text.index(NOTE) :].split("\n\n")[0]
        assert "local-stack.env" in note, name


def test_the_notes_name_the_local_stacks_secret_and_settings() -> None:
    text = (ROOT / "docs" / "consume.md").read_text()
    assert "cmstoken-local/service-token" in text
    for setting in ("AWS_ENDPOINT_URL", "us-east-1", "`local`"):
        assert setting in text
