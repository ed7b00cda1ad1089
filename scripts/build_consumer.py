"""`make dist`: the consumer helper as a wheel of its own, for workloads outside Lambda.

The wheel (``cmstoken-consumer``) carries the ``cmstoken`` folders the consumer helper imports
(``consumer/``, ``aws/`` and ``core/``, with the package's ``__init__.py``) and nothing else (no
functions' code, no command-line tools, no emulator), and depends on requests and boto3 only.
The folder list is checked: the helper must import with it alone.
Built with ``python -m build`` from a staging directory, without build isolation (offline).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "layers" / "cmstoken" / "cmstoken"
TEMPLATE = ROOT / "packaging" / "consumer"
# What ``cmstoken.consumer`` imports, directly or through the modules it imports: the layers
# below it (see ``cmstoken/__init__.py``).
FOLDERS = ("consumer", "aws", "core")
FILES = ("__init__.py", "py.typed")


def version() -> str:
    namespace: dict[str, object] = {}
    exec((PACKAGE / "__init__.py").read_text(), namespace)  # noqa: S102 -- our own module
    return str(namespace["__version__"])


def main(outdir: str = "dist") -> int:
    target = (ROOT / outdir).resolve()
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cmstoken-consumer-") as stage_name:
        stage = Path(stage_name)
        package = stage / "src" / "cmstoken"
        package.mkdir(parents=True)
        for name in FILES:
            shutil.copy2(PACKAGE / name, package / name)
        for folder in FOLDERS:
            shutil.copytree(
                PACKAGE / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__")
            )
        shutil.copy2(ROOT / "LICENSE", stage / "LICENSE")
        shutil.copy2(TEMPLATE / "README.md", stage / "README.md")
        pyproject = (TEMPLATE / "pyproject.toml.in").read_text().replace("@VERSION@", version())
        (stage / "pyproject.toml").write_text(pyproject)
        subprocess.run(  # noqa: S603 -- the build frontend of this interpreter
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(target)],
            cwd=stage,
            check=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
