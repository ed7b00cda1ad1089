"""A fleet of consumer processes in one account and Region (issue 30, item 3): each process is
the real ``ServiceTokenProvider`` (its cache, its refused-token wait, its refresh requests) on
a simulated clock, against a model of Secrets Manager and EventBridge that counts the calls
made in each second.

The quotas the counts are held against: Secrets Manager serves 10,000 ``GetSecretValue`` and
``DescribeSecret`` calls a second per account and Region ("Secrets Manager quotas", AWS
Secrets Manager User Guide); EventBridge's ``PutEvents`` quota is 10,000 transactions a second
in us-east-1, 2,400 in us-east-2 ("Amazon EventBridge quotas", EventBridge User Guide).

Two moments:

- ``rotation``: the rotator publishes a new token ``REFRESH_MARGIN`` (6 h) before the old
  one expires, at its first scheduled run after that (``ROTATION_LATE`` later); the fleet
  has read the old token at random times in the 15 minutes before. It runs until every
  process has picked up the new token.
- ``refused``: every process is refused the token at the same second (the service stopped
  accepting it) and calls ``refused``; the rotator publishes a new token
  ``PUBLISH_AFTER_REQUEST`` seconds after the first request (EventBridge, the queue, a run).
  Processes are independent but for that first request, so the fleet runs in two passes:
  the first finds the first request (each process stops at its request), the second runs
  every process to its end with the new token published then (the same draws, so the first
  request is the same).
"""

from __future__ import annotations

import heapq
import logging
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from types import SimpleNamespace
from typing import Any

from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.consumer import ServiceTokenProvider
from cmstoken.consumer.spread import Fraction

PROCESSES = 10_000
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:111122223333:secret:cmstoken/service-token-AbCdEf"
DAY = 86_400.0
REFRESH_MARGIN = 21_600.0  # REFRESH_MARGIN_SECONDS' default
ROTATION_LATE = 1_800.0  # the first scheduled run after the margin began
PUBLISH_AFTER_REQUEST = 5.0
SECRETS_MANAGER_READS_A_SECOND = 10_000
TOKENS = ("token-a-" + "a" * 40, "token-b-" + "b" * 40)


@cache
def document(token: str, issued_at: float) -> str:
    """The published document of ``token``, issued at ``issued_at``, refreshed an hour before."""
    return ServiceTokenDocument(
        token=token,
        expires_at=issued_at + DAY,
        api_url="https://cms.example.com/api",
        issued_at=issued_at,
        refreshed_at=issued_at - 3600,
        min_refresh_interval_seconds=600,
    ).to_json()


@dataclass
class Published:
    """What the secret holds over time: the first token, and its successor from ``replaced_at``."""

    replaced_at: float = float("inf")

    def at(self, now: float) -> tuple[str, str]:
        """The version id and document current at ``now``."""
        if now >= self.replaced_at:
            return "v2", document(TOKENS[1], self.replaced_at)
        return "v1", document(TOKENS[0], 0.0)


@dataclass
class Counts:
    """The calls the fleet made, by the second."""

    reads: Counter[int] = field(default_factory=Counter)
    requests: Counter[int] = field(default_factory=Counter)

    def peak_reads(self) -> int:
        """The most ``GetSecretValue`` calls in one second."""
        return max(self.reads.values(), default=0)

    def peak_requests(self) -> int:
        """The most refresh requests in one second."""
        return max(self.requests.values(), default=0)


class Clock:
    """A simulated clock (one for the fleet, or one a process)."""

    def __init__(self, now: float) -> None:
        self.current = now

    def now(self) -> float:
        return self.current

    def sleep(self, seconds: float) -> None:
        self.current += max(seconds, 0.0)


class FirstRequestError(Exception):
    """Raised at a process's refresh request in the first pass of ``refused``."""


@dataclass
class Aws:
    """What one process's clients see: the secret as published at its clock's time."""

    published: Published
    clock: Clock
    counts: Counts
    stop_at_request: bool = False
    meta: Any = field(default_factory=lambda: SimpleNamespace(region_name="us-east-1"))

    def get_secret_value(self, SecretId: str) -> dict[str, Any]:  # noqa: N803 (boto3's name)
        self.counts.reads[int(self.clock.now())] += 1
        version, text = self.published.at(self.clock.now())
        return {"ARN": SecretId, "SecretString": text, "VersionId": version}

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        self.counts.requests[int(self.clock.now())] += len(Entries)
        if self.stop_at_request:
            raise FirstRequestError(self.clock.now())
        return {"FailedEntryCount": 0, "Entries": [{"EventId": "e"}]}


