"""Powertools Logger and Metrics, created once and shared by the handlers.

The library logs through the standard ``cmstoken.*`` loggers; here they are given the Powertools
handler, so that every line is structured JSON with the invocation's context. Metrics use the
embedded metric format, namespace from ``POWERTOOLS_METRICS_NAMESPACE``.
"""

from __future__ import annotations

import logging

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from .clock import Clock
from .errors import CmsTokenError, NotBootstrappedError, ReauthorizationRequiredError
from .rotation import OUTCOME_REAUTHORIZATION_REQUIRED, OUTCOME_ROTATED, OUTCOME_SKIPPED, Rotator

logger = Logger()
metrics = Metrics()


def route_library_logs() -> None:
    """Send the library's ``cmstoken.*`` log records through the Powertools handler."""
    library = logging.getLogger("cmstoken")
    handler = logger.registered_handler
    if library.name == logger.name or handler in library.handlers:
        return  # the Powertools logger is the library's logger, or already routed
    library.handlers = [handler]
    library.setLevel(logger.log_level)
    library.propagate = False


route_library_logs()


def _count(name: str, value: bool) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1 if value else 0)


def record_rotation(outcome: str | None, error: CmsTokenError | None) -> None:
    """The run's outcome counters: exactly one of them is 1 on every run."""
    _count("RotationSucceeded", outcome == OUTCOME_ROTATED)
    _count("RotationSkipped", outcome == OUTCOME_SKIPPED)
    _count("RotationFailed", error is not None)
    _count(
        "ReauthorizationRequired",
        outcome == OUTCOME_REAUTHORIZATION_REQUIRED
        or isinstance(error, ReauthorizationRequiredError),
    )
    _count("NotBootstrapped", isinstance(error, NotBootstrappedError))


def record_freshness(rotator: Rotator, clock: Clock) -> None:
    """Gauges from what the run saw (the credential when it was read, else the published
    document's copy of its metadata): seconds to the service token's expiry and to the assumed
    end of the refresh family, and the ages of the refresh token and of the family."""
    now = clock.now()
    published, credential = rotator.published, rotator.credential

    def known(field: str) -> float | None:
        for source in (credential, published):
            value = getattr(source, field, None) if source is not None else None
            if value is not None:
                return float(value)
        return None

    expires_at = published.expires_at if published is not None else None
    reauthorize_by, refreshed_at, authorized_at = (
        known("reauthorize_by"),
        known("refreshed_at"),
        known("authorized_at"),
    )
    for name, seconds in (
        ("ServiceTokenSecondsToExpiry", None if expires_at is None else expires_at - now),
        ("SecondsUntilReauthorization", None if reauthorize_by is None else reauthorize_by - now),
        ("RefreshTokenAgeSeconds", None if refreshed_at is None else now - refreshed_at),
        ("RefreshFamilyAgeSeconds", None if authorized_at is None else now - authorized_at),
    ):
        if seconds is not None:
            metrics.add_metric(name=name, unit=MetricUnit.Seconds, value=round(seconds))


def record_upstream_latency(endpoint: str, elapsed_ms: float) -> None:
    """One upstream call's latency (``UpstreamLatency``, milliseconds); the endpoint is logged."""
    metrics.add_metric(name="UpstreamLatency", unit=MetricUnit.Milliseconds, value=elapsed_ms)
    logger.debug("upstream latency", extra={"endpoint": endpoint, "elapsed_ms": elapsed_ms})


def record_bootstrap(status: str) -> None:
    """The bootstrap's outcome counters (all 0 for a ``status`` report)."""
    _count("BootstrapAuthorized", status == "authorized")
    _count("BootstrapPending", status == "pending")
    _count("BootstrapFailed", status in ("failed", "expired", "denied"))
