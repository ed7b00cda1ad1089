"""Every permission the template grants or denies, written out in full: for each IAM role its
trust policy, inline policies and attached managed policies; for each managed policy, each inline
policy of its own (``AWS::IAM::RolePolicy``) and each resource-based policy (secret, queue,
topic, key, Lambda permission) its exact statements:
effect, principal, actions, resources and conditions, as the SAM-transformed template holds
them (intrinsic functions and both branches of each ``Fn::If`` included).

Any widening (an action added or replaced by a wildcard, a resource or principal widened, a
condition dropped, a statement, policy or role added) fails a test here, and has to be written
into these tables in the same change, where a reviewer sees it. Only descriptions are left out
of the comparison."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from template_model import transformed

NO_VALUE = {"Ref": "AWS::NoValue"}


def ref(name: str) -> dict[str, Any]:
    return {"Ref": name}


def arn(logical_id: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def sub(text: str) -> dict[str, Any]:
    return {"Fn::Sub": text}


def only_if(condition: str, statement: dict[str, Any]) -> dict[str, Any]:
    """A statement present only under ``condition`` (absent otherwise)."""
    return {"Fn::If": [condition, statement, NO_VALUE]}


def document(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


DEFAULT_BUS = sub("arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/default")
THE_TWO_SECRETS = [ref("RefreshCredentialSecret"), ref("ServiceTokenSecret")]
THROUGH_SECRETS_MANAGER = {
    "StringEquals": {"kms:ViaService": sub("secretsmanager.${AWS::Region}.amazonaws.com")}
}
LAMBDA_TRUST = document(
    {
        "Effect": "Allow",
        "Principal": {"Service": "lambda.amazonaws.com"},
        "Action": "sts:AssumeRole",
    }
)


def functions_statements(log_group: str) -> list[dict[str, Any]]:
    """What the rotator and the bootstrap share: the two secrets (read and write), their own
    log group, events on the default bus, X-Ray (which AWS cannot scope), and the customer key
    through Secrets Manager only."""
    return [
        {
            "Sid": "ReadAndWriteTheTwoSecrets",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"],
            "Resource": THE_TWO_SECRETS,
        },
        {
            "Sid": "WriteItsLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": arn(log_group),
        },
        {
            "Sid": "AnnounceRotations",
            "Effect": "Allow",
            "Action": "events:PutEvents",
            "Resource": DEFAULT_BUS,
        },
    ]


SEND_TRACES = {
    "Sid": "SendTraces",
    "Effect": "Allow",
    "Action": ["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
    "Resource": "*",
}
USE_THE_SECRETS_KEY = only_if(
    "HasKmsKey",
    {
        "Sid": "UseTheSecretsKeyThroughSecretsManager",
        "Effect": "Allow",
        "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
        "Resource": ref("KmsKeyArn"),
        "Condition": THROUGH_SECRETS_MANAGER,
    },
)


# Sharing the service token (docs/organisation.md): ReplicaRegions' five places, the key (the
# stack's or the given one) and its multi-Region replicas, Secrets Manager in every Region.
def replica_region(index: int) -> dict[str, Any]:
    regions = {"Fn::Join": [",", ref("ReplicaRegions")]}
    padded = {"Fn::Join": [",", [regions, "", "", "", ""]]}
    return {"Fn::Select": [index, {"Fn::Split": [",", padded]}]}


def in_each_replica_region(make: Any) -> list[Any]:
    """The first replica Region's item, then each further one's under its condition."""
    return [make(0), *(if_else(f"HasReplicaRegion{i + 1}", make(i), NO_VALUE) for i in range(1, 5))]


def if_else(condition: str, when_true: Any, when_false: Any) -> dict[str, Any]:
    return {"Fn::If": [condition, when_true, when_false]}


SERVICE_TOKEN_KEY = if_else(
    "CreateServiceTokenKey", arn("ServiceTokenKey"), ref("ServiceTokenKmsKeyArn")
)


def replica_key(index: int) -> dict[str, Any]:
    return {
        "Fn::Sub": [
            "arn:${AWS::Partition}:kms:${Region}:${KeyAccount}:${KeyId}",
            {
                "Region": replica_region(index),
                "KeyAccount": {"Fn::Select": [4, {"Fn::Split": [":", SERVICE_TOKEN_KEY]}]},
                "KeyId": {"Fn::Select": [5, {"Fn::Split": [":", SERVICE_TOKEN_KEY]}]},
            },
        ]
    }


def replica_secret(index: int) -> dict[str, Any]:
    return {
        "Fn::Sub": [
            "arn:${AWS::Partition}:secretsmanager:${Region}:${AWS::AccountId}:secret:${Name}",
            {
                "Region": replica_region(index),
                "Name": {"Fn::Select": [6, {"Fn::Split": [":", ref("ServiceTokenSecret")]}]},
            },
        ]
    }


SECRETS_MANAGER_IN_EVERY_REGION = {
    "Fn::Split": [
        ",",
        {
            "Fn::Sub": [
                "secretsmanager.${AWS::Region}.amazonaws.com,"
                "secretsmanager.${Replicas}.amazonaws.com",
                {
                    "Replicas": {
                        "Fn::Join": [
                            ".amazonaws.com,secretsmanager.",
                            ref("ReplicaRegions"),
                        ]
                    }
                },
            ]
        },
    ]
}


@dataclass(frozen=True)
class Role:
    trust: dict[str, Any]
    policies: dict[str, dict[str, Any]]  # inline policy name -> document
    managed: list[dict[str, Any]] = field(default_factory=list)
    condition: str | None = None

    def properties(self) -> dict[str, Any]:
        expected: dict[str, Any] = {
            "AssumeRolePolicyDocument": self.trust,
            "Policies": [
                {"PolicyName": name, "PolicyDocument": policy}
                for name, policy in self.policies.items()
            ],
        }
        if self.managed:
            expected["ManagedPolicyArns"] = self.managed
        return expected


def scheduler_role(
    prefix: str, function: str, *, dead_letters: str | None = None, condition: str | None = None
) -> Role:
    """The role SAM generates for a ScheduleV2 event (its documents carry no Version):
    EventBridge Scheduler invokes ``function``, and sends to ``dead_letters`` when given."""
    policies = {
        f"{prefix}LambdaPolicy": {
            "Statement": [
                {"Action": "lambda:InvokeFunction", "Effect": "Allow", "Resource": arn(function)}
            ]
        }
    }
    if dead_letters is not None:
        policies[f"{prefix}SQSPolicy"] = {
            "Statement": [
                {"Action": "sqs:SendMessage", "Effect": "Allow", "Resource": arn(dead_letters)}
            ]
        }
    trust = {
        "Action": ["sts:AssumeRole"],
        "Effect": "Allow",
        "Principal": {"Service": ["scheduler.amazonaws.com"]},
    }
    return Role(trust=document(trust), policies=policies, condition=condition)


ROLES: dict[str, Role] = {
    "RotatorRole": Role(
        trust=LAMBDA_TRUST,
        policies={
            "rotate-the-two-secrets": document(
                *functions_statements("RotatorLogGroup")[:1],
                {
                    "Sid": "CountTheCredentialsVersions",
                    "Effect": "Allow",
                    "Action": "secretsmanager:ListSecretVersionIds",
                    "Resource": ref("RefreshCredentialSecret"),
                },
                *functions_statements("RotatorLogGroup")[1:],
                {
                    "Sid": "TakeTheRefreshRequests",
                    "Effect": "Allow",
                    "Action": [
                        "sqs:ReceiveMessage",
                        "sqs:DeleteMessage",
                        "sqs:GetQueueAttributes",
                    ],
                    "Resource": arn("RefreshRequestQueue"),
                },
                {
                    "Sid": "ReportFailedInvocations",
                    "Effect": "Allow",
                    "Action": "sqs:SendMessage",
                    "Resource": arn("RotationDeadLetterQueue"),
                },
                SEND_TRACES,
                USE_THE_SECRETS_KEY,
            )
        },
    ),
    "BootstrapRole": Role(
        trust=LAMBDA_TRUST,
        policies={
            "authorize-into-the-two-secrets": document(
                *functions_statements("BootstrapLogGroup")[:1],
                {
                    "Sid": "CountTheCredentialsVersions",
                    "Effect": "Allow",
                    "Action": "secretsmanager:ListSecretVersionIds",
                    "Resource": ref("RefreshCredentialSecret"),
                },
                *functions_statements("BootstrapLogGroup")[1:],
                SEND_TRACES,
                USE_THE_SECRETS_KEY,
            )
        },
    ),
    "ExampleConsumerRole": Role(
        condition="DeployExample",
        trust=LAMBDA_TRUST,
        managed=[ref("ConsumerPolicy"), ref("ConsumerRefreshRequestPolicy")],
        policies={
            "write-its-logs": document(
                {
                    "Effect": "Allow",
                    "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                    "Resource": arn("ExampleConsumerLogGroup"),
                }
            )
        },
    ),
    # Generated by SAM for the rotator's ScheduleV2 event (its documents carry no Version).
    "RotatorFunctionScheduleRole": scheduler_role(
        "RotatorFunctionSchedule", "RotatorFunction", dead_letters="RotationDeadLetterQueue"
    ),
}

ONE_CLICK = "OneClickEnabled"
THROUGH_SNS = {"StringEquals": {"kms:ViaService": sub("sns.${AWS::Region}.amazonaws.com")}}


def publish_through_topic_key(condition: str, sid: str, key: dict[str, Any]) -> dict[str, Any]:
    """Use of the alarm topic's key for publishing, through SNS only, when the topic has it."""
    return only_if(
        condition,
        {
            "Sid": sid,
            "Effect": "Allow",
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Resource": key,
            "Condition": THROUGH_SNS,
        },
    )