def provider(aws: Aws, fraction: Fraction, *, spread: bool) -> ServiceTokenProvider:
    """A process's provider: today's defaults, or the rules without spreading."""
    options: dict[str, Any] = {"random_fraction": fraction}
    if not spread:
        options.update(max_age_seconds=None, refused_spread_seconds=0)
    clients: Any = aws  # what the provider calls of boto3's clients
    return ServiceTokenProvider(
        SECRET_ARN, secrets_client=clients, events_client=clients, clock=aws.clock, **options
    )


def fractions(seed: int, spread: bool) -> Iterator[Fraction]:
    """Each process's ``random_fraction``: its own seeded draws, or 0 without spreading."""
    for index in range(PROCESSES):
        yield random.Random(seed * 1_000_003 + index).random if spread else (lambda: 0.0)


@contextmanager
def quiet() -> Iterator[None]:
    """The helper's per-process log lines, 10,000 of each, left out."""
    logger = logging.getLogger("cmstoken.consumer")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@dataclass(frozen=True)
class RotationFigures:
    counts: Counts
    picked_up: list[float]  # seconds after publication, a process

    @property
    def latest_pickup(self) -> float:
        return max(self.picked_up)


def rotation(*, spread: bool, seed: int = 1) -> RotationFigures:
    """Every process, having read the old token in the 15 minutes before the rotation, until it
    holds the new one."""
    published_at = DAY - REFRESH_MARGIN + ROTATION_LATE
    published = Published(replaced_at=published_at)
    clock = Clock(0.0)
    counts = Counts()
    starts = random.Random(seed)
    queue: list[tuple[float, int]] = []
    providers: list[ServiceTokenProvider] = []
    for index, fraction in enumerate(fractions(seed, spread)):
        providers.append(provider(Aws(published, clock, counts), fraction, spread=spread))
        heapq.heappush(queue, (published_at - 900 * starts.random(), index))
    picked_up: list[float] = []
    with quiet():
        while queue:
            clock.current, index = heapq.heappop(queue)
            if providers[index].document().token == TOKENS[1]:
                picked_up.append(clock.current - published_at)
                continue
            heapq.heappush(queue, (next_read(providers[index], clock.current), index))
    return RotationFigures(counts, picked_up)


def next_read(provider: ServiceTokenProvider, now: float) -> float:
    """When the process's cache reads the secret next: the first moment its cached document is
    no longer fresh (an event-driven stand-in for a process that asks for the token often)."""
    entry = provider._cache._entry  # the cache's own bound, read by the simulation only
    assert entry is not None
    assert entry.fresh_until > now
    return entry.fresh_until


@dataclass(frozen=True)
class RefusedFigures:
    counts: Counts
    first_request: float
    waited: list[float]  # seconds from the refusal to the new token, a process

    @property
    def requests(self) -> int:
        return sum(self.counts.requests.values())


def refused(*, spread: bool, seed: int = 1, refused_at: float = 3600.0) -> RefusedFigures:
    """Every process refused the old token at ``refused_at``, each until it holds a new one."""
    first = _refused_pass(Published(), spread, seed, refused_at, stop_at_request=True)
    published_at = first.first_request + PUBLISH_AFTER_REQUEST
    return _refused_pass(Published(published_at), spread, seed, refused_at, stop_at_request=False)


def _refused_pass(
    published: Published, spread: bool, seed: int, refused_at: float, *, stop_at_request: bool
) -> RefusedFigures:
    counts = Counts()
    waited: list[float] = []
    first_request = float("inf")
    with quiet():
        for fraction in fractions(seed, spread):
            clock = Clock(refused_at)
            process = provider(
                Aws(published, clock, counts, stop_at_request=stop_at_request),
                fraction,
                spread=spread,
            )
            try:
                replaced = process.refused(TOKENS[0])
            except FirstRequestError as request:
                first_request = min(first_request, request.args[0])
                continue
            assert replaced == TOKENS[1]
            waited.append(clock.current - refused_at)
    return RefusedFigures(counts, first_request, waited)


def summary(name: str, counts: Counts) -> str:
    """One line of figures, for the test's output."""
    return (
        f"{name}: peak {counts.peak_reads()} GetSecretValue/s, "
        f"{sum(counts.reads.values())} reads, {sum(counts.requests.values())} refresh requests "
        f"(peak {counts.peak_requests()}/s)"
    )
