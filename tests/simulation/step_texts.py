"""A step's line in a trace (``Harness._record``): what an actor's model call did, told from the
models and the answer, and the facts the invariants read from it (``simulation.invariants``)."""

from __future__ import annotations

import functools
import json
from typing import Any

from cmstoken.aws.documents import RefreshSecret, ServiceTokenDocument
from cmstoken.aws.secrets import next_version_id
from simulation.invariants import label
from simulation.world import HOUR, REFRESH_SECRET, SERVICE_SECRET, World


def describe(
    world: World,
    start_at: float,
    name: str,
    action: str,
    call: tuple[str, str, float],
    answer: Any,
    error: Exception | None,
    before: str | None,
    log_size: int,
) -> tuple[str, dict[str, Any]]:
    """The line of actor ``name``'s ``action`` and its facts; ``call``: the fault injected, its
    tag in the line and the seconds slept; ``before``: the current version a read met, and
    ``log_size``: the upstream log's length before the call."""
    fault, tag, seconds = call
    when = f"t+{world.clock.now() - start_at:.1f}s"
    facts: dict[str, Any] = {}
    kind, _, target = action.partition(":")
    if kind == "clock.sleep":
        text = f"{name} sleeps {seconds:.2f} s"
    elif kind.startswith("secretsmanager."):
        secret = world.secretsmanager.secrets[
            REFRESH_SECRET if target == "credential" else SERVICE_SECRET
        ]
        versions = list(secret.versions)

        def vname(version: str | None) -> str:
            return f"v{versions.index(version) + 1}" if version in versions else "(empty)"

        if kind.endswith("GetSecretValue"):
            if error is not None:
                text = f"{name} reads {target}{tag}: nothing ({error_code(error)})"
            else:
                version = answer["VersionId"]
                stale = f", current is {vname(before)}" if version != before else ""
                text = (
                    f"{name} reads {target}{tag}: {vname(version)}{stale} = "
                    f"{_summary(target, answer['SecretString'], start_at)}"
                )
        else:
            token = answer["VersionId"] if error is None else _token_of(error)
            basis = next(
                (vname(v) for v in versions if next_version_id(v) == token),
                "the empty secret" if token == next_version_id(None) else None,
            )
            how = f"as the successor of {basis}" if basis else "under an id derived from no version"
            if error is not None:
                text = f"{name} writes {target}{tag} {how}: REFUSED ({error_code(error)})"
                facts["refused"] = error_code(error)
            else:
                value = secret.versions[token].text
                summary = _summary(target, value, start_at)
                text = f"{name} writes {target} {how}: {vname(token)} = {summary}"
                if target == "credential":
                    written = RefreshSecret.from_json(value).credential
                    facts["stored"] = written.refresh_token if written else None
    else:
        endpoint = kind.removeprefix("upstream.")
        exchange = world.upstream.log[log_size] if len(world.upstream.log) > log_size else None
        credential = exchange.credential if exchange else None
        status = exchange.status if exchange else None
        body = json.loads(answer.body) if answer is not None and error is None else None
        if endpoint == "refresh":
            children = [v for v, t in world.identity.tokens.items() if t.parent == credential]
            issued = children[-1] if children and (status in (200, None)) else None
            facts.update(presented=credential, status=status, issued=issued)
            if status is None and exchange is not None:
                facts["loss"] = _loss(fault, exchange.cut_short)
            if status == 200:
                answer_text = f"200, issued {label(issued)}"
            elif status is None:
                answer_text = f"acted (issued {label(issued)}), answer lost"
            else:
                revoked = (
                    world.identity.family_revoked(credential)
                    if credential in world.identity.tokens
                    else False
                )
                answer_text = f"{status} {body.get('error') if body else ''}" + (
                    "; family revoked" if revoked else ""
                )
            text = f"{name} refreshes with {label(credential)}{tag}: {answer_text}"
        elif endpoint == "exchange":
            got = body.get("token") if isinstance(body, dict) else None
            issued_token = label(got) if got else ""
            text = f"{name} exchanges {label(credential)}{tag}: {status} {issued_token}"
        elif endpoint == "projects":
            if status == 200:
                facts["verified"] = credential
            text = f"{name} lists projects with {label(credential)}{tag}: {status}"
        else:
            text = f"{name} calls {endpoint}{tag}: {status}"
        facts["status"] = status
    return f"{when} {text}", facts


def error_code(error: Exception) -> str:
    """An AWS error's code, or the exception's type."""
    response = getattr(error, "response", None)
    return str(response["Error"]["Code"]) if isinstance(response, dict) else type(error).__name__


def _loss(fault: str, cut_short: bool) -> str:
    """How a refresh's answer was lost, for the invariants."""
    if cut_short:
        return "cut short"
    return {"gateway": "gateway", "stalled": "limit"}.get(fault, "closed")


def _token_of(error: Exception) -> str:
    message = str(getattr(error, "response", {}).get("Error", {}).get("Message", ""))
    return message.partition("ClientRequestToken ")[2].partition(" ")[0]


@functools.lru_cache(maxsize=4096)
def _summary(target: str, text: str, start: float) -> str:
    if target == "credential":
        secret = RefreshSecret.from_json(text)
        credential = secret.credential
        parts = [label(credential.refresh_token) if credential else "no credential"]
        if credential is not None and credential.status != "active":
            parts.append(credential.status)
        if secret.lease is not None:
            parts.append(
                f"lease {secret.lease.owner} until t+{secret.lease.expires_at - start:.0f}s"
            )
        if secret.raw_access_token is not None:
            parts.append(f"raw {label(secret.raw_access_token.token)}")
        return "[" + ", ".join(parts) + "]"
    document = ServiceTokenDocument.from_json(text)
    status = "" if document.credential_status == "active" else f", {document.credential_status}"
    return (
        f"[{label(document.token)} expiring t+{(document.expires_at - start) / HOUR:.1f}h{status}]"
    )
