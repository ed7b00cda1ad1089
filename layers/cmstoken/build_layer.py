"""Build the SharedLayer into ``<artifacts>/python``, the directory Lambda mounts as /opt/python.

``make --makefile layers/cmstoken/Makefile build-SharedLayer`` (what ``sam build`` runs) calls
this with ``$ARTIFACTS_DIR``. Three steps:

1. The locked dependencies, exactly: ``requirements.txt`` (every distribution pinned, with hashes)
   installed with ``--require-hashes --no-deps``, wheels only, for CPython 3.13 on
   manylinux2014_aarch64 (Lambda's python3.13 on arm64). Console scripts are left out: a layer
   has no use for them and their ``#!`` line names the build machine's interpreter.
2. The ``cmstoken`` package's sources (not the development tree's ``__pycache__``).
3. Bytecode for every module in the layer, by this interpreter (it must be the runtime's minor
   version), with ``unchecked-hash`` invalidation: /opt is read-only, so without it every cold
   start compiles the layer; unchecked-hash pycs carry no mtime and are never re-validated, and
   with a fixed hash seed the whole build is byte-for-byte reproducible.
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {Path(argv[0]).name} ARTIFACTS_DIR", file=sys.stderr)
        return 2
    if sys.version_info[:2] != RUNTIME:
        wanted = ".".join(map(str, RUNTIME))
        print(
            f"error: the layer's bytecode must be compiled by Python {wanted} (the Lambda "
            f"runtime), not {sys.version.split()[0]} ({sys.executable}). Put python{wanted} "
            f"first on PATH or pass PYTHON=/path/to/python{wanted} to make.",
            file=sys.stderr,
        )
        return 1
    out = Path(argv[1]).resolve() / "python"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    install_locked(out)
    drop_scripts(out)
    shutil.copytree(PACKAGE, out / PACKAGE.name, ignore=shutil.ignore_patterns("__pycache__"))
    compile_bytecode(out)
    return 0


def install_locked(out: Path) -> None:
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--require-hashes",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            PLATFORM,
            "--implementation",
            "cp",
            "--python-version",
            ".".join(map(str, RUNTIME)),
            "--no-compile",
            "--target",
            str(out),
            "--requirement",
            str(LOCK),
        ]
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
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    # Set and frozenset constants are marshalled in hash order: fix the seed to be reproducible.
    env["PYTHONHASHSEED"] = "0"
    run(
        [
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
        ],
        env=env,
    )


def run(command: list[str], env: dict[str, str] | None = None) -> None:
    completed = subprocess.run(command, env=env, check=False)  # noqa: S603 -- fixed commands
    if completed.returncode != 0:
        sys.exit(f"error: {' '.join(command[:4])} ... exited {completed.returncode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
