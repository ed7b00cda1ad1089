"""Waiting for a token other than a refused one: one wait per refused token, shared by every
thread refused with it (``SharedWaits``), and the polling of the secret such a wait does
(``wait_for_other_than``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.consumer.errors import ConsumerError, require_active
from cmstoken.consumer.spread import Fraction, poll_delay
from cmstoken.core.clock import Clock
from cmstoken.core.redaction import fingerprint

logger = logging.getLogger(__name__)


class _Wait:
    """One wait for a token other than a refused one, shared by every thread refused with it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.document: ServiceTokenDocument | None = None
        self.error: BaseException | None = None

    def outcome(self) -> ServiceTokenDocument:
        """The wait's document, or its error raised in the calling thread."""
        error = self.error
        if isinstance(error, ConsumerError):
            raise ConsumerError(
                str(error), reason=error.reason, retry_at=error.retry_at
            ) from error.__cause__
        if error is not None:
            raise error
        assert self.document is not None
        return self.document


class SharedWaits:
    """The running waits, one per refused token. Thread-safe."""

    def __init__(self) -> None:
        self._waits: dict[str, _Wait] = {}
        self._lock = threading.Lock()  # the waits

    def run(self, token: str, replace: Callable[[], ServiceTokenDocument]) -> ServiceTokenDocument:
        """The outcome of the one wait for a token other than ``token``: this thread runs it
        (``replace``) when none is running, and joins the running one otherwise."""
        with self._lock:
            wait = self._waits.get(token)
            leading = wait is None
            if wait is None:
                wait = self._waits[token] = _Wait()
        if leading:
            try:
                wait.document = replace()
            except BaseException as exc:
                wait.error = exc
                raise
            finally:
                with self._lock:
                    del self._waits[token]
                wait.done.set()
            return wait.document
        wait.done.wait()
        return wait.outcome()


def wait_for_other_than(
    token: str,
    read: Callable[[], ServiceTokenDocument],
    *,
    clock: Clock,
    seconds: float,
    poll_interval: float,
    fraction: Fraction,
) -> ServiceTokenDocument | None:
    """Poll the secret (``read``) about every ``poll_interval`` (``spread.poll_delay``) until it
    holds a token other than ``token`` (that document), or ``seconds`` pass (``None``);
    ``ConsumerError`` when the refresh credential needs reauthorization meanwhile."""
    started = clock.now()
    deadline = started + seconds
    while (remaining := deadline - clock.now()) > 0:
        clock.sleep(min(poll_delay(poll_interval, fraction), remaining))
        current = read()
        if current.token != token:
            logger.info(
                "rotated service token published",
                extra={
                    "current": fingerprint(current.token),
                    "waited_seconds": round(clock.now() - started, 1),
                },
            )
            return current
        require_active(current)
    return None
