"""Re-authorization links function: its function URL (the link pages), and the notices (the
stack's alarms going off, the daily reminder, the outcome of a background poll)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from cmstoken import runtime
from cmstoken.links.events import read_event
from cmstoken.observability import logger, tag_version


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: LambdaContext) -> Any:
    """A function URL request (its answer), or a notice to decide (what was done)."""
    tag_version()
    request = read_event(event)
    return runtime.links(context.invoked_function_arn).handle(request)