# The links function (OneClickReauthorization): the signing key, its table, the bootstrap (its
# only way to the stack's state), the topic (and its key), its logs, X-Ray. Never a credential
# secret.
ROLES["LinksRole"] = Role(
    condition=ONE_CLICK,
    trust=LAMBDA_TRUST,
    policies={
        "sign-links-and-start-authorizations": document(
            {
                "Sid": "ReadTheLinkSigningKey",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": ref("LinkSigningKeySecret"),
            },
            {
                "Sid": "KeepTheLinkState",
                "Effect": "Allow",
                "Action": [
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem",
                ],
                "Resource": arn("LinksTable"),
            },
            {
                "Sid": "AskTheBootstrapThroughItsLinksAlias",
                "Effect": "Allow",
                "Action": "lambda:InvokeFunction",
                "Resource": ref("BootstrapLinksAlias"),
            },
            {
                "Sid": "SendNotices",
                "Effect": "Allow",
                "Action": "sns:Publish",
                "Resource": ref("AlarmTopic"),
            },
            publish_through_topic_key(
                "CreateAlarmTopicKey", "PublishThroughTheStacksTopicKey", arn("AlarmTopicKey")
            ),
            publish_through_topic_key(
                "EncryptAlarmTopicWithGivenKey",
                "PublishThroughTheGivenTopicKey",
                ref("AlarmTopicKmsKey"),
            ),
            {
                "Sid": "WriteItsLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": arn("LinksLogGroup"),
            },
            SEND_TRACES,
        )
    },
)
# Generated by SAM for the links function's daily reminder (ScheduleV2).
ROLES["LinksFunctionReminderRole"] = scheduler_role(
    "LinksFunctionReminder", "LinksFunction", condition=ONE_CLICK
)

