"""boto3 clients, built the same way everywhere: on first use (so that importing the package does
not import boto3), honouring ``AWS_ENDPOINT_URL``, with short timeouts and standard retries."""

from __future__ import annotations

from typing import Any


def client(service_name: str) -> Any:
    """A boto3 client for ``service_name`` (callers annotate it with its stub type)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        service_name,  # type: ignore[call-overload]
        config=Config(
            connect_timeout=3,
            read_timeout=5,
            retries={"mode": "standard", "max_attempts": 3},
        ),
    )
