"""What ``get-token`` prints on standard output: the tokens, in JSON (for jq) or plain text."""

from __future__ import annotations

import json
from dataclasses import dataclass

from cmstoken.upstream.models import RawTokens, ServiceToken

TOKEN_TYPE = "Bearer"  # noqa: S105 -- a token type, not a secret


@dataclass(frozen=True)
class Result:
    """What the command prints: the raw token response, the service token (absent when the
    exchange failed), the scope to report, and the refresh file that holds the new refresh
    token (``--refresh-file``: its path is printed in the token's place)."""

    tokens: RawTokens
    scope: str
    service_token: ServiceToken | None = None
    refresh_token_file: str | None = None


def render(result: Result, output_format: str, *, now: float) -> str:
    """The standard output text (newline-terminated). Without a service token (failed
    exchange) only the refresh token (or its file) and scope are rendered, so that they are not
    lost. With a refresh file, ``refresh_token_file`` (its path) replaces ``refresh_token``."""
    fields: dict[str, str | int] = {}
    if result.service_token is not None:
        fields["access_token"] = result.service_token.token
    if result.refresh_token_file is not None:
        fields["refresh_token_file"] = result.refresh_token_file
    else:
        fields["refresh_token"] = result.tokens.refresh_token
    if output_format == "plain":
        if result.service_token is not None:
            fields["expires_in"] = _seconds_left(result.service_token, now)
        return "".join(f"{key}: {value}\n" for key, value in fields.items())
    fields["scope"] = result.scope
    if result.service_token is not None:
        fields["expires_in"] = _seconds_left(result.service_token, now)
        fields["token_type"] = TOKEN_TYPE
    return json.dumps(fields) + "\n"


def _seconds_left(service_token: ServiceToken, now: float) -> int:
    return max(0, int(service_token.expires_at - now))
