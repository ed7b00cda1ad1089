"""A local stand-in for a deployed stack: moto's Secrets Manager, the emulator, the handlers."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from cmsemu import Emulator
from cmstoken import runtime
from cmstoken.aws.documents import (
    STATUS_ACTIVE,
    RefreshCredential,
    RefreshSecret,
    ServiceTokenDocument,
)
from cmstoken.core.errors import DocumentError
from cmstoken.core.redaction import fingerprint
from cmstoken.upstream.service import ServiceClient
from support import EmulatorClock, load_handler

REFRESH_SECRET = "cmstoken/refresh-credential"
SERVICE_SECRET = "cmstoken/service-token"


@dataclass
class Stack:
    """A deployed stack, locally: moto's Secrets Manager, the emulator, the handlers."""

    emulator: Emulator
    clock: EmulatorClock
    secretsmanager: Any
    context_factory: Callable[[], Any]
    aws_calls: Counter[str] = field(default_factory=Counter)
    # Each secret version's value, once read: a version never changes, and the leak scans of a
    # property test's examples (one stack for all of them) would read every one again each time.
    version_texts: dict[tuple[str, str], str] = field(default_factory=dict, repr=False)

    def invoke(
        self,
        function: str,
        event: Any,
        *,
        remaining_ms: int = 120_000,
        qualifier: str | None = None,
    ) -> Any:
        """Run a function's handler in-process with a fresh context (invoked through the
        alias ``qualifier``, when given)."""
        context = self.context_factory()
        context.remaining_millis = remaining_ms
        context.qualifier = qualifier
        return load_handler(function)(event, context)

    def refresh_document(self) -> RefreshSecret:
        text = self.secretsmanager.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"]
        return RefreshSecret.from_json(text)

    def service_document(self) -> ServiceTokenDocument:
        text = self.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
        return ServiceTokenDocument.from_json(text)

    def newest_refresh_token(self) -> str:
        credential = self.refresh_document().credential
        assert credential is not None
        return credential.refresh_token

    def seed(self, *, client_id: str | None = None) -> None:
        """Put the stack in the state a successful bootstrap leaves: an authorized credential
        and a verified service token, both written through the store."""
        tokens = self.emulator.issue_tokens(client_id=client_id)
        now = self.clock.now()
        settings = runtime.settings()
        credential = RefreshCredential(
            refresh_token=tokens["refresh_token"],
            client_id=client_id or self.emulator.config.client_id,
            issuer_url=self.emulator.issuer_url.rstrip("/"),
            status=STATUS_ACTIVE,
            authorized_at=now,
            refreshed_at=now,
            reauthorize_by=settings.reauthorize_by(now),
        )
        store = runtime.store()
        store.write(
            REFRESH_SECRET,
            RefreshSecret(credential=credential).to_json(),
            replacing=store.read(REFRESH_SECRET).version_id,
        )
        service = ServiceClient(self.emulator.base_url, clock=self.clock)
        token = service.exchange(tokens["access_token"], fallback_expires_at=now + 86400)
        document = ServiceTokenDocument(
            token=token.token,
            expires_at=token.expires_at,
            api_url=service.api_url,
            issued_at=now,
            refreshed_at=now,
            reauthorize_by=credential.reauthorize_by,
            min_refresh_interval_seconds=settings.min_refresh_interval_seconds,
        )
        store.write(
            SERVICE_SECRET, document.to_json(), replacing=store.read(SERVICE_SECRET).version_id
        )
        self.aws_calls.clear()

    def published_token_works(self) -> bool:
        return self.emulator.service_token_valid(self.service_document().token)


def not_at_risk(stored: RefreshSecret) -> bool:
    """Whether no lease in ``stored`` is over its stored refresh token: none, or one that
    presents a token no longer stored (a refresh whose answer was stored), which lapses by
    itself and holds no later run back."""
    lease, credential = stored.lease, stored.credential
    return (
        lease is None
        or credential is None
        or lease.presents != fingerprint(credential.refresh_token)
    )


def secret_values(stack: Stack) -> list[str]:
    """Every secret value the stack's secrets ever held (all versions), for leak scans."""
    values = []
    for secret_id in (REFRESH_SECRET, SERVICE_SECRET):
        versions = stack.secretsmanager.list_secret_version_ids(SecretId=secret_id)["Versions"]
        for version in versions:
            seen = (secret_id, version["VersionId"])
            if seen not in stack.version_texts:
                stack.version_texts[seen] = stack.secretsmanager.get_secret_value(
                    SecretId=secret_id, VersionId=version["VersionId"]
                )["SecretString"]
            document = json.loads(stack.version_texts[seen])
            # the document itself, and a new authorization waiting for its verification
            for section in (document, document.get("candidate") or {}):
                for key in ("refresh_token", "token"):
                    if isinstance(section.get(key), str):
                        values.append(section[key])
                raw = section.get("raw_access_token")
                if isinstance(raw, dict):
                    values.append(raw["token"])
    return values


def approve_pending(stack: Stack) -> str:
    """Approve the pending authorization's user code at the emulator; returns the code."""
    pending = stack.refresh_document().pending
    assert pending is not None
    stack.emulator.approve(pending.user_code)
    return pending.user_code


def refuse_rotation_writes(code: str | None, times: int, *, after: int = 0) -> dict[str, int]:
    """Fail the writes that store a refresh's answer (``times`` of them; ``code`` None: a local
    document error instead of an AWS error), after letting ``after`` such writes through (the
    claim, when the document already holds a raw access token)."""
    left = {"left": times, "through": after}

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if '"raw_access_token"' not in params.get("SecretString", ""):
            return
        if left["through"]:
            left["through"] -= 1
            return
        if left["left"]:
            left["left"] -= 1
            if code is None:
                raise DocumentError("refresh credential: cannot be written")
            raise ClientError({"Error": {"Code": code, "Message": "refused"}}, "PutSecretValue")

    runtime.store().client.meta.events.register(
        "provide-client-params.secrets-manager.PutSecretValue", refuse
    )
    return left


def record_secret_writes(monkeypatch: Any) -> list[str]:
    """The secret id of every Secrets Manager write from now on, in order."""
    from cmstoken.aws.secrets import SecretStore

    writes: list[str] = []
    write = SecretStore.write

    def record(self: SecretStore, secret_id: str, text: str, **kwargs: Any) -> str:
        writes.append(secret_id)
        return write(self, secret_id, text, **kwargs)

    monkeypatch.setattr(SecretStore, "write", record)
    return writes


def refresh_request_queue(
    *, bus: str = "default", pattern: dict[str, Any] | None = None, region: str | None = None
) -> tuple[Any, str]:
    """An SQS queue that receives the events on ``bus`` (which must exist) that ``pattern``
    matches, by default every ``Service Token Refresh Requested`` event (standing in for the
    rotator's rule): the SQS client and the queue's URL. ``region``: the session's unless named."""
    import boto3

    from cmstoken.core.triggers import REFRESH_REQUESTED

    sqs = boto3.client("sqs", region_name=region)
    events = boto3.client("events", region_name=region)
    queue_url = sqs.create_queue(QueueName="refresh-requests")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(
        Name="refresh-requested",
        EventBusName=bus,
        EventPattern=json.dumps(pattern or {"detail-type": [REFRESH_REQUESTED]}),
    )
    events.put_targets(
        Rule="refresh-requested", EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn}]
    )
    return sqs, queue_url
