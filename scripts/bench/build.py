"""What ships, in Lambda's layout: ``sam build`` into a temporary directory, the runtime's boto3
emulated beside it (boto3 and its dependencies at the development pins), and ``Layout``, where
a cold start finds the function, the layer and the runtime."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .probe import HANDLERS
from .runner import PYTHON, ROOT, VENV_BIN

SAM_TIMEOUT_SECONDS = 300
# What the Lambda runtime provides besides the standard library (boto3 and its dependencies).
RUNTIME_DISTRIBUTIONS = (
    "boto3",
    "botocore",
    "jmespath",
    "python-dateutil",
    "s3transfer",
    "six",
    "urllib3",
)


@dataclass(frozen=True)
class Layout:
    """Lambda's file system, emulated: the built functions' directories, the built layer's
    ``python/`` directory and the runtime's boto3."""

    build: Path  # sam build's output: <LogicalId>/ per function and layer
    runtime: Path
    cwd: Path

    @property
    def layer(self) -> Path:
        return self.build / "SharedLayer" / "python"

    def function(self, name: str) -> Path:
        return self.build / f"{name.capitalize()}Function"


def dev_pins() -> dict[str, str]:
    """The versions requirements-dev.txt pins, by normalized name."""
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not line.startswith("#"):
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def install_runtime(directory: Path) -> None:
    """The Lambda runtime's boto3, emulated: boto3 and its dependencies at the development pins,
    in a directory of their own, precompiled (pip's default, as the runtime ships them): beside
    their sources, so none of the caller's PYTHON* settings (PYTHONPYCACHEPREFIX, which the
    Makefile sets, would put the bytecode elsewhere, and each cold start would compile)."""
    pins = dev_pins()
    missing = [name for name in RUNTIME_DISTRIBUTIONS if name not in pins]
    if missing:
        raise RuntimeError(f"requirements-dev.txt pins no {', '.join(missing)}")
    completed = subprocess.run(  # noqa: S603 -- our interpreter's pip, pinned versions
        [
            PYTHON,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
            str(directory),
            *(f"{name}=={pins[name]}" for name in RUNTIME_DISTRIBUTIONS),
        ],
        capture_output=True,
        text=True,
        env={name: value for name, value in os.environ.items() if not name.startswith("PYTHON")},
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"installing the runtime's boto3 failed:\n{completed.stderr[-2000:]}")
    shutil.rmtree(directory / "bin", ignore_errors=True)


def start_sam_build(original_env: Mapping[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    """``sam build`` of template.yaml into ``workdir/build``, started (its log in
    ``workdir/sam-build.log``); ``wait_for_build`` waits for it."""
    sam = VENV_BIN / "sam"
    if not sam.exists():
        raise RuntimeError(
            f"sam not found at {sam.relative_to(ROOT)}: run `make venv` "
            "(aws-sam-cli is pinned in requirements-dev.txt)"
        )
    env = dict(original_env)
    env.update(
        {
            "AWS_DEFAULT_REGION": "us-east-1",
            "SAM_CLI_TELEMETRY": "0",
            "SAM_CLI_CONTACT_TRACKING": "0",
            "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    log = (workdir / "sam-build.log").open("wb")
    # build.toml goes next to the build directory: keep both inside workdir.
    command = [
        str(sam),
        "build",
        "--template",
        str(ROOT / "template.yaml"),
        "--build-dir",
        str(workdir / "build"),
        "--cache-dir",
        str(workdir / "cache"),
    ]
    with log:
        return subprocess.Popen(  # noqa: S603 -- the venv's sam, fixed arguments
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )


def wait_for_build(build: subprocess.Popen[bytes], workdir: Path) -> Path:
    """The build directory, once ``sam build`` has succeeded."""
    try:
        code = build.wait(timeout=SAM_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        build.kill()
        build.wait()
        raise RuntimeError(f"sam build took more than {SAM_TIMEOUT_SECONDS} s") from None
    if code != 0:
        log = (workdir / "sam-build.log").read_text(errors="replace").strip().splitlines()
        raise RuntimeError(f"sam build exited {code}:\n" + "\n".join(log[-10:]))
    for name in (
        "SharedLayer",
        *(f"{s.function.capitalize()}Function" for s in HANDLERS if s.function),
    ):
        if not (workdir / "build" / name).is_dir():
            raise RuntimeError(f"sam build produced no {name} directory")
    return workdir / "build"
