"""The consumer account's check (``cmstoken-admin check-consumer``): what it can do with a
stack's secrets, from its side (issue 22, item 7), through the helper's own reading. One line
per check, ``ok``, ``FAIL`` (with what to fix) or
``skip``; never a token.

- ``read``, ``decrypt``, ``token``, for the primary and each replica region: ``GetSecretValue``
  through the consumer helper's own reading, so its three refusals apart (the policies, the
  key, not found); the token's fields parse and it has not expired. One call answers all
  three: a key's refusal means the policies let the caller through.
- ``replica``, for each replica region: its token against the primary's (their ``issued_at``,
  never the tokens). A replica behind the primary fails, with how far behind and the
  ``describe-secret`` command that shows why (replication that fails keeps the old versions in
  the replica's region, and the helper then reads the primary); ``skip`` when either token was
  not read.
- ``refresh request``: a real ``PutEvents`` on the stack's bus, only with
  ``--send-refresh-request`` (PutEvents has no dry run, and a request forces a rotation unless
  the stack refreshed within its minimum interval); otherwise ``skip``.
- ``refresh credential``: ``GetSecretValue`` on it must be refused by the policies; a value,
  or a refusal by its key alone, is a failure, and so is a secret that is not there (nothing
  is proven then). A value read is dropped unseen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cmstoken.aws.documents import STATUS_ACTIVE
from cmstoken.aws.refresh_requests import bus_region, request_refresh
from cmstoken.aws.secret_lookup import secret_arn
from cmstoken.aws.secrets import SecretStore
from cmstoken.consumer import errors as reasons
from cmstoken.consumer.errors import ConsumerError
from cmstoken.consumer.reading import read_document
from cmstoken.consumer.regions import replica_arn
from cmstoken.consumer.staleness import behind, lag
from cmstoken.core.clock import Clock, to_iso
from cmstoken.core.errors import (
    ConfigurationError,
    DocumentError,
    EventBusAccessError,
    EventBusError,
    EventBusUnavailableError,
    StoreError,
    StoreKeyError,
    StoreUnavailableError,
)
from cmstoken.core.triggers import CONSUMER_SOURCE, REFRESH_REQUESTED

if TYPE_CHECKING:
    from cmstoken.aws.documents import ServiceTokenDocument

OK, FAIL, SKIP = "ok", "FAIL", "skip"

# A client of a region, for a service: the command's session, or a test's.
Clients = Callable[[str, str], Any]


@dataclass(frozen=True)
class Line:
    """One check's outcome."""

    status: str
    check: str
    text: str

    def __str__(self) -> str:
        return f"{self.status:<4} {self.check}: {self.text}"


@dataclass(frozen=True)
class ConsumerCheck:
    """What to check: the service token's ARN and replica regions, the stack's bus (and
    whether to send a real request on it), the refresh credential's ARN."""

    secret_arn: str
    refresh_credential_arn: str
    replica_regions: tuple[str, ...] = ()
    bus_arn: str | None = None
    send_refresh_request: bool = False

    @property
    def region(self) -> str:
        """The secret's region (its ARN's): where the primary is read."""
        arn = secret_arn(self.secret_arn)
        if arn is None:
            raise ConfigurationError(f"{self.secret_arn!r} is not a secret's full ARN")
        return arn.region


def run_checks(check: ConsumerCheck, clients: Clients, session: Any, clock: Clock) -> list[Line]:
    """Every check's line, in order (``session``: the credentials' session, for messages)."""
    store = SecretStore(clients("secretsmanager", check.region))
    primary, lines = _read(check.secret_arn, check.region, store, session, clock, None)
    for region in check.replica_regions:
        arn = replica_arn(check.secret_arn, region)
        store = SecretStore(clients("secretsmanager", region))
        replica, replica_lines = _read(arn, region, store, session, clock, primary)
        lines += [*replica_lines, _replica(check, region, replica, primary, clock)]
    if check.bus_arn:
        lines.append(_refresh_request(check, clients, clock))
    lines.append(_refresh_credential(check.refresh_credential_arn, clients))
    return lines


# --- the service token --------------------------------------------------------------------

# The reasons of a read that stopped before anything was decrypted.
_NOT_READ = frozenset(
    {reasons.ACCESS_DENIED, reasons.SECRET_NOT_FOUND, reasons.UNAVAILABLE, reasons.UNREADABLE}
)


def _read(
    arn: str,
    region: str,
    store: SecretStore,
    session: Any,
    clock: Clock,
    primary: ServiceTokenDocument | None,
) -> tuple[ServiceTokenDocument | None, list[Line]]:
    """The document read in ``region`` (``None`` when none was) and its three lines;
    ``primary``: the primary's document, for a replica."""
    try:
        document = read_document(store, arn, session)
    except ConsumerError as exc:
        return None, _read_failed(exc, region)
    return document, [
        Line(OK, f"read {region}", f"GetSecretValue allowed on {arn}"),
        Line(OK, f"decrypt {region}", "Secrets Manager decrypted it with the secret's key"),
        _token(document, region, clock, primary),
    ]


def _read_failed(exc: ConsumerError, region: str) -> list[Line]:
    read, decrypt, token = f"read {region}", f"decrypt {region}", f"token {region}"
    if isinstance(exc.__cause__, DocumentError):  # read and decrypted, but no token document
        return [
            Line(OK, read, "GetSecretValue allowed"),
            Line(OK, decrypt, "Secrets Manager decrypted it with the secret's key"),
            Line(FAIL, token, str(exc)),
        ]
    if exc.reason in _NOT_READ:
        return [
            Line(FAIL, read, str(exc)),
            Line(SKIP, decrypt, "not reached"),
            Line(SKIP, token, "not reached"),
        ]
    if exc.reason == reasons.CANNOT_DECRYPT:
        return [
            Line(OK, read, "GetSecretValue allowed (the key refused, after the policies)"),
            Line(FAIL, decrypt, str(exc)),
            Line(SKIP, token, "not reached"),
        ]
    return [  # not bootstrapped: the secret is there and readable, and has no value
        Line(OK, read, "GetSecretValue allowed"),
        Line(SKIP, decrypt, "no value to decrypt"),
        Line(FAIL, token, str(exc)),
    ]


