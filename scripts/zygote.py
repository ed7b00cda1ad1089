"""A warm server for ``make bite``'s pytest runs: the installed packages imported once, each run
in a forked child set up as ``python -m pytest`` started in its copy would be.

``Zygote`` (used by scripts/bite.py) starts this file's text as ``python -c`` (so the server has
no script folder on ``sys.path`` and no module whose file is the project's) with the run's
environment but ``PYTHONPATH``. The server imports ``PRELOADED`` (third-party packages only),
then answers each request (one JSON line on its stdin: the copy, its environment, pytest's
arguments, the log) with one JSON line: the child's exit code, or why it did not fork. Before
each fork it checks that it has one thread and that no module of the project (a file inside
the checkout, outside the interpreter's prefix, or inside the run's folder of copies) is
imported; the child checks again, by name, that none of the copy's modules is, then replaces
its environment, folder, ``sys.path``, ``sys.argv``, bytecode prefix and standard streams with
a fresh process's and runs ``pytest`` as ``-m`` does. When its requests end (the caller gone)
the server kills its process group: itself and a child still running.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, NoReturn

# The installed packages a break's run imports, by ``python -X importtime`` of the named tests
# (cumulative ms on 2 CPUs): samtranslator's transform 490 (the template tests), boto3 and
# botocore 330, moto 210, pytest 150, moto's server 90, requests 45. Not hypothesis (510, every
# run imports it): pytest rewrites the asserts of a plugin's package (it is one), which it
# cannot do once imported, and its import keeps the folder it runs in (its example database).
# Not aws_lambda_powertools: its objects read the POWERTOOLS_* that tests/conftest.py sets.
PRELOADED = (
    "pytest",
    "boto3",
    "moto",
    "moto.server",
    "requests",
    "samtranslator.translator.transform",
)
# A child's exit code when it could not set itself up (said in its log); pytest's are 0 to 5.
SET_UP_FAILED = 70
# How often the server looks for its caller's end while a child runs, in seconds.
POLL = 0.02


def project_module(roots: Sequence[str]) -> str | None:
    """A module imported from inside ``roots`` (but not from this interpreter's prefix, where
    the installed packages are), said; None when there is none."""
    inside = tuple(os.path.join(root, "") for root in roots)
    installed = tuple(os.path.join(prefix, "") for prefix in {sys.prefix, sys.base_prefix})
    for name, module in list(sys.modules.items()):
        places = [getattr(module, "__file__", None), *(getattr(module, "__path__", None) or ())]
        for place in places:
            if not isinstance(place, str):
                continue
            where = os.path.abspath(place)
            if where.startswith(inside) and not where.startswith(installed):
                return f"{name} is imported from {where}"
    return None


def threads() -> int:
    """This process's threads (the kernel's count where it says, Python's otherwise)."""
    tasks = Path("/proc/self/task")
    return len(list(tasks.iterdir())) if tasks.is_dir() else threading.active_count()


