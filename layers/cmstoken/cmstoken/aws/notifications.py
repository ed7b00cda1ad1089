"""Events on the default EventBridge bus for other systems to react to: ``Service Token Rotated``
and ``Reauthorization Required``. They carry metadata only, never a token."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from cmstoken.aws import clients
from cmstoken.core.clock import optional_iso

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient

logger = logging.getLogger(__name__)

SOURCE = "cmstoken"
SERVICE_TOKEN_ROTATED = "Service Token Rotated"  # noqa: S105 -- an event name
REAUTHORIZATION_REQUIRED = "Reauthorization Required"


class Notifier:
    """Sends the product's events. Best effort: a failure is logged, never raised, because the
    rotation it reports has already succeeded (or failed) for good."""

    def __init__(self, client: EventBridgeClient | None = None, *, source: str = SOURCE) -> None:
        self._client = client
        self.source = source

    @property
    def client(self) -> EventBridgeClient:
        """The EventBridge client, created on first use (it honours ``AWS_ENDPOINT_URL``)."""
        if self._client is None:
            self._client = clients.client("events")
        return self._client

    def rotated(
        self, *, secret_id: str, expires_at: float, refreshed_at: float, reason: str
    ) -> None:
        """A new, verified service token is published."""
        self._send(
            SERVICE_TOKEN_ROTATED,
            {
                "serviceTokenSecret": secret_id,
                "expiresAt": optional_iso(expires_at),
                "refreshedAt": optional_iso(refreshed_at),
                "reason": reason,
            },
        )

    def reauthorization_required(self, *, secret_id: str, authorized_at: float, error: str) -> None:
        """The refresh credential was refused: a person must run the bootstrap."""
        self._send(
            REAUTHORIZATION_REQUIRED,
            {
                "refreshCredentialSecret": secret_id,
                "authorizedAt": optional_iso(authorized_at),
                "error": error,
                "action": "run the bootstrap (cmstoken-admin --stack NAME bootstrap)",
            },
        )

    def _send(self, detail_type: str, detail: dict[str, Any]) -> None:
        try:
            answer = self.client.put_events(
                Entries=[
                    {
                        "Source": self.source,
                        "DetailType": detail_type,
                        "Detail": json.dumps(detail),
                    }
                ]
            )
        except Exception as exc:  # noqa: BLE001 -- best effort, see the class docstring
            logger.warning(
                "could not send event", extra={"detail_type": detail_type, "error": str(exc)}
            )
            return
        if answer.get("FailedEntryCount"):
            logger.warning("event was not accepted", extra={"detail_type": detail_type})
