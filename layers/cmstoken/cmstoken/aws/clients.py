"""boto3 clients, built the same way everywhere: on first use (so that importing the package does
not import boto3), honouring ``AWS_ENDPOINT_URL``, with short timeouts and standard retries; and
the account of a session's credentials, when they carry it."""

from __future__ import annotations

from typing import Any


def session() -> Any:
    """A boto3 session of its own (callers annotate it): boto3 sessions are not thread-safe, so
    code that may run in a workload's threads makes its clients from its own session instead
    of boto3's default one, which the workload may be using at the same moment."""
    import boto3

    return boto3.session.Session()


def credentials_account(session: Any) -> str | None:
    """The account id of ``session``'s credentials when they carry one (``AWS_ACCOUNT_ID``, a
    profile's ``aws_account_id``, SSO or assumed-role credentials): already resolved, no call.
    ``None`` otherwise, also when the credentials cannot be resolved (a diagnosis that uses it
    must never hide the error it explains)."""
    from botocore.exceptions import BotoCoreError

    try:
        credentials = session.get_credentials()
        account = getattr(credentials, "account_id", None)
    except BotoCoreError:
        return None
    return account if isinstance(account, str) and account else None


def client(
    service_name: str,
    *,
    session: Any = None,
    region_name: str | None = None,
    connect_timeout: float = 3,
    read_timeout: float = 5,
    max_attempts: int = 3,
) -> Any:
    """A boto3 client for ``service_name`` (callers annotate it with its stub type), from
    ``session`` when given, else from boto3's default session, in ``region_name`` (default:
    the session's region). ``max_attempts`` counts the first call (1: botocore does not
    retry; the caller does)."""
    import boto3
    from botocore.config import Config

    make: Any = boto3.client if session is None else session.client
    return make(
        service_name,
        region_name=region_name,
        config=Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
        ),
    )


# Answers that say "try again": throttling and AWS-side trouble, whatever the service.
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "InternalServiceError",
        "InternalServerError",
        "InternalFailure",
        "ServiceException",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


def failure(exc: Exception, transient: frozenset[str] = TRANSIENT_CODES) -> tuple[str, bool]:
    """What a failed call says: its AWS error code (botocore's exception name when no answer
    came) and whether the same call may succeed later (no answer, a 5xx, or a code in
    ``transient``)."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return type(exc).__name__, True
    code = str(exc.response.get("Error", {}).get("Code") or "Unknown")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return code, code in transient or status >= 500
