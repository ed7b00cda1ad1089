"""Identity provider endpoints: device authorization and the token endpoint (both grants)."""

from cmsemu.request import Request
from cmsemu.responses import OAuthError, Response, json_response
from cmsemu.state import State

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
REFRESH_GRANT = "refresh_token"


def _required(form: dict[str, str], *names: str) -> list[str]:
    for name in names:
        if not form.get(name):
            raise OAuthError(400, "invalid_request", f"Missing required parameter: {name}")
    return [form[name] for name in names]


def _known_client(state: State, client_id: str) -> None:
    if client_id not in state.client_ids():
        raise OAuthError(401, "invalid_client", "Unknown client.")


def device_code(state: State, request: Request) -> Response:
    """POST /oauth/device/code: issue a device code and user code."""
    form = request.form()
    (client_id,) = _required(form, "client_id")
    _known_client(state, client_id)
    scope, audience = _required(form, "scope", "audience")
    if audience != state.urls.api_url:
        raise OAuthError(403, "access_denied", f"Service not found: {audience}")
    config = state.config
    code = state.devices.issue(
        client_id,
        scope,
        expires_at=state.now() + config.device_code_lifetime,
        interval=config.poll_interval,
        approved=config.auto_approve,
    )
    verification_uri = state.urls.verification_uri
    return json_response(
        200,
        {
            "device_code": code.device_code,
            "user_code": code.user_code,
            "verification_uri": verification_uri,
            "verification_uri_complete": f"{verification_uri}?user_code={code.user_code}",
            "expires_in": config.device_code_lifetime,
            "interval": config.poll_interval,
        },
    )


def token(state: State, request: Request) -> Response:
    """POST /oauth/token: the device code grant and the refresh token grant.

    A client id the provider does not know gets 401 invalid_client; a refresh by a known
    client that is not the family's gets 403 invalid_grant, like an unknown token.
    """
    form = request.form()
    grant_type = form.get("grant_type")
    if grant_type == DEVICE_GRANT:
        code_value, client_id = _required(form, "device_code", "client_id")
        code = state.devices.poll(code_value, client_id, state.now())
        return json_response(200, state.start_family(code.client_id, code.scope, code.subject))
    if grant_type == REFRESH_GRANT:
        client_id, refresh_token = _required(form, "client_id", "refresh_token")
        _known_client(state, client_id)
        family = state.families.rotate(refresh_token, client_id, state.now(), state.config)
        body = state.token_response(
            family.client_id, state.config.refresh_scope, family.newest, family.subject
        )
        return json_response(200, body)
    if not grant_type:
        raise OAuthError(400, "invalid_request", "Missing required parameter: grant_type")
    raise OAuthError(400, "unsupported_grant_type", f"Unsupported grant type: {grant_type}")