# Inline policies of their own (AWS::IAM::RolePolicy): each one's properties, in full. Both
# name the links function, which the role of its own would otherwise depend on (a cycle), or
# which the bootstrap's role cannot name unconditionally.
ROLE_POLICIES: dict[str, dict[str, Any]] = {
    "LinksReadOwnUrl": {
        "RoleName": ref("LinksRole"),
        "PolicyName": "read-its-own-url",
        "PolicyDocument": document(
            {
                "Sid": "ReadItsOwnUrl",
                "Effect": "Allow",
                "Action": "lambda:GetFunctionUrlConfig",
                "Resource": arn("LinksFunction"),
            }
        ),
    },
    # Lambda sends an asynchronous invocation's record to its destination with the function's
    # execution role.
    "BootstrapSendsOutcomesToLinks": {
        "RoleName": ref("BootstrapRole"),
        "PolicyName": "send-poll-outcomes-to-the-links-function",
        "PolicyDocument": document(
            {
                "Sid": "SendPollOutcomes",
                "Effect": "Allow",
                "Action": "lambda:InvokeFunction",
                "Resource": arn("LinksFunction"),
            }
        ),
    },
}
ROLE_POLICY_CONDITIONS = dict.fromkeys(ROLE_POLICIES, ONE_CLICK)

