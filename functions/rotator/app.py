"""Rotator function: keeps a fresh, verified service token published (SPEC sections 3 and 4)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cmstoken import runtime
from cmstoken.core.errors import CmsTokenError
from cmstoken.core.triggers import RotationRequest
from cmstoken.observability import logger, metrics, record_run, tag_version
from cmstoken.rotation.rotator import Rotator


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """Scheduled run, ``{"force": true}``, or a ``Service Token Refresh Requested`` event."""
    tag_version()
    deadline = runtime.CLOCK.now() + context.get_remaining_time_in_millis() / 1000
    rotator: Rotator | None = None
    outcome: str | None = None
    error: BaseException | None = None
    try:
        request = RotationRequest.from_event(event)
        rotator = runtime.rotator(owner=context.aws_request_id)
        result = rotator.run(request, deadline=deadline)
        outcome = result.outcome
    except CmsTokenError as exc:
        error = exc
        logger.error("rotation failed", extra={"error": str(exc), "kind": type(exc).__name__})
        raise
    except Exception as exc:
        # Not the project's error: its message may quote data, so only its type is logged.
        error = exc
        logger.error("rotation failed unexpectedly", extra={"kind": type(exc).__name__})
        raise
    finally:
        record_run(outcome, error, rotator, runtime.CLOCK)
    return result.to_dict()
