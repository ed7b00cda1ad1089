"""The links' function: one request in, one answer out, through the portal of one stack."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cmstoken.links import web
from cmstoken.links.events import Outcome, Remind
from cmstoken.links.notifying import Notices
from cmstoken.links.portal import AwsPortal

logger = logging.getLogger(__name__)


@dataclass
class LinksApp:
    """``portal(url)`` gives the stack's portal with its function URL (``None``: look it up,
    for links in notices); ``now()`` the epoch second."""

    portal: Callable[[str | None], AwsPortal]
    warning_seconds: int
    now: Callable[[], int]

    def handle(self, request: web.Request | Remind | Outcome) -> Any:
        if isinstance(request, web.Request):
            return self.page(request)
        notices = Notices(self.portal(None), self.warning_seconds)
        if isinstance(request, Remind):
            done = notices.remind(self.now())
            logger.info("reminder", extra={"reason": request.reason, "done": done})
            return {"done": done}
        if request.error is not None:  # Lambda gave up on the poll: reported as failed
            logger.warning("the background poll failed", extra={"error": request.error})
        done = notices.outcome(request.result, self.now(), request.link)
        logger.info("poll outcome", extra={"done": done})
        return {"done": done}

    def page(self, request: web.Request) -> dict[str, Any]:
        """The page (``web.handle``), its status logged (never the link, which is in the
        path)."""
        answer = web.handle(request, self.portal(f"https://{request.domain}/"), self.now())
        logger.info("link page", extra={"method": request.method, "status": answer["statusCode"]})
        return answer
