"""Depth-first search over a scenario's decisions, replaying a prefix per schedule, with sleep
sets and state caching (Godefroid 1996, "Partial-Order Methods for the Verification of
Concurrent Systems", ch. 6).

Sleep sets: after exploring a step ``t`` at a decision, ``t`` stays asleep in its siblings'
subtrees until a step dependent on it runs (``simulation.exploration`` says which steps are
independent). State caching: every decision comes with the state's fingerprint
(``Harness.fingerprint``); the explorer remembers, per fingerprint, the sleep set it was explored
with. A state met again is explored only for the steps asleep at every earlier visit and awake
now: when the earlier sleep set is a subset of the current one there are none, and the schedule
is abandoned. What was explored from the earlier visit counts as done at this one (its steps
join the siblings' sleep sets, as if explored here). The remembered set becomes the
intersection. Sound because the states only grow (each step lengthens an actor's history), so
an earlier visit of a state is never an unfinished ancestor: its subtree was explored in full
(``docs/how-we-know-it-holds.md``, "A state explored before is not explored again").

A state met renamed (two interchangeable actors swapped: ``simulation.symmetry``) is the same
state: its steps are compared and remembered renamed as its fingerprint was.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from simulation.scheduler import SchedulingError

# A state as the search sees it: its fingerprint, and the renaming of steps under which it is
# that fingerprint (``None``: none; ``simulation.symmetry``).
type State[T] = tuple[int, Callable[[T], T] | None]


@dataclass
class _Node[T: Hashable]:
    options: list[T]
    sleep: frozenset[T]
    done: list[T]
    chosen: T


@dataclass
class _Visit[T: Hashable]:
    """A state explored before: its choices (a check of the fingerprint) and the steps left
    unexplored from it (asleep at every visit)."""

    options: list[T]
    asleep: frozenset[T]


class SleepSetExplorer[T: Hashable]:
    """The search (see the module docstring); ``independent`` says which steps commute,
    ``reduce`` turns the sleep sets on, ``prune`` the state caching."""

    def __init__(
        self, independent: Callable[[T, T], bool], *, reduce: bool = True, prune: bool = True
    ) -> None:
        self.independent = independent
        self.reduce = reduce
        self.prune = prune
        self.stack: list[_Node[T]] = []
        self.depth = 0
        self.visits: dict[int, _Visit[T]] = {}
        self.revisits = 0  # schedules abandoned at a state explored before

    def decide(self, options: list[T], state: Callable[[], State[T]] | None = None) -> T | None:
        """The step to take at this decision, ``None`` to abandon the schedule; ``state``: the
        state's fingerprint here and the renaming of steps that goes with it (``None``: the
        steps as they are; ``simulation.symmetry``), called at a decision met for the first
        time (in a replayed prefix the state was seen); no ``state``: no caching."""
        depth = self.depth
        self.depth += 1
        if depth < len(self.stack):
            node = self.stack[depth]
            if node.options != options:
                raise SchedulingError("a replayed schedule met different choices")
            return node.chosen
        sleep: frozenset[T] = frozenset()
        if depth and self.reduce:
            parent = self.stack[depth - 1]
            sleep = frozenset(
                u for u in parent.sleep | set(parent.done) if self.independent(u, parent.chosen)
            )
        explored = self._explored(options, sleep, None if state is None else state())
        done = explored or []
        awake = [o for o in options if o not in sleep and o not in done]
        if not awake:
            self.revisits += explored is not None
            return None  # every continuation is explored elsewhere, or was from here
        self.stack.append(_Node(options, sleep, done, awake[0]))
        return awake[0]

    def _explored(
        self, options: list[T], sleep: frozenset[T], state: State[T] | None
    ) -> list[T] | None:
        """The steps explored from earlier visits of ``state``, ``None`` at a first visit (or
        without caching); notes this visit. A renamed state's steps are noted renamed."""
        if state is None or not self.prune:
            return None
        fingerprint, rename = state
        named = options if rename is None else [rename(o) for o in options]
        if rename is not None:
            sleep = frozenset(map(rename, sleep))
        visit = self.visits.get(fingerprint)
        if visit is None:
            self.visits[fingerprint] = _Visit(named, sleep)
            return None
        if visit.options != named and set(visit.options) != set(named):  # (renamed: reordered)
            raise SchedulingError("a state met again offers other choices: a short fingerprint")
        done = [o for o, n in zip(options, named, strict=True) if n not in visit.asleep]
        visit.asleep = visit.asleep & sleep
        return done

    def advance(self) -> bool:
        """Move to the next unexplored schedule; ``False`` when none is left."""
        if self.depth < len(self.stack):
            raise SchedulingError("a replayed schedule ended before its prefix")
        self.depth = 0
        while self.stack:
            node = self.stack[-1]
            node.done.append(node.chosen)
            rest = [o for o in node.options if o not in node.sleep and o not in node.done]
            if rest:
                node.chosen = rest[0]
                return True
            self.stack.pop()
        return False
