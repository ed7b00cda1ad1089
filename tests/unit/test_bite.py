"""The threat model's rows and their deliberate breaks stay in step (``make bite`` applies each
break in a copy and requires the row's named tests to fail; this only checks the mapping, fast).

Every row of docs/threat-model.md that is not marked **open** names at least one break in its
"what holds it" cell (``bite: [slug](../tests/bite/breaks/slug.patch)``), each a patch in
tests/bite/breaks/ that says what it breaks and applies cleanly to this checkout
(``git apply --check``); an open row names none; every patch belongs to a row, and no two rows
name the same."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import bite
import zygote

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


# --- the run's speed: fastest first, one failure enough, breaks in parallel -----------------


def test_the_named_tests_run_fastest_first_by_the_unbroken_runs_times() -> None:
    times = {
        ("tests.unit.test_a", "test_slow"): 3.0,
        ("tests.unit.test_a", "test_many[one]"): 0.5,
        ("tests.unit.test_a", "test_many[two]"): 1.0,
        ("tests.unit.test_a.TestThing", "test_fast"): 0.1,
        ("tests.unit.test_b", "test_slow"): 0.2,
    }
    slow = "tests/unit/test_a.py::test_slow"
    many = "tests/unit/test_a.py::test_many"
    one = "tests/unit/test_a.py::test_many[two]"
    fast = "tests/unit/test_a.py::TestThing::test_fast"
    unknown = "tests/unit/test_a.py::test_not_in_the_report"
    assert bite.seconds(many, times) == 1.5, "a name without parameters counts all of them"
    assert bite.seconds(one, times) == 1.0
    assert bite.seconds("tests/unit/test_a.py::test_many[three]", times) == float("inf")
    assert bite.fastest_first([unknown, slow, many, one, fast], times) == [
        fast,
        one,
        many,
        slow,
        unknown,
    ]
    assert bite.fastest_first([unknown, "tests/unit/test_c.py::test_x"], times) == [
        unknown,
        "tests/unit/test_c.py::test_x",
    ], "ties keep the order the row names them in"


def installed_bytecode(tmp_path: Path) -> Path:
    """Where this process keeps its bytecode (``make`` sets it: the installed packages' is
    there, compiled once), else a folder of the test's."""
    return Path(sys.pycache_prefix) if sys.pycache_prefix else tmp_path / "pyc"


def server_environment() -> dict[str, str]:
    """A server's environment, its bytecode where the installed packages' already is (the runs'
    own goes where their requests say)."""
    env = bite.shared_environment(Path(sys.pycache_prefix or "unused"))
    if sys.pycache_prefix is None:
        del env["PYTHONPYCACHEPREFIX"]
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zygote.Zygote]:
    """One server for this module's runs (its copies are under pytest's temporary folder)."""
    base = tmp_path_factory.getbasetemp()
    logs = tmp_path_factory.mktemp("server")
    with zygote.zygotes(1, [ROOT, base], server_environment(), logs) as [one]:
        yield one


def tiny_copy(copy: Path, test: str) -> Path:
    """A copy of a checkout with bite, its server and one test file (``tests/test_it.py``)."""
    (copy / "functions").mkdir(parents=True)
    (copy / "scripts").mkdir()
    for name in ("bite.py", "zygote.py"):
        (copy / "scripts" / name).write_text((ROOT / "scripts" / name).read_text())
    (copy / "tests").mkdir()
    (copy / "tests" / "test_it.py").write_text(test)
    return copy


def test_a_breaks_run_stops_at_the_first_failure_but_not_at_an_error(
    tmp_path: Path, server: zygote.Zygote
) -> None:
    """The run of a break (``-p bite``) goes on past a set-up error and ends after the first
    test that fails in its call; the report gives each test's time."""
    copy = tiny_copy(
        tmp_path / "copy",
        "import pytest\n\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('set-up')\n\n"
        "def test_errors(broken):\n    pass\n\n"
        "def test_passes():\n    pass\n\n"
        "def test_fails():\n    assert False\n\n"
        "def test_fails_too():\n    assert False\n",
    )
    named = [f"tests/test_it.py::{name}" for name in ("test_errors", "test_passes", "test_fails")]
    every = [*named, "tests/test_it.py::test_fails_too"]
    outcome = bite.run_tests(copy, every, tmp_path / "log", tmp_path / "pyc", server)
    assert (outcome.code, outcome.failed, outcome.errors) == (1, ["test_fails"], ["test_errors"])
    assert [bite.seconds(node, outcome.times) < float("inf") for node in named] == [True] * 3
    assert bite.seconds("tests/test_it.py::test_fails_too", outcome.times) == float("inf")
    assert not list(copy.rglob("*.pyc")), "bytecode is written under the cache only"
    assert list((tmp_path / "pyc").rglob("*.pyc"))


