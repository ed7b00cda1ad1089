"""The template's part of one-click re-authorization (issue 21), read from the SAM-transformed
template with its intrinsic functions resolved for one set of parameter values.

``OneClickReauthorization`` is off by default, and off the stack is what it was before the
feature: the same resources, none of the new ones. On, the links function has a public function
URL and nothing more than its contract: it reads the signing key (which nobody else may read),
keeps its state in its table, asks the bootstrap function, publishes to the alarm topic, and
learns its own URL; the bootstrap sends its asynchronous poll outcomes to it and may invoke
nothing else. Where cheap, each check is also run on a doctored template, to show that it sees
what it looks for."""

from __future__ import annotations

import copy
import fnmatch
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from cmstoken.bootstrap.request import through_links
from cmstoken.core.link_tags import LINKS_ALIAS
from cmstoken.core.settings import LinksSettings
from template_model import (
    SHARING,
    Resolver,
    as_list,
    of_type,
    parameter_values,
    source,
    statements,
    transformed,
)

ON = {"OneClickReauthorization": "true"}
GIVEN_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
# Every resource the feature adds (after the SAM transform), all under OneClickEnabled.
ONE_CLICK = {
    "LinksRole": "AWS::IAM::Role",
    "LinksReadOwnUrl": "AWS::IAM::RolePolicy",
    "LinkSigningKeySecret": "AWS::SecretsManager::Secret",
    "LinkSigningKeySecretPolicy": "AWS::SecretsManager::ResourcePolicy",
    "LinksTable": "AWS::DynamoDB::Table",
    "LinksLogGroup": "AWS::Logs::LogGroup",
    "LinksFunction": "AWS::Lambda::Function",
    "LinksFunctionUrl": "AWS::Lambda::Url",
    "LinksFunctionUrlPublicPermissions": "AWS::Lambda::Permission",
    "LinksFunctionURLInvokeAllowPublicAccess": "AWS::Lambda::Permission",
    "LinksFunctionAlarmStateChange": "AWS::Events::Rule",
    "LinksFunctionAlarmStateChangePermission": "AWS::Lambda::Permission",
    "LinksFunctionReminder": "AWS::Scheduler::Schedule",
    "LinksFunctionReminderRole": "AWS::IAM::Role",
    "BootstrapOutcomeDestinations": "AWS::Lambda::EventInvokeConfig",
    "BootstrapSendsOutcomesToLinks": "AWS::IAM::RolePolicy",
    "BootstrapLinksAlias": "AWS::Lambda::Alias",
}
ONE_CLICK_OUTPUTS = {"LinksUrl", "LinksFunctionName", "LinkSigningKeySecretArn", "LinksTableName"}
# The transformed template's logical ids before issue 21 (main at 97d593c; the layer's without
# the hash SAM appends): with the parameter off, the stack is exactly these, each resolving to
# what it resolved to then (checked when the feature was added, for the defaults and with every
# other optional resource on). Since issue 29 the refresh requests coalesce in a queue
# (RefreshRequestQueue, its policy and the rotator's mapping) instead of the rule's permission;
# since issue 36 the requests that kept failing and those EventBridge could not deliver have
# queues of their own (FailedRefreshRequestQueue, UndeliveredRefreshRequestQueue and its policy),
# and RotationDeadLetterQueue no policy.
BEFORE = {
    "AlarmEmailSubscription",
    "AlarmTopic",
    "AlarmTopicKey",
    "AlarmTopicKeyAlias",
    "AlarmTopicPolicy",
    "AuthorizationRequiredAlarm",
    "BootstrapFunction",
    "BootstrapLogGroup",
    "BootstrapRole",
    "ConsumerPolicy",
    "ConsumerRefreshRequestPolicy",
    "CredentialLostAlarm",
    "Dashboard",
    "ExampleConsumerFunction",
    "ExampleConsumerLogGroup",
    "ExampleConsumerRole",
    "FailedRefreshRequestQueue",
    "RefreshCredentialSecret",
    "RefreshCredentialSecretPolicy",
    "RefreshFamilyAgingAlarm",
    "RefreshRequestQueue",
    "RefreshRequestQueuePolicy",
    "RefreshRequestedRule",
    "RotationDeadLetterQueue",
    "RotationFailingAlarm",
    "RotatorFunction",
    "RotatorFunctionEventInvokeConfig",
    "RotatorFunctionRefreshRequests",
    "RotatorFunctionSchedule",
    "RotatorFunctionScheduleRole",
    "RotatorHeartbeatAlarm",
    "RotatorLogGroup",
    "RotatorRole",
    "RotatorSilentAlarm",
    "ServiceTokenExpiringAlarm",
    "ServiceTokenSecret",
    "SharedLayer",
    "UndeliveredRefreshRequestQueue",
    "UndeliveredRefreshRequestQueuePolicy",
}
OPTIONAL = {  # every other optional resource on
    "AlarmTopicKmsKey": "create",
    "KmsKeyArn": GIVEN_KEY,
    "AlarmEmail": "ops@example.com",
    "DeployExampleConsumer": "true",
    "RefreshCredentialAdministrators": "arn:aws:iam::123456789012:role/administrator",
}


