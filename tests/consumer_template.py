"""consumer.yaml as the tests read it: the template, its parameters for a combination of inputs,
the policy document CloudFormation would create for them, and the policy the issue asks for,
written out independently (issue 22, item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cfn_intrinsics

TEMPLATE = Path(__file__).resolve().parents[1] / "consumer.yaml"
ACCOUNT = "123456789012"  # the stack's account
SECRET_ARN = f"arn:aws:secretsmanager:eu-west-1:{ACCOUNT}:secret:cmstoken/service-token-AbCdEf"
KEY_ARN = f"arn:aws:kms:eu-west-1:{ACCOUNT}:key/mrk-0123456789abcdef0123456789abcdef"
BUS_ARN = f"arn:aws:events:eu-west-1:{ACCOUNT}:event-bus/cmstoken-refresh-requests"
FIVE_REGIONS = ("us-east-1", "eu-central-1", "ap-southeast-2", "us-west-2", "sa-east-1")


def template() -> dict[str, Any]:
    return cfn_intrinsics.load_template(TEMPLATE)


def parameters(*, bus: bool = False, regions: tuple[str, ...] = ()) -> dict[str, str]:
    """The template's parameters for one combination (the rest at their defaults): the secret and
    its key always (a shared secret is always under a customer managed key)."""
    values = {
        "ServiceTokenSecretArn": SECRET_ARN,
        "ServiceTokenKeyArn": KEY_ARN,
        "ServiceTokenReplicaRegions": ",".join(regions),
    }
    if bus:
        values["RefreshRequestBusArn"] = BUS_ARN
    return values


def resolver(values: dict[str, str], account: str = "222233334444") -> cfn_intrinsics.Resolver:
    """The template's intrinsic functions as a stack of ``account`` in us-east-1 resolves them."""
    source = template()
    pseudo = {
        "AWS::AccountId": account,
        "AWS::Region": "us-east-1",
        "AWS::Partition": "aws",
        "AWS::URLSuffix": "amazonaws.com",
        "AWS::StackName": "cmstoken-consumer",
    }
    return cfn_intrinsics.Resolver(
        source, {**pseudo, **cfn_intrinsics.parameter_values(source, **values)}
    )


def policy_document(values: dict[str, str]) -> dict[str, Any]:
    """The managed policy's document CloudFormation would create for ``values``."""
    resolved = resolver(values)
    (policy,) = resolved.resources("AWS::IAM::ManagedPolicy").values()
    document: dict[str, Any] = resolved.resolve(policy["Properties"]["PolicyDocument"])
    return document


def expected_document(*, bus: bool = False, regions: tuple[str, ...] = ()) -> dict[str, Any]:
    """What the consumer may do, written out by hand: read the secret and its replicas (the same
    ARN in each replica region), decrypt with the key and its multi-Region replicas through
    Secrets Manager in those regions only, and put refresh requests from cmstoken.consumer on
    the stack's bus; nothing else."""
    everywhere = ("eu-west-1", *regions)
    statements: list[dict[str, Any]] = [
        {
            "Sid": "ReadTheServiceToken",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": [SECRET_ARN.replace(":eu-west-1:", f":{r}:") for r in everywhere],
        },
        {
            "Sid": "DecryptTheServiceTokenThroughSecretsManager",
            "Effect": "Allow",
            "Action": "kms:Decrypt",
            "Resource": [KEY_ARN.replace(":eu-west-1:", f":{r}:") for r in everywhere],
            "Condition": {
                "StringEquals": {
                    "kms:ViaService": [f"secretsmanager.{r}.amazonaws.com" for r in everywhere]
                }
            },
        },
    ]
    if bus:
        statements.append(
            {
                "Sid": "RequestServiceTokenRefresh",
                "Effect": "Allow",
                "Action": "events:PutEvents",
                "Resource": BUS_ARN,
                "Condition": {
                    "StringEquals": {
                        "events:source": "cmstoken.consumer",
                        "events:detail-type": "Service Token Refresh Requested",
                    }
                },
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}
