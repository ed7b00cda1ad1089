"""``cmstoken-admin``'s failures, each reported in one line (``AdminError``), and every AWS error
turned into one (``explain``).

That line names the action (the IAM action, such as ``lambda:InvokeFunction``), the resource
(an ARN when it is known), the account and region, and what to do about it; its exit status is
2 for what the operator must fix on the command line or in the configuration (no region, a
malformed region, an unknown profile) and 1 otherwise. No traceback: botocore's ``ClientError``
and ``BotoCoreError`` are caught where each call is made.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from cmstoken.cli.console import EXIT_FAILURE, EXIT_USAGE, shown

NO_REGION = (
    "no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or set a region "
    "in your AWS profile (aws configure set region eu-west-1)"
)
_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError"}
_CREDENTIALS_REFUSED = {
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
    "InvalidSignatureException",
    "InvalidAccessKeyId",
    "AuthFailure",
}
_THROTTLED = {
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
}
_NOT_FOUND = {"ResourceNotFoundException", "NotFoundException", "ResourceNotFound"}


class AdminError(Exception):
    """A failure to report to the operator in one line (made printable). ``short`` is the gist
    (``lambda:InvokeFunction denied``) for a report that degrades a line instead of failing."""

    def __init__(
        self, message: str, *, exit_status: int = EXIT_FAILURE, short: str | None = None
    ) -> None:
        super().__init__(shown(message))
        self.exit_status = exit_status
        self.short = shown(short or message)


@dataclass(frozen=True)
class Where:
    """The account (when known) and region an AWS call went to."""

    region: str | None
    account: str | None = None

    def __str__(self) -> str:
        parts = [f"account {self.account}" if self.account else "", f"region {self.region}"]
        return ", ".join(part for part in parts if part)


@dataclass(frozen=True)
class Call:
    """One AWS call, as an error message names it: ``missing`` says what to do when the
    resource does not exist, ``unanswered`` when the call was sent but not answered."""

    action: str
    resource: str
    where: Where
    missing: str = "check the name, the account and the region"
    unanswered: str = "retry"


def explain(exc: Exception, call: Call) -> AdminError:
    """One line for a failed AWS call: what was refused, where, and what to do."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        return _client_error(exc, call)
    if isinstance(exc, BotoCoreError):
        return _botocore_error(exc, call)
    return AdminError(f"{call.action} on {call.resource} failed ({call.where}): {exc}")


def _client_error(exc: Any, call: Call) -> AdminError:
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    what = f"{call.action} on {call.resource} ({call.where})"
    if code in _DENIED:
        principal = re.search(r"User: (arn:\S+) is not authorized", message)
        who = f" to {principal.group(1)}" if principal else ""
        explicit = re.search(r"explicit deny in an? ([\w -]*?policy)", message)
        advice = (
            f"an explicit deny in a {explicit.group(1)} blocks it; ask whoever administers it "
            f"to allow {call.action} on {call.resource}{who}"
            if explicit
            else f"grant {call.action} on {call.resource}{who}"
        )
        return AdminError(
            f"{call.action} denied on {call.resource} ({call.where}): {advice}",
            short=f"{call.action} denied",
        )
    if code in _CREDENTIALS_REFUSED:
        return AdminError(
            f"{what}: AWS refused your credentials ({code}): renew them (aws sso login, aws "
            "configure, or new AWS_* variables) and retry",
            short=f"credentials refused ({code})",
        )
    if code in _THROTTLED:
        busy = "ConcurrentInvocationLimitExceeded" in str(exc.response.get("Reason", ""))
        advice = (
            "the function is already running (its reserved concurrency is in use): retry in a "
            "minute"
            if busy
            else "throttled: wait a little and retry"
        )
        return AdminError(f"{what}: {advice}", short=f"{call.action} throttled")
    if code in _NOT_FOUND or "does not exist" in message:
        return AdminError(
            f"{call.resource} not found ({call.action}, {call.where}): {call.missing}",
            short=f"{call.resource} not found",
        )
    return AdminError(
        f"{what} failed: {code or 'error'}: {message or exc}", short=f"{call.action}: {code}"
    )