# Policies of several roles (AWS::IAM::Policy): each one's properties, in full. The functions
# write the shared service token with its key (through Secrets Manager only), and Secrets
# Manager re-encrypts each new version with the replica keys as the writer.
POLICIES: dict[str, dict[str, Any]] = {
    "ServiceTokenKeyUse": {
        "PolicyName": "write-the-service-token-with-its-key",
        "Roles": [ref("RotatorRole"), ref("BootstrapRole")],
        "PolicyDocument": document(
            {
                "Sid": "UseTheServiceTokenKeyThroughSecretsManager",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": SERVICE_TOKEN_KEY,
                "Condition": THROUGH_SECRETS_MANAGER,
            },
            only_if(
                "HasReplicaRegions",
                {
                    "Sid": "EncryptTheReplicasThroughSecretsManager",
                    "Effect": "Allow",
                    "Action": ["kms:Encrypt", "kms:GenerateDataKey"],
                    "Resource": in_each_replica_region(replica_key),
                    "Condition": {
                        "StringEquals": {"kms:ViaService": SECRETS_MANAGER_IN_EVERY_REGION}
                    },
                },
            ),
        ),
    }
}
POLICY_CONDITIONS = {"ServiceTokenKeyUse": "UseServiceTokenKey"}


MANAGED_POLICIES: dict[str, dict[str, Any]] = {
    "ConsumerPolicy": document(
        {
            "Sid": "ReadTheServiceToken",
            "Effect": "Allow",
            "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
            "Resource": if_else(
                "HasReplicaRegions",
                [ref("ServiceTokenSecret"), *in_each_replica_region(replica_secret)],
                ref("ServiceTokenSecret"),
            ),
        },
        # Shared or replicated, the service token's own key (and its replicas) replaces
        # KmsKeyArn, which then encrypts the refresh credential alone.
        if_else(
            "UseServiceTokenKey",
            {
                "Sid": "DecryptTheServiceTokenThroughSecretsManager",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": if_else(
                    "HasReplicaRegions",
                    [SERVICE_TOKEN_KEY, *in_each_replica_region(replica_key)],
                    SERVICE_TOKEN_KEY,
                ),
                "Condition": {
                    "StringEquals": {
                        "kms:ViaService": if_else(
                            "HasReplicaRegions",
                            SECRETS_MANAGER_IN_EVERY_REGION,
                            sub("secretsmanager.${AWS::Region}.amazonaws.com"),
                        )
                    }
                },
            },
            only_if(
                "HasKmsKey",
                {
                    "Sid": "DecryptThroughSecretsManager",
                    "Effect": "Allow",
                    "Action": "kms:Decrypt",
                    "Resource": ref("KmsKeyArn"),
                    "Condition": THROUGH_SECRETS_MANAGER,
                },
            ),
        ),
    ),
    "ConsumerRefreshRequestPolicy": document(
        {
            "Sid": "RequestServiceTokenRefresh",
            "Effect": "Allow",
            "Action": "events:PutEvents",
            "Resource": DEFAULT_BUS,
            "Condition": {"StringEquals": {"events:source": "cmstoken.consumer"}},
        }
    ),
}

THE_FUNCTIONS_ROLES = [arn("RotatorRole"), arn("BootstrapRole")]
# Every key policy here opens with it: the account (its IAM policies) administers the key.
THE_ACCOUNT_ADMINISTERS_THE_KEY = {
    "Sid": "TheAccountAdministersTheKey",
    "Effect": "Allow",
    "Principal": {"AWS": sub("arn:${AWS::Partition}:iam::${AWS::AccountId}:root")},
    "Action": "kms:*",
    "Resource": "*",
}


# Resource-based policies: each resource's properties (descriptions aside), in full.
def rules_send_to(queue: str, kind: str) -> dict[str, Any]:
    """A queue's policy admitting what the two refresh rules send (the second with sharing)."""

    def sends(rule: str) -> dict[str, Any]:
        return {
            "Sid": f"{rule}{kind}",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": arn(queue),
            "Condition": {"ArnEquals": {"aws:SourceArn": arn(rule)}},
        }

    return {
        "Queues": [ref(queue)],
        "PolicyDocument": document(
            sends("RefreshRequestedRule"),
            only_if("ShareAcrossAccounts", sends("RemoteRefreshRequestedRule")),
        ),
    }


