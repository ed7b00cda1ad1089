"""Every row of docs/threat-model.md bites (``make bite``; ``ROW=slug`` for one row).

Each row of the threat model's tables is one limit, what holds it, and the tests that fail if
it breaks. A row that is not marked **open** names its deliberate break in its "what holds it"
cell: ``bite: [slug](../tests/bite/breaks/slug.patch)``, a unified diff that breaks exactly
what the cell names (a condition removed, a limit widened, a statement of a policy widened, a
check skipped). The lines before the patch's first ``diff --git`` say what it breaks.

For each break this copies the checkout (the files git tracks plus the untracked ones it does
not ignore, as they are in the working tree: the user's tree is never written) into a temporary
folder of its own, applies the break there with ``git apply``, and runs only the row's named
tests in the copy, with this checkout's interpreter and ``PYTHONPATH`` set so that the copy's
library, emulator, functions, tests and scripts are imported (checked before anything runs:
each module's file must be inside the copy). At least one named test must fail in its call
(pytest's exit code 1 with a failing test; a collection error, a missing file or a test that
errors in its set-up is not a bite). Before the breaks, the named tests run once in an unbroken
copy and must pass: a test that always fails would otherwise seem to catch every break.

Each run is a child forked from a warm server (scripts/zygote.py: ``--jobs`` of them, each
with the installed packages imported once, never the project's code, checked before each
fork), set up as ``python -m pytest`` started in the copy would be: its environment, folder,
``sys.path`` and arguments. The unbroken run goes the same way, a child of each server taking
the next named test no other has claimed (``--bite-claims``, as pytest-xdist's workers share
tests): a test that fails only in a forked child then fails unbroken, never only under a break.

One failing test is enough: a break's named tests run fastest first (by their times in the
unbroken run's report) and the run stops after the first test that fails in its call (this
module is the pytest plugin, ``-p bite``; a set-up error does not stop it). The breaks run
``--jobs`` at a time (default: the CPUs this process may use), each in its own copy and child;
bytecode is cached for the whole run under the temporary folder (``PYTHONPYCACHEPREFIX``), so
the installed packages are compiled once, and since each copy's path is used once no copy reads
another's bytecode.

It prints a table in the document's order (row, break, the named test that failed first) and
exits 1 naming each row whose break no named test caught. ``tests/unit/test_bite.py`` (in
``make test``) keeps the rows and the breaks in step: every row that is not open has a break
that applies to the checkout, and every break belongs to a row.

Run as ``python scripts/bite.py [--row SLUG] [--jobs N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from zygote import SET_UP_FAILED, Zygote, ZygoteError, zygotes

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "threat-model.md"
BREAKS = ROOT / "tests" / "bite" / "breaks"
HEADER = ["limit", "what holds it", "test"]
# Under the run's temporary folder: the bytecode of every pytest process of the run.
BYTECODE = ".bytecode"
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
IMPORTED = ("cmstoken", "cmsemu", "support", "bite", "zygote")
# A run's seconds before it is killed (a test that hangs).
TIMEOUT = 1800
# pytest's exit codes (pytest.ExitCode) as a line says them, and a child's that did not start it.
EXIT_CODES = {
    0: "every named test passed",
    2: "pytest was interrupted (a collection error?)",
    3: "pytest failed internally",
    4: "pytest's usage error (a named test or file not found?)",
    5: "no test was collected",
    SET_UP_FAILED: "the run could not start (its log says why)",
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


def shared_environment(cache: Path) -> dict[str, str]:
    """What every copy's environment holds (the servers' environment): this process's, without
    its pytest and Python settings, writing bytecode only under ``cache``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    # Bytecode, and pytest's rewritten test modules, go under the run's temporary folder, never
    # beside a source: the installed packages compile once for the whole run, and a copy's
    # files, at paths no other copy has, are never read from another copy's bytecode.
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def environment(copy: Path, cache: Path) -> dict[str, str]:
    """The environment that imports the copy's code first (before the editable install, which
    points at this checkout) and writes bytecode only under ``cache``."""
    paths = [copy / "layers" / "cmstoken", copy / "emulator", copy / "tests", copy / "scripts"]
    paths += sorted(path for path in (copy / "functions").iterdir() if path.is_dir())
    return {**shared_environment(cache), "PYTHONPATH": os.pathsep.join(map(str, paths))}


