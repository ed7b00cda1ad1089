"""Powertools Logger and Metrics, created once and shared by the handlers.

The library logs through the standard ``cmstoken.*`` loggers; here they are given the Powertools
handler, so that every line is structured JSON with the invocation's context. Metrics use the
embedded metric format, namespace from ``POWERTOOLS_METRICS_NAMESPACE``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from cmstoken import __version__
from cmstoken.aws.documents import STATUS_ACTIVE, RefreshCredential, ServiceTokenDocument
from cmstoken.core.clock import Clock
from cmstoken.core.errors import (
    CredentialLostError,
    NotBootstrappedError,
    ReauthorizationRequiredError,
)

if TYPE_CHECKING:
    from cmstoken.rotation.rotator import Rotator

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
# Once per cold start: which release this container runs.
logger.info("cold start", extra={"version": __version__})


def tag_version() -> None:
    """Put the release on this invocation's metric document, as metadata: a top-level field
    of the EMF record, not a dimension, so the alarms' dimension sets do not change."""
    metrics.add_metadata(key="version", value=__version__)


def _count(name: str, value: bool) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1 if value else 0)


def record_run(
    outcome: str | None, error: BaseException | None, rotator: Rotator | None, clock: Clock
) -> None:
    """Everything a rotator run reports, on every run that gets to report (template.yaml's
    alarms read these):

    - the outcome counters, exactly one of them 1: ``RotationSucceeded``, ``RotationSkipped``,
      ``RotationFailed`` (any other failure, including an exception that is not the project's),
      ``ReauthorizationRequired`` and ``NotBootstrapped`` (no working credential: a person must
      authorize, which no retry can fix);
    - ``AuthorizationRequired``: 1 while a person must authorize, 0 while the credential is
      active, absent when the run failed before it learned which;
    - ``CredentialLost``: 1 when the run's refresh succeeded but its rotated refresh token could
      not be stored (``CredentialLostError``), 0 when a rotation stored and published, absent
      otherwise (the loss is an incident until a rotation or a bootstrap succeeds);
    - the freshness gauges (``record_freshness``), except the service token's expiry while
      authorization is required: that incident is ``AuthorizationRequired``'s alone.
    """
    # Loaded by the rotator only (the other handlers import this module for its logger).
    from cmstoken.rotation.decisions import (
        OUTCOME_REAUTHORIZATION_REQUIRED,
        OUTCOME_ROTATED,
        OUTCOME_SKIPPED,
    )

    needs_person = outcome == OUTCOME_REAUTHORIZATION_REQUIRED or isinstance(
        error, ReauthorizationRequiredError | NotBootstrappedError
    )
    _count("RotationSucceeded", outcome == OUTCOME_ROTATED)
    _count("RotationSkipped", outcome == OUTCOME_SKIPPED)
    _count("RotationFailed", error is not None and not needs_person)
    _count(
        "ReauthorizationRequired",
        outcome == OUTCOME_REAUTHORIZATION_REQUIRED
        or isinstance(error, ReauthorizationRequiredError),
    )
    _count("NotBootstrapped", isinstance(error, NotBootstrappedError))
    lost = isinstance(error, CredentialLostError)
    if lost or outcome == OUTCOME_ROTATED:
        _count("CredentialLost", lost)
    status = _credential_status(rotator)
    required = needs_person or (status is not None and status != STATUS_ACTIVE)
    if required or status is not None:
        _count("AuthorizationRequired", required)
    if rotator is not None:
        record_freshness(rotator.published, rotator.credential, clock, token_expiry=not required)


def _credential_status(rotator: Rotator | None) -> str | None:
    """The credential's status as the run saw it: from the credential when it was read, else
    from the published document's copy of it."""
    if rotator is None:
        return None
    if rotator.credential is not None:
        return rotator.credential.status
    if rotator.published is not None:
        return rotator.published.credential_status
    return None


def record_authorized(published: ServiceTokenDocument | None, clock: Clock) -> None:
    """A bootstrap that authorized the stack: authorization is no longer required, and the new
    token's freshness is known at once, and a lost credential is replaced (the alarms clear
    without waiting for a rotator run)."""
    _count("AuthorizationRequired", False)
    _count("CredentialLost", False)
    record_freshness(published, None, clock)


def record_freshness(
    published: ServiceTokenDocument | None,
    credential: RefreshCredential | None,
    clock: Clock,
    *,
    token_expiry: bool = True,
) -> None:
    """Gauges from what a run saw (the credential when it was read, else the published
    document's copy of its metadata): seconds to the service token's expiry (unless
    ``token_expiry`` is false) and to the assumed end of the refresh family, and the ages of
    the refresh token and of the family."""
    now = clock.now()

    def known(field: str) -> float | None:
        for source in (credential, published):
            value = getattr(source, field, None) if source is not None else None
            if value is not None:
                return float(value)
        return None

    expires_at = published.expires_at if published is not None and token_expiry else None
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