RESOURCE_POLICIES: dict[str, dict[str, Any]] = {
    "RefreshCredentialSecretPolicy": {
        "SecretId": ref("RefreshCredentialSecret"),
        "BlockPublicPolicy": True,
        "ResourcePolicy": document(
            {
                "Sid": "OnlyTheProductsFunctionsReadTheRefreshCredential",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": "*",
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": THE_FUNCTIONS_ROLES}},
            },
            only_if(
                "HardenRefreshCredential",
                {
                    "Sid": "OnlyTheFunctionsAndNamedAdministratorsWriteTheRefreshCredential",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "secretsmanager:PutSecretValue",
                    "Resource": "*",
                    "Condition": {
                        "ArnNotEquals": {
                            "aws:PrincipalArn": {
                                "Fn::Split": [
                                    ",",
                                    {
                                        "Fn::Sub": [
                                            "${Rotator},${Bootstrap},"
                                            "${RefreshCredentialAdministrators}",
                                            {
                                                "Rotator": arn("RotatorRole"),
                                                "Bootstrap": arn("BootstrapRole"),
                                            },
                                        ]
                                    },
                                ]
                            }
                        }
                    },
                },
            ),
            only_if(
                "HardenRefreshCredential",
                {
                    "Sid": "OnlyNamedAdministratorsChangeOrDeleteTheRefreshCredential",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": [
                        "secretsmanager:UpdateSecret",
                        "secretsmanager:UpdateSecretVersionStage",
                        "secretsmanager:RotateSecret",
                        "secretsmanager:CancelRotateSecret",
                        "secretsmanager:DeleteSecret",
                        "secretsmanager:RestoreSecret",
                        "secretsmanager:PutResourcePolicy",
                        "secretsmanager:DeleteResourcePolicy",
                        "secretsmanager:ReplicateSecretToRegions",
                        "secretsmanager:RemoveRegionsFromReplication",
                        "secretsmanager:StopReplicationToReplica",
                        "secretsmanager:TagResource",
                        "secretsmanager:UntagResource",
                    ],
                    "Resource": "*",
                    "Condition": {
                        "ArnNotEquals": {
                            "aws:PrincipalArn": {
                                "Fn::Split": [",", ref("RefreshCredentialAdministrators")]
                            }
                        }
                    },
                },
            ),
        ),
    },
    # The requests EventBridge could not deliver go to a queue of their own, which admits the two
    # refresh rules' dead letters and nothing else; RotationDeadLetterQueue has no resource
    # policy (the rotator's role and the schedule's role send there).
    "UndeliveredRefreshRequestQueuePolicy": rules_send_to(
        "UndeliveredRefreshRequestQueue", "Undelivered"
    ),
    "AlarmTopicPolicy": {
        "Topics": [ref("AlarmTopic")],
        "PolicyDocument": document(
            {
                "Sid": "ThisAccountsAlarmsPublish",
                "Effect": "Allow",
                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                "Action": "sns:Publish",
                "Resource": ref("AlarmTopic"),
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": ref("AWS::AccountId")},
                    "ArnLike": {
                        "aws:SourceArn": sub(
                            "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}"
                            ":alarm:*"
                        )
                    },
                },
            }
        ),
    },
    # A key policy's "*" resource is the key itself (AWS KMS Developer Guide, "Key policies").
    "AlarmTopicKey": {
        "EnableKeyRotation": True,
        "KeyPolicy": document(
            THE_ACCOUNT_ADMINISTERS_THE_KEY,
            {
                "Sid": "ThisAccountsAlarmsPublishToTheEncryptedTopic",
                "Effect": "Allow",
                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:SourceAccount": ref("AWS::AccountId")}},
            },
        ),
    },
    # The refresh requests' queue admits what the two refresh rules send, nothing else.
    "RefreshRequestQueuePolicy": rules_send_to("RefreshRequestQueue", "Requests"),
    # OneClickReauthorization: the signing key is readable by the links function's role alone.
    "LinkSigningKeySecretPolicy": {
        "SecretId": ref("LinkSigningKeySecret"),
        "BlockPublicPolicy": True,
        "ResourcePolicy": document(
            {
                "Sid": "OnlyTheLinksFunctionReadsTheSigningKey",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": "*",
                "Condition": {"ArnNotEquals": {"aws:PrincipalArn": arn("LinksRole")}},
            }
        ),
    },
    # The public function URL (AuthType NONE): anyone may call the URL, and the function only
    # through it (the two permissions Lambda requires of a public URL; SAM generates them).
    "LinksFunctionUrlPublicPermissions": {
        "Action": "lambda:InvokeFunctionUrl",
        "FunctionName": ref("LinksFunction"),
        "Principal": "*",
        "FunctionUrlAuthType": "NONE",
    },
    "LinksFunctionURLInvokeAllowPublicAccess": {
        "Action": "lambda:InvokeFunction",
        "FunctionName": ref("LinksFunction"),
        "Principal": "*",
        "InvokedViaFunctionUrl": True,
    },
    "LinksFunctionAlarmStateChangePermission": {
        "Action": "lambda:InvokeFunction",
        "FunctionName": ref("LinksFunction"),
        "Principal": "events.amazonaws.com",
        "SourceArn": arn("LinksFunctionAlarmStateChange"),
    },
}