def _token(
    document: ServiceTokenDocument,
    region: str,
    clock: Clock,
    primary: ServiceTokenDocument | None,
) -> Line:
    check = f"token {region}"
    expires = to_iso(document.expires_at)
    now = clock.now()
    if now >= document.expires_at and primary is not None and behind(document, primary, now):
        return Line(
            FAIL,
            check,
            f"this replica's token expired at {expires} and the primary holds a newer one: "
            f"the replica is behind (replica {region}, below); the helper reads the primary "
            "instead",
        )
    if now >= document.expires_at:
        return Line(
            FAIL,
            check,
            f"the published token expired at {expires}: the stack's rotator is not replacing "
            "it; tell the stack's operator (cmstoken-admin --stack NAME status)",
        )
    note = ""
    if document.credential_status != STATUS_ACTIVE:
        note = "; the stack's credential needs reauthorization: tell its operator"
    return Line(OK, check, f"a token for {document.api_url}, expires {expires}{note}")


def _replica(
    check: ConsumerCheck,
    region: str,
    replica: ServiceTokenDocument | None,
    primary: ServiceTokenDocument | None,
    clock: Clock,
) -> Line:
    name = f"replica {region}"
    if replica is None or primary is None:
        which = "the primary's" if primary is None else "this replica's"
        return Line(SKIP, name, f"not compared: {which} token was not read")
    issued = to_iso(replica.issued_at)
    if replica.token == primary.token:
        return Line(OK, name, f"holds the primary's token (issued at {issued})")
    if not behind(replica, primary, clock.now()):
        return Line(OK, name, f"holds a token issued at {issued}, no older than the primary's")
    describe = (
        f"aws secretsmanager describe-secret --secret-id {check.secret_arn} "
        f"--region {check.region} --query ReplicationStatus"
    )
    return Line(
        FAIL,
        name,
        f"{lag(primary.issued_at - replica.issued_at)} behind the primary: its token was "
        f"issued at {issued}, the primary's at {to_iso(primary.issued_at)}; replication to "
        f"{region} has failed or not caught up yet (the helper reads the primary meanwhile): "
        f"`{describe}` shows its Status and StatusMessage (InProgress: check again in a "
        "minute; Failed: the stack's operator fixes what StatusMessage names, see "
        "Troubleshoot AWS Secrets Manager replication)",
    )


# --- refresh requests -----------------------------------------------------------------------


def _refresh_request(check: ConsumerCheck, clients: Clients, clock: Clock) -> Line:
    name = "refresh request"
    bus = str(check.bus_arn)
    if not check.send_refresh_request:
        return Line(
            SKIP,
            name,
            f"not sent to {bus}: PutEvents has no dry run; --send-refresh-request sends one "
            "real request (it forces a rotation unless the stack refreshed within its minimum "
            "interval)",
        )
    region = bus_region(bus) or ""
    detail = {
        "reason": "consumer_check",
        "secret_id": check.secret_arn,
        "requested_at": to_iso(clock.now()),
    }
    try:
        event_id = request_refresh(
            clients("events", region), source=CONSUMER_SOURCE, detail=detail, bus=bus
        )
    except EventBusError as exc:
        if isinstance(exc, EventBusAccessError):
            fix = (
                f"this principal needs events:PutEvents on it for source {CONSUMER_SOURCE} and "
                f"detail-type {REFRESH_REQUESTED} (consumer.yaml with RefreshRequestBusArn), and "
                "the bus's policy must allow this account (the stack's ConsumerAccountIds or "
                "ConsumerOrganizationId)"
            )
        elif isinstance(exc, EventBusUnavailableError):
            fix = "retry later"
        else:
            fix = "check the bus ARN (the stack's RefreshRequestBusArn output)"
        return Line(FAIL, name, f"{bus} did not take it ({exc}): {fix}")
    return Line(OK, name, f"{bus} took it (event {event_id}); the rotator answers it")


# --- the refresh credential ---------------------------------------------------------------


def _refresh_credential(arn: str, clients: Clients) -> Line:
    name = "refresh credential"
    parsed = secret_arn(arn)
    store = SecretStore(clients("secretsmanager", parsed.region if parsed else ""))
    try:
        value = store.read(arn)
    except StoreKeyError as exc:
        return Line(
            FAIL,
            name,
            f"only its KMS key refused ({exc.code}): its policies let this principal read "
            f"{arn}; the refresh credential must be readable by the stack's functions only "
            "(remove the grant from this principal's policies, and any statement for it in "
            "the secret's resource policy)",
        )
    except StoreUnavailableError as exc:
        return Line(FAIL, name, f"could not be checked ({exc}): retry later")
    except StoreError as exc:
        if exc.code == "AccessDeniedException":
            return Line(OK, name, f"GetSecretValue denied on {arn}, as it must be")
        return Line(FAIL, name, f"could not be checked ({exc})")
    if value.text is None and value.version_id is None:
        return Line(
            FAIL,
            name,
            f"{arn} was not found, so nothing is proven: give the stack's "
            "RefreshCredentialSecretArn output (its full ARN)",
        )
    del value  # never shown, never kept
    return Line(
        FAIL,
        name,
        f"this principal can read {arn}: remove the grant from its policies; the refresh "
        "credential must be readable by the stack's functions only",
    )
