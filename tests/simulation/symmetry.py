"""Symmetry between two actors that run the same request: two scheduled runs, or the two
deliveries of one forced request, are the same program given the same input, told apart only by
their names. A state and the state with their names swapped (everywhere: the actors' histories,
a lease's owner, the checker's notes, Lambda's invocations) have the same futures, names
swapped, and the invariants hold in one exactly when they hold in the other (they never test a
name). So the search keeps one of the two: both have one fingerprint
(``simulation.fingerprints``), and the steps the search notes at a state are renamed as its
fingerprint was (``simulation.search``). Emerson and Sistla 1996, "Symmetry and model
checking".

What the harness itself decides must not tell the names apart either: each actor's retry jitter
is drawn from the first actor's stream (both draw alike), and of two failed invocations of the
pair that Lambda would retry at the same moment, the state, not the name, chooses which goes
first (``Harness._first_retried``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any


class Symmetry:
    """The two renamings of a scenario's two interchangeable actors: none, and the swap."""

    def __init__(self, first: str, second: str) -> None:
        self.pair = (first, second)
        names = "|".join(map(re.escape, sorted(self.pair, key=len, reverse=True)))
        # whole names, a retry's "#n" kept ("first#2" is "second#2" swapped)
        self.pattern = re.compile(rf"(?<![\w-])({names})(?![\w-])")
        self.swap = self._renaming({first: second, second: first})
        self.renames: tuple[Callable[[str], str], ...] = (unchanged, self.swap)

    @staticmethod
    @functools.cache
    def of(actors: tuple[tuple[str, object], ...]) -> Symmetry | None:
        """The symmetry of actors ``(name, request)``: ``None`` when no two are alike (one
        per scenario, its renamed texts kept from schedule to schedule)."""
        by_request: dict[object, list[str]] = {}
        for name, request in actors:
            by_request.setdefault(request, []).append(name)
        groups = [names for names in by_request.values() if len(names) > 1]
        if not groups:
            return None
        if len(groups) > 1 or len(groups[0]) > 2:
            raise ValueError("more than two interchangeable actors: only a pair is renamed")
        return Symmetry(*groups[0])

    def stream(self, name: str) -> str:
        """The jitter stream of actor ``name``: the first actor's, its retry's suffix kept."""
        base, sep, attempt = name.partition("#")
        return self.pair[0] + sep + attempt if base in self.pair else name

    def to_first(self, name: str) -> Callable[[str], str]:
        """The renaming that gives actor ``name`` (or its retry) the first actor's name."""
        return self.swap if name.partition("#")[0] == self.pair[1] else unchanged

    def least(self, texts: Iterable[str]) -> str:
        """The least of ``texts``' renamings, each sorted and joined."""
        texts = tuple(texts)
        return min("; ".join(sorted(map(rename, texts))) for rename in self.renames)

    def _renaming(self, renaming: dict[str, str]) -> Callable[[str], str]:
        """``renaming`` applied to every whole actor name in a text (each text renamed once:
        the same texts recur in state after state)."""
        pattern = self.pattern

        def swap(match: re.Match[str]) -> str:
            return renaming[match.group(1)]

        @functools.lru_cache(maxsize=1 << 16)
        def rename(text: str) -> str:
            return pattern.sub(swap, text)

        return rename


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
    if isinstance(value, dict):  # a Counter too: digested and read as any dict
        return {renamed(k, rename): renamed(v, rename) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return {renamed(v, rename) for v in value}
    if isinstance(value, list | tuple):
        return type(value)(renamed(v, rename) for v in value)
    if value is None or isinstance(value, int | float):
        return value
    raise TypeError(f"cannot rename the actors in a {type(value).__name__}")
