"""Where the helper reads the secret: the replica in its own region when the secret has one
there, else the primary, in the primary's region.

Secrets Manager gives a replica the primary's ARN with its own region ("The ARN for a
replicated secret is the same as the primary secret except for the Region", Secrets Manager
User Guide, "Replicate secrets across Regions"). The helper does not discover replicas: the
workload names the regions (``replica_regions``, the stack's ``ServiceTokenReplicaRegions``),
so that no read is made to a region without one (each would be a failed, logged call). When a
replica read fails, or the replica is behind the primary (``fallback``), the primary alone is
read for ``REPLICA_RETRY_SECONDS``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from cmstoken.aws.secret_lookup import secret_arn
from cmstoken.core.clock import Clock
from cmstoken.core.errors import ConfigurationError

# After a failed replica read, or one behind the primary, the primary alone is read for this long.
REPLICA_RETRY_SECONDS = 300.0
# An AWS region name (us-east-1, ap-southeast-2, us-gov-west-1).
REGION_PATTERN = r"[a-z]{2}(-[a-z]+)+-\d{1,2}"
_REGION = re.compile(REGION_PATTERN)


@dataclass(frozen=True)
class Target:
    """One place to read the secret: a region and the secret's id there."""

    region: str | None
    secret_id: str
    replica: bool = False


def replica_arn(arn: str, region: str) -> str:
    """The ARN of ``arn``'s replica in ``region``: the same ARN with that region."""
    parts = arn.split(":", 6)
    parts[3] = region
    return ":".join(parts)


def region_names(regions: Iterable[str]) -> tuple[str, ...]:
    """The regions, stripped, empty ones left out; ``ConfigurationError`` for anything but
    region names."""
    found = tuple(region.strip() for region in regions if region.strip())
    for region in found:
        if not _REGION.fullmatch(region):
            raise ConfigurationError(f"replica_regions: {region!r} is not an AWS region name")
    return found


def checked_regions(secret_id: str, regions: Iterable[str]) -> tuple[str, ...]:
    """The replica regions of ``secret_id`` (``region_names``); ``ConfigurationError`` for
    regions without the secret's ARN too (a replica is found by its ARN)."""
    found = region_names(regions)
    if found and secret_arn(secret_id) is None:
        raise ConfigurationError(
            "replica_regions needs the secret's full ARN (the stack's ServiceTokenSecretArn "
            f"output), not {secret_id!r}"
        )
    return found


class Targets:
    """The places to read ``secret_id`` from a caller in ``caller_region``, best first: its
    own region's replica (when ``regions``, from ``checked_regions``, lists that region), then
    the primary. Thread-safe."""

    def __init__(
        self, secret_id: str, regions: tuple[str, ...], caller_region: str | None, clock: Clock
    ) -> None:
        arn = secret_arn(secret_id)
        self.primary = Target(arn.region if arn else caller_region, secret_id)
        self.replica: Target | None = None
        if arn is not None and caller_region in regions and caller_region != arn.region:
            self.replica = Target(caller_region, replica_arn(secret_id, caller_region), True)
        self._clock = clock
        self._skip_replica_until = 0.0
        self._lock = threading.Lock()

    def order(self) -> list[Target]:
        """Where to read now, best first."""
        replica = self.replica_to_read()
        return [self.primary] if replica is None else [replica, self.primary]

    def replica_to_read(self) -> Target | None:
        """The replica, unless there is none or it is resting."""
        with self._lock:
            resting = self._clock.now() < self._skip_replica_until
        return None if resting else self.replica

    def rest_replica(self) -> None:
        """A replica read failed or was behind: read the primary alone for
        ``REPLICA_RETRY_SECONDS``."""
        with self._lock:
            self._skip_replica_until = self._clock.now() + REPLICA_RETRY_SECONDS