def shared_with(
    action: dict[str, Any], sid: tuple[str, str], condition: dict[str, Any]
) -> list[Any]:
    """The three statements of a shared resource's policy: the listed accounts' (named as
    principals), the whole organisation's and its organizational units' (a wildcard principal
    narrowed to the organisation, this account's principals left out), each with ``action``
    (Action and Resource) and ``condition``; present as their parameters are set. ``sid``: the
    endings of their Sids, for a plural and a singular subject."""
    organisation = {
        **condition,
        "StringEquals": {
            "aws:PrincipalOrgID": ref("ConsumerOrganizationId"),
            **condition.get("StringEquals", {}),
        },
        "StringNotEquals": {"aws:PrincipalAccount": ref("AWS::AccountId")},
    }
    paths = {
        "ForAnyValue:StringLike": {"aws:PrincipalOrgPaths": ref("ConsumerOrganizationalUnitPaths")}
    }
    accounts = {
        "Sid": f"ConsumerAccounts{sid[0]}",
        "Effect": "Allow",
        "Principal": {"AWS": ref("ConsumerAccountIds")},
        **action,
    }
    if condition:
        accounts["Condition"] = condition
    return [
        only_if("HasConsumerAccounts", accounts),
        only_if(
            "ShareWithTheOrganization",
            {
                "Sid": f"TheOrganization{sid[1]}",
                "Effect": "Allow",
                "Principal": "*",
                **action,
                "Condition": organisation,
            },
        ),
        only_if(
            "ShareWithOrganizationalUnits",
            {
                "Sid": f"TheOrganizationalUnits{sid[0]}",
                "Effect": "Allow",
                "Principal": "*",
                **action,
                "Condition": {**organisation, **paths},
            },
        ),
    ]


THIS_SECRETS_VERSIONS = {
    "StringLike": {
        "kms:EncryptionContext:SecretARN": sub(
            "arn:${AWS::Partition}:secretsmanager:${AWS::Region}:${AWS::AccountId}:secret:"
            "${AWS::StackName}/service-token-??????"
        )
    }
}
REFRESH_BUS = sub(
    "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/"
    "${AWS::StackName}-refresh-requests"
)
# Sharing the service token: its secret's policy (GetSecretValue and DescribeSecret only; "*"
# is the secret the policy is attached to), the key's (Decrypt through Secrets Manager, of this
# secret's versions only), and the refresh requests' bus (PutEvents of refresh requests only).
RESOURCE_POLICIES["ServiceTokenSecretPolicy"] = {
    "SecretId": ref("ServiceTokenSecret"),
    "BlockPublicPolicy": True,
    "ResourcePolicy": document(
        *shared_with(
            {
                "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                "Resource": "*",
            },
            ("ReadTheServiceToken", "ReadsTheServiceToken"),
            {},
        )
    ),
}
RESOURCE_POLICIES["ServiceTokenKey"] = {
    "EnableKeyRotation": True,
    "MultiRegion": True,
    "KeyPolicy": document(
        THE_ACCOUNT_ADMINISTERS_THE_KEY,
        *shared_with(
            {"Action": "kms:Decrypt", "Resource": "*"},
            (
                "DecryptTheServiceTokenThroughSecretsManager",
                "DecryptsTheServiceTokenThroughSecretsManager",
            ),
            {**THROUGH_SECRETS_MANAGER, **THIS_SECRETS_VERSIONS},
        ),
    ),
}
RESOURCE_POLICIES["RefreshRequestBus"] = {
    "Name": sub("${AWS::StackName}-refresh-requests"),
    "Policy": document(
        *shared_with(
            {"Action": "events:PutEvents", "Resource": REFRESH_BUS},
            ("RequestRefreshes", "RequestsRefreshes"),
            {
                "StringEquals": {"events:detail-type": "Service Token Refresh Requested"},
                "ForAllValues:StringEquals": {"events:source": "cmstoken.consumer"},
            },
        )
    ),
}

