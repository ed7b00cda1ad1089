"""The SharedLayer as `make build` builds it (sam build running layers/cmstoken/Makefile): exactly
the hashed lock, plus the cmstoken package, with unchecked-hash bytecode for Lambda's python3.13
on every module, and reproducible. The lock itself: every distribution pinned with hashes, from
requirements.in, at the versions the development environment tests."""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "layers" / "cmstoken"
LOCK = SOURCE / "requirements.txt"
TOP_LEVEL = SOURCE / "requirements.in"
BUILT = ROOT / ".aws-sam" / "build" / "SharedLayer" / "python"
LAYER_PATH = "/opt/python"
# CPython 3.13's bytecode magic number, and the flags of an unchecked hash-based pyc (PEP 552).
MAGIC_313 = (3571).to_bytes(2, "little") + b"\r\n"
UNCHECKED_HASH = 0b01
RUNTIME_PROVIDED = {"boto3", "botocore", "s3transfer"}  # the Lambda runtime's, never the layer's
# pyproject's runtime dependencies that the functions do not use (cmstoken-admin's QR code).
CLI_ONLY = {"segno"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock() -> dict[str, tuple[str, list[str], list[str]]]:
    """The lock's entries: normalized name -> (version, hashes, what it is required ``via``)."""
    entries: dict[str, tuple[str, list[str], list[str]]] = {}
    current = ""
    for line in LOCK.read_text().replace("\\\n", " ").splitlines():
        comment = line.strip().removeprefix("#").strip()
        if line.startswith(" ") and current and line.strip().startswith("#"):
            entries[current][2].append(comment.removeprefix("via").strip())
            continue
        code = line.split("#", 1)[0].strip()
        if not code:
            continue
        requirement, *options = code.split()
        name, pinned, version = requirement.partition("==")
        assert pinned, f"{LOCK.name}: {requirement!r} is not pinned with =="
        current = normalize(name)
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=")]
        entries[current] = (version, hashes, [])
    return entries


def top_level() -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in TOP_LEVEL.read_text().splitlines())
    return {normalize(Requirement(line).name) for line in lines if line}


def dev_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-dev.txt").read_text().splitlines():
        name, pinned, version = line.strip().partition("==")
        if pinned and not line.startswith("#"):
            pins[normalize(name)] = version
    return pins


def digests(directory: Path) -> dict[str, str]:
    return {
        path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def built() -> Path:
    if not (BUILT / "cmstoken").is_dir():
        pytest.fail(
            f"{BUILT.relative_to(ROOT)} has no build of the layer: run `make build` "
            "(`make test` runs it before the tests)"
        )
    return BUILT


# --- the lock ----------------------------------------------------------------------------------


def test_lock_pins_every_distribution_with_hashes() -> None:
    lock = read_lock()
    assert lock, f"{LOCK.name} locks nothing"
    for name, (version, hashes, _) in lock.items():
        assert version, name
        assert hashes, f"{name}=={version} has no --hash"
        for digest in hashes:
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), (name, digest)
    assert top_level() <= set(lock), "requirements.in names a package the lock lacks: make lock"
    assert not RUNTIME_PROVIDED & set(lock), "boto3/botocore come from the Lambda runtime"


def test_lock_is_resolved_from_requirements_in() -> None:
    """What the lock says it took from requirements.in is what requirements.in holds now (an
    edit of requirements.in without `make lock` fails here)."""
    via_file = {
        name
        for name, (_, _, via) in read_lock().items()
        if any(v.startswith("-r ") and v.endswith("requirements.in") for v in via)
    }
    assert via_file == top_level(), "requirements.in changed since the lock: run `make lock`"


def test_lock_ships_the_versions_the_tests_run() -> None:
    """The layer's lock is resolved within requirements-dev.txt: the development environment,
    where every test runs, has each locked distribution at the locked version."""
    pins = dev_pins()
    differing = {
        name: (version, pins.get(name))
        for name, (version, _, _) in read_lock().items()
        if pins.get(name) != version
    }
    assert not differing, f"layer lock vs requirements-dev.txt: {differing} (run `make lock`)"


