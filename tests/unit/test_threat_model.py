"""docs/threat-model.md tests itself: a section for each surface that callers we did not choose
can reach (who reaches it, what they can make the stack do, what it costs, a table of its limits
and a line on residual risk), and every limit names the tests that fail if it breaks. A named
test that is renamed or deleted fails here. A limit the project does not hold yet, or holds
without a test, is a row marked open that names none; any other row names at least one."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from support import defined_tests

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "threat-model.md"
# The surfaces the tracker lists, as the document heads their sections.
SURFACES = (
    "The function URL of the links function",
    "The refresh-request bus and the default bus's rule",
    "The secrets' and keys' resource policies",
    "The consumer policies and consumer.yaml",
    "The admin command and the functions invoked directly",
    "The alarm topic and its messages",
)
SAID = ("**Who reaches it:**", "**What they can make the stack do:**", "**What it costs:**")
RESIDUAL = "**Residual risk.**"
HEADER = ["limit", "what holds it", "test"]
# A test as pytest names it: its file, an optional class, the function, an optional parameter.
NODE_ID = re.compile(r"`(tests/[\w/]+\.py)::((?:Test\w+::)?test_\w+)(?:\[[^\]`]+\])?`")
OPEN = re.compile(r"\*\*open\*\*: (?:not limited yet|no test yet)\b.*")


def sections(text: str) -> dict[str, str]:
    """The document's ``##`` sections, by heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def rows(section: str) -> list[list[str]]:
    """The body rows (three cells each, stripped) of the section's tables of limits."""
    table = [
        line.strip()
        for line in section.splitlines()
        if line.startswith("|") and not re.fullmatch(r"\|[-:| ]+\|", line.strip())
    ]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in table]
    return [row for row in cells if row != HEADER]


def missing_parts(text: str) -> list[str]:
    """Each surface without a section, or whose section leaves out who reaches it, what they
    can do, what it costs, its limits or its residual risk."""
    found = sections(text)
    missing = []
    for surface in SURFACES:
        section = found.get(surface)
        if section is None:
            missing.append(f"{surface}: no section")
            continue
        missing += [f"{surface}: no {part}" for part in (*SAID, RESIDUAL) if part not in section]
        if not rows(section):
            missing.append(f"{surface}: no limits")
    return missing


def unnamed_limits(text: str) -> list[str]:
    """Each row that names no test without being marked open, is marked open and names one
    anyway, or holds in its test column anything but node ids separated by ``<br>``."""
    wrong = []
    for heading, section in sections(text).items():
        for row in rows(section):
            if len(row) != len(HEADER):
                wrong.append(f"{heading}: not a row of {len(HEADER)} cells: {row}")
                continue
            limit, _, tests = row
            named = NODE_ID.findall(tests)
            if OPEN.fullmatch(tests):
                if named:
                    wrong.append(f"{heading}: marked open but names a test: {limit}")
            elif not named:
                wrong.append(f"{heading}: names no test and is not marked open: {limit}")
            elif NODE_ID.sub("", tests).replace("<br>", "").strip():
                wrong.append(f"{heading}: not only node ids in its test column: {limit}")
    return wrong


@functools.cache
def defined_in(module: str) -> frozenset[str]:
    return frozenset(defined_tests(module)) if (ROOT / module).is_file() else frozenset()


def undefined_tests(text: str) -> list[str]:
    """Each named test whose file is missing or does not define it (a parametrized test by the
    name it is defined under)."""
    return [
        f"{module}::{name}"
        for module, name in NODE_ID.findall(text)
        if name not in defined_in(module)
    ]


# --- the document ---------------------------------------------------------------------------


def test_every_surface_has_a_section_with_who_what_cost_limits_and_residual_risk() -> None:
    assert missing_parts(DOC.read_text()) == []


def test_every_limit_names_a_test_or_is_marked_open() -> None:
    text = DOC.read_text()
    assert unnamed_limits(text) == []
    limits = [row for section in sections(text).values() for row in rows(section)]
    assert any(OPEN.fullmatch(row[2]) for row in limits)  # the gaps are said, not left out


def test_every_named_test_is_defined() -> None:
    text = DOC.read_text()
    assert len(NODE_ID.findall(text)) >= len(SURFACES)
    assert undefined_tests(text) == []


def test_the_security_model_links_here() -> None:
    assert "](threat-model.md)" in (ROOT / "docs" / "security.md").read_text()


# --- controls: the checks see what they look for --------------------------------------------


def test_the_checks_see_a_renamed_test_and_a_missing_file() -> None:
    text = DOC.read_text()
    module, name = NODE_ID.findall(text)[0]
    renamed = text.replace(f"{module}::{name}`", f"{module}::{name}_renamed`", 1)
    assert undefined_tests(renamed) == [f"{module}::{name}_renamed"]
    moved = text.replace(f"`{module}::", "`tests/unit/no_such_file.py::", 1)
    assert undefined_tests(moved) == [f"tests/unit/no_such_file.py::{name}"]


def test_the_checks_see_a_limit_without_a_test_and_an_open_row_with_one() -> None:
    heading = f"## {SURFACES[0]}\n\n"
    table = "| limit | what holds it | test |\n|---|---|---|\n"
    test = "`tests/unit/test_threat_model.py::test_every_named_test_is_defined`"
    assert unnamed_limits(heading + table + f"| held | code | {test} |\n") == []
    assert unnamed_limits(heading + table + "| held | code | **open**: no test yet |\n") == []
    for cell in ("", "a test", f"{test} and more", f"**open**: no test yet {test}", "open"):
        assert len(unnamed_limits(heading + table + f"| held | code | {cell} |\n")) == 1, cell


def test_the_checks_see_a_missing_section_and_a_missing_part() -> None:
    text = DOC.read_text()
    assert missing_parts(text.replace(f"## {SURFACES[0]}", "## Something else", 1)) == [
        f"{SURFACES[0]}: no section"
    ]
    assert missing_parts(text.replace(RESIDUAL, "Residual risk:")) == [
        f"{surface}: no {RESIDUAL}" for surface in SURFACES
    ]


def test_defined_tests_finds_functions_methods_of_test_classes_and_conditional_ones(
    tmp_path: Path,
) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(
        "import sys\n\n"
        "def test_plain(): pass\n\n"
        "def helper(): pass\n\n"
        "class TestGroup:\n    def test_method(self): pass\n    def helper(self): pass\n\n"
        "class Helper:\n    def test_not_collected(self): pass\n\n"
        "if sys.version_info >= (3,):\n    def test_conditional(): pass\n"
    )
    assert defined_tests(str(module)) == {
        "test_plain",
        "TestGroup::test_method",
        "test_conditional",
    }
