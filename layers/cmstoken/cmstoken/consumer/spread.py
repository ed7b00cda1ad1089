"""When a process reads the secret again, spread so that a fleet's reads do not meet.

Every process of a fleet reads the same secret. Kept until a fixed time before expiry, every
cached token would be re-read at the same instant, hours after its successor was published;
refused at once, every process would re-read and request a refresh in the same second.
Secrets Manager serves at most 10,000 ``GetSecretValue`` and ``DescribeSecret`` calls a second
per account and Region ("Secrets Manager quotas"), and EventBridge takes 10,000 ``PutEvents``
a second in us-east-1, 2,400 in us-east-2 ("Amazon EventBridge quotas"). So each wait below is
shortened by a share drawn from ``fraction`` (a number in [0, 1): ``random.random``, or a fixed
one in tests), at most half of it:

- a read token is fresh for ``max_age * (1 - fraction/2)``: a new token is picked up within
  ``max_age`` of its publication, the fleet's re-reads spread over half of it;
- but never inside its last ``min_validity * (1 + fraction)``, so that a fleet whose token is
  not replaced (the rotation failing) re-reads over a ``min_validity`` window, not in a second;
- one that is already that close is re-checked after ``NEAR_EXPIRY_RECHECK * (1 - fraction/2)``;
- a refused token is re-read after ``refused_spread * fraction``, and a refresh requested only
  when the token there is still the refused one: the processes that read after the rotator
  published (seconds after the first request) find the new token and send nothing;
- a wait for a rotated token polls every ``poll_interval * (1 - fraction/2)``.

With ``fraction`` 0 these are the rules without spreading: fresh for ``max_age``, until
``min_validity`` before expiry, a refused token re-read at once, polls every ``poll_interval``.
"""

from __future__ import annotations

from collections.abc import Callable

# A token read inside its last ``min_validity_seconds`` is re-read about this often.
NEAR_EXPIRY_RECHECK_SECONDS = 5.0

Fraction = Callable[[], float]


def fresh_until(
    now: float,
    expires_at: float,
    *,
    max_age: float | None,
    min_validity: float,
    fraction: Fraction,
) -> float:
    """Until when a token read at ``now`` is served without reading again (``max_age``
    ``None``: no bound but expiry). At or before ``now`` when the token is already inside its
    last minutes: ``near_expiry_recheck`` then says when to look again."""
    last = expires_at - min_validity * (1 + fraction())
    if max_age is None:
        return last
    return min(now + _shortened(max_age, fraction), last)


def near_expiry_recheck(now: float, expires_at: float, fraction: Fraction) -> float:
    """When to look again for a successor of a token inside its last minutes."""
    return min(now + _shortened(NEAR_EXPIRY_RECHECK_SECONDS, fraction), expires_at)


def refused_delay(spread: float, fraction: Fraction) -> float:
    """How long a process waits before re-reading after the service refused its token."""
    return spread * fraction()


def poll_delay(interval: float, fraction: Fraction) -> float:
    """The wait between two reads while waiting for a rotated token."""
    return _shortened(interval, fraction)


def _shortened(seconds: float, fraction: Fraction) -> float:
    """``seconds`` less a random share of at most half."""
    return seconds * (1 - fraction() / 2)