def _botocore_error(exc: Any, call: Call) -> AdminError:
    from botocore import exceptions as e

    if isinstance(exc, e.NoRegionError):
        return AdminError(NO_REGION, exit_status=EXIT_USAGE)
    if isinstance(exc, e.ProfileNotFound):
        return AdminError(unknown_profile(exc), exit_status=EXIT_USAGE)
    if isinstance(exc, e.InvalidRegionError):
        return AdminError(
            f"{exc}: check --region, AWS_REGION and AWS_PROFILE", exit_status=EXIT_USAGE
        )
    if isinstance(exc, e.NoCredentialsError | e.PartialCredentialsError):
        return AdminError(
            f"no AWS credentials found ({call.action}, {call.where}): configure them (aws "
            "configure, aws sso login, AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY) and retry",
            short="no AWS credentials",
        )
    if isinstance(exc, e.SSOError | e.TokenRetrievalError):
        return AdminError(
            f"your AWS SSO session is missing or expired ({call.action}, {call.where}): run "
            "aws sso login (with your profile) and retry",
            short="AWS SSO session expired",
        )
    if isinstance(exc, e.CredentialRetrievalError):
        return AdminError(
            f"could not get AWS credentials for {call.action} ({call.where}): {exc}",
            short="no AWS credentials",
        )
    if isinstance(exc, e.ConnectionError):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url", "the endpoint")
        variable = endpoint_variable(str(endpoint), call.action)
        if variable is not None:
            return AdminError(
                f"{call.action} on {call.resource}: cannot reach {endpoint} ({call.where}), the "
                f"address {variable} sets: check {variable} (unset it to reach AWS itself) and "
                "that something answers there",
                short=f"cannot reach {endpoint} ({variable})",
            )
        return AdminError(
            f"{call.action} on {call.resource}: cannot reach {endpoint} ({call.where})"
            f"{_unknown_region(call.where.region)}: check --region, and your network or proxy",
            short=f"cannot reach {endpoint}",
        )
    if isinstance(exc, e.ReadTimeoutError | e.ConnectionClosedError):
        return AdminError(
            f"{call.action} on {call.resource} ({call.where}): sent, but no answer came "
            f"({type(exc).__name__}): {call.unanswered}",
            short=f"{call.action}: no answer",
        )
    return AdminError(f"{call.action} on {call.resource} failed ({call.where}): {exc}")


def unknown_profile(exc: Exception) -> str:
    """One line for a profile that is in no AWS configuration file."""
    name = getattr(exc, "kwargs", {}).get("profile") or os.environ.get("AWS_PROFILE") or "?"
    return (
        f"the AWS profile {shown(str(name))!r} is not in your AWS configuration: check --profile "
        "and AWS_PROFILE (aws configure list-profiles lists the profiles)"
    )


def endpoint_variable(endpoint: str, action: str) -> str | None:
    """The environment variable that pointed the AWS call ``action`` (``lambda:Invoke``...) at
    ``endpoint``: the service's ``AWS_ENDPOINT_URL_<SERVICE>`` when set, else
    ``AWS_ENDPOINT_URL``, as botocore picks them; ``None`` when neither did."""
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return None
    names = ["AWS_ENDPOINT_URL"]
    try:
        import botocore.session

        model = botocore.session.get_session().get_service_model(action.partition(":")[0])
        names.insert(0, "AWS_ENDPOINT_URL_" + model.service_id.upper().replace(" ", "_"))
    except Exception:  # noqa: BLE001, S110 - an unknown service: the global variable only
        pass
    for name in names:
        value = os.environ.get(name, "").strip().rstrip("/")
        if value:  # the one botocore used
            return name if endpoint.rstrip("/").startswith(value) else None
    return None


def _unknown_region(region: str | None) -> str:
    """A note when ``region`` is none that this botocore knows (it may be newer than it)."""
    if not region or os.environ.get("AWS_ENDPOINT_URL"):
        return ""
    import boto3

    session = boto3.Session(region_name=region)
    known = {
        name
        for partition in session.get_available_partitions()
        for name in session.get_available_regions("cloudformation", partition)
    }
    return "" if region in known else f"; {region!r} is not a region this AWS SDK knows"
