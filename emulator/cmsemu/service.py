"""Service endpoints: provider information, the token exchange and the project listing."""

from cmsemu.request import Request
from cmsemu.responses import Response, json_response, service_error
from cmsemu.state import RAW_ACCESS, SERVICE, State


def provider(state: State, request: Request) -> Response:
    """GET /api/v3/auth/provider."""
    config = state.config
    return json_response(
        200,
        {
            "clientId": config.client_id,
            "freetrialClientId": config.freetrial_client_id,
            "issuerUri": state.urls.issuer_url,
            "scope": config.scope,
            "audience": state.urls.api_url,
        },
    )


def exchange(state: State, request: Request) -> Response:
    """POST /api/v3/auth/token: a raw access token for a service token."""
    style = state.config.service_error_style
    if request.media_type() != "application/json":
        return service_error(415, "content-type must be application/json", style)
    payload = request.json()
    raw = payload.get("token") if isinstance(payload, dict) else None
    claims = state.valid_claims(raw, RAW_ACCESS) if isinstance(raw, str) else None
    if claims is None:
        return service_error(500, "failed to get service token", style)
    return json_response(200, {"token": state.service_token(str(claims["sub"]))})


def projects(state: State, request: Request) -> Response:
    """GET /api/v3/projects: needs a valid service token."""
    config = state.config
    bearer = request.bearer()
    if bearer is None or state.valid_claims(bearer, SERVICE) is None:
        details = "missing token" if bearer is None else "invalid token"
        return service_error(config.refused_token_status, details, config.service_error_style)
    project = {
        "projectId": state.project_id,
        "projectName": "Emulated Project",
        "clusterCount": 2,
        "userCount": 3,
        "cloudProviders": [
            {"cloudProviderId": "aws", "cloudProviderName": "Amazon Web Services"},
            {"cloudProviderId": "gcp", "cloudProviderName": "Google Cloud"},
        ],
    }
    return json_response(
        200, {"data": [project]} if config.projects_envelope == "data" else project
    )
