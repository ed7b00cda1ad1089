"""boto3 clients, built the same way everywhere: on first use (so that importing the package does
not import boto3), honouring ``AWS_ENDPOINT_URL``, with short timeouts and standard retries."""

from __future__ import annotations

from typing import Any


def session() -> Any:
    """A boto3 session of its own (callers annotate it): boto3 sessions are not thread-safe, so
    code that may run in a workload's threads makes its clients from its own session instead
    of boto3's default one, which the workload may be using at the same moment."""
    import boto3

    return boto3.session.Session()


def client(
    service_name: str,
    *,
    session: Any = None,
    connect_timeout: float = 3,
    read_timeout: float = 5,
    max_attempts: int = 3,
) -> Any:
    """A boto3 client for ``service_name`` (callers annotate it with its stub type), from
    ``session`` when given, else from boto3's default session. ``max_attempts`` counts the
    first call (1: botocore does not retry; the caller does)."""
    import boto3
    from botocore.config import Config

    make: Any = boto3.client if session is None else session.client
    return make(
        service_name,
        config=Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
        ),
    )
