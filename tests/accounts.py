"""Several AWS accounts on one moto server: sessions whose credentials belong to an account, and
what moto lacks to reach another account's resource by its ARN.

moto keeps resources per account and picks the account of a request from its access key
(``moto.core.responses.BaseResponse.get_current_account``: ``MOTO_ACCOUNT_ID``, else the
``x-moto-account-id`` header, else the account whose IAM backend holds the access key, which
STS ``AssumeRole`` puts in the role's account). It then looks every secret and event bus up
in that account: an ARN of another account is not found (Secrets Manager), or is read as a name
in the caller's own account (EventBridge ``PutEvents`` keeps the bus's name only). AWS instead
resolves a full ARN in the account it names, and then evaluates the resource's policy, which
moto does not do. ``reach_by_arn`` gives a session that lookup: a request whose secret or
event bus is a full ARN of another account is answered in that account (the header);
everything else, a name included, stays in the caller's account."""

from __future__ import annotations

import json
from typing import Any

import boto3

ACCOUNT_HEADER = "x-moto-account-id"  # moto's own: the account that answers the request


def account_session(account: str, region: str = "us-east-1") -> Any:
    """A session whose credentials belong to ``account`` (an assumed role there)."""
    credentials = boto3.client("sts").assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/cmstoken-consumer", RoleSessionName="consumer"
    )["Credentials"]
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=region,
    )


def reach_by_arn(session: Any) -> Any:
    """``session``, its requests for another account's secret or bus by full ARN answered in
    that account (see the module)."""
    session.events.register("before-call.secrets-manager.*", _secret_owner)
    session.events.register("before-call.events.PutEvents", _bus_owner)
    return session


def _secret_owner(params: Any, **_: Any) -> None:
    _answer_in(params, json.loads(params["body"] or b"{}").get("SecretId"))


def _bus_owner(params: Any, **_: Any) -> None:
    entries = json.loads(params["body"] or b"{}").get("Entries") or [{}]
    _answer_in(params, entries[0].get("EventBusName"))


def _answer_in(params: Any, resource: str | None) -> None:
    parts = (resource or "").split(":")
    if len(parts) >= 6 and parts[0] == "arn" and parts[4]:
        params["headers"][ACCOUNT_HEADER] = parts[4]
