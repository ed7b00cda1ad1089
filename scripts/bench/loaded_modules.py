"""What the cold starts loaded, and from where: every layer module from the layer's bytecode,
no handler loading what its first invocation has no use for (``Subject.unneeded``), the
runtime's packages and the library's parts a handler uses, get-token without boto3, botocore or
Powertools, and the import time per package (``-X importtime``)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from .build import Layout
from .importtime import attribute_importtime
from .probe import GET_TOKEN, HANDLERS, Probe
from .report import Report

FORBIDDEN_IN_GET_TOKEN = ("boto3", "botocore", "aws_lambda_powertools")


def cached(source: str) -> str:
    """The bytecode path CPython 3.13 uses for ``source``."""
    path = Path(source)
    return str(path.parent / "__pycache__" / f"{path.stem}.cpython-313.pyc")


def report_layer_bytecode(report: Report, layout: Layout, verbose: Mapping[str, Probe]) -> None:
    """Each handler's layer modules, from a ``-v`` run: all must come from the shipped
    bytecode (the layer is read-only in Lambda: a module compiled at import costs every run)."""
    for subject in HANDLERS:
        loaded = [
            path
            for path in verbose[subject.name].modules.values()
            if Path(path).is_relative_to(layout.layer) and path.endswith(".py")
        ]
        from_bytecode = set(
            re.findall(r"# code object from '([^']+)'", verbose[subject.name].stderr)
        )
        compiled = [path for path in loaded if cached(path) not in from_bytecode]
        report.add(
            f"functions/{subject.function}: layer modules loaded from the shipped bytecode",
            f"{len(loaded) - len(compiled)} of {len(loaded)}",
            "all",
            bool(loaded) and not compiled,
        )


def note_runtime_packages(report: Report, layout: Layout, probes: Mapping[str, Probe]) -> None:
    """A note per handler: the top-level packages it loaded from the runtime's directory."""
    for subject in HANDLERS:
        outside = sorted(
            {
                name.split(".")[0]
                for name, path in probes[subject.name].modules.items()
                if Path(path).is_relative_to(layout.runtime)
            }
        )
        report.notes.append(f"{subject.name:<9} loaded from the runtime: {', '.join(outside)}")


def report_unneeded(report: Report, probes: Mapping[str, Probe]) -> None:
    """Each handler's first invocation loaded none of its ``unneeded`` modules (a module or
    any module under it)."""
    for subject in HANDLERS:
        loaded = probes[subject.name].modules
        found = [
            unneeded
            for unneeded in subject.unneeded
            if any(name == unneeded or name.startswith(unneeded + ".") for name in loaded)
        ]
        report.add(
            f"functions/{subject.function} ({subject.first}): loads none of "
            + ", ".join(subject.unneeded),
            ", ".join(found) or "none",
            "none",
            not found,
        )


def note_layer_packages(report: Report, layout: Layout, probes: Mapping[str, Probe]) -> None:
    """A note per handler: how many modules of each of the library's parts it loaded."""
    for subject in HANDLERS:
        parts = Counter(
            name.split(".")[1]
            for name, path in probes[subject.name].modules.items()
            if name.startswith("cmstoken.") and Path(path).is_relative_to(layout.layer)
        )
        report.notes.append(
            f"{subject.name:<9} loaded of cmstoken: "
            + ", ".join(f"{part} {count}" for part, count in sorted(parts.items()))
        )


def report_get_token(report: Report, median_seconds: float, probe: Probe) -> None:
    """get-token's import on the built layer: its time, and no boto3, botocore or Powertools."""
    report.add(
        f"import {GET_TOKEN.argument} (get-token), built layer", f"{median_seconds * 1000:.0f} ms"
    )
    tops = {name.split(".")[0] for name in probe.modules}
    forbidden = [p for p in FORBIDDEN_IN_GET_TOKEN if p in tops]
    report.add(
        "get-token: boto3/botocore/powertools loaded",
        ", ".join(forbidden) or "none",
        "none",
        not forbidden,
    )


def note_import_owners(report: Report, importtime: Mapping[str, Sequence[Probe]]) -> None:
    """A note per subject: the six packages its imports spend most time in (medians)."""
    for name, samples in importtime.items():
        attributed = [attribute_importtime(probe.stderr) for probe in samples]
        owners = {owner for sample in attributed for owner in sample}
        typical = {o: statistics.median(s.get(o, 0.0) for s in attributed) for o in owners}
        top = sorted(typical.items(), key=lambda item: -item[1])[:6]
        report.notes.append(
            f"{name:<9} import by package (-X importtime, inflated): "
            + ", ".join(f"{owner} {ms:.0f} ms" for owner, ms in top)
        )
