"""The report: rows ``| measure | value | budget | ok |``, notes, failures (a missed budget or
a measure that could not be made), the printed table and summary, and the exit status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Row:
    measure: str
    value: str
    budget: str
    ok: bool | None  # None: reported, no budget


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, measure: str, value: str, budget: str = "-", ok: bool | None = None) -> None:
        self.rows.append(Row(measure, value, budget, ok))
        if ok is False:
            self.failures.append(f"{measure}: {value} (budget {budget})")

    def error(self, measure: str, message: str) -> None:
        self.rows.append(Row(measure, "ERROR", "-", False))
        self.failures.append(f"{measure}: {message}")

    @contextmanager
    def failing_as(self, measure: str, *, typed: bool = True) -> Iterator[None]:
        """An exception in the block becomes an ERROR row for ``measure`` (its type named
        unless ``typed`` is false), and the other measures still run."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 -- reported, and the other parts still run
            self.error(measure, f"{type(exc).__name__}: {exc}" if typed else str(exc))

    def table(self) -> str:
        header = ("measure", "value", "budget", "ok")
        cells = [
            (r.measure, r.value, r.budget, "-" if r.ok is None else "yes" if r.ok else "NO")
            for r in self.rows
        ]
        widths = [max(len(row[i]) for row in [header, *cells]) for i in range(4)]

        def line(values: tuple[str, ...]) -> str:
            return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        return "\n".join([line(header), rule, *(line(c) for c in cells)])


def finish(report: Report, started: float) -> int:
    """Print the table, the notes and the summary; the exit status (1: a budget missed or a
    measure not made). ``started`` is the bench's ``time.monotonic()`` at its start."""
    print(report.table())
    for note in report.notes:
        print(note)
    elapsed = time.monotonic() - started
    budgets = sum(1 for row in report.rows if row.ok is not None)
    if report.failures:
        print(f"bench: {len(report.failures)} of {budgets} budgets NOT met in {elapsed:.0f} s:")
        for failure in report.failures:
            print(f"  - {failure}")
        return 1
    print(f"bench: all {budgets} budgets met in {elapsed:.0f} s")
    return 0
