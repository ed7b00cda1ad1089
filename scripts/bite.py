"""Every row of docs/threat-model.md bites (``make bite``; ``ROW=slug`` for one row).

Each row of the threat model's tables is one limit, what holds it, and the tests that fail if
it breaks. A row that is not marked **open** names its deliberate break in its "what holds it"
cell: ``bite: [slug](../tests/bite/breaks/slug.patch)``, a unified diff that breaks exactly
what the cell names (a condition removed, a limit widened, a statement of a policy widened, a
check skipped). The lines before the patch's first ``diff --git`` say what it breaks.

For each row this copies the checkout (the files git tracks plus the untracked ones it does not
ignore, as they are in the working tree: the user's tree is never written) into a temporary
folder, applies the row's break there with ``git apply``, and runs only the row's named tests
in the copy, with this checkout's interpreter and ``PYTHONPATH`` set so that the copy's
library, emulator, functions, tests and scripts are imported (checked before anything runs:
each module's file must be inside the copy). At least one named test must fail (pytest's exit
code 1 with a failing test; a collection error, a missing file or a test that errors in its
set-up is not a bite). Before the breaks, the named tests run once in an unbroken copy and must
pass: a test that always fails would otherwise seem to catch every break.

It prints a table (row, break, the tests that failed) and exits 1 naming each row whose break
no named test caught. ``tests/unit/test_bite.py`` (in ``make test``) keeps the rows and the
breaks in step: every row that is not open has a break that applies to the checkout, and every
break belongs to a row.

Run as ``python scripts/bite.py [--row SLUG]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "threat-model.md"
BREAKS = ROOT / "tests" / "bite" / "breaks"
HEADER = ["limit", "what holds it", "test"]
# A test as pytest names it: its file, an optional class, the function, an optional parameter.
NODE_ID = re.compile(r"`(tests/[\w/]+\.py::(?:Test\w+::)?test_\w+(?:\[[^\]`]+\])?)`")
OPEN = re.compile(r"\*\*open\*\*: (?:not limited yet|no test yet)\b.*")
SLUG = r"[a-z0-9]+(?:-[a-z0-9]+)*"
BITE = re.compile(rf"bite: \[({SLUG})\]\(\.\./tests/bite/breaks/({SLUG})\.patch\)")
# A test whose file deploys the stack from ``sam build``'s output (``deployer.deploy``, from
# tests/deployment.py) needs a build of the broken template, minutes per break: such named tests
# are left out of the runs (said when they are), and each row must bite with its others.
DEPLOYS = re.compile(r"\bdeployer\.deploy\(")
# The copy's modules that must be imported from the copy, not from the editable install.
IMPORTED = ("cmstoken", "cmsemu", "support", "bite")
# pytest's exit codes (pytest.ExitCode) as a line says them.
EXIT_CODES = {
    0: "every named test passed",
    2: "pytest was interrupted (a collection error?)",
    3: "pytest failed internally",
    4: "pytest's usage error (a named test or file not found?)",
    5: "no test was collected",
}


@dataclass(frozen=True)
class Row:
    """One row of a table of limits."""

    section: str
    limit: str
    holds: str
    tests: str

    @property
    def is_open(self) -> bool:
        return OPEN.fullmatch(self.tests) is not None

    @property
    def bites(self) -> list[tuple[str, str]]:
        """The (name, the patch's file name) of each break the row names."""
        return [(slug, patch) for slug, patch in BITE.findall(self.holds)]

    @property
    def slugs(self) -> list[str]:
        """The row's breaks, by slug (a row whose cell names two things may break each)."""
        return [slug for slug, _ in self.bites]

    @property
    def node_ids(self) -> list[str]:
        return NODE_ID.findall(self.tests)

    @property
    def run_ids(self) -> list[str]:
        """The named tests that run in a copy: all but those that need a build."""
        return [node for node in self.node_ids if not deploys(node)]


def deploys(node_id: str) -> bool:
    """Whether the test deploys the stack from ``sam build``'s output."""
    path = ROOT / node_id.split("::", 1)[0]
    return path.is_file() and DEPLOYS.search(path.read_text()) is not None


def sections(text: str) -> dict[str, str]:
    """The document's ``##`` sections, by heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def rows(text: str) -> list[Row]:
    """Every body row of three cells of the document's tables of limits."""
    found = []
    for heading, section in sections(text).items():
        for line in section.splitlines():
            line = line.strip()
            if not line.startswith("|") or re.fullmatch(r"\|[-:| ]+\|", line):
                continue
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            if cells != HEADER and len(cells) == len(HEADER):
                found.append(Row(heading, *cells))
    return found


def patch_path(slug: str) -> Path:
    return BREAKS / f"{slug}.patch"


def description(patch: str) -> str:
    """What a break breaks: the lines before its first ``diff --git``, on one line."""
    head = patch.split("diff --git", 1)[0]
    said = " ".join(line.strip() for line in head.splitlines() if line.strip())
    return said.removeprefix("Break: ")


def checkout_files(root: Path) -> list[str]:
    """The files of the checkout as they are in its working tree: what git tracks (but was not
    deleted) and what it does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],  # noqa: S607 -- git on PATH
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (root / name).is_file()})


def copy_checkout(root: Path, files: Iterable[str], into: Path) -> None:
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)


def environment(copy: Path) -> dict[str, str]:
    """The environment that imports the copy's code first (before the editable install, which
    points at this checkout)."""
    paths = [copy / "layers" / "cmstoken", copy / "emulator", copy / "tests", copy / "scripts"]
    paths += sorted(path for path in (copy / "functions").iterdir() if path.is_dir())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env["PYTHONPATH"] = os.pathsep.join(str(path) for path in paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def imported_from(copy: Path) -> list[str]:
    """Each module of ``IMPORTED`` that the copy's environment imports from outside the copy
    (empty when all come from the copy)."""
    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    print(name, importlib.import_module(name).__file__)\n"
    )
    listed = subprocess.run(  # noqa: S603 -- this interpreter, a fixed probe
        [sys.executable, "-c", probe, *IMPORTED],
        cwd=copy,
        env=environment(copy),
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode != 0:
        said = listed.stderr.strip().splitlines()
        return [f"the probe failed ({said[-1] if said else listed.returncode})"]
    wrong = []
    for line in listed.stdout.splitlines():
        name, _, file = line.partition(" ")
        if not Path(file).resolve().is_relative_to(copy.resolve()):
            wrong.append(f"{name} from {file}")
    return wrong


@dataclass(frozen=True)
class Outcome:
    code: int
    failed: list[str]
    errors: list[str]
    log: str


def run_tests(copy: Path, node_ids: Sequence[str], log: Path) -> Outcome:
    """Run the named tests in the copy, one process; which failed (in a test's call) and which
    errored (set-up, collection)."""
    report = copy.parent / f"{copy.name}.xml"
    completed = subprocess.run(  # noqa: S603 -- this interpreter's pytest, the doc's node ids
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "-o",
            "junit_family=xunit2",
            *node_ids,
        ],
        cwd=copy,
        env=environment(copy),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    log.write_text(completed.stdout + completed.stderr)
    failed: list[str] = []
    errors: list[str] = []
    if report.is_file():
        # pytest's own report of this run, written in our temporary folder
        for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
            name = case.get("name", "?")
            if case.find("failure") is not None:
                failed.append(name)
            if case.find("error") is not None:
                errors.append(name)
    return Outcome(completed.returncode, failed, errors, str(log))


@dataclass(frozen=True)
class Result:
    row: Row
    slug: str
    broke: str
    outcome: Outcome | None
    problem: str | None

    @property
    def caught(self) -> bool:
        return self.problem is None


def bite(row: Row, slug: str, files: Sequence[str], work: Path) -> Result:
    patch = patch_path(slug)
    if not row.run_ids:
        return Result(row, slug, "", None, "every named test needs a build (none runs in a copy)")
    if not patch.is_file():
        return Result(row, slug, "", None, f"no break: {patch.relative_to(ROOT)} is missing")
    broke = description(patch.read_text())
    copy = work / slug
    copy_checkout(ROOT, files, copy)
    applied = subprocess.run(  # noqa: S603 -- fixed arguments, a patch of this checkout
        ["git", "apply", str(patch)],  # noqa: S607 -- git on PATH
        cwd=copy,
        # The copy is no repository: git must not find one above it (a TMPDIR inside a
        # checkout), where it would apply the patch relative to that one's top.
        env={**os.environ, "GIT_CEILING_DIRECTORIES": str(copy.parent)},
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        if applied.returncode != 0:
            lines = applied.stderr.strip().splitlines()
            reason = lines[0] if lines else f"git apply exited {applied.returncode}"
            return Result(row, slug, broke, None, f"the break does not apply ({reason})")
        outcome = run_tests(copy, row.run_ids, work / f"{slug}.log")
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    if outcome.code == 1 and outcome.failed:
        return Result(row, slug, broke, outcome, None)
    if outcome.code == 1:
        problem = f"no named test failed, {len(outcome.errors)} errored (log: {outcome.log})"
    else:
        said = EXIT_CODES.get(outcome.code, f"pytest exited {outcome.code}")
        problem = f"no named test failed: {said} (log: {outcome.log})"
    return Result(row, slug, broke, outcome, problem)


def grouped(tests: Sequence[str]) -> Iterator[str]:
    """Each test by name, its parameters counted: ``test_x (3 of its parameters)``."""
    counted: dict[str, int] = {}
    for test in tests:
        name, bracket, _ = test.partition("[")
        counted[name] = counted.get(name, 0) + (1 if bracket else 0)
    for name, parameters in counted.items():
        yield f"{name} ({parameters} of its parameters)" if parameters else name


def table(results: Sequence[Result]) -> Iterator[str]:
    yield "| row | break | tests that failed |"
    yield "|---|---|---|"
    for result in results:
        if result.outcome is not None and result.caught:
            failed = "<br>".join(grouped(result.outcome.failed))
        else:
            failed = f"**none**: {result.problem}"
        yield f"| {result.slug} | {result.broke} | {failed} |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--row", help="the break (a row's slug) to apply alone; comma-separated")
    args = parser.parse_args(argv)

    every = rows(DOC.read_text())
    chosen = [(row, slug) for row in every for slug in row.slugs]
    if args.row:
        wanted = set(args.row.split(","))
        unknown = wanted - {slug for _, slug in chosen}
        if unknown:
            print(f"bite: no row has the break {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        chosen = [(row, slug) for row, slug in chosen if slug in wanted]
    unbroken = [row for row in every if not row.slugs and not row.is_open]
    started = time.monotonic()
    files = checkout_files(ROOT)
    work = Path(tempfile.mkdtemp(prefix="cmstoken-bite-"))
    keep = False
    try:
        baseline = work / "unbroken"
        copy_checkout(ROOT, files, baseline)
        wrong = imported_from(baseline)
        if wrong:
            print(f"bite: the copy's code is not what runs: {'; '.join(wrong)}", file=sys.stderr)
            keep = True
            return 2
        every_id = list(dict.fromkeys(node for row, _ in chosen for node in row.run_ids))
        built = sorted({node for row, _ in chosen for node in row.node_ids if deploys(node)})
        for node in built:
            print(f"bite: left out (it needs a sam build of each broken template): {node}")
        print(f"bite: {len(every_id)} named tests in an unbroken copy first", flush=True)
        clean = run_tests(baseline, every_id, work / "unbroken.log")
        shutil.rmtree(baseline, ignore_errors=True)
        if clean.code != 0:
            said = EXIT_CODES.get(clean.code, f"pytest exited {clean.code}")
            broken = ", ".join(clean.failed + clean.errors)
            print(
                f"bite: the named tests do not pass unbroken ({said}: {broken}; log: {clean.log})",
                file=sys.stderr,
            )
            keep = True
            return 1
        results = []
        for row, slug in chosen:
            print(f"bite: {slug} ...", flush=True)
            results.append(bite(row, slug, files, work))
        print()
        for line in table(results):
            print(line)
        elapsed = time.monotonic() - started
        missed = [result for result in results if not result.caught]
        bitten = len({result.row for result in results})
        print(
            f"\nbite: {len(results) - len(missed)} of {len(results)} breaks caught, "
            f"{bitten} rows ({elapsed:.0f} s)"
        )
        if not args.row:
            opened = sum(1 for row in every if row.is_open)
            print(f"bite: {opened} rows open")
        for row in [] if args.row else unbroken:
            print(f"bite: a row has no break and is not open: {row.limit[:80]}", file=sys.stderr)
        for result in missed:
            print(f"bite: row {result.slug}: {result.problem}", file=sys.stderr)
        keep = bool(missed)
        return 1 if missed or (unbroken and not args.row) else 0
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