# A test in a tiny copy that imports what the server preloads (as the named tests do) and
# records what a run sees: where the copy's modules come from, the environment, the folder, the
# paths, the arguments, the streams and the preloaded packages' state.
RECORDS = """\
import importlib, json, os, signal, sys
from pathlib import Path

for name in PRELOADED:
    importlib.import_module(name)
import hypothesis.configuration

def test_records():
    devnull, stdin = os.stat(os.devnull), os.fstat(0)
    main = sys.modules["__main__"]
    seen = {
        "files": {name: importlib.import_module(name).__file__ for name in IMPORTED},
        "env": dict(os.environ), "cwd": os.getcwd(), "path": sys.path, "argv": sys.argv,
        "orig_argv": sys.orig_argv, "pycache_prefix": sys.pycache_prefix,
        "flags": list(sys.flags), "executable": sys.executable,
        "main": [getattr(main, "__file__", None), getattr(main.__spec__, "name", None)],
        "stdin": [stdin.st_dev, stdin.st_ino] == [devnull.st_dev, devnull.st_ino],
        "meta_path": [str(finder).split(" at ")[0] for finder in sys.meta_path],
        "signals": [str(signal.getsignal(number)) for number in (signal.SIGINT, signal.SIGPIPE)],
        "hypothesis": str(hypothesis.configuration.storage_directory(
            "examples", intent_to_write=False).path),
    }
    with (Path.cwd().parent / "records.jsonl").open("a") as records:
        records.write(json.dumps(seen) + "\\n")
""".replace("IMPORTED", repr(bite.IMPORTED)).replace("PRELOADED", repr(zygote.PRELOADED))


def recording_copy(copy: Path) -> Path:
    """A tiny copy with a module of its own for each of ``bite.IMPORTED`` and the recording
    test: what the test imports from the checkout (the editable install) is seen."""
    tiny_copy(copy, RECORDS)
    for package in ("layers/cmstoken/cmstoken", "emulator/cmsemu"):
        (copy / package).mkdir(parents=True)
        (copy / package / "__init__.py").write_text("")
    (copy / "tests" / "support.py").write_text("")
    return copy


def test_a_run_in_the_server_sees_what_a_fresh_pytest_in_the_copy_sees(
    tmp_path: Path, server: zygote.Zygote
) -> None:
    """The same test records the same in a fresh ``python -m pytest`` in the copy and in a
    child of the server: the copy's own modules (never the checkout's), the environment, the
    folder, ``sys.path``, the arguments, stdin, the bytecode folder, hypothesis's home."""
    copy = recording_copy(tmp_path / "copy")
    cache = installed_bytecode(tmp_path)
    args = ["-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_it.py"]
    fresh = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=copy,
        env=bite.environment(copy, cache),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    code = server.run(
        copy, bite.environment(copy, cache), args, tmp_path / "log", absent=(), timeout=600
    )
    assert code == 0, (tmp_path / "log").read_text()
    [expected, seen] = [json.loads(line) for line in (tmp_path / "records.jsonl").open()]
    assert all(Path(file).is_relative_to(copy) for file in seen["files"].values()), seen["files"]
    assert {str(copy), str(copy / "layers" / "cmstoken")} <= set(seen["path"])
    assert seen["hypothesis"] == str(copy / ".hypothesis" / "examples")
    assert seen == expected


