"""The threat model's rows and their deliberate breaks stay in step (``make bite`` applies each
break in a copy and requires the row's named tests to fail; this only checks the mapping, fast).

Every row of docs/threat-model.md that is not marked **open** names at least one break in its
"what holds it" cell (``bite: [slug](../tests/bite/breaks/slug.patch)``), each a patch in
tests/bite/breaks/ that says what it breaks and applies cleanly to this checkout
(``git apply --check``); an open row names none; every patch belongs to a row, and no two rows
name the same."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import bite

ROOT = Path(__file__).resolve().parents[2]
ROWS = bite.rows(bite.DOC.read_text())
NAMED = [slug for row in ROWS for slug in row.slugs]


def test_every_row_that_is_not_open_names_a_break_and_an_open_row_none() -> None:
    wrong = [
        f"{row.section}: {row.limit[:60]}: "
        + ("open, but names a break" if row.is_open else "names no break and is not open")
        for row in ROWS
        if bool(row.slugs) == row.is_open
    ]
    assert wrong == []


def test_each_break_is_named_by_one_row_and_links_its_own_patch() -> None:
    assert len(NAMED) == len(set(NAMED)), "a break named twice"
    assert [(slug, patch) for row in ROWS for slug, patch in row.bites if slug != patch] == []


def test_every_patch_belongs_to_a_row_and_every_named_break_is_a_patch() -> None:
    patches = {path.stem for path in bite.BREAKS.glob("*.patch")}
    assert sorted(patches - set(NAMED)) == [], "a break whose row is gone"
    assert sorted(set(NAMED) - patches) == [], "a row whose break is missing"
    assert [path.name for path in bite.BREAKS.iterdir() if path.suffix != ".patch"] == []


@pytest.mark.parametrize("slug", NAMED)
def test_each_break_says_what_it_breaks_and_applies_to_the_checkout(slug: str) -> None:
    patch = bite.patch_path(slug)
    text = patch.read_text()
    assert text.startswith("Break: "), "the first line says what the patch breaks"
    assert bite.description(text)
    assert "diff --git a/" in text
    checked = subprocess.run(
        ["git", "apply", "--check", str(patch)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_a_break_changes_only_what_the_checkout_holds() -> None:
    """No break adds or deletes a file, or touches the tests that judge it."""
    wrong = []
    for slug in NAMED:
        text = bite.patch_path(slug).read_text()
        for line in text.splitlines():
            if line.startswith(("new file mode", "deleted file mode", "rename from")):
                wrong.append(f"{slug}: {line}")
            if line.startswith(("+++ b/tests/", "--- a/tests/")):
                wrong.append(f"{slug}: {line}")
    assert wrong == []


# --- controls: the checks see what they look for --------------------------------------------


def test_the_mapping_sees_a_row_without_a_break_and_an_open_row_with_one() -> None:
    heading = "## A surface\n\n| limit | what holds it | test |\n|---|---|---|\n"
    test = "`tests/unit/test_bite.py::test_each_break_is_named_by_one_row_and_links_its_own_patch`"
    link = "bite: [some-break](../tests/bite/breaks/some-break.patch)"
    [held, unbroken, opened, broken_open] = bite.rows(
        heading
        + f"| held | code<br>{link} | {test} |\n"
        + f"| unbroken | code | {test} |\n"
        + "| gap | nothing | **open**: not limited yet |\n"
        + f"| gap | nothing<br>{link} | **open**: not limited yet |\n"
    )
    assert (held.slugs, held.node_ids) == (["some-break"], [test.strip("`")])
    assert (unbroken.slugs, unbroken.is_open) == ([], False)
    assert (opened.is_open, opened.slugs) == (True, [])
    assert (broken_open.is_open, broken_open.slugs) == (True, ["some-break"])


def test_a_patch_that_does_not_apply_is_seen(tmp_path: Path) -> None:
    patch = tmp_path / "stale.patch"
    patch.write_text(
        "Break: nothing that exists.\n\n"
        "diff --git a/template.yaml b/template.yaml\n--- a/template.yaml\n+++ b/template.yaml\n"
        "@@ -1,1 +1,1 @@\n-no such line in the template\n+another\n"
    )
    checked = subprocess.run(
        ["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, check=False
    )
    assert checked.returncode != 0
