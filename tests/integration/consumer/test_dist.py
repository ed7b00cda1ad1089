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
    # Only requests, boto3 and what they need, from this environment's copies.
    dependencies = tmp_path / "dependencies"
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

    secret = boto3.client("secretsmanager").create_secret(
        Name="stack/service-token",
        SecretString=ServiceTokenDocument(
            token="eyJ.test.token",
            expires_at=4_102_444_800.0,  # 2100-01-01
            api_url="https://cms.example.invalid/api",
            issued_at=1_795_000_000.0,
        ).to_json(),
    )
    result = subprocess.run(
        [str(fresh / "bin" / "python"), "-c", READER, secret["ARN"]],
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["token"] == "eyJ.test.token"
    assert outcome["api_url"] == "https://cms.example.invalid/api"
    assert outcome["package"].startswith(str(site))
    for unwanted in ("aws_lambda_powertools", "segno", "cmsemu"):
        assert unwanted not in outcome["modules"]
