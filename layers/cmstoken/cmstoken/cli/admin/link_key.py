"""``cmstoken-admin rotate-link-key``: replace the key that signs the stack's re-authorization
links, so that every link sent so far is void (a link leaked, a person left, or routinely).

The key is the secret the stack's output ``LinkSigningKeySecretArn`` names; the stack has it
only when its parameter ``OneClickReauthorization`` is ``"true"``. The new key is written with
``PutSecretValue``: 64 characters drawn with ``secrets.choice`` from ``[A-Za-z0-9]``, as the
template's ``GenerateSecretString`` (``PasswordLength: 64``, ``ExcludePunctuation: true``) makes
the first one. It is never printed, logged or put in an error message: only the call, the
secret's ARN, the account and the region are.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from typing import Any, TextIO

from cmstoken.cli.admin.errors import AdminError, Call, explain
from cmstoken.cli.admin.stack import DeployedStack
from cmstoken.cli.console import EXIT_OK, EXIT_USAGE, shown

LINK_KEY_OUTPUT = "LinkSigningKeySecretArn"
ONE_CLICK_PARAMETER = "OneClickReauthorization"
KEY_ALPHABET = string.ascii_letters + string.digits
KEY_LENGTH = 64


def new_link_key() -> str:
    """A fresh signing key: ``KEY_LENGTH`` characters of ``KEY_ALPHABET``, from ``secrets``."""
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(KEY_LENGTH))


def rotate_link_key(
    stack: DeployedStack,
    secretsmanager: Any,
    *,
    out: TextIO,
    new_key: Callable[[], str] = new_link_key,
) -> int:
    """Write a new signing key to the stack's link signing key secret and say, in one line,
    that every link sent before now is void; ``AdminError`` when the stack has no such secret
    (exit 2: the command does not apply to it) or the call fails (exit 1)."""
    secret_arn = stack.outputs.get(LINK_KEY_OUTPUT)
    if not secret_arn:
        raise _no_link_key(stack)
    call = Call(
        "secretsmanager:PutSecretValue",
        secret_arn,
        stack.where,
        missing=f"stack {stack.name!r} names it in its output {LINK_KEY_OUTPUT} but it does "
        f"not exist: check the stack (aws cloudformation describe-stack-events --stack-name "
        f"{stack.name} --region {stack.region}) or deploy it again",
        unanswered="the new key may or may not be stored: run the command again (a second "
        "rotation voids nothing more than the first)",
    )
    from botocore.exceptions import BotoCoreError, ClientError

    key = new_key()
    try:
        secretsmanager.put_secret_value(SecretId=secret_arn, SecretString=key)
    except (BotoCoreError, ClientError) as exc:
        error = _kms_refusal(exc, call, stack) or explain(exc, call)
        if key in f"{exc} {error} {error.short}":
            # A validation error's or a stub's text may hold the parameters: neither its
            # message nor, with --debug, its traceback shows the key.
            raise _without(key, error) from None
        raise error from exc
    out.write(
        f"rotated the link signing key of stack {shown(stack.name)!r} ({stack.where}): every "
        "re-authorization link sent before now is void; the next notice carries a new link\n"
    )
    return EXIT_OK


def _without(key: str, error: AdminError) -> AdminError:
    """``error`` with ``key`` taken out of its message."""
    return AdminError(
        str(error).replace(key, "[the new key]"),
        exit_status=error.exit_status,
        short=error.short.replace(key, "[the new key]"),
    )


def _no_link_key(stack: DeployedStack) -> AdminError:
    """The stack has no link signing key: one-click re-authorization is off (exit 2), or the
    update that turns it on has not finished (exit 1)."""
    setting = stack.parameters.get(ONE_CLICK_PARAMETER)
    name = shown(stack.name)
    if setting is None:
        return AdminError(
            f"stack {name!r} has no one-click re-authorization (no parameter "
            f"{ONE_CLICK_PARAMETER}: a release before it), so no link signing key: nothing to "
            "rotate",
            exit_status=EXIT_USAGE,
        )
    if setting == "true":
        return AdminError(
            f'stack {name!r} has {ONE_CLICK_PARAMETER} "true" but no output {LINK_KEY_OUTPUT} '
            f"yet: wait until its update completes (aws cloudformation describe-stacks "
            f"--stack-name {name} --region {stack.region}) and retry"
        )
    return AdminError(
        f"stack {name!r} has one-click re-authorization off ({ONE_CLICK_PARAMETER} is "
        f'"{shown(setting)}"), so no link signing key: nothing to rotate',
        exit_status=EXIT_USAGE,
    )


def _kms_refusal(exc: Any, call: Call, stack: DeployedStack) -> AdminError | None:
    """Secrets Manager's answer when the secret's KMS key refuses the caller or cannot be used
    (``AccessDeniedException`` "Access to KMS is not allowed", ``EncryptionFailure``):
    granting ``PutSecretValue`` would not fix it."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    error = response.get("Error", {})
    if "KMS" not in str(error.get("Message", "")):
        return None
    key = stack.parameters.get("KmsKeyArn") or "the secret's KMS key"
    return AdminError(
        f"{call.action} on {call.resource} ({call.where}): KMS refused the secret's key "
        f"({shown(error.get('Code', 'error'))}): grant kms:GenerateDataKey on {shown(key)} "
        "(in its key policy or your IAM policy), or check that the key is enabled",
        short=f"{call.action}: KMS refused",
    )
