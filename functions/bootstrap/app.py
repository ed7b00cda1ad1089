"""Bootstrap function: the one-time device authorization inside AWS (SPEC section 3)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cmstoken import runtime
from cmstoken.bootstrap import BootstrapRequest, results
from cmstoken.bootstrap.request import through_links
from cmstoken.core.errors import CmsTokenError
from cmstoken.observability import (
    logger,
    metrics,
    record_authorized,
    record_bootstrap,
    tag_version,
)


@metrics.log_metrics
@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """``{"action": "start" | "poll" | "status"}``; failures of start and poll are results.
    Through the links' alias, a request may ask only what a link may (``BootstrapRequest``)."""
    tag_version()
    deadline = runtime.CLOCK.now() + context.get_remaining_time_in_millis() / 1000
    try:
        via_links = through_links(context.invoked_function_arn)
        request = BootstrapRequest.from_event(event, via_links=via_links)
    except CmsTokenError:
        record_bootstrap("failed")
        raise
    bootstrapper = runtime.bootstrapper()
    try:
        result = bootstrapper.handle(request, deadline=deadline)
    except CmsTokenError as exc:
        record_bootstrap("failed")
        if request.action == "status":
            raise
        logger.error("bootstrap failed", extra={"action": request.action, "error": str(exc)})
        return results.failed(exc)
    status = str(result.get("status", "reported"))
    record_bootstrap(status)
    if status == "authorized":
        record_authorized(bootstrapper.vault.published, runtime.CLOCK)
    return result
