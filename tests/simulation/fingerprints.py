"""The state's fingerprint, which the search keys its visits by (``Harness.fingerprint``).

A state between two transitions is all its future depends on: the models (every secret's
versions with their values, stages and times, and which were current; the identity provider's
token families, access tokens and device codes; the service's tokens), the clock, the faults
used (and so those left), Lambda's invocations (failed, when, retried: its retries to come),
each actor's own history (the steps it took and every answer it was given, which determine its
local state; crashed or not) and the invariant checker's history
(``simulation.invariants.history``). Nothing that records the order of steps of different
actors: two orders of commuting steps must give one fingerprint.

With two interchangeable actors (``simulation.symmetry``), a state and its renaming are one:
the fingerprint is the state's under the renaming whose actors' histories come first (compared
as texts), or, when both renamings give the same histories, whose shared part does. Either
renaming of the same state gives the same fingerprint, so two states share one exactly when one
is the other renamed. The comparison is of texts, never of fingerprints: Python's hashes of
strings differ from process to process, and the counts must not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulation.invariants import InvariantChecker, history, history_fields, stable
from simulation.scheduler import Actor
from simulation.symmetry import Symmetry, unchanged

if TYPE_CHECKING:
    from cmstoken.core.triggers import RotationRequest
    from simulation.world import World


@dataclass
class Invocation:
    """A rotator invocation Lambda ran (its ``attempt``-th), and how it ended."""

    name: str
    request: RotationRequest
    attempt: int
    failed: bool = False
    ended_at: float = 0.0
    retried: bool = False


# The shared part of a state, as a recovery's record keeps it (``Fingerprints.shared``): its
# fingerprint part under each renaming, and the renaming whose part reads first.
type Shared = tuple[tuple[int, ...], int]


@dataclass(frozen=True)
class Recovery:
    """A recovery's record (``Harness.recover_once``): the states it passed, the state it left
    (each as ``Fingerprints.shared``) and the texts of its ends."""

    states: tuple[Shared, ...]
    after: Shared
    ends: tuple[str, ...]


class Fingerprints:
    """The fingerprint of a harness's state (see the module docstring)."""

    world: World
    actors: list[Actor]
    texts: dict[str, list[str]]  # per actor: its steps' texts, in order
    answers: dict[str, list[str]]  # per actor: every call's answer, in order
    invocations: dict[str, Invocation]
    used: Counter[str]
    last_deadline: float
    checker: InvariantChecker
    recalled: Recovery | None  # the recovery taken from a record, not run
    symmetry: Symmetry | None

    def fingerprint(self) -> int:
        """The state's fingerprint."""
        return self.canonical()[0]

    def fingerprints(self) -> tuple[int, ...]:
        """The state's fingerprint under each renaming, the names as they are first (one
        without interchangeable actors)."""
        if self.symmetry is None:
            return (_state(self._shared(), self._own()),)
        return tuple(
            _state(self._shared_under(i), self._own_as(rename))
            for i, rename in enumerate(self.symmetry.renames)
        )

    def canonical(self, recorded: Shared | None = None) -> tuple[int, int]:
        """The state's fingerprint and the index of the renaming that gives it (0: the names
        as they are): the renaming whose actors' histories read first, or, when both read
        alike, whose shared part does (each compared as texts, the same in every process:
        fingerprints, Python's hashes of strings, are not). ``recorded``: the shared part
        when it is known (``shared``)."""
        symmetry = self.symmetry
        if symmetry is None:
            shared = self._shared() if recorded is None else recorded[0][0]
            return _state(shared, self._own()), 0
        owns = [self._own_as(rename) for rename in symmetry.renames]
        if owns[0] != owns[1]:
            index = int(owns[1] < owns[0])
        else:
            index = self._reads_first() if recorded is None else recorded[1]
        shared = self._shared_under(index) if recorded is None else recorded[0][index]
        return _state(shared, owns[index]), index

    def shared(self) -> Shared:
        """The shared part (``_shared``) under each renaming, the names as they are first, and
        the renaming whose shared part reads first (for a recovery's record)."""
        if self.symmetry is None:
            return (self._shared(),), 0
        renames = range(len(self.symmetry.renames))
        return tuple(self._shared_under(i) for i in renames), self._reads_first()

    def least_renamed(self, texts: list[str]) -> str:
        """``texts`` sorted and joined, the least of their renamings: a violation's message or
        the actors' ends, one text for states that are one renamed."""
        if self.symmetry is None:
            return "; ".join(sorted(texts))
        return self.symmetry.least(texts)

    def order_as(self, rename: Callable[[str], str], *, whole: bool = False) -> tuple[Any, ...]:
        """The state under ``rename`` as a value that orders alike in every process: its
        actors' histories, and (``whole``) its shared part as a text."""
        own = self._own_as(rename)
        if not whole:
            return (own,)
        return own, self._shared_text(rename), self._checker_text(rename)

    def _reads_first(self) -> int:
        """The renaming whose shared part reads first (0 when both read alike): the models,
        the clock, the faults used and Lambda's invocations (tuples in a fixed order: their
        ``repr``), then, when those read alike, the checker's notes (``stable``)."""
        assert self.symmetry is not None
        renames = self.symmetry.renames
        first, second = (self._shared_text(rename) for rename in renames)
        if first == second:
            first, second = (self._checker_text(rename) for rename in renames)
        return int(second < first)

    def _shared_text(self, rename: Callable[[str], str]) -> str:
        """``_shared_as`` but the checker's notes, as a text."""
        world = self.world
        return repr(
            (
                _models(world, rename),
                world.clock.now(),
                sorted(self.used.items()),
                self._invocations(rename),
                self.last_deadline,
            )
        )

    def _checker_text(self, rename: Callable[[str], str]) -> str:
        """The checker's notes as ``_shared_as`` has them, as a text."""
        return stable(history_fields(self.checker, None if rename is unchanged else rename))

    def _shared_under(self, index: int) -> int:
        if index == 0:
            return self._shared()
        if self.recalled is not None:
            return self.recalled.after[0][index]
        assert self.symmetry is not None
        return self._shared_as(self.symmetry.renames[index])

    def _own(self) -> tuple[Any, ...]:
        """The fingerprint's part of the actors' own histories."""
        if self.symmetry is not None:
            return self._own_as(unchanged)
        return tuple(
            (
                tuple(self.texts.get(actor.name, ())),
                tuple(self.answers.get(actor.name, ())),
                _crashed(actor),
            )
            for actor in self.actors
        )

    def _own_as(self, rename: Callable[[str], str]) -> tuple[Any, ...]:
        """``_own``, the actors renamed by ``rename``, in the order of their names."""
        return tuple(
            sorted(
                (
                    rename(actor.name),
                    tuple(map(rename, self.texts.get(actor.name, ()))),
                    tuple(map(rename, self.answers.get(actor.name, ()))),
                    _crashed(actor),
                )
                for actor in self.actors
            )
        )

    def _shared(self) -> int:
        """The fingerprint's part but the actors' own histories (after a recovery taken from
        its record: the state it left)."""
        if self.recalled is not None:
            return self.recalled.after[0][0]
        return self._shared_as(unchanged)

    def _shared_as(self, rename: Callable[[str], str]) -> int:
        """``_shared``, the actors renamed by ``rename`` in every text of it."""
        world = self.world
        return hash(
            (
                _models(world, rename),
                world.clock.now(),
                tuple(sorted(self.used.items())),
                self._invocations(rename),
                self.last_deadline,
                history(self.checker, None if rename is unchanged else rename),
            )
        )

    def _invocations(self, rename: Callable[[str], str]) -> tuple[Any, ...]:
        """Lambda's invocations: which failed, when, which were retried."""
        return tuple(
            sorted(
                (rename(i.name), i.attempt, i.failed, i.ended_at, i.retried)
                for i in self.invocations.values()
            )
        )


def _state(shared: int, own: tuple[Any, ...]) -> int:
    """The fingerprint of a state from its two parts (``_shared``, ``_own``)."""
    return hash((shared, own))


def _models(world: World, rename: Callable[[str], str]) -> tuple[Any, ...]:
    """The models' state; ``rename`` applied to the secrets' values, the only texts of the
    models that name an actor (a lease's owner)."""
    identity, service = world.identity, world.upstream.service
    secrets = tuple(
        (
            tuple(secret.history),
            tuple(
                (v.version_id, rename(v.text), tuple(v.stages), v.created)
                for v in secret.versions.values()
            ),
            tuple(v.version_id for v in secret.removed),
        )
        for secret in world.secretsmanager.secrets.values()
    )
    tokens = tuple(
        (value, token.parent, token.used_at, repr(token.family))
        for value, token in identity.tokens.items()
    )
    devices = tuple(map(repr, identity.devices.values()))
    return (
        secrets,
        tokens,
        tuple(identity.access_tokens.items()),
        devices,
        identity.minted,
        tuple(service.tokens.items()),
        service.minted,
    )


def _crashed(actor: Actor) -> bool:
    """Whether the actor crashed (a ``SimActor``'s flag)."""
    return bool(getattr(actor, "crashed", False))