def test_a_run_does_not_start_when_the_copys_code_is_already_imported(
    tmp_path: Path, server: zygote.Zygote
) -> None:
    """The child checks, by name, that none of the copy's modules is imported before pytest
    starts (here: told that ``json``, which the server imports, must not be)."""
    copy = recording_copy(tmp_path / "copy")
    env = bite.environment(copy, installed_bytecode(tmp_path))
    code = server.run(copy, env, ["tests"], tmp_path / "log", absent=["json"], timeout=600)
    assert code == zygote.SET_UP_FAILED
    assert "imported before the run: json" in (tmp_path / "log").read_text()
    assert not (tmp_path / "records.jsonl").exists()


def test_a_server_that_imported_the_projects_code_does_not_fork(tmp_path: Path) -> None:
    """A server that has a module of the checkout or of a copy imported (here: a
    ``sitecustomize`` of the copies' folder, imported as Python starts) runs nothing."""
    found = tmp_path / "found"
    found.mkdir()
    (found / "sitecustomize.py").write_text("")
    copy = recording_copy(tmp_path / "copy")
    env = {**server_environment(), "PYTHONPATH": str(found)}
    refused = pytest.raises(zygote.ZygoteError, match="does not fork: sitecustomize is imported")
    with zygote.zygotes(1, [ROOT, tmp_path], env, tmp_path) as [server], refused:
        server.run(copy, env, ["tests"], tmp_path / "log", absent=(), timeout=600)
    assert not (tmp_path / "records.jsonl").exists()
    assert zygote.project_module([str(ROOT)]) is not None, "this process has bite imported"


def test_a_run_over_its_time_is_killed_and_the_next_has_a_new_server(
    tmp_path: Path, server: zygote.Zygote
) -> None:
    """A run that hangs ends at its timeout (killed with its server, said in its log, minus
    SIGKILL as ``subprocess`` says it), and the next run on that server starts a new one."""
    copy = tiny_copy(
        tmp_path / "copy",
        "import time\n\ndef test_hangs():\n    time.sleep(600)\n\ndef test_passes():\n    pass\n",
    )
    env = bite.environment(copy, installed_bytecode(tmp_path))
    before = server.start()
    hangs = server.run(
        copy, env, ["tests/test_it.py::test_hangs"], tmp_path / "log", absent=(), timeout=1
    )
    assert hangs == -signal.SIGKILL
    assert "bite: killed after 1 s" in (tmp_path / "log").read_text()
    assert before.poll() is not None, "the server was killed"
    passes = server.run(
        copy, env, ["tests/test_it.py::test_passes"], tmp_path / "log", absent=(), timeout=600
    )
    assert passes == 0
    assert server.start() is not before