def imported_from(copy: Path, cache: Path) -> list[str]:
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
        env=environment(copy, cache),
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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--bite-claims", help="a share of the unbroken run: the claims' folder")


def claimed(claims: Path, item: pytest.Item) -> bool:
    """Whether this share claimed the test (no other share had: it is this share's to run)."""
    claim = claims / hashlib.sha256(item.nodeid.encode()).hexdigest()
    try:
        os.close(os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """As the plugin of a share of the unbroken run (``-p bite --bite-claims DIR``): run, in
    order, each test that no other share (the same tests, the same folder) has claimed first;
    a test runs once the share has claimed the next (pytest tears down what that one does not
    need), as pytest-xdist's workers do."""
    claims = session.config.getoption("bite_claims")
    if claims is None:
        return None
    if session.testsfailed:  # as pytest: a collection error, and nothing runs
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    held: pytest.Item | None = None
    for item in [*session.items, None]:
        if item is not None and not claimed(Path(claims), item):
            continue
        if held is not None:
            held.config.hook.pytest_runtest_protocol(item=held, nextitem=item)
        held = item
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """As the plugin of a break's run (``-p bite``): the first test that fails in its call ends
    the run with exit code 1 (as ``--maxfail=1``, but a set-up error does not end it)."""
    report = yield
    if report.when == "call" and report.failed and item.config.getoption("bite_claims") is None:
        item.session.shouldfail = f"bite: {report.nodeid} failed, the break is caught"
    return report


@dataclass(frozen=True)
class Outcome:
    code: int
    failed: list[str]
    errors: list[str]
    log: str
    # Each test's seconds (set-up, call and teardown), by its junit (classname, name).
    times: dict[tuple[str, str], float]


def run_tests(
    copy: Path,
    node_ids: Sequence[str],
    log: Path,
    cache: Path,
    server: Zygote,
    *,
    claims: Path | None = None,
) -> Outcome:
    """Run the named tests in the copy, in the order given, in a child of the server (pytest's
    output in ``log``): until the first that fails in its call, or (a share of the unbroken
    run) each that no other share with the same ``claims`` folder has run. Which failed (in a
    test's call), which errored (set-up, collection), and their times."""
    report = log.with_suffix(".xml")
    share = [] if claims is None else [f"--bite-claims={claims}"]
    args = ["-q", "-n", "0", "-p", "bite", *share, "-p", "no:cacheprovider"]
    args += [f"--junitxml={report}", "-o", "junit_family=xunit2", *node_ids]
    code = server.run(copy, environment(copy, cache), args, log, absent=IMPORTED, timeout=TIMEOUT)
    failed: list[str] = []
    errors: list[str] = []
    times: dict[tuple[str, str], float] = {}
    if report.is_file():
        # pytest's own report of this run, written in our temporary folder
        for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
            name = case.get("name", "?")
            times[(case.get("classname", "?"), name)] = float(case.get("time", "0"))
            if case.find("failure") is not None:
                failed.append(name)
            if case.find("error") is not None:
                errors.append(name)
    return Outcome(code, failed, errors, str(log), times)


def seconds(node_id: str, times: Mapping[tuple[str, str], float]) -> float:
    """A named test's seconds in a report (a name without parameters: all its parameters'),
    infinite when the report has none of it."""
    path, _, inside = node_id.partition("::")
    *classes, name = inside.split("::")
    classname = ".".join([*Path(path).with_suffix("").parts, *classes])
    whole = "[" not in name
    found = [
        took
        for (where, case), took in times.items()
        if where == classname and (case == name or (whole and case.startswith(f"{name}[")))
    ]
    return sum(found) if found else math.inf


def fastest_first(node_ids: Sequence[str], times: Mapping[tuple[str, str], float]) -> list[str]:
    """The named tests by their seconds in the unbroken run, fastest first (ties as named)."""
    return sorted(node_ids, key=lambda node: seconds(node, times))


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


def broken_copy(patch: Path, files: Sequence[str], copy: Path) -> str | None:
    """Copy the checkout's files into ``copy`` and apply the break there; why not, if it does
    not apply."""
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
    if applied.returncode == 0:
        return None
    lines = applied.stderr.strip().splitlines()
    return f"the break does not apply ({lines[0] if lines else applied.returncode})"


def bite(
    row: Row, slug: str, files: Sequence[str], work: Path, order: Sequence[str], server: Zygote
) -> Result:
    """Apply the break in a copy of its own and run ``order`` (the row's tests that run in a
    copy, fastest first) there until one fails."""
    patch = patch_path(slug)
    if not order:
        return Result(row, slug, "", None, "every named test needs a build (none runs in a copy)")
    if not patch.is_file():
        return Result(row, slug, "", None, f"no break: {patch.relative_to(ROOT)} is missing")
    broke = description(patch.read_text())
    copy = work / slug
    try:
        problem = broken_copy(patch, files, copy)
        if problem is not None:
            return Result(row, slug, broke, None, problem)
        outcome = run_tests(copy, order, work / f"{slug}.log", work / BYTECODE, server)
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


def across[T](servers: Sequence[Zygote], jobs: Sequence[Callable[[Zygote], T]]) -> Iterator[T]:
    """Each job with a server of its own, as many at once as there are servers; the results in
    the jobs' order, each as soon as it and those before it are known. Whatever ends it early
    (Ctrl-C, a server that does not fork) kills the servers first, which ends the jobs."""
    free: queue.SimpleQueue[Zygote] = queue.SimpleQueue()
    for server in servers:
        free.put(server)

    def job_with_a_server(job: Callable[[Zygote], T]) -> T:
        server = free.get()
        try:
            return job(server)
        finally:
            free.put(server)

    pool = ThreadPoolExecutor(max_workers=len(servers))
    try:
        for future in [pool.submit(job_with_a_server, job) for job in jobs]:
            yield future.result()
    except BaseException:
        for server in servers:
            server.close()
        raise
    finally:
        pool.shutdown(cancel_futures=True)


def bite_all(
    chosen: Sequence[tuple[Row, str]],
    files: Sequence[str],
    work: Path,
    times: Mapping[tuple[str, str], float],
    servers: Sequence[Zygote],
) -> list[Result]:
    """Each break in its own copy, one per server at a time; the results in ``chosen``'s
    order, each said as soon as it and those before it are known."""
    results = []
    jobs = [
        partial(bite, row, slug, files, work, fastest_first(row.run_ids, times))
        for row, slug in chosen
    ]
    for number, result in enumerate(across(servers, jobs), 1):
        if result.outcome is not None and result.caught:
            said = f"caught by {result.outcome.failed[0]}"
        else:
            said = "NOT caught"
        print(f"bite: {result.slug} ({number} of {len(jobs)}): {said}", flush=True)
        results.append(result)
    return results


def grouped(tests: Sequence[str]) -> Iterator[str]:
    """Each test by name, its parameters counted: ``test_x (3 of its parameters)``."""
    counted: dict[str, int] = {}
    for test in tests:
        name, bracket, _ = test.partition("[")
        counted[name] = counted.get(name, 0) + (1 if bracket else 0)
    for name, parameters in counted.items():
        yield f"{name} ({parameters} of its parameters)" if parameters else name


def table(results: Sequence[Result]) -> Iterator[str]:
    yield "| row | break | the named test that failed first (fastest first; one is enough) |"
    yield "|---|---|---|"
    for result in results:
        if result.outcome is not None and result.caught:
            failed = "<br>".join(grouped(result.outcome.failed))
        else:
            failed = f"**none**: {result.problem}"
        yield f"| {result.slug} | {result.broke} | {failed} |"


def unbroken_run(
    chosen: Sequence[tuple[Row, str]], files: Sequence[str], work: Path, servers: Sequence[Zygote]
) -> dict[tuple[str, str], float] | int:
    """Run every named test once in an unbroken copy, in a child of each server (as the breaks
    run: a test that fails only there fails here too), each taking the next test no other has
    claimed; their times, or an exit code, said, when the copy's code is not what runs (2) or a
    named test does not pass (1)."""
    baseline = work / "unbroken"
    copy_checkout(ROOT, files, baseline)
    wrong = imported_from(baseline, work / BYTECODE)
    if wrong:
        print(f"bite: the copy's code is not what runs: {'; '.join(wrong)}", file=sys.stderr)
        return 2
    every_id = list(dict.fromkeys(node for row, _ in chosen for node in row.run_ids))
    built = sorted({node for row, _ in chosen for node in row.node_ids if deploys(node)})
    for node in built:
        print(f"bite: left out (it needs a sam build of each broken template): {node}")
    print(f"bite: {len(every_id)} named tests in an unbroken copy first", flush=True)
    cache, claims = work / BYTECODE, work / "claims"
    claims.mkdir()
    logs = [work / f"unbroken-{number}.log" for number in range(1, len(servers) + 1)]
    jobs = [partial(run_tests, baseline, every_id, log, cache, claims=claims) for log in logs]
    runs = list(across(servers, jobs))
    shutil.rmtree(baseline, ignore_errors=True)
    times = {case: took for run in runs for case, took in run.times.items()}
    for run in runs:
        if run.code != 0:
            said = EXIT_CODES.get(run.code, f"pytest exited {run.code}")
            broken = ", ".join(run.failed + run.errors)
            print(
                f"bite: the named tests do not pass unbroken ({said}: {broken}; log: {run.log})",
                file=sys.stderr,
            )
    return 1 if any(run.code != 0 for run in runs) else times


def summary(results: Sequence[Result], every: Sequence[Row], one: bool, took: float) -> int:
    """Print the table and the counts; the exit code."""
    print()
    for line in table(results):
        print(line)
    missed = [result for result in results if not result.caught]
    bitten = len({result.row for result in results})
    print(
        f"\nbite: {len(results) - len(missed)} of {len(results)} breaks caught, "
        f"{bitten} rows ({took:.0f} s)"
    )
    unbroken = [] if one else [row for row in every if not row.slugs and not row.is_open]
    if not one:
        print(f"bite: {sum(1 for row in every if row.is_open)} rows open")
    for row in unbroken:
        print(f"bite: a row has no break and is not open: {row.limit[:80]}", file=sys.stderr)
    for result in missed:
        print(f"bite: row {result.slug}: {result.problem}", file=sys.stderr)
    return 1 if missed or unbroken else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--row", help="the break (a row's slug) to apply alone; comma-separated")
    parser.add_argument(
        "--jobs", type=int, default=os.process_cpu_count() or 1, help="breaks at a time"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs is at least 1")

    every = rows(DOC.read_text())
    chosen = [(row, slug) for row in every for slug in row.slugs]
    if args.row:
        wanted = set(args.row.split(","))
        unknown = wanted - {slug for _, slug in chosen}
        if unknown:
            print(f"bite: no row has the break {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        chosen = [(row, slug) for row, slug in chosen if slug in wanted]
    started = time.monotonic()
    files = checkout_files(ROOT)
    work = Path(tempfile.mkdtemp(prefix="cmstoken-bite-"))
    code = 2
    env = shared_environment(work / BYTECODE)
    try:
        with zygotes(args.jobs, [ROOT, work], env, work) as servers:
            clean = unbroken_run(chosen, files, work, servers)
            if isinstance(clean, int):
                code = clean
                return code
            results = bite_all(chosen, files, work, clean, servers)
        code = summary(results, every, bool(args.row), time.monotonic() - started)
        return code
    except ZygoteError as error:
        print(f"bite: {error}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        print("bite: interrupted", file=sys.stderr)
        return code
    finally:
        shutil.rmtree(work / BYTECODE, ignore_errors=True)
        if code == 0:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"bite: the logs are kept in {work}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
