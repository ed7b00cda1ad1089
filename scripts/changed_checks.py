"""`make check`: the quick checks of what a change touches, in under two minutes.

The files changed against the merge base with ``main`` (``git diff --name-only``, the working
tree included) and the untracked ones; ruff (lint and format) on those in Python, mypy on them,
then the unit tests that mirror them (the tests mirror the library's folders): a library module
``layers/cmstoken/cmstoken/X/y.py`` its ``tests/unit/X/test*_y*.py``, else all of
``tests/unit/X/``; a script or helper ``y.py`` its ``tests/unit/**/test_y.py``; a unit test
itself; ``tests/simulation/`` the explorations' tests. Anything else it cannot map (the
template, the docs, the Makefile, a shared test helper) runs all of ``tests/unit`` but for the
explorations (``tests/unit/simulation``, `make explore`: minutes), which run when a change calls
for them. Integration tests are `make test`'s (and `make integration`'s): a changed one is linted
here, not run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = "layers/cmstoken/cmstoken/"
UNIT = "tests/unit"
ALL_UNIT = (UNIT,)
EXPLORATIONS = f"{UNIT}/simulation"
SPARED = f"--ignore={EXPLORATIONS}"


def git(*arguments: str) -> list[str]:
    """git's output lines in the checkout."""
    completed = subprocess.run(  # noqa: S603 -- git with this script's arguments
        ["git", "-C", str(ROOT), *arguments],  # noqa: S607 -- git on PATH, fixed arguments
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return [line for line in completed.stdout.splitlines() if line]


def changed_files(base: str) -> list[str]:
    """The files changed since the merge base of HEAD and ``base`` (committed or not), and the
    untracked ones git does not ignore."""
    try:
        (fork,) = git("merge-base", "HEAD", base)
    except subprocess.CalledProcessError:
        fork = base
    changed = git("diff", "--name-only", fork) + git("ls-files", "--others", "--exclude-standard")
    return sorted(set(changed))


def unit_tests(root: Path = ROOT) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in (root / UNIT).rglob("test_*.py"))


def _named_for(stem: str, tests: Iterable[str]) -> list[str]:
    """The tests whose name carries ``stem`` as a word: test_y.py, test_x_y.py, test_y_x.py."""
    found = []
    for test in tests:
        name = Path(test).stem.removeprefix("test")
        if f"_{stem}_" in f"{name}_":
            found.append(test)
    return found


def mirrors(path: str, tests: Sequence[str]) -> tuple[str, ...]:
    """The unit tests (files or folders) that mirror a changed file; ``()`` for a file no unit
    test covers (an integration test); ``ALL_UNIT`` when it cannot tell."""
    file = Path(path)
    if path.startswith(f"{UNIT}/"):
        if file.name.startswith("test_") and file.suffix == ".py":
            return (path,)
        return (str(file.parent),) if file.suffix == ".py" else ALL_UNIT
    if path.startswith(("tests/integration/", "tests/artifact/")):
        return ()
    if path.startswith("tests/simulation/"):
        return (EXPLORATIONS,)
    if file.suffix != ".py":
        return ALL_UNIT
    if path.startswith(LIBRARY):
        parts = Path(path.removeprefix(LIBRARY)).parts
        if len(parts) == 1:  # runtime.py, observability.py, __init__.py: every layer uses them
            return ALL_UNIT
        folder = f"{UNIT}/{parts[0]}"
        inside = [test for test in tests if test.startswith(f"{folder}/")]
        return tuple(_named_for(file.stem, inside)) or (folder,)
    exact = tuple(test for test in tests if Path(test).name == f"test_{file.stem}.py")
    return exact or ALL_UNIT


def plan(changed: Iterable[str], tests: Sequence[str]) -> list[str]:
    """pytest's paths for the changed files: all of ``tests/unit`` once any needs it, but for
    the explorations (``make explore``, minutes) unless a change calls for them."""
    targets: set[str] = set()
    for path in changed:
        targets.update(mirrors(path, tests))
    if ALL_UNIT[0] in targets:
        explore = any(f"{t}/".startswith(f"{EXPLORATIONS}/") for t in targets)
        return list(ALL_UNIT) if explore else [*ALL_UNIT, SPARED]
    # A file inside a folder that is run whole runs with it.
    folders = {t for t in targets if not t.endswith(".py")}
    return sorted(t for t in targets if not any(t.startswith(f"{f}/") for f in folders))


def typed(paths: Iterable[str], root: Path = ROOT) -> list[str]:
    """The Python files among ``paths`` that mypy checks (pyproject.toml's files)."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]
    roots = [str(entry) for entry in config["files"]]
    return [p for p in paths if any(p == r or p.startswith(f"{r}/") for r in roots)]


def commands(changed: Sequence[str], jobs: int, root: Path = ROOT) -> list[list[str]]:
    """The commands `make check` runs for these changed files, in order."""
    python = [p for p in changed if p.endswith(".py") and (root / p).is_file()]
    bin_ = str(Path(sys.executable).parent)
    steps = []
    if python:
        steps.append([f"{bin_}/ruff", "check", *python])
        steps.append([f"{bin_}/ruff", "format", "--check", *python])
    if typed(python, root):
        steps.append([f"{bin_}/mypy", *typed(python, root)])
    targets = plan(changed, unit_tests(root))
    if targets:
        one_file = len(targets) == 1 and targets[0].endswith(".py")
        parallel = [] if one_file else ["-n", str(jobs), "--dist", "worksteal"]
        steps.append([f"{bin_}/pytest", "-q", *parallel, *targets])
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="the branch to compare with (main)")
    parser.add_argument("--jobs", type=int, default=2, help="pytest processes for all units")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    changed = changed_files(args.base)
    print(f"make check: {len(changed)} files changed against {args.base}", flush=True)
    steps = commands(changed, args.jobs)
    for step in steps:
        print(" ".join(Path(step[0]).name if n == 0 else a for n, a in enumerate(step)), flush=True)
        if not args.dry_run and subprocess.run(step, cwd=ROOT, check=False).returncode:  # noqa: S603 -- the venv's tools, the changed files
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
