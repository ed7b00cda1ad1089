"""Bounded retries with exponential back-off that honour the upstream's wait hint and a deadline."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from cmstoken.core.clock import Clock
from cmstoken.core.errors import aws_error_code

logger = logging.getLogger(__name__)

# A type variable, not PEP 695's `[T]`: the consumer wheel carries this module to Python 3.11.
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    ``attempts`` counts the first call. The wait before retry ``n`` is the error's
    ``retry_after`` when it has one, else ``base_delay * 2**(n-1)`` capped at ``max_delay``, with
    jitter down to half of that. A hint longer than ``max_retry_after`` is not waited for: the
    error is raised, so that the platform retries later instead of a function idling.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0

    def backoff(self, retry: int, jitter: float) -> float:
        """The wait before retry number ``retry`` (1-based) when no hint was given."""
        delay: float = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        return delay * (0.5 + 0.5 * jitter)


def call_with_retries(
    operation: Callable[[], T],
    *,
    retry_on: tuple[type[BaseException], ...],
    policy: RetryPolicy,
    clock: Clock,
    deadline: float | None = None,
    description: str = "call",
    jitter: Callable[[], float] = random.random,
    retryable: Callable[[BaseException], bool] | None = None,
    attempt_seconds: float = 0.0,
) -> T:
    """Run ``operation``, retrying errors of the ``retry_on`` types under ``policy``.

    ``retryable``, when given, must also approve an error for it to be retried. No retry starts
    unless its wait, and ``attempt_seconds`` (the longest one attempt can take), end before
    ``deadline`` (epoch seconds); the last error is raised when the attempts, the deadline,
    ``retryable`` or a too-long hint rule out another try.
    """
    retry = 0
    while True:
        try:
            return operation()
        except retry_on as exc:
            retry += 1
            if retry >= policy.attempts or (retryable is not None and not retryable(exc)):
                raise
            hint = getattr(exc, "retry_after", None)
            if isinstance(hint, int | float):
                if hint > policy.max_retry_after:
                    raise
                wait = float(hint)
            else:
                wait = policy.backoff(retry, jitter())
            if deadline is not None and clock.now() + wait + attempt_seconds >= deadline:
                raise
            logger.warning(
                "retrying after a transient error",
                extra=_retry_details(exc, retry, wait, description),
            )
            clock.sleep(wait)


def _retry_details(
    error: BaseException, retry: int, wait: float, description: str
) -> dict[str, object]:
    """The log fields of a retry: the error's class and, for an AWS call, its AWS error code
    (``aws_error``: what AWS answered, ``ThrottlingException`` say; never a secret's value)."""
    details: dict[str, object] = {
        "operation": description,
        "error": type(error).__name__,
        "retry": retry,
        "wait_seconds": round(wait, 3),
    }
    code = aws_error_code(error)
    if code is not None:
        details["aws_error"] = code
    return details
