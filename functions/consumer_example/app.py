"""Example consumer (deployed when DeployExampleConsumer is true): lists the projects with the
published service token, through the consumer helper."""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import requests
from aws_lambda_powertools.utilities.typing import LambdaContext

from cmstoken.consumer import ServiceTokenAuth, ServiceTokenProvider
from cmstoken.observability import logger
from cmstoken.upstream.models import parse_project_listing


@cache
def _session() -> tuple[ServiceTokenProvider, requests.Session]:
    """One provider (its token cache) and one pooled session per warm container."""
    provider = ServiceTokenProvider(os.environ["SERVICE_TOKEN_SECRET_ID"])
    session = requests.Session()
    session.auth = ServiceTokenAuth(provider)
    return provider, session


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    """Any event: returns the projects' ids and names."""
    provider, session = _session()
    response = session.get(f"{provider.api_url}/v3/projects", timeout=10)
    response.raise_for_status()
    projects = parse_project_listing(response.json())
    logger.info("listed projects", extra={"count": len(projects)})
    return {"projects": [{"projectId": p.project_id, "name": p.project_name} for p in projects]}
