"""`make dist` as a user runs it: the consumer helper's wheel carries the helper's modules and
nothing else, depends on requests and boto3 only, and installed into a fresh virtual
environment (with only those dependencies importable) reads a token from moto's server."""

from __future__ import annotations

import email
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import boto3
import pytest

import cmstoken
from build_consumer import FILES, FOLDERS
from cmstoken.aws.documents import ServiceTokenDocument

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]

PACKAGE = ROOT / "layers" / "cmstoken" / "cmstoken"

WHEEL = ROOT / "dist" / f"cmstoken_consumer-{cmstoken.__version__}-py3-none-any.whl"
READER = """
import json, sys
import cmstoken
from cmstoken.consumer import ServiceTokenProvider
provider = ServiceTokenProvider(sys.argv[1])
token = provider.token()
outside = sorted({m.partition(".")[0] for m in sys.modules} - set(sys.stdlib_module_names))
print(json.dumps({"token": token, "api_url": provider.api_url, "modules": outside,
                  "package": cmstoken.__file__}))
"""


@pytest.fixture(scope="module")
def wheel() -> Path:
    WHEEL.unlink(missing_ok=True)
    result = subprocess.run(
        ["make", "-s", "dist"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert WHEEL.is_file()
    return WHEEL


def test_the_wheel_carries_the_helper_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = email.message_from_bytes(
            archive.read(f"cmstoken_consumer-{cmstoken.__version__}.dist-info/METADATA")
        )
    modules = {name.removeprefix("cmstoken/") for name in names if name.startswith("cmstoken/")}
    # The package's face and the consumer's folders, every module of them, and nothing else.
    expected = set(FILES) | {
        path.relative_to(PACKAGE).as_posix()
        for folder in FOLDERS
        for path in (PACKAGE / folder).glob("*.py")
    }
    assert modules == expected
    assert {m.partition("/")[0] for m in modules if "/" in m} == {"consumer", "aws", "core"}
    assert all(n.startswith(("cmstoken/", "cmstoken_consumer-")) for n in names), names
    assert metadata["Name"] == "cmstoken-consumer"
    assert metadata["Version"] == cmstoken.__version__
    assert metadata["License-Expression"] == "Apache-2.0"
    declared = metadata.get_all("Requires-Dist") or []
    requirements = sorted(re.split(r"[<>=!~ ;]", r)[0] for r in declared)
    assert requirements == ["boto3", "requests"]


def _closure(*distributions: str) -> set[str]:
    """The distributions these need, recursively (no extras)."""
    found: set[str] = set()
    todo = list(distributions)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in found:
            continue
        found.add(name)
        for requirement in importlib.metadata.requires(name) or []:
            if "extra ==" not in requirement:
                todo.append(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0])
    return found


def link_dependencies(site: Path, directory: Path) -> None:
    """Only requests, boto3 and what they need, from this environment's copies (pure Python,
    or with a pure-Python fallback), made importable in ``site``: offline."""
    dependencies = directory / "dependencies"
    dependencies.mkdir()
    needed = _closure("requests", "boto3")
    for top, owners in importlib.metadata.packages_distributions().items():
        if not {owner.lower().replace("_", "-") for owner in owners} & needed:
            continue
        spec = importlib.util.find_spec(top)
        if spec is None or spec.origin is None:
            continue
        source = Path(spec.origin)
        source = source.parent if source.name == "__init__.py" else source
        target = dependencies / source.name
        if not target.exists():
            target.symlink_to(source)
    (site / "dependencies.pth").write_text(str(dependencies) + "\n")


def run_isolated(python: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c script args``, nothing of this environment's ``PYTHONPATH`` on its path."""
    return subprocess.run(
        [str(python), "-c", script, *args],
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def read_token(python: Path, site: Path) -> None:
    """``python`` reads a token from moto's server with the installed helper, importing
    nothing but the standard library, the helper and its two dependencies."""
    secret = boto3.client("secretsmanager").create_secret(
        Name="stack/service-token",
        SecretString=ServiceTokenDocument(
            token="eyJ.test.token",
            expires_at=4_102_444_800.0,  # 2100-01-01
            api_url="https://cms.example.invalid/api",
            issued_at=1_795_000_000.0,
        ).to_json(),
    )
    result = run_isolated(python, READER, secret["ARN"])
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["token"] == "eyJ.test.token"
    assert outcome["api_url"] == "https://cms.example.invalid/api"
    assert outcome["package"].startswith(str(site))
    for unwanted in ("aws_lambda_powertools", "segno", "cmsemu"):
        assert unwanted not in outcome["modules"]


def test_installed_in_a_fresh_environment_it_reads_the_token(
    wheel: Path, moto_server: str, tmp_path: Path
) -> None:
    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    (site,) = fresh.glob("lib/python*/site-packages")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    link_dependencies(site, tmp_path)
    read_token(fresh / "bin" / "python", site)


def python_3_11() -> Path | None:
    """A Python 3.11 on PATH or among pyenv's installs (Debian 12's and Amazon Linux 2023's)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = shutil.which("python3.11")
    candidates = [Path(found)] if found else []
    candidates += sorted(root.glob("versions/3.11*/bin/python3.11"), reverse=True)
    return candidates[0] if candidates else None


def test_on_python_3_11_it_installs_and_reads_the_token(
    wheel: Path, moto_server: str, tmp_path: Path
) -> None:
    """pip installs the wheel into a 3.11 venv (its Requires-Python admits 3.11, offline:
    ``--no-index``), every module of it imports there, and it reads a token. The venv has no pip
    of its own (``ensurepip`` took 5 s): this environment's pip installs for the venv's
    interpreter (``--python``: pip runs there, and checks Requires-Python against 3.11)."""
    python = python_3_11()
    if python is None:
        pytest.skip("no Python 3.11 on PATH or in pyenv")
    fresh = tmp_path / "venv311"
    subprocess.run(
        [str(python), "-m", "venv", "--without-pip", str(fresh)], check=True, timeout=120
    )
    installed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(fresh / "bin" / "python"),
            "install",
            "--no-deps",
            "--no-index",
            "--disable-pip-version-check",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (site,) = fresh.glob("lib/python3.11/site-packages")
    link_dependencies(site, tmp_path)
    modules = sorted(
        ".".join(path.relative_to(site).with_suffix("").parts)
        for path in (site / "cmstoken").rglob("*.py")
    )
    imported = run_isolated(
        fresh / "bin" / "python",
        "import importlib, sys\n"
        "for name in sys.argv[1:]: importlib.import_module(name.removesuffix('.__init__'))",
        *modules,
    )
    assert imported.returncode == 0, imported.stderr
    read_token(fresh / "bin" / "python", site)


def test_the_helpers_modules_type_check_against_python_3_11() -> None:
    """mypy with Python 3.11's standard library: no 3.12-only API in the wheel's folders (runs
    without a 3.11 interpreter)."""
    paths = [str(PACKAGE / name) for name in FILES if name.endswith(".py")]
    paths += [str(PACKAGE / folder) for folder in FOLDERS]
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--python-version",
            "3.11",
            "--strict",
            "--cache-dir",
            os.devnull,
            *paths,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_wheel_and_the_page_say_python_3_11(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata = email.message_from_bytes(
            archive.read(f"cmstoken_consumer-{cmstoken.__version__}.dist-info/METADATA")
        )
    assert metadata["Requires-Python"] == ">=3.11"
    assert "Python 3.11 or later" in (ROOT / "docs" / "consume.md").read_text()
