"""The size of the built SharedLayer: its directory unzipped (against Lambda's 250 MB limit for a
function and its layers) and as a deflated zip."""

from __future__ import annotations

import zipfile
from pathlib import Path

from .report import Report

LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024  # function code and all its layers, unzipped
MIB = 1024 * 1024


def measure_layer(report: Report, build: Path, workdir: Path) -> None:
    layer = build / "SharedLayer"
    files = [path for path in sorted(layer.rglob("*")) if path.is_file() and not path.is_symlink()]
    unzipped = sum(path.stat().st_size for path in files)
    archive = workdir / "SharedLayer.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in files:
            zipped.write(path, path.relative_to(layer).as_posix())
    report.add(
        "SharedLayer (sam build), unzipped",
        f"{unzipped / MIB:.1f} MiB ({len(files)} files)",
        f"<= {LAMBDA_UNZIPPED_LIMIT / MIB:.0f} MiB",
        unzipped <= LAMBDA_UNZIPPED_LIMIT,
    )
    report.add("SharedLayer zip (deflate)", f"{archive.stat().st_size / MIB:.1f} MiB")
