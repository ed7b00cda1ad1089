"""The documentation's shell recipes paste safely into an interactive shell, and keep refresh
files out of a clone: strictness (``set -e``) only inside a subshell, where a failing command
ends the subshell and not the reader's terminal; every ``--refresh-file`` a document shows is
a per-user path or a variable, never a bare name in the working directory (a clone, most
likely); and the names such a file might still get are ignored by git."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import DOCUMENTS

ROOT = Path(__file__).resolve().parents[2]
RECIPE = re.compile(r"<!-- recipe: ([\w-]+) -->\s*```(?:sh|bash)\n(.*?)```", re.DOTALL)
STRICT = re.compile(r"^set\s+-\w*e")
REFRESH_FILE = re.compile(r"--refresh-file\s+(\S+)")
PER_USER = '"${XDG_STATE_HOME:-$HOME/.local/state}/cmstoken/'


def pasted_recipes() -> list[tuple[str, str]]:
    """The recipes meant for pasting: every shell recipe but a script file (``#!``)."""
    return [
        (name, body)
        for path in DOCUMENTS
        for name, body in RECIPE.findall(path.read_text())
        if not body.startswith("#!")
    ]


def code_lines(body: str) -> list[str]:
    lines = (line.rstrip() for line in body.splitlines())
    return [line for line in lines if line and not line.lstrip().startswith("#")]


def strict_at_top_level(body: str) -> bool:
    """Whether ``body`` turns on ``set -e`` outside the one subshell it may be wrapped in."""
    lines = code_lines(body)
    wrapped = bool(lines) and lines[0].startswith("(") and lines[-1] == ")"
    return not wrapped and any(STRICT.match(line) for line in lines)


def test_the_check_sees_a_strict_recipe() -> None:
    assert strict_at_top_level("set -euo pipefail\necho hi\n")
    assert not strict_at_top_level("(  # a subshell\nset -euo pipefail\necho hi\n)\n")
    assert not strict_at_top_level("echo hi\n")


def test_no_recipe_meant_for_pasting_sets_e_at_top_level() -> None:
    recipes = pasted_recipes()
    assert {"emulator", "aws-cli", "refresh-request"} <= {name for name, _ in recipes}
    strict = [name for name, body in recipes if strict_at_top_level(body)]
    assert strict == [], f"recipes that would close a terminal on the first failure: {strict}"


def test_every_shown_refresh_file_is_outside_the_working_directory() -> None:
    shown = [
        argument
        for path in DOCUMENTS
        for argument in REFRESH_FILE.findall(path.read_text())
        if argument not in ("PATH", "PATH`")  # the option's description
    ]
    assert shown, "no document shows --refresh-file"
    bare = [arg for arg in shown if not (arg.startswith((PER_USER, '"$')))]
    assert bare == [], f"refresh files in the working directory: {bare}"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize(
    "name",
    ["refresh-token", "refresh-token.txt", ".refresh-token.abc123.tmp", "docs/refresh-token"],
)
def test_the_names_a_refresh_file_might_get_in_a_clone_are_ignored(name: str) -> None:
    checked = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", "--", name],
        capture_output=True,
        check=False,
        timeout=10,
    )
    assert checked.returncode == 0, f"{name} is not ignored by .gitignore"