def resources() -> dict[str, Any]:
    return transformed()["Resources"]  # type: ignore[no-any-return]


def resolver(**parameters: Any) -> Resolver:
    return Resolver(parameter_values(**parameters))


def logical_ids(found: Mapping[str, Any]) -> set[str]:
    """Logical ids, the layer's without the content hash SAM appends to it."""
    return {
        "SharedLayer" if r["Type"] == "AWS::Lambda::LayerVersion" else name
        for name, r in found.items()
    }


def present(values: Resolver, template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The resources the stack holds under these values, resolved."""
    found = (template or transformed())["Resources"]
    return {name: values.resolve(r) for name, r in found.items() if values.present(r)}


def mentions(value: Any, names: set[str]) -> set[str]:
    """The logical ids among ``names`` that a fragment references (Ref, GetAtt, Sub)."""
    text = json.dumps(value)
    return {
        name
        for name in names
        if f'"Ref": "{name}"' in text
        or f'"Fn::GetAtt": ["{name}"' in text
        or f"${{{name}}}" in text
        or f"${{{name}." in text
    }


# --- off: the stack as it was -----------------------------------------------------------


def test_the_parameter_is_off_by_default_and_says_it_adds_a_public_url() -> None:
    parameter = source()["Parameters"]["OneClickReauthorization"]
    assert parameter["Default"] == "false"
    assert parameter["AllowedValues"] == ["true", "false"]
    assert "public" in parameter["Description"]
    assert "function URL" in parameter["Description"]
    assert source()["Conditions"]["OneClickEnabled"] == {
        "Fn::Equals": [{"Ref": "OneClickReauthorization"}, "true"]
    }


def test_every_new_resource_and_output_is_under_the_condition() -> None:
    found = resources()
    assert {name: found[name]["Type"] for name in ONE_CLICK} == ONE_CLICK
    for name in ONE_CLICK:
        assert found[name]["Condition"] == "OneClickEnabled", name
    assert logical_ids(found) == BEFORE | set(ONE_CLICK) | set(SHARING)
    outputs = transformed()["Outputs"]
    for name in ONE_CLICK_OUTPUTS:
        assert outputs[name]["Condition"] == "OneClickEnabled", name


@pytest.mark.parametrize("others", [{}, OPTIONAL], ids=["defaults", "everything else on"])
def test_off_the_stack_is_what_it_was(others: dict[str, str]) -> None:
    """Off: none of the new resources or outputs, every other one present as before, and no
    resource that stays references one that goes."""
    values = resolver(**others)
    held = present(values)
    later = set(ONE_CLICK) | set(SHARING)  # sharing is off here too (test_sharing.py)
    before = {name: r for name, r in resources().items() if name not in later}
    assert logical_ids(before) == BEFORE
    assert set(held) == {name for name, r in before.items() if values.present(r)}
    for name, resource in resources().items():
        if name not in ONE_CLICK:
            assert not mentions(resource, set(ONE_CLICK)), name
    outputs = {n for n, o in transformed()["Outputs"].items() if values.present(o)}
    assert not outputs & ONE_CLICK_OUTPUTS
    # Control: on, exactly the new ones are added.
    on = present(resolver(**others, **ON))
    assert set(on) - set(held) == set(ONE_CLICK)


# --- on: the links function and its URL ------------------------------------------------------


def links_function(**parameters: Any) -> dict[str, Any]:
    return present(resolver(**ON, **parameters))["LinksFunction"]["Properties"]  # type: ignore[no-any-return]


def test_the_function_url_is_public_buffered_and_without_cors() -> None:
    """A public function URL (AuthType NONE) answers only when the function's resource-based
    policy lets everyone invoke it through the URL: ``lambda:InvokeFunctionUrl`` with
    ``FunctionUrlAuthType: NONE`` and, since October 2025, ``lambda:InvokeFunction`` with
    ``InvokedViaFunctionUrl`` (AWS Lambda Developer Guide, "Control access to Lambda function
    URLs", https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html). moto neither models the
    URL nor evaluates the policy: the template must hold both statements, and nothing wider."""
    url = present(resolver(**ON))["LinksFunctionUrl"]["Properties"]
    assert url == {
        "TargetFunctionArn": "<LinksFunction>",
        "AuthType": "NONE",
        "InvokeMode": "BUFFERED",
    }
    assert "Cors" not in url
    # Control: the function's configuration as written asks for the same.
    written = source()["Resources"]["LinksFunction"]["Properties"]["FunctionUrlConfig"]
    assert written == {"AuthType": "NONE", "InvokeMode": "BUFFERED"}
    public = {
        name: r["Properties"]
        for name, r in present(resolver(**ON)).items()
        if r["Type"] == "AWS::Lambda::Permission" and r["Properties"].get("Principal") == "*"
    }
    assert sorted(public.values(), key=lambda p: p["Action"]) == [
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": "<LinksFunction>",
            "Principal": "*",
            "InvokedViaFunctionUrl": True,
        },
        {
            "Action": "lambda:InvokeFunctionUrl",
            "FunctionName": "<LinksFunction>",
            "Principal": "*",
            "FunctionUrlAuthType": "NONE",
        },
    ]


def test_the_function_is_bounded_and_configured_by_the_contract() -> None:
    function = links_function()
    assert function["ReservedConcurrentExecutions"] == 10
    assert function["Timeout"] == 30
    assert function["Handler"] == "app.lambda_handler"
    assert function["Role"] == "<LinksRole.Arn>"
    assert function["LoggingConfig"] == {"LogGroup": "<LinksLogGroup>"}
    variables = function["Environment"]["Variables"]
    own = {
        "STACK_NAME": "cmstoken-prod",
        "LINKS_KEY_SECRET_ID": "<LinkSigningKeySecret>",
        "LINKS_TABLE": "<LinksTable>",
        "BOOTSTRAP_FUNCTION_NAME": "<BootstrapLinksAlias>",
        "ALARM_TOPIC_ARN": "<AlarmTopic>",
        "REAUTHORIZATION_WARNING_SECONDS": "2160000",
        "LINKS_STARTS_PER_HOUR": "6",
    }
    assert {key: variables.get(key) for key in own} == own
    shared = source()["Globals"]["Function"]["Environment"]["Variables"]
    assert set(variables) == set(own) | set(shared)  # besides Globals, nothing
    settings = LinksSettings.from_environ(variables)  # what the function reads, all there
    assert (settings.stack_name, settings.starts_per_hour) == ("cmstoken-prod", 6)
    warning = links_function(ReauthorizationWarningSeconds=0)["Environment"]["Variables"]
    assert warning["REAUTHORIZATION_WARNING_SECONDS"] == "0"  # control: the parameter's
    assert source()["Resources"]["LinksFunction"]["Properties"]["CodeUri"] == "functions/links/"
    group = present(resolver(**ON, LogRetentionDays=30))["LinksLogGroup"]["Properties"]
    assert group == {"LogGroupName": "/cmstoken/cmstoken-prod/links", "RetentionInDays": "30"}


# --- on: who may do what ---------------------------------------------------------------------


def identity_statements(held: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(role, statement) for every Allow of every role: its inline policies, its managed policies
    of the template, and the AWS::IAM::RolePolicy resources put on it."""
    managed = {
        f"<{name}>": r["Properties"]["PolicyDocument"]
        for name, r in held.items()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
    }
    for name, role in held.items():
        if role["Type"] != "AWS::IAM::Role":
            continue
        properties = role["Properties"]
        documents = [policy["PolicyDocument"] for policy in properties.get("Policies", [])]
        documents += [managed[arn] for arn in properties.get("ManagedPolicyArns", [])]
        documents += [
            r["Properties"]["PolicyDocument"]
            for r in held.values()
            if r["Type"] == "AWS::IAM::RolePolicy" and r["Properties"]["RoleName"] == f"<{name}>"
        ]
        for document in documents:
            for statement in statements(document):
                if statement["Effect"] == "Allow":
                    yield name, statement


KEY_ARN = (
    "arn:aws:secretsmanager:us-east-1:123456789012:secret:cmstoken-prod/link-signing-key-AbCdEf"
)


def readers_of_the_signing_key(held: Mapping[str, Any]) -> set[str]:
    """The roles allowed secretsmanager:GetSecretValue on something that may be the signing key:
    the key itself, ``*``, or a pattern its ARN matches (NotAction and NotResource count as
    allowing it)."""
    readers = set()
    for role, statement in identity_statements(held):
        actions = as_list(statement.get("Action", "*"))
        if "NotAction" not in statement and not any(
            fnmatch.fnmatch("secretsmanager:getsecretvalue", str(a).lower()) for a in actions
        ):
            continue
        targets = as_list(statement.get("Resource", "*"))
        if "NotResource" in statement or any(
            target == "<LinkSigningKeySecret>" or fnmatch.fnmatch(KEY_ARN, str(target))
            for target in targets
        ):
            readers.add(role)
    return readers


@pytest.mark.parametrize("others", [{}, OPTIONAL], ids=["defaults", "everything else on"])
def test_no_role_but_the_links_role_may_read_the_signing_key(others: dict[str, str]) -> None:
    held = present(resolver(**ON, **others))
    assert readers_of_the_signing_key(held) == {"LinksRole"}
    # Controls: a wildcard, a pattern or a NotResource anywhere else is seen.
    for grant in (
        {"Action": "secretsmanager:GetSecretValue", "Resource": "*"},
        {"Action": "secretsmanager:Get*", "Resource": "arn:aws:secretsmanager:*:*:secret:*"},
        {"Action": "*", "NotResource": "<RefreshCredentialSecret>"},
    ):
        doctored = copy.deepcopy(held)
        document = doctored["RotatorRole"]["Properties"]["Policies"][0]["PolicyDocument"]
        document["Statement"].append({"Effect": "Allow", **grant})
        assert readers_of_the_signing_key(doctored) == {"LinksRole", "RotatorRole"}, grant


def test_the_credential_secrets_are_not_the_links_roles() -> None:
    """Whatever the links function learns of the credential, it learns from the bootstrap: its
    role names no secret but the signing key, and no customer key of the secrets."""
    held = present(resolver(**ON, **OPTIONAL))
    granted = {
        str(target)
        for role, statement in identity_statements(held)
        if role == "LinksRole"
        for target in as_list(statement["Resource"])
    }
    assert "<RefreshCredentialSecret>" not in granted
    assert "<ServiceTokenSecret>" not in granted
    assert GIVEN_KEY not in granted  # KmsKeyArn, the credential secrets' key


def links_role_grants(**parameters: Any) -> dict[str, tuple[set[str], set[str]]]:
    """The links role's statements as Sid -> (actions, resources)."""
    held = present(resolver(**ON, **parameters))
    return {
        statement["Sid"]: (set(as_list(statement["Action"])), set(as_list(statement["Resource"])))
        for role, statement in identity_statements(held)
        if role == "LinksRole"
    }


LINKS_ROLE = {
    "ReadTheLinkSigningKey": ({"secretsmanager:GetSecretValue"}, {"<LinkSigningKeySecret>"}),
    "KeepTheLinkState": (
        {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"},
        {"<LinksTable.Arn>"},
    ),
    "AskTheBootstrapThroughItsLinksAlias": ({"lambda:InvokeFunction"}, {"<BootstrapLinksAlias>"}),
    "SendNotices": ({"sns:Publish"}, {"<AlarmTopic>"}),
    "WriteItsLogs": ({"logs:CreateLogStream", "logs:PutLogEvents"}, {"<LinksLogGroup.Arn>"}),
    "SendTraces": ({"xray:PutTraceSegments", "xray:PutTelemetryRecords"}, {"*"}),
    "ReadItsOwnUrl": ({"lambda:GetFunctionUrlConfig"}, {"<LinksFunction.Arn>"}),
}
TOPIC_KEY_USE = {"kms:Decrypt", "kms:GenerateDataKey"}


@pytest.mark.parametrize(
    ("encryption", "key_grant"),
    [
        ("", {}),
        ("create", {"PublishThroughTheStacksTopicKey": (TOPIC_KEY_USE, {"<AlarmTopicKey.Arn>"})}),
        (GIVEN_KEY, {"PublishThroughTheGivenTopicKey": (TOPIC_KEY_USE, {GIVEN_KEY})}),
    ],
    ids=["topic unencrypted", "stack's topic key", "given topic key"],
)
def test_the_links_role_grants_exactly_its_contract(
    encryption: str, key_grant: dict[str, Any]
) -> None:
    """The signing key, the table, the bootstrap, the topic (and its key, through SNS only,
    when the topic is encrypted), its own log group and URL, X-Ray; nothing else."""
    assert links_role_grants(AlarmTopicKmsKey=encryption) == {**LINKS_ROLE, **key_grant}
    held = present(resolver(**ON, AlarmTopicKmsKey=encryption))
    for role, statement in identity_statements(held):
        if role == "LinksRole" and statement["Sid"].startswith("PublishThrough"):
            assert statement["Condition"] == {
                "StringEquals": {"kms:ViaService": "sns.us-east-1.amazonaws.com"}
            }


def excepted_from_the_read_deny(policy: Mapping[str, Any]) -> set[str]:
    """The principals a secret's resource policy leaves able to read it: those excepted from
    a Deny of GetSecretValue to everyone (everyone when there is no such Deny, or an Allow)."""
    excepted: set[str] = {"*"}
    for statement in policy["Statement"]:
        if statement["Effect"] == "Allow":
            return {"*"}
        if (
            statement["Principal"] == "*"
            and "secretsmanager:GetSecretValue" in as_list(statement["Action"])
            and statement["Resource"] == "*"
            and set(statement["Condition"]) == {"ArnNotEquals"}
        ):
            excepted = set(as_list(statement["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]))
    return excepted


def test_the_signing_keys_policy_denies_reading_to_all_but_the_links_role() -> None:
    """An explicit Deny in a resource-based policy overrides any Allow of an identity policy
    (IAM User Guide, "Policy evaluation logic",
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html;
    Secrets Manager User Guide, "Resource-based policies",
    https://docs.aws.amazon.com/secretsmanager/latest/userguide/auth-and-access_resource-policies.html),
    so a principal of the account with ``secretsmanager:*`` still cannot read the key. moto
    does not evaluate either policy: the statement is checked as written."""
    policy = present(resolver(**ON))["LinkSigningKeySecretPolicy"]["Properties"]
    assert policy["SecretId"] == "<LinkSigningKeySecret>"
    assert policy["BlockPublicPolicy"] is True
    assert excepted_from_the_read_deny(policy["ResourcePolicy"]) == {"<LinksRole.Arn>"}
    # Controls: a second exception, or no deny, is seen.
    doctored = copy.deepcopy(policy["ResourcePolicy"])
    doctored["Statement"][0]["Condition"]["ArnNotEquals"]["aws:PrincipalArn"] = [
        "<LinksRole.Arn>",
        "<RotatorRole.Arn>",
    ]
    assert excepted_from_the_read_deny(doctored) == {"<LinksRole.Arn>", "<RotatorRole.Arn>"}
    assert excepted_from_the_read_deny({"Statement": []}) == {"*"}


def test_the_signing_key_is_generated_and_goes_with_the_stack() -> None:
    resource = resources()["LinkSigningKeySecret"]
    assert resource["DeletionPolicy"] == "Delete"
    assert resource["UpdateReplacePolicy"] == "Delete"
    secret = present(resolver(**ON))["LinkSigningKeySecret"]["Properties"]
    assert secret["Name"] == "cmstoken-prod/link-signing-key"
    assert secret["GenerateSecretString"] == {"PasswordLength": 64, "ExcludePunctuation": True}
    assert "SecretString" not in secret
    assert resources()["LinkSigningKeySecretPolicy"]["DeletionPolicy"] == "Delete"


def invocations_by(role: str, held: Mapping[str, Any]) -> set[str]:
    return {
        str(target)
        for name, statement in identity_statements(held)
        if name == role
        and any(
            fnmatch.fnmatch("lambda:invokefunction", str(a).lower())
            for a in as_list(statement["Action"])
        )
        for target in as_list(statement["Resource"])
    }


def test_the_bootstrap_may_invoke_only_the_links_function() -> None:
    """Lambda sends an asynchronous invocation's record to a Lambda destination with the
    function's execution role, which must be allowed ``lambda:InvokeFunction`` on it (AWS
    Lambda Developer Guide, "Capturing records of Lambda asynchronous invocations",
    https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html). moto
    runs no destination: the bootstrap's role is checked to hold exactly that permission."""
    held = present(resolver(**ON))
    assert invocations_by("BootstrapRole", held) == {"<LinksFunction.Arn>"}
    policy = held["BootstrapSendsOutcomesToLinks"]["Properties"]
    assert policy["RoleName"] == "<BootstrapRole>"
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert statement["Action"] == "lambda:InvokeFunction"
    # Control: off, the bootstrap invokes nothing (the attached policy is what was found).
    assert invocations_by("BootstrapRole", present(resolver())) == set()


def test_the_bootstraps_asynchronous_outcomes_go_to_the_links_function_unretried() -> None:
    """Lambda checks the execution role's permission on the destination when the invoke
    configuration is saved (same document as above), so the configuration must be created
    after the role policy that grants it: ``DependsOn``, which moto's CloudFormation, which does
    not model ``AWS::Lambda::EventInvokeConfig``, cannot show."""
    held = present(resolver(**ON))
    config = held["BootstrapOutcomeDestinations"]
    assert config["DependsOn"] == ["BootstrapSendsOutcomesToLinks", "BootstrapLinksAlias"]
    assert config["Properties"] == {
        "FunctionName": "<BootstrapFunction>",
        "Qualifier": LINKS_ALIAS,  # the links' polls go through the alias
        "MaximumRetryAttempts": 0,
        "DestinationConfig": {
            "OnSuccess": {"Destination": "<LinksFunction.Arn>"},
            "OnFailure": {"Destination": "<LinksFunction.Arn>"},
        },
    }
    # Control: the only other invoke config is the rotator's, to its dead letter queue.
    others = {
        name: r["Properties"]["FunctionName"]
        for name, r in held.items()
        if r["Type"] == "AWS::Lambda::EventInvokeConfig" and name != "BootstrapOutcomeDestinations"
    }
    assert others == {"RotatorFunctionEventInvokeConfig": "<RotatorFunction>"}


def test_the_links_reach_the_bootstrap_only_through_its_alias() -> None:
    """The links function's role may invoke the bootstrap's alias ``links`` and nothing else of
    it: an IAM statement on a qualified ARN (an alias's) allows invoking through that alias
    only, and one on the unqualified ARN does not allow the alias (Lambda Developer Guide,
    "Fine-tuning the Resources and Conditions sections of policies", Function resource names,
    https://docs.aws.amazon.com/lambda/latest/dg/lambda-api-permissions-ref.html). Through the
    alias the bootstrap takes only what a link may ask (its invocation's ARN names the alias:
    ``bootstrap.request.through_links``). The alias points at ``$LATEST``, as the function's
    other callers (CreateAlias accepts ``$LATEST`` or a version number, Lambda API Reference).
    moto's CloudFormation does not model ``AWS::Lambda::Alias``."""
    held = present(resolver(**ON))
    alias = held["BootstrapLinksAlias"]
    assert alias["Properties"] == {
        "Description": "What the re-authorization links may ask of the bootstrap",
        "FunctionName": "<BootstrapFunction>",
        "FunctionVersion": "$LATEST",
        "Name": LINKS_ALIAS,
    }
    assert through_links(f"arn:aws:lambda:us-east-1:123456789012:function:b:{LINKS_ALIAS}")
    variables = links_function()["Environment"]["Variables"]
    assert variables["BOOTSTRAP_FUNCTION_NAME"] == "<BootstrapLinksAlias>"  # Ref: its ARN
    invokes = [
        statement
        for role, statement in identity_statements(held)
        if role == "LinksRole"
        and {"lambda:InvokeFunction", "lambda:*", "*"} & set(as_list(statement["Action"]))
    ]
    assert [as_list(statement["Resource"]) for statement in invokes] == [["<BootstrapLinksAlias>"]]


# --- on: what invokes the links function -------------------------------------------------------


def alarm_rule(**parameters: Any) -> dict[str, Any]:
    held = present(resolver(**ON, **parameters))
    return held["LinksFunctionAlarmStateChange"]["Properties"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("warning", "alarms"),
    [
        ("2160000", ["AuthorizationRequiredAlarm", "RefreshFamilyAgingAlarm"]),
        ("0", ["AuthorizationRequiredAlarm"]),
    ],
    ids=["with the warning alarm", "without it"],
)
def test_the_rule_matches_this_stacks_reauthorization_alarms_entering_alarm(
    warning: str, alarms: list[str]
) -> None:
    """CloudWatch sends an alarm's state changes to the account's default event bus as
    ``CloudWatch Alarm State Change`` events from ``aws.cloudwatch``, the alarm's ARN in
    ``resources`` and the new state in ``detail.state.value`` (Amazon CloudWatch User Guide,
    "Alarm events and EventBridge",
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-and-eventbridge.html).
    moto evaluates no alarm: the pattern is checked against that documented shape (the sample
    events/links-alarm.json has it, and the function reads it: test_link_sending)."""
    rule = alarm_rule(ReauthorizationWarningSeconds=warning)
    assert rule["EventPattern"] == {
        "source": ["aws.cloudwatch"],
        "detail-type": ["CloudWatch Alarm State Change"],
        "resources": [f"<{name}.Arn>" for name in alarms],
        "detail": {"state": {"value": ["ALARM"]}},
    }
    assert [target["Arn"] for target in rule["Targets"]] == ["<LinksFunction.Arn>"]
    # Control: each alarm named exists in that stack, and the warning alarm only with a warning.
    values = resolver(**ON, ReauthorizationWarningSeconds=warning)
    stack_alarms = {
        name
        for name, r in of_type(resources(), "AWS::CloudWatch::Alarm").items()
        if values.present(r)
    }
    assert set(alarms) <= stack_alarms
    assert ("RefreshFamilyAgingAlarm" in stack_alarms) is (warning != "0")
    permission = present(values)["LinksFunctionAlarmStateChangePermission"]["Properties"]
    assert permission["SourceArn"] == "<LinksFunctionAlarmStateChange.Arn>"
    assert permission["Principal"] == "events.amazonaws.com"


def test_the_daily_reminder_asks_the_links_function_to_remind() -> None:
    schedule = present(resolver(**ON))["LinksFunctionReminder"]["Properties"]
    assert json.loads(schedule["Target"]["Input"]) == {"action": "remind"}
    assert schedule["ScheduleExpression"] == "rate(1 day)"
    assert schedule["Target"]["Arn"] == "<LinksFunction.Arn>"
    assert schedule["Name"] == "cmstoken-prod-remind"
    # Control: the rotator's schedule sends its own input.
    rotator = present(resolver(**ON))["RotatorFunctionSchedule"]["Properties"]
    assert json.loads(rotator["Target"]["Input"]) == {}


# --- on: the link state -------------------------------------------------------------------


def test_the_links_table_is_on_demand_with_a_ttl_and_goes_with_the_stack() -> None:
    resource = resources()["LinksTable"]
    assert resource["DeletionPolicy"] == "Delete"
    assert resource["UpdateReplacePolicy"] == "Delete"
    table = present(resolver(**ON))["LinksTable"]["Properties"]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": "pk", "AttributeType": "S"}]
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": False}
    assert "SSESpecification" not in table  # DynamoDB's default: an AWS owned key
    assert "TableName" not in table  # generated, unique per stack


def test_the_outputs_name_the_url_the_function_the_key_and_the_table() -> None:
    outputs = transformed()["Outputs"]
    values = resolver(**ON)
    assert {name: values.resolve(outputs[name]["Value"]) for name in ONE_CLICK_OUTPUTS} == {
        "LinksUrl": "<LinksFunctionUrl.FunctionUrl>",
        "LinksFunctionName": "<LinksFunction>",
        "LinkSigningKeySecretArn": "<LinkSigningKeySecret>",
        "LinksTableName": "<LinksTable>",
    }