def test_pyproject_agrees_with_the_layer_lock() -> None:
    """pyproject.toml's runtime dependencies are the layer's top-level ones (each admitting the
    locked version) plus the command-line tools' own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {normalize(r.name): r for r in map(Requirement, project["dependencies"])}
    lock = read_lock()
    for name in top_level():
        assert name in declared, f"pyproject.toml does not depend on {name} (requirements.in)"
        assert declared[name].specifier.contains(lock[name][0]), (
            f"pyproject.toml's {declared[name]} excludes the locked {name}=={lock[name][0]}"
        )
    assert set(declared) - top_level() == CLI_ONLY, (
        "a runtime dependency of pyproject.toml that the layer does not ship: add it to "
        "layers/cmstoken/requirements.in (and `make lock`) or, if only a command-line tool "
        "needs it, to CLI_ONLY here"
    )


# --- the built layer ---------------------------------------------------------------------------


def test_layer_holds_exactly_the_lock(built: Path) -> None:
    installed = {}
    for metadata in built.glob("*.dist-info/METADATA"):
        fields = dict(
            line.split(": ", 1)
            for line in metadata.read_text().split("\n\n", 1)[0].splitlines()
            if ": " in line
        )
        installed[normalize(fields["Name"])] = fields["Version"]
    assert installed == {name: entry[0] for name, entry in read_lock().items()}
    recorded = {
        line.split(",", 1)[0].split("/", 1)[0]
        for record in built.glob("*.dist-info/RECORD")
        for line in record.read_text().splitlines()
    }
    strays = {
        entry.name
        for entry in built.iterdir()
        if entry.name not in recorded | {"cmstoken", "__pycache__"}
    }
    assert not strays, f"files in the layer that no locked distribution installed: {strays}"


def test_layer_package_is_the_source(built: Path) -> None:
    def sources(directory: Path) -> dict[str, str]:
        return {k: v for k, v in digests(directory).items() if "__pycache__" not in k}

    assert sources(built / "cmstoken") == sources(SOURCE / "cmstoken"), (
        "the built cmstoken package differs from layers/cmstoken/cmstoken: rerun `make build`"
    )


def test_every_module_has_unchecked_hash_bytecode_for_python_313(built: Path) -> None:
    assert sys.version_info[:2] == (3, 13), "the layer is built by and for Python 3.13"
    assert importlib.util.MAGIC_NUMBER == MAGIC_313
    sources = sorted(built.rglob("*.py"))
    assert len(sources) > 100
    for source in sources:
        relative = source.relative_to(built).as_posix()
        pyc = source.parent / "__pycache__" / f"{source.stem}.cpython-313.pyc"
        assert pyc.is_file(), f"no bytecode for {relative}"
        data = pyc.read_bytes()
        assert data[:4] == MAGIC_313, relative
        assert int.from_bytes(data[4:8], "little") == UNCHECKED_HASH, f"{relative}: not unchecked"
        assert data[8:16] == importlib.util.source_hash(source.read_bytes()), relative
        code = marshal.loads(data[16:])  # noqa: S302 -- our own build output
        assert code.co_filename == f"{LAYER_PATH}/{relative}"
    expected = {s.parent / "__pycache__" / f"{s.stem}.cpython-313.pyc" for s in sources}
    assert set(built.rglob("*.pyc")) == expected, "bytecode without its source, or not 3.13's"


def test_extension_modules_are_for_lambda_arm64(built: Path) -> None:
    for extension in built.rglob("*.so"):
        assert extension.name.endswith(".cpython-313-aarch64-linux-gnu.so"), extension.name


def test_build_is_reproducible(built: Path, tmp_path: Path) -> None:
    """A second build, elsewhere and offline (from the wheel cache the first one filled),
    is byte-for-byte the same."""
    completed = subprocess.run(
        [sys.executable, str(SOURCE / "build_layer.py"), "--offline", str(tmp_path / "again")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    first, second = digests(built), digests(tmp_path / "again" / "python")
    differing = sorted(k for k in first.keys() | second.keys() if first.get(k) != second.get(k))
    assert not differing, (
        f"{len(differing)} files differ between two builds, e.g. {differing[:5]} "
        "(if the sources changed since `make build`, rerun it)"
    )


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_layer", SOURCE / "build_layer.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_build_refuses_an_interpreter_other_than_the_runtimes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = load_builder()
    monkeypatch.setattr(builder, "RUNTIME", (3, 12))
    assert builder.main([str(tmp_path)]) == 1
    assert "must be compiled by Python 3.12" in capsys.readouterr().err
    assert not (tmp_path / "python").exists()