def set_up(request: Mapping[str, Any]) -> list[str]:
    """Make this process what ``python -m pytest ARGS`` started in the copy with the request's
    environment would be, but for the packages already imported; pytest's ``sys.argv``."""
    env: dict[str, str] = request["env"]
    os.chdir(request["copy"])
    os.environ.clear()
    os.environ.update(env)
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX")
    # As Python starts with ``-m``: the folder it runs in, then PYTHONPATH, then its own paths.
    paths = [os.path.abspath(path) for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    sys.path[:0] = [os.getcwd(), *paths]
    importlib.invalidate_caches()
    args: list[str] = request["args"]
    sys.orig_argv = [sys.orig_argv[0], "-m", "pytest", *args]
    return args


def child(request: Mapping[str, Any], protocol: Sequence[int]) -> NoReturn:
    """In the forked child: the log as stdout and stderr, nothing as stdin, then pytest."""
    code = SET_UP_FAILED
    try:
        for fd in protocol:
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(nothing)
        os.close(log)
        sys.argv = ["-m", *set_up(request)]
        loaded = [name for name in request["absent"] if name in sys.modules]
        if loaded:
            raise RuntimeError(f"imported before the run: {', '.join(loaded)}")
        code = run_pytest()
    except BaseException as error:  # noqa: BLE001 -- said in the log, the child's exit code
        print(f"zygote: the child could not run pytest: {error!r}", file=sys.stderr)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


def run_pytest() -> int:
    """``pytest/__main__.py`` run as ``-m`` runs it (``sys.argv[0]`` its file); its exit code."""
    try:
        runpy.run_module("pytest", run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        code = exit.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def wait(pid: int, requests: IO[str]) -> int:
    """The child's exit code (as ``subprocess``: minus the signal that ended it). Nothing is
    sent while a child runs: if the requests end, the caller is gone, and so is the group."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        ready, _, _ = select.select([requests], [], [], POLL)
        if ready and not requests.readline():
            os.killpg(0, signal.SIGKILL)


def serve(roots: Sequence[str]) -> None:
    """Preload, then answer each request until the requests end."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    nothing = os.open(os.devnull, os.O_RDWR)
    os.dup2(nothing, 0)
    os.dup2(nothing, 1)
    os.close(nothing)
    for name in PRELOADED:
        __import__(name)
    for line in requests:
        request = json.loads(line)
        problem = project_module(roots)
        if threads() != 1:
            problem = f"the server has {threads()} threads, it forks with one"
        if problem is not None:
            answers.write(json.dumps({"problem": problem}) + "\n")
            answers.flush()
            continue
        pid = os.fork()
        if pid == 0:
            child(request, [requests.fileno(), answers.fileno()])
        answers.write(json.dumps({"code": wait(pid, requests)}) + "\n")
        answers.flush()
    os.killpg(0, signal.SIGKILL)


class ZygoteError(Exception):
    """The server did not run a request: why, on one line."""


class Zygote:
    """One server, started when first asked (and again after a run that ran out of time)."""

    def __init__(self, roots: Sequence[Path], env: Mapping[str, str], log: Path) -> None:
        self.roots = [str(root) for root in roots]
        self.env = dict(env)
        self.log = log
        self.process: subprocess.Popen[str] | None = None
        self.closed = False
        self.lock = threading.Lock()

    def start(self) -> subprocess.Popen[str]:
        with self.lock:
            if self.closed:
                raise ZygoteError("the servers of the runs are closed")
            if self.process is None:
                with self.log.open("a") as log:
                    self.process = subprocess.Popen(  # noqa: S603 -- this interpreter, this file
                        [sys.executable, "-c", Path(__file__).read_text(), *self.roots],
                        cwd=self.log.parent,
                        env=self.env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=log,
                        text=True,
                        process_group=0,
                    )
            return self.process

    def run(
        self,
        copy: Path,
        env: Mapping[str, str],
        args: Sequence[str],
        log: Path,
        *,
        absent: Sequence[str],
        timeout: float,
    ) -> int:
        """pytest's exit code for ``args`` in the copy (minus a signal's number, as
        ``subprocess``); a run over ``timeout`` seconds is killed with its server."""
        process = self.start()
        assert process.stdin is not None
        assert process.stdout is not None
        request = {"copy": str(copy), "env": dict(env), "args": list(args), "log": str(log)}
        request["absent"] = list(absent)
        with suppress(BrokenPipeError):  # said below: the server has ended
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        if not ready:
            self.kill(process)
            with log.open("a") as said:
                said.write(f"\nbite: killed after {timeout:.0f} s\n")
            return -signal.SIGKILL
        line = process.stdout.readline()
        if not line:
            self.kill(process)
            raise ZygoteError(f"a server of the runs ended (its log: {self.log})")
        answer = json.loads(line)
        if "problem" in answer:
            raise ZygoteError(f"a server of the runs does not fork: {answer['problem']}")
        code: int = answer["code"]
        return code

    def kill(self, process: subprocess.Popen[str]) -> None:
        """Kill the server's process group (it, and a child still running)."""
        with self.lock:
            if self.process is process:
                self.process = None
        with suppress(ProcessLookupError):  # it has ended, and its group with it
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Kill the server, and start none again."""
        with self.lock:
            self.closed = True
            process = self.process
        if process is not None:
            self.kill(process)


@contextmanager
def zygotes(
    count: int, roots: Sequence[Path], env: Mapping[str, str], logs: Path
) -> Iterator[list[Zygote]]:
    """``count`` servers, started at once (they import while the caller goes on), killed on
    the way out, whatever ends the block."""
    servers = [Zygote(roots, env, logs / f"zygote-{number}.log") for number in range(count)]
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.close()


if __name__ == "__main__":
    # As ``python -c``: the server. Python put the folder it started in first on sys.path.
    if sys.path[0] == "":
        del sys.path[0]
    serve(sys.argv[1:])