def test_the_server_counts_its_threads_before_it_forks() -> None:
    """The count the server checks before each fork (one) sees a thread started beside it."""
    counted = subprocess.run(
        [
            sys.executable,
            "-c",
            "import threading, zygote\n"
            "print(zygote.threads())\n"
            "done = threading.Event()\n"
            "threading.Thread(target=done.wait).start()\n"
            "print(zygote.threads())\n"
            "done.set()\n",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert counted.stdout.split() == ["1", "2"]


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, ended but not reaped, does not)."""
    state = subprocess.run(
        ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return state.stdout.strip()[:1] not in ("", "Z")


def until(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition`` holds within ``seconds`` (asked every tenth of a second)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("ended_by", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_or_interrupted_bite_leaves_no_server_and_no_run_behind(
    tmp_path: Path, ended_by: signal.Signals
) -> None:
    """A caller of the servers that is killed (the server sees its requests end) or stopped
    with Ctrl-C (it kills them on the way out) leaves no server and no child running."""
    pids = tmp_path / "pids.json"
    copy = tiny_copy(
        tmp_path / "copy",
        "import json, os, time\n\n"
        "def test_waits():\n"
        f"    with open({str(pids)!r}, 'w') as said:\n"
        "        json.dump([os.getppid(), os.getpid()], said)\n"
        "    time.sleep(600)\n",
    )
    caller = (
        "import sys\nfrom pathlib import Path\nimport bite, zygote\n"
        "copy, work = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "env = bite.environment(copy, work / 'pyc')\n"
        "server_env = {k: v for k, v in env.items() if not k.startswith('PYTHON')}\n"
        "with zygote.zygotes(1, [bite.ROOT, work], server_env, work) as [server]:\n"
        "    server.run(copy, env, ['tests'], work / 'log', absent=(), timeout=600)\n"
    )
    running = subprocess.Popen(
        [sys.executable, "-c", caller, str(copy), str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")},
        stderr=subprocess.DEVNULL,
    )
    try:
        assert until(pids.exists, 300), "the run did not start"
        time.sleep(0.2)
        server, child = json.loads(pids.read_text())
        assert alive(server)
        assert alive(child)
        running.send_signal(ended_by)
        assert until(lambda: not alive(server) and not alive(child), 60)
    finally:
        running.kill()
        running.wait()


def test_the_unbroken_runs_shares_run_each_test_once_and_past_a_failure(
    tmp_path: Path, server: zygote.Zygote
) -> None:
    """A share of the unbroken run (``--bite-claims``) runs each test no other share has
    claimed, and goes on after a failure (all must pass, and all are said)."""
    copy = tiny_copy(
        tmp_path / "copy",
        "def test_fails():\n    assert False\n\n"
        "def test_passes():\n    pass\n\n"
        "def test_fails_too():\n    assert False\n",
    )
    every = [
        f"tests/test_it.py::{name}" for name in ("test_fails", "test_passes", "test_fails_too")
    ]
    claims = tmp_path / "claims"
    claims.mkdir()
    first = bite.run_tests(
        copy, every[:2], tmp_path / "first.log", installed_bytecode(tmp_path), server, claims=claims
    )
    second = bite.run_tests(
        copy, every, tmp_path / "second.log", installed_bytecode(tmp_path), server, claims=claims
    )
    assert (first.code, first.failed, sorted(name for _, name in first.times)) == (
        1,
        ["test_fails"],
        ["test_fails", "test_passes"],
    )
    assert (second.code, second.failed, list(second.times)) == (
        1,
        ["test_fails_too"],
        [("tests.test_it", "test_fails_too")],
    ), "the tests the first share ran are not run again"


def test_a_breaks_copy_holds_the_checkout_as_it_is_and_the_patch(tmp_path: Path) -> None:
    """Each break runs on exactly the checkout's files with its patch applied: the files its
    patch names differ, and undoing the patch gives the checkout back, byte for byte."""
    slug = NAMED[0]
    patch = bite.patch_path(slug)
    touched = set(re.findall(r"^\+\+\+ b/(\S+)$", patch.read_text(), flags=re.MULTILINE))
    files = bite.checkout_files(ROOT)
    copy = tmp_path / slug
    assert bite.broken_copy(patch, files, copy) is None
    copied = sorted(str(path.relative_to(copy)) for path in copy.rglob("*") if path.is_file())
    assert copied == files

    def changed() -> set[str]:
        return {name for name in files if (copy / name).read_bytes() != (ROOT / name).read_bytes()}

    assert touched
    assert changed() == touched
    undone = subprocess.run(
        ["git", "apply", "-R", str(patch)],
        cwd=copy,
        env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert undone.returncode == 0, undone.stderr
    assert changed() == set()


def test_the_breaks_run_at_once_and_are_said_in_the_documents_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A later break that ends first still comes after the ones before it."""
    chosen = [(row, slug) for row in ROWS for slug in row.slugs][:4]
    running: list[str] = []
    most = [0]
    lock = threading.Lock()

    def fake(row: bite.Row, slug: str, *_: object) -> bite.Result:
        with lock:
            running.append(slug)
            most[0] = max(most[0], len(running))
        time.sleep(0.05 * (4 - [s for _, s in chosen].index(slug)))
        with lock:
            running.remove(slug)
        return bite.Result(row, slug, "", None, "not run")

    monkeypatch.setattr(bite, "bite", fake)
    servers = [zygote.Zygote([ROOT], {}, Path("unused")) for _ in range(3)]  # never started
    results = bite.bite_all(chosen, [], Path("unused"), {}, servers)
    assert [result.slug for result in results] == [slug for _, slug in chosen]
    assert most[0] == 3
    said = [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()]
    assert said == [f"bite: {slug}" for _, slug in chosen]
