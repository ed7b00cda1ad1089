"""Reading ``-X importtime`` output: the total import time of a run, and each module's self time
attributed to the package whose import pulled it in."""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any

from .probe import MARKER

IMPORTTIME_RUNS = 3  # separate -X importtime runs per subject (the tracing inflates times)

# One parsed line: (depth, module, self time in microseconds, children)
Node = tuple[int, str, int, list[Any]]


def importing_ms(stderr: str) -> float:
    """The total of the self times that ``-X importtime`` printed, in milliseconds."""
    total = 0
    for line in stderr.splitlines():
        if line.startswith("import time:"):
            field = line.split("|")[0].split(":")[1].strip()
            total += int(field) if field.isdigit() else 0
    return total / 1000


def import_tree(stderr: str) -> list[Node]:
    """The imports after the probe's ``MARKER``, as trees (``-X importtime`` prints
    ``import time: self [us] | cumulative | <2 spaces per level>name``, children first)."""
    lines = stderr.split(MARKER, 1)[-1].splitlines()
    pending: list[Node] = []
    for text in lines:
        if not text.startswith("import time:") or "self [us]" in text:
            continue
        self_part, _, name_part = text.split("|", 2)
        microseconds = int(self_part.split(":")[1])
        name = name_part[1:]
        depth = (len(name) - len(name.lstrip())) // 2
        children = []
        while pending and pending[-1][0] > depth:
            children.append(pending.pop())
        pending.append((depth, name.strip(), microseconds, children[::-1]))
    return pending


def attribute_importtime(stderr: str) -> dict[str, float]:
    """Milliseconds of self time per owner: each module's time goes to the outermost third-party
    package whose import pulled it in (``ssl`` under ``requests`` counts for ``requests``);
    modules no third-party package pulled in count for ``cmstoken``, ``app`` or ``stdlib``."""
    ours = ("cmstoken", "app")
    stdlib = sys.stdlib_module_names
    totals: dict[str, float] = defaultdict(float)

    def visit(node: Node, owner: str | None) -> None:
        _, name, microseconds, children = node
        top = name.split(".")[0]
        if owner is None and top not in stdlib and top not in ours:
            owner = top
        totals[owner or (top if top in ours else "stdlib")] += microseconds / 1000
        for child in children:
            visit(child, owner)

    for root in import_tree(stderr):
        visit(root, None)
    return dict(totals)
