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
the fingerprint is the state's under the renaming that puts the lesser of the two actors'
histories, each seen from itself, under the first actor's name, and the lesser of both
fingerprints when the histories tie. Either renaming of the same state gives the same
fingerprint, so two states share one exactly when one is the other renamed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulation.invariants import InvariantChecker, history
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


@dataclass(frozen=True)
class Recovery:
    """A recovery's record (``Harness.recover_once``): the states it passed, the state it left
    (each as ``Fingerprints.shareds``) and the texts of its ends."""

    states: tuple[tuple[int, ...], ...]
    after: tuple[int, ...]
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

    def canonical(self, shared: Callable[[int], int] | None = None) -> tuple[int, int]:
        """The state's fingerprint and the index of the renaming that gives it (0: the names
        as they are); ``shared(i)``: the shared part under renaming ``i`` when it is known
        (``shareds``)."""
        part = shared or self._shared_under
        symmetry = self.symmetry
        if symmetry is None:
            return _state(part(0), self._own()), 0
        lesser = self._lesser()
        indices = (0, 1) if lesser is None else (lesser,)
        return min((_state(part(i), self._own_as(symmetry.renames[i])), i) for i in indices)

    def shareds(self) -> tuple[int, ...]:
        """The shared part (``_shared``) under each renaming, the names as they are first."""
        count = 1 if self.symmetry is None else len(self.symmetry.renames)
        return tuple(self._shared_under(i) for i in range(count))

    def least_renamed(self, texts: list[str]) -> str:
        """``texts`` sorted and joined, the least of their renamings: a violation's message or
        the actors' ends, one text for states that are one renamed."""
        if self.symmetry is None:
            return "; ".join(sorted(texts))
        return self.symmetry.least(texts)

    def _lesser(self) -> int | None:
        """The renaming that puts the lesser history under the first actor's name: 0 when it is
        there already, 1 when it is the second's, ``None`` when the two are alike."""
        assert self.symmetry is not None
        first, second = (self._seen_by(name) for name in self.symmetry.pair)
        return None if first == second else int(first > second)

    def _seen_by(self, base: str) -> tuple[Any, ...]:
        """The histories of actor ``base`` and its retries, as it saw them (its own name and
        the other's replaced by placeholders)."""
        assert self.symmetry is not None
        rename = self.symmetry.seen_from(base)
        return tuple(
            (
                tuple(map(rename, self.texts.get(actor.name, ()))),
                tuple(map(rename, self.answers.get(actor.name, ()))),
                _crashed(actor),
            )
            for actor in self.actors
            if actor.name.partition("#")[0] == base
        )

    def _state_as(self, rename: Callable[[str], str]) -> int:
        """The state's fingerprint under ``rename``."""
        return _state(self._shared_as(rename), self._own_as(rename))

    def _shared_under(self, index: int) -> int:
        if index == 0:
            return self._shared()
        if self.recalled is not None:
            return self.recalled.after[index]
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
            return self.recalled.after[0]
        return self._shared_as(unchanged)

    def _shared_as(self, rename: Callable[[str], str]) -> int:
        """``_shared``, the actors renamed by ``rename`` in every text of it."""
        world = self.world
        invocations = tuple(
            sorted(
                (rename(i.name), i.attempt, i.failed, i.ended_at, i.retried)
                for i in self.invocations.values()
            )
        )
        return hash(
            (
                _models(world, rename),
                world.clock.now(),
                tuple(sorted(self.used.items())),
                invocations,
                self.last_deadline,
                history(self.checker, None if rename is unchanged else rename),
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