RESOURCE_POLICY_CONDITIONS = {
    "ServiceTokenSecretPolicy": "ShareAcrossAccounts",
    "ServiceTokenKey": "CreateServiceTokenKey",
    "RefreshRequestBus": "ShareAcrossAccounts",
    "AlarmTopicKey": "CreateAlarmTopicKey",
    "LinkSigningKeySecretPolicy": ONE_CLICK,
    "LinksFunctionUrlPublicPermissions": ONE_CLICK,
    "LinksFunctionURLInvokeAllowPublicAccess": ONE_CLICK,
    "LinksFunctionAlarmStateChangePermission": ONE_CLICK,
}

# The conditions that switch statements or policy-bearing resources on, as written.
GATES = {
    "HasKmsKey": {"Fn::Not": [{"Fn::Equals": [ref("KmsKeyArn"), ""]}]},
    "HardenRefreshCredential": {
        "Fn::Not": [{"Fn::Equals": [ref("RefreshCredentialAdministrators"), ""]}]
    },
    "DeployExample": {"Fn::Equals": [ref("DeployExampleConsumer"), "true"]},
    "CreateAlarmTopicKey": {"Fn::Equals": [ref("AlarmTopicKmsKey"), "create"]},
    "EncryptAlarmTopicWithGivenKey": {
        "Fn::Not": [
            {
                "Fn::Or": [
                    {"Fn::Equals": [ref("AlarmTopicKmsKey"), ""]},
                    {"Fn::Equals": [ref("AlarmTopicKmsKey"), "create"]},
                ]
            }
        ]
    },
    ONE_CLICK: {"Fn::Equals": [ref("OneClickReauthorization"), "true"]},
    "HasConsumerAccounts": {
        "Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", ref("ConsumerAccountIds")]}, ""]}]
    },
    "HasConsumerOrganization": {"Fn::Not": [{"Fn::Equals": [ref("ConsumerOrganizationId"), ""]}]},
    "HasConsumerOrganizationalUnits": {
        "Fn::Not": [
            {"Fn::Equals": [{"Fn::Join": ["", ref("ConsumerOrganizationalUnitPaths")]}, ""]}
        ]
    },
    "ShareWithTheOrganization": {
        "Fn::And": [
            {"Condition": "HasConsumerOrganization"},
            {"Fn::Not": [{"Condition": "HasConsumerOrganizationalUnits"}]},
        ]
    },
    "ShareWithOrganizationalUnits": {
        "Fn::And": [
            {"Condition": "HasConsumerOrganization"},
            {"Condition": "HasConsumerOrganizationalUnits"},
        ]
    },
    "ShareAcrossAccounts": {
        "Fn::Or": [{"Condition": "HasConsumerAccounts"}, {"Condition": "HasConsumerOrganization"}]
    },
    # Replicas asked for; the two other conditions are true or refuse the stack
    # (test_sharing.py: test_a_single_region_key_with_replicas_is_refused_before_any_resource).
    "HasReplicaRegions": {
        "Fn::And": [
            {"Fn::Not": [{"Fn::Equals": [{"Fn::Join": ["", ref("ReplicaRegions")]}, ""]}]},
            {"Condition": "ReplicaRegionsFitTheirPlaces"},
            {"Condition": "GivenKeyHasReplicas"},
        ]
    },
    "UseServiceTokenKey": {
        "Fn::Or": [{"Condition": "ShareAcrossAccounts"}, {"Condition": "HasReplicaRegions"}]
    },
    "CreateServiceTokenKey": {
        "Fn::And": [
            {"Condition": "UseServiceTokenKey"},
            {"Fn::Equals": [ref("ServiceTokenKmsKeyArn"), ""]},
        ]
    },
    **{
        f"HasReplicaRegion{i + 1}": {"Fn::Not": [{"Fn::Equals": [replica_region(i), ""]}]}
        for i in range(1, 5)
    },
}

