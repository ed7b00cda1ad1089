"""The rotation invariants of issues 10 and 28, checked after every step of a simulated run.

A ``Step`` is one thing an actor did (a model call with its answer, a crash, a sleep, its end);
``InvariantChecker.after(step)`` updates what it knows and returns the first invariant the
world now breaks, if any:

- I1: a refresh token the identity provider has rotated (answered 200, or acted and lost the
  answer, or answered after the caller's time limit) is presented again only inside the reuse
  interval, or when its successor was lost (the answer lost once no answer could arrive any
  more, the receiving run crashed or could not store it): then the presenter could not know
  better, and presenting it is the only recovery. Never while its answer could still arrive
  (a caller that gave up before the call's whole limit), never when its successor was stored;
- I2: the newest refresh token issued is in the credential secret, except while the actor that
  received it is inside the documented window (it has made no call since the refresh other than
  reading and writing the credential and sleeping between those retries), or after a loss (an
  answer lost, a crash inside the window, ``CredentialLostError``). No run returns success
  (rotated, skipped) after reading the credential while the credential holds a token whose
  successor was lost: Lambda retries only a run that fails, so such a run would leave the spent
  token to the next schedule. ``final``: healthy, or a loss a run reported (the credential
  marked); and with a single fault a loss is a violation where the provider's reuse interval
  allowed recovery (issue 28): at 30 s or more an answer lost to a closed connection, at 300 s
  or more any lost answer (closed, a gateway's 504, the time limit passed) and a crash;
- I3: the published service token was verified (a project listing accepted it before it was
  published), and its expiry never moves backwards;
- I4: actors present at most ``max_refreshes`` distinct refresh tokens (one per due period, one
  per forced request after the debounce);
- I6: no write of the refresh credential is refused by Secrets Manager's version quota
  (``LimitExceededException``): above all not the store of a token an actor holds (a refresh's
  or an approval's answer: what it replaced is spent), and not a write whose action the version
  budget let start (``core.version_budget``: every action counts before its first write, and
  keeps room for the writes that follow a spend).
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cmstoken.aws.documents import STATUS_ACTIVE, STATUS_REAUTHORIZATION_REQUIRED
from simulation.symmetry import renamed

if TYPE_CHECKING:
    from simulation.world import World

CREDENTIAL_CALLS = (
    "secretsmanager.GetSecretValue:credential",
    "secretsmanager.PutSecretValue:credential",
)
REPORTED = ("ReauthorizationRequiredError", "CredentialLostError", "reauthorization_required")
SUCCESS = ("rotated", "skipped")
# How a successor token can be lost, and the shortest reuse interval that must recover each
# with one fault (issue 28): a closed connection is presented again at once, in the run; a
# gateway's 504 or the whole time limit (30 s) at most that later; a crash on Lambda's retry, a
# minute on. A write refused until the deadline (CredentialLostError) is not required.
MUST_RECOVER_FROM = {"closed": 30.0, "gateway": 300.0, "limit": 300.0, "crash": 300.0}
# The faults that count towards "a single fault" (a stale read is Secrets Manager's normal).
FAULTS = ("crash", "lost", "slow", "busy")
# The error Secrets Manager gives for a quota, here its quota of versions (I6).
QUOTA_REFUSED = "LimitExceededException"


@dataclass
class Step:
    """One numbered thing an actor did; ``text`` is its line in a trace."""

    number: int
    actor: str
    action: str  # "secretsmanager.GetSecretValue:credential", "upstream.refresh", "crash", "end"
    text: str
    at: float = 0.0
    presented: str | None = None  # the refresh token a refresh presented
    status: int | None = None  # an upstream answer's status (None: lost)
    issued: str | None = None  # the refresh token the identity provider issued
    verified: str | None = None  # a service token a project listing accepted
    stored: str | None = None  # the refresh token in a credential version written
    outcome: str | None = None  # an actor's end: its outcome or its exception's type
    loss: str | None = None  # how a refresh's answer was lost (closed, gateway, limit, cut short)
    refused: str | None = None  # a refused write's AWS error code


@dataclass(frozen=True)
class Violation:
    invariant: str
    step: int
    message: str


@dataclass
class InvariantChecker:
    world: World
    max_refreshes: int
    reuse_interval: float = 0.0
    holding: dict[str, str] = field(default_factory=dict)  # actor: unstored token it received
    lost: dict[str, str] = field(default_factory=dict)  # token: how it was lost (documented)
    kinds: dict[str, str] = field(default_factory=dict)  # token: kind of loss (MUST_RECOVER_FROM)
    read_credential: set[str] = field(default_factory=set)  # actors that read the credential
    faults: Counter[str] = field(default_factory=Counter)  # the faults the schedule used
    rotated: dict[str, tuple[int, str, str | None]] = field(default_factory=dict)
    represented: set[str] = field(default_factory=set)
    presented: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)  # actors that ended or crashed
    verified: set[str] = field(default_factory=set)
    last_expiry: float = 0.0
    reported: list[str] = field(default_factory=list)
    _times: dict[int, float] = field(default_factory=dict)

    def start(self) -> None:
        """The seeded state: its service token counts as verified (the bootstrap did that)."""
        document = self.world.service_document()
        self.verified.add(document.token)
        self.last_expiry = document.expires_at

    # --- after every step -------------------------------------------------------------------

    def after(self, step: Step) -> Violation | None:
        self._finished(step)
        if step.action == CREDENTIAL_CALLS[0]:
            self.read_credential.add(step.actor)
        return (
            self._i6(step)
            or self._i1(step)
            or self._window(step)
            or self._i4(step)
            or self._i2(step)
            or self._success_over_spent(step)
            or self._i3(step)
        )

    def _i6(self, step: Step) -> Violation | None:
        """A write of the credential refused by the version quota: the store of a token the
        actor holds (its window), or any write of an action the budget let start."""
        if step.refused != QUOTA_REFUSED or not step.action.endswith(":credential"):
            return None
        token = self.holding.get(step.actor)
        if token is None:
            return Violation(
                "I6",
                step.number,
                f"{step.actor}'s write of the credential was refused by the version quota "
                f"({QUOTA_REFUSED}), although the version budget let its action start",
            )
        spent = next((t for t, (_, _, issued) in self.rotated.items() if issued == token), None)
        what = f"the successor of {label(spent)}, spent" if spent else "an approval's token"
        return Violation(
            "I6",
            step.number,
            f"{step.actor}'s store of {label(token)} ({what}) was refused by the version quota "
            f"({QUOTA_REFUSED}): the budget left no room for the writes that follow a spend",
        )

    def _i1(self, step: Step) -> Violation | None:
        token = step.presented
        if step.action != "upstream.refresh" or token is None:
            return None
        earlier = self.rotated.get(token)
        if earlier is not None:
            violation = self._presented_again(step, token, *earlier)
            if violation is not None:
                return violation
        elif step.status == 200 or (step.status is None and step.issued is not None):
            # (A lost answer rotated the token only if the provider issued one: a lost
            # refusal rotated nothing.)
            self.rotated[token] = (step.number, step.actor, step.issued)
            self._times[step.number] = step.at
        if step.status is None and step.issued is not None:
            how = step.loss or "closed"
            self.lost[step.issued] = f"the answer to step {step.number} was lost ({how})"
            self.kinds[step.issued] = how
        elif step.status == 200 and step.issued is not None:
            self.holding[step.actor] = step.issued
        return None

    def _presented_again(
        self, step: Step, token: str, number: int, who: str, issued: str | None
    ) -> Violation | None:
        """A rotated token presented again: fine inside the reuse interval or after its
        successor was lost, unless its answer could still have arrived."""
        kind = self.kinds.get(issued or "")
        if kind == "cut short":
            return Violation(
                "I1",
                step.number,
                f"{step.actor} presented {label(token)} again while the answer to step {number} "
                "could still arrive (its caller gave up before the call's whole time limit)",
            )
        within = self.reuse_interval > 0 and step.at - self._times[number] <= self.reuse_interval
        if within or issued in self.lost:
            if not within:
                self.represented.add(token)  # refused: the report must follow
            return None
        return Violation(
            "I1",
            step.number,
            f"{step.actor} presented {label(token)} again; the identity provider rotated it at "
            f"step {number} (answered to {who}) and its successor {label(issued)} was not lost",
        )

    def _finished(self, step: Step) -> None:
        if step.action in ("end", "crash"):
            self.finished.add(step.actor)

    def _window(self, step: Step) -> Violation | None:
        """Inside the window an actor holding an unstored token only reads and writes the
        credential and sleeps between retries; its crash there is a documented loss."""
        token = self.holding.get(step.actor)
        if token is None:
            return None
        if step.stored == token:
            del self.holding[step.actor]
            return None
        if step.action == "crash":
            self.lost[token] = f"{step.actor} crashed inside the window (step {step.number})"
            self.kinds[token] = "crash"
            del self.holding[step.actor]
            return None
        if step.action == "end":
            del self.holding[step.actor]
            if step.outcome == "CredentialLostError":
                self.lost[token] = f"{step.actor} could not store it (CredentialLostError)"
                self.kinds[token] = "unstored"
                return None
            return Violation(
                "I2",
                step.number,
                f"{step.actor} ended ({step.outcome}) without storing {label(token)}",
            )
        if step.action in (*CREDENTIAL_CALLS, "clock.sleep", "upstream.refresh"):
            return None
        return Violation(
            "I2",
            step.number,
            f"{step.actor} went on ({step.action}) before {label(token)}, the refresh token the "
            "identity provider just issued, was stored",
        )

    def _i4(self, step: Step) -> Violation | None:
        if step.action != "upstream.refresh" or step.presented is None:
            return None
        if step.actor == "recovery":
            return None
        self.presented.add(step.presented)
        if len(self.presented) > self.max_refreshes:
            tokens = ", ".join(sorted(label(t) for t in self.presented))
            return Violation(
                "I4",
                step.number,
                f"{len(self.presented)} refreshes ({tokens}) where at most "
                f"{self.max_refreshes} may happen",
            )
        return None

    def _i2(self, step: Step) -> Violation | None:
        if step.action == "end" and step.outcome in REPORTED:
            self.reported.append(f"{step.actor}: {step.outcome}")
        newest = self.newest()
        stored = self.stored()
        if newest is None or newest == stored:
            return None
        if newest in self.holding.values() or newest in self.lost:
            return None
        return Violation(
            "I2",
            step.number,
            f"the credential secret holds {label(stored)}, not the newest token issued, "
            f"{label(newest)}, and no actor is inside the window holding it",
        )

    def _success_over_spent(self, step: Step) -> Violation | None:
        """A run that read the credential returns success while it holds a spent token whose
        successor was lost, and no actor is inside the window with the newest: Lambda will not
        retry it (I2)."""
        if step.action != "end" or step.outcome not in SUCCESS or step.actor == "recovery":
            return None
        if step.actor not in self.read_credential:
            return None
        newest, stored = self.newest(), self.stored()
        if newest is None or newest == stored or newest not in self.lost:
            return None
        if newest in self.holding.values():
            return None
        return Violation(
            "I2",
            step.number,
            f"{step.actor} returned {step.outcome} while the credential holds {label(stored)}, "
            f"spent: its successor {label(newest)} was lost ({self.lost[newest]}); Lambda retries "
            "only a run that fails, so the spent token is left to the next schedule",
        )

    def _i3(self, step: Step) -> Violation | None:
        if step.verified is not None:
            self.verified.add(step.verified)
        document = self.world.service_document()
        if document.token not in self.verified:
            return Violation(
                "I3", step.number, f"{label(document.token)} published without verification"
            )
        if document.expires_at < self.last_expiry:
            return Violation(
                "I3",
                step.number,
                f"the published expiry moved backwards by "
                f"{self.last_expiry - document.expires_at:.0f} s",
            )
        self.last_expiry = document.expires_at
        return None

    # --- at the end ---------------------------------------------------------------------------

    def final(self, number: int) -> Violation | None:
        """After the recovery run: healthy, or a documented loss that a run reported."""
        world = self.world
        credential = world.refresh_document().credential
        published = world.service_document()
        newest, stored = self.newest(), self.stored()
        assert credential is not None
        healthy = (
            stored == newest
            and stored is not None
            and world.identity.usable(stored)
            and credential.status == STATUS_ACTIVE
            and published.credential_status == STATUS_ACTIVE
            and world.upstream.service.valid(published.token)
        )
        if healthy:
            return None
        if newest in self.lost:
            unforgiven = self._unforgiven(newest)
            if unforgiven is not None:
                return Violation("I2", number, unforgiven)
            said = bool(self.reported) and credential.status == STATUS_REAUTHORIZATION_REQUIRED
            if said:
                return None
            return Violation(
                "I2",
                number,
                f"{label(newest)} was lost ({self.lost[newest]}) and no run said so "
                f"(reported: {sorted(self.reported) or 'nothing'}; credential {credential.status})",
            )
        return Violation(
            "I2",
            number,
            f"the run ends unhealthy without a documented loss: stored {label(stored)} "
            f"(usable: {stored is not None and world.identity.usable(stored)}), newest "
            f"{label(newest)}, credential {credential.status}, published token accepted: "
            f"{world.upstream.service.valid(published.token)}",
        )

    def _unforgiven(self, newest: str) -> str | None:
        """Why the loss of ``newest`` is a violation: one fault, of a kind the provider's reuse
        interval gives the time to recover from (``MUST_RECOVER_FROM``)."""
        kind = self.kinds.get(newest, "")
        needs = MUST_RECOVER_FROM.get(kind)
        faults = sum(self.faults[name] for name in FAULTS)
        if needs is None or faults != 1 or self.reuse_interval < needs:
            return None
        return (
            f"{label(newest)} was lost ({self.lost[newest]}) although the identity provider "
            f"allows a reuse interval of {self.reuse_interval:.0f} s, enough to recover from "
            f"one such fault ({kind}): the family is revoked and a person must authorize again"
        )

    def newest(self) -> str | None:
        tokens = self.world.identity.tokens
        return next(reversed(tokens)) if tokens else None

    def stored(self) -> str | None:
        credential = self.world.refresh_document().credential
        return None if credential is None else credential.refresh_token


STEP_NUMBER = re.compile(r"\bstep \d+")


@functools.cache
def unnumbered(text: str) -> str:
    """``text`` without the step numbers it names (a violation's message, a loss's reason)."""
    return STEP_NUMBER.sub("step N", text)


def digest(value: Any) -> int:
    """A digest of ``value`` (dicts, sets, lists, strings, values), the order of dicts and sets
    left out (a multiset of their items' digests: two that digest alike still count twice),
    strings ``unnumbered``. The fingerprint only hashes what this returns, so a dict or a set
    is digested at once (a sum of its items' scrambled digests, which any order gives alike)
    instead of being built as a frozen multiset and hashed after."""
    if isinstance(value, str):  # the most common, first
        return hash(unnumbered(value))
    if isinstance(value, dict):
        return _multiset(hash((digest(k), digest(v))) for k, v in value.items())
    if isinstance(value, set | frozenset):
        return _multiset(map(digest, value))
    if isinstance(value, list | tuple):
        return hash(tuple(map(digest, value)))
    return hash(repr(value))


# A multiset's digest: the sum of its items' digests, each scrambled first (multiplied by an
# odd constant and folded, a bijection on 64 bits), so that the sum does not follow the items'
# own arithmetic; the count of items is mixed in.
_MASK = (1 << 64) - 1
_ODD = 0x9E3779B97F4A7C15


def _multiset(digests: Iterable[int]) -> int:
    total = count = 0
    for digest in digests:
        scrambled = ((digest & _MASK) * _ODD) & _MASK
        total += scrambled ^ (scrambled >> 31)
        count += 1
    return hash((total & _MASK, count))


def history(checker: object, rename: Callable[[str], str] | None = None) -> int:
    """What of an invariant checker's history decides its later verdicts, for the state's
    fingerprint: every field but the world (fingerprinted on its own), without the step numbers,
    which only name steps in messages (commuting steps number differently in either order): a
    rotation as who was answered, the token issued and when; the runs' reports as a multiset.
    ``rename``: applied to every text first (``simulation.symmetry``)."""
    return digest(history_fields(checker, rename))


def history_fields(checker: object, rename: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The fields ``history`` digests (their texts' step numbers still in)."""
    fields = {k: v for k, v in vars(checker).items() if k not in ("world", "lw", "_times")}
    if isinstance(checker, InvariantChecker):
        fields["rotated"] = {
            token: (who, issued, checker._times[number])
            for token, (number, who, issued) in checker.rotated.items()
        }
        fields["reported"] = Counter(checker.reported)
    if rename is not None:
        fields = renamed(fields, rename)
    return fields


def stable(value: Any) -> str:
    """``value`` as a text that is the same in every process, for ``digest``'s equality: dicts
    and sets in sorted order, strings ``unnumbered`` (the order of states that the search and
    the harness decide by; Python's hashes of strings differ from process to process)."""
    if isinstance(value, str):
        return repr(unnumbered(value))
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{stable(k)}:{stable(v)}" for k, v in value.items())) + "}"
    if isinstance(value, set | frozenset):
        return "{" + ",".join(sorted(map(stable, value))) + "}"
    if isinstance(value, list | tuple):
        return "(" + ",".join(map(stable, value)) + ")"
    return repr(value)


def label(token: str | None) -> str:
    """A short, readable name for a simulated token."""
    if token is None:
        return "none"
    if token.startswith("v1.sim-refresh-"):
        return "rt-" + token.removeprefix("v1.sim-refresh-")
    try:
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        return (
            str(claims["jti"]).removeprefix("sim-").replace("service", "st").replace("access", "at")
        )
    except (ValueError, IndexError, KeyError, TypeError):
        return token[-12:]
