"""Symmetry between actors that run the same request: two scheduled runs, or the two deliveries
of one forced request, are the same program given the same input, told apart only by their
names. A state and the state with their names swapped (everywhere: the actors' histories, a
lease's owner, the checker's notes, Lambda's invocations) have the same futures, names swapped,
and the invariants hold in one exactly when they hold in the other (they never test a name). So
the search keeps one of the two: a state's fingerprint is the least of its fingerprints under
each renaming (``Harness.canonical``), and the steps the search notes at it are renamed the
same way (``simulation.search``). Emerson and Sistla 1996, "Symmetry and model checking".

What the harness itself decides must not tell the names apart either: each actor's retry jitter
is seeded by its group's first name (both draw the same stream), and of two failed invocations
of one group that Lambda would retry at the same moment, the one retried first is chosen by the
state, not by the name (``Symmetry.first_retried``)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any


class Symmetry:
    """The renamings of a scenario's actors that leave it unchanged: its groups of actors with
    equal requests, each group of two (the scenarios have no larger ones), swapped or not."""

    def __init__(self, groups: Iterable[Sequence[str]]) -> None:
        self.groups = [tuple(group) for group in groups]
        if any(len(group) != 2 for group in self.groups):
            raise ValueError("a group of interchangeable actors is two actors")
        self.renamings: list[dict[str, str]] = [{}]
        for first, second in self.groups:
            self.renamings += [{**r, first: second, second: first} for r in self.renamings]
        names = sorted({name for group in self.groups for name in group}, key=len, reverse=True)
        # whole names, a retry's "#n" kept ("first#2" is "second#2" swapped)
        self.pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
        self._renames: dict[tuple[tuple[str, str], ...], Callable[[str], str]] = {}

    @staticmethod
    @functools.cache
    def of(actors: tuple[tuple[str, object], ...]) -> Symmetry | None:
        """The symmetry of actors ``(name, request)``: ``None`` when no two are alike (one
        per scenario, its renamed texts kept from schedule to schedule)."""
        by_request: dict[object, list[str]] = {}
        for name, request in actors:
            by_request.setdefault(request, []).append(name)
        groups = [names for names in by_request.values() if len(names) > 1]
        return Symmetry(groups) if groups else None

    def stream(self, name: str) -> str:
        """The jitter stream of actor ``name``: its group's first name, its retry's suffix."""
        base, sep, attempt = name.partition("#")
        group = next((g for g in self.groups if base in g), None)
        return name if group is None else group[0] + sep + attempt

    def rename(self, renaming: dict[str, str]) -> Callable[[str], str]:
        """``renaming`` applied to every whole actor name in a text (each text renamed once:
        the same texts recur in state after state)."""
        key = tuple(sorted(renaming.items()))
        rename = self._renames.get(key)
        if rename is None:
            rename = self._renames[key] = unchanged if not renaming else self._renaming(renaming)
        return rename

    def _renaming(self, renaming: dict[str, str]) -> Callable[[str], str]:
        pattern = self.pattern

        def swap(match: re.Match[str]) -> str:
            return renaming.get(match.group(1), match.group(1))

        @functools.lru_cache(maxsize=1 << 16)
        def rename(text: str) -> str:
            return pattern.sub(swap, text)

        return rename

    def least(self, texts: Iterable[str]) -> str:
        """The least of ``texts``' renamings, each sorted and joined."""
        texts = tuple(texts)
        return min(
            "; ".join(sorted(map(self.rename(renaming), texts))) for renaming in self.renamings
        )

    def swapping_to_first(self, name: str) -> dict[str, str]:
        """The renaming that makes actor ``name`` (or its retry) its group's first."""
        base = name.partition("#")[0]
        group = next((g for g in self.groups if base in g), None)
        if group is None or base == group[0]:
            return {}
        return {group[0]: group[1], group[1]: group[0]}


def unchanged(text: str) -> str:
    """The renaming that renames nothing."""
    return text


def renamed(value: Any, rename: Callable[[str], str]) -> Any:
    """``value`` (strings, numbers, and dicts, sets, lists and tuples of them) with ``rename``
    applied to every string in it."""
    if rename is unchanged:
        return value
    if isinstance(value, str):
        return rename(value)
    if isinstance(value, Counter):
        return Counter({renamed(k, rename): v for k, v in value.items()})
    if isinstance(value, dict):
        return {renamed(k, rename): renamed(v, rename) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return {renamed(v, rename) for v in value}
    if isinstance(value, list | tuple):
        return type(value)(renamed(v, rename) for v in value)
    if value is None or isinstance(value, int | float):
        return value
    raise TypeError(f"cannot rename the actors in a {type(value).__name__}")
