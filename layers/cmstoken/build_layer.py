"""Build the SharedLayer into ``<artifacts>/python``, the directory Lambda mounts as /opt/python.

``make --makefile layers/cmstoken/Makefile build-SharedLayer`` (what ``sam build`` runs) calls
this with ``$ARTIFACTS_DIR``. Steps:

1. Fetch: the wheels ``requirements.txt`` locks (every distribution pinned, with hashes), for
   CPython 3.13 on manylinux2014_aarch64 (Lambda's python3.13 on arm64), into a wheel cache
   (``$CMSTOKEN_WHEELHOUSE``, else ``~/.cache/cmstoken/layer-wheels``), hashes checked.
   ``--offline`` skips this step and builds from the cache alone.
2. Install exactly the lock from that cache: ``--no-index --require-hashes --no-deps``, wheels
   only. Console scripts are left out: a layer has no use for them and their ``#!`` line names
   the build machine's interpreter.
3. The ``cmstoken`` package's sources (not the development tree's ``__pycache__``).
4. Bytecode for every module in the layer, by this interpreter (it must be the runtime's minor
   version), with ``unchecked-hash`` invalidation: /opt is read-only, so without it every cold
   start compiles the layer; unchecked-hash pycs carry no mtime and are never re-validated, so
   the whole build is byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

RUNTIME = (3, 13)  # Lambda's python3.13
PLATFORM = "manylinux2014_aarch64"  # arm64 (template.yaml: CompatibleArchitectures)
LAYER_PATH = "/opt/python"  # where Lambda puts the layer's python/ directory
HERE = Path(__file__).resolve().parent
LOCK = HERE / "requirements.txt"
PACKAGE = HERE / "cmstoken"
TARGET = [
    "--require-hashes",
    "--no-deps",
    "--only-binary=:all:",
    "--platform",
    PLATFORM,
    "--implementation",
    "cp",
    "--python-version",
    ".".join(map(str, RUNTIME)),
    "--requirement",
    str(LOCK),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the SharedLayer into ARTIFACTS_DIR/python.")
    parser.add_argument("artifacts", type=Path, help="ARTIFACTS_DIR: python/ is written in it")
    parser.add_argument(
        "--offline", action="store_true", help="build from the wheel cache, fetch nothing"
    )
    options = parser.parse_args(argv)
    if sys.version_info[:2] != RUNTIME:
        wanted = ".".join(map(str, RUNTIME))
        print(
            f"error: the layer's bytecode must be compiled by Python {wanted} (the Lambda "
            f"runtime), not {sys.version.split()[0]} ({sys.executable}). Put python{wanted} "
            f"first on PATH or pass PYTHON=/path/to/python{wanted} to make.",
            file=sys.stderr,
        )
        return 1
    wheels = wheelhouse()
    if not options.offline:
        fetch(wheels)
    out = options.artifacts.resolve() / "python"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    install_locked(out, wheels)
    drop_scripts(out)
    shutil.copytree(PACKAGE, out / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    compile_bytecode(out)
    return 0


def wheelhouse() -> Path:
    configured = os.environ.get("CMSTOKEN_WHEELHOUSE")
    if configured:
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "cmstoken" / "layer-wheels"


def pip(*arguments: str) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        *arguments[:1],
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        *arguments[1:],
    ]
    completed = subprocess.run(command, check=False)  # noqa: S603 -- fixed commands
    if completed.returncode != 0:
        sys.exit(f"error: pip {arguments[0]} for the layer exited {completed.returncode}")


def fetch(wheels: Path) -> None:
    wheels.mkdir(parents=True, exist_ok=True)
    pip("download", "--dest", str(wheels), *TARGET)


def install_locked(out: Path, wheels: Path) -> None:
    pip(
        "install",
        "--no-index",
        "--find-links",
        str(wheels),
        "--no-compile",
        "--target",
        str(out),
        *TARGET,
    )


def drop_scripts(out: Path) -> None:
    """Remove pip's console scripts (``bin/``) and their RECORD entries, which point outside the
    layer's package directory and carry the hash of a machine-specific ``#!`` line."""
    shutil.rmtree(out / "bin", ignore_errors=True)
    for record in sorted(out.glob("*.dist-info/RECORD")):
        with record.open(encoding="utf-8", newline="") as file:
            lines = file.readlines()
        kept = [line for line in lines if inside(out, next(csv.reader([line]))[0])]
        if kept != lines:
            with record.open("w", encoding="utf-8", newline="") as file:
                file.writelines(kept)


def inside(out: Path, relative: str) -> bool:
    return (out / relative).resolve().is_relative_to(out)


def compile_bytecode(out: Path) -> None:
    # None of the caller's PYTHON* settings (PYTHONPYCACHEPREFIX would put the bytecode elsewhere);
    # a fixed hash seed, although 3.13's marshal already writes set constants in a stable order.
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    command = [
        sys.executable,
        "-m",
        "compileall",
        "-q",
        "-f",
        "-o",
        "0",  # what Lambda's interpreter loads (no -O)
        "--invalidation-mode",
        "unchecked-hash",
        # Source paths in tracebacks as Lambda sees them, not the build directory's.
        "-s",
        str(out),
        "-p",
        LAYER_PATH,
        str(out),
    ]
    completed = subprocess.run(command, env=env, check=False)  # noqa: S603 -- fixed command
    if completed.returncode != 0:
        sys.exit(f"error: compiling the layer's bytecode exited {completed.returncode}")


if __name__ == "__main__":
    sys.exit(main())