# Resource types that grant access without a policy document of their own.
PERMISSION_TYPES = {"AWS::Lambda::Permission", "AWS::Lambda::LayerVersionPermission"}


def resources() -> dict[str, Any]:
    return transformed()["Resources"]  # type: ignore[no-any-return]


def without_description(properties: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in properties.items() if key != "Description"}


def holds_a_policy(value: Any) -> bool:
    """Whether a policy document (a mapping with ``Statement``) is anywhere inside."""
    if isinstance(value, dict):
        return "Statement" in value or any(holds_a_policy(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_a_policy(item) for item in value)
    return False


def test_every_role_and_policy_of_the_template_is_in_a_table() -> None:
    """A role, policy, or permission-bearing resource added to the template fails here until
    its statements are written into the tables below."""
    found = resources()
    iam = {name for name, r in found.items() if r["Type"].startswith("AWS::IAM::")}
    assert iam == set(ROLES) | set(MANAGED_POLICIES) | set(ROLE_POLICIES) | set(POLICIES)
    for name in ROLES:
        assert found[name]["Type"] == "AWS::IAM::Role"
    for name in MANAGED_POLICIES:
        assert found[name]["Type"] == "AWS::IAM::ManagedPolicy"
    for name in ROLE_POLICIES:
        assert found[name]["Type"] == "AWS::IAM::RolePolicy"
    for name in POLICIES:
        assert found[name]["Type"] == "AWS::IAM::Policy"
    granting = {
        name
        for name, r in found.items()
        if not r["Type"].startswith("AWS::IAM::")
        and (r["Type"] in PERMISSION_TYPES or holds_a_policy(r.get("Properties", {})))
    }
    assert granting == set(RESOURCE_POLICIES)


@pytest.mark.parametrize("name", ROLES)
def test_each_role_grants_exactly_its_table(name: str) -> None:
    role = resources()[name]
    expected = ROLES[name]
    assert role.get("Condition") == expected.condition
    assert set(role) <= {"Type", "Condition", "Properties"}
    assert without_description(role["Properties"]) == expected.properties()


@pytest.mark.parametrize("name", MANAGED_POLICIES)
def test_each_managed_policy_grants_exactly_its_table(name: str) -> None:
    policy = resources()[name]
    assert "Condition" not in policy
    assert without_description(policy["Properties"]) == {"PolicyDocument": MANAGED_POLICIES[name]}


@pytest.mark.parametrize("name", ROLE_POLICIES)
def test_each_role_policy_grants_exactly_its_table(name: str) -> None:
    policy = resources()[name]
    assert policy.get("Condition") == ROLE_POLICY_CONDITIONS[name]
    assert set(policy) <= {"Type", "Condition", "Properties"}
    assert policy["Properties"] == ROLE_POLICIES[name]


@pytest.mark.parametrize("name", POLICIES)
def test_each_policy_of_several_roles_grants_exactly_its_table(name: str) -> None:
    policy = resources()[name]
    assert policy.get("Condition") == POLICY_CONDITIONS[name]
    assert set(policy) <= {"Type", "Condition", "Properties"}
    assert policy["Properties"] == POLICIES[name]


@pytest.mark.parametrize("name", RESOURCE_POLICIES)
def test_each_resource_policy_is_exactly_its_table(name: str) -> None:
    resource = resources()[name]
    assert resource.get("Condition") == RESOURCE_POLICY_CONDITIONS.get(name)
    assert without_description(resource["Properties"]) == RESOURCE_POLICIES[name]


def test_the_conditions_that_gate_permissions_are_as_written() -> None:
    conditions = transformed()["Conditions"]
    for name, expression in GATES.items():
        assert conditions[name] == expression, name
