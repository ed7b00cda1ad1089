"""``get-token``'s retries of the upstream steps, under one policy and one waiting budget for
the whole run, each wait announced."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from cmstoken.cli.console import say, shown
from cmstoken.cli.get_token.options import PROG
from cmstoken.core.clock import Clock
from cmstoken.core.errors import RateLimitedError, ServerError, TransientError, may_send_again
from cmstoken.core.retry import RetryPolicy, call_with_retries

# Upstream steps refused for a while (429, 503...) are sent again under this policy, with at
# most RETRY_BUDGET_SECONDS of waiting over the whole run; a wait hint longer than
# max_retry_after, or than what is left of the budget, is not waited for. Only a request that
# provably was not acted on is sent again (errors.may_send_again), except the exchange, which
# spends nothing the next attempt needs. (A refresh whose answer was lost is sent again once,
# at once, by flows.run_refresh, not by these retries.)
RETRIES = RetryPolicy(attempts=5, base_delay=1.0, max_delay=8.0, max_retry_after=30.0)
RETRY_BUDGET_SECONDS = 45.0
# What the help and docs/get-token.md say of these retries (a test holds the two to this text
# and this text to refused_for_now and the exchange's retries).
RETRY_STORY = (
    f"A call answered HTTP 429 (its Retry-After or X-RateLimit-Reset honoured, up to "
    f"{RETRIES.max_retry_after:.0f} s) or a 5xx other than a gateway's 502 or 504 (500, 503...) "
    f"is sent again, up to {RETRIES.attempts} attempts, with at most "
    f"{RETRY_BUDGET_SECONDS:.0f} s of waiting in all; a longer wait hint is not waited for. The "
    "exchange, whose raw access token stays valid, is also sent again after a 502 or 504, no "
    "answer in time, or a connection that dropped or could not be made."
)


class Retries:
    """``call_with_retries`` for the upstream steps of one run, under ``RETRIES``, with at
    most ``budget`` seconds of waiting in all; each wait is announced on ``stderr`` (when
    given) with the failure it follows.

    It is the clock the retries wait on: its ``sleep`` announces the wait and takes it from
    the budget."""

    def __init__(
        self, clock: Clock, stderr: TextIO | None, budget: float = RETRY_BUDGET_SECONDS
    ) -> None:
        self.clock = clock
        self.stderr = stderr
        self.left = budget
        self._failure: BaseException | None = None

    def call[T](
        self,
        operation: Callable[[], T],
        *,
        description: str,
        retryable: Callable[[BaseException], bool] | None,
    ) -> T:
        """``operation``, its ``TransientError``s approved by ``retryable`` (``None``: all)
        sent again."""

        def attempt() -> T:
            try:
                return operation()
            except TransientError as exc:
                self._failure = exc
                raise

        return call_with_retries(
            attempt,
            retry_on=(TransientError,),
            policy=RETRIES,
            clock=self,
            deadline=self.clock.now() + self.left,
            description=description,
            retryable=retryable,
        )

    def now(self) -> float:
        """The run's clock."""
        return self.clock.now()

    def sleep(self, seconds: float) -> None:
        """A wait before an attempt, announced and taken from the budget."""
        if self.stderr is not None and self._failure is not None:
            say(self.stderr, f"{PROG}: {shown(self._failure)}; trying again in {seconds:.3g} s")
        self.left -= max(0.0, seconds)
        self.clock.sleep(seconds)


def refused_for_now(error: BaseException) -> bool:
    """Whether a request to the service or the provider is sent again after ``error``: only
    when the upstream answered that it did not act and may later (429, or a 5xx other than a
    gateway's: ``may_send_again``). A connection that could not be made (a wrong address, more
    likely than not) fails at once, and a request that may have been acted on (a timeout, a
    dropped connection, a 502 or 504, a garbled or any 2xx answer) is not retried here (a
    refresh's lost answer is handled by ``flows.run_refresh``: the same token again, once)."""
    return isinstance(error, RateLimitedError | ServerError) and may_send_again(error)
