"""Rules that AWS enforces on the day a stack is deployed and that neither moto nor the linters
check, each written down from the AWS document that states it. They run on the SAM-transformed
template with its intrinsic functions resolved, for every value of the parameters they depend on,
so that a resource added later is held to them too."""

from __future__ import annotations

import re
from typing import Any

import pytest

from template_model import (
    NAMELESS,
    PSEUDO,
    Resolver,
    as_list,
    of_type,
    parameter_values,
    statements,
    transformed,
)

GIVEN_KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
TOPIC_ENCRYPTION = {"none": "", "created key": "create", "given key": GIVEN_KEY}

# Resource types whose names live in a namespace shared by every stack: the name property, and
# whether the namespace is the account and region ("region") or the whole account ("account").
NAMED = {
    # "Schedule names must be unique within a schedule group" (EventBridge Scheduler API, Name).
    "AWS::Scheduler::Schedule": ("Name", "region"),
    # A layer name identifies the layer in its account and region; versions accrue under it
    # (Lambda API, PublishLayerVersion, LayerName).
    "AWS::Lambda::LayerVersion": ("LayerName", "region"),
    # "secret names must be unique within an AWS Region" (Secrets Manager API, CreateSecret).
    "AWS::SecretsManager::Secret": ("Name", "region"),
    # "Log group names must be unique within a Region for an AWS account" (CreateLogGroup).
    "AWS::Logs::LogGroup": ("LogGroupName", "region"),
    # "All dashboards in your account are global, not region-specific" (PutDashboard).
    "AWS::CloudWatch::Dashboard": ("DashboardName", "account"),
    # Alias names are unique in the account and Region (KMS API, CreateAlias).
    "AWS::KMS::Alias": ("AliasName", "region"),
    # Names CloudFormation generates (unique) when the template leaves them out.
    "AWS::Lambda::Function": ("FunctionName", "region"),
    "AWS::IAM::Role": ("RoleName", "account"),
    "AWS::IAM::ManagedPolicy": ("ManagedPolicyName", "account"),
    "AWS::SQS::Queue": ("QueueName", "region"),
    "AWS::SNS::Topic": ("TopicName", "region"),
    "AWS::Events::Rule": ("Name", "region"),
    "AWS::CloudWatch::Alarm": ("AlarmName", "region"),
    "AWS::CloudWatch::CompositeAlarm": ("AlarmName", "region"),
    # Table names are unique in the account and Region (DynamoDB API Reference, CreateTable).
    "AWS::DynamoDB::Table": ("TableName", "region"),
    # "The name of the event bus ... must be unique in your account" in a Region (EventBridge
    # API Reference, CreateEventBus, Name).
    "AWS::Events::EventBus": ("Name", "region"),
}
ALARM_TYPES = ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")


def variants() -> dict[str, dict[str, str]]:
    """Parameter sets that switch every optional resource on or off."""
    return {
        "defaults": parameter_values(),
        "everything": parameter_values(
            AlarmTopicKmsKey="create",
            KmsKeyArn=GIVEN_KEY,
            AlarmEmail="ops@example.com",
            DeployExampleConsumer="true",
            OneClickReauthorization="true",
            ConsumerAccountIds="111111111111",  # sharing: the service token's key and the bus
        ),
    }


@pytest.mark.parametrize("encryption", TOPIC_ENCRYPTION)
def test_alarm_topics_are_deliverable(encryption: str) -> None:
    """CloudWatch alarms cannot publish to a topic encrypted with the AWS managed key
    ``alias/aws/sns``: its key policy does not let ``cloudwatch.amazonaws.com`` call
    ``kms:Decrypt`` / ``kms:GenerateDataKey*`` and cannot be edited; a customer managed key
    must grant them (AWS Knowledge Center, "How do I configure a CloudWatch alarm with an
    encrypted Amazon SNS topic?", https://repost.aws/knowledge-center/cloudwatch-configure-alarm-sns).
    The topic's access policy must let the CloudWatch service publish (Knowledge Center, "Why
    didn't I receive an SNS notification for my CloudWatch alarm trigger?",
    https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger), here only
    for this account's alarms."""
    resolver = Resolver(parameter_values(AlarmTopicKmsKey=TOPIC_ENCRYPTION[encryption]))
    resources = transformed()["Resources"]
    topics = {
        action
        for kind in ALARM_TYPES
        for alarm in of_type(resources, kind).values()
        if resolver.present(alarm)
        for key in ("AlarmActions", "OKActions")
        for action in resolver.resolve(alarm["Properties"]).get(key, [])
    }
    assert topics == {"<AlarmTopic>"}
    topic = resolver.resolve(resources["AlarmTopic"]["Properties"])
    key = topic.get("KmsMasterKeyId")
    if encryption == "none":
        assert key is None
    elif encryption == "given key":
        assert key == GIVEN_KEY  # its policy is the owner's: the README gives the statement
    else:
        assert key == "<AlarmTopicKey>"
        policy = resolver.resolve(resources["AlarmTopicKey"]["Properties"]["KeyPolicy"])
        grants = [
            s
            for s in policy["Statement"]
            if s["Effect"] == "Allow"
            and s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        ]
        assert len(grants) == 1
        assert set(as_list(grants[0]["Action"])) == {"kms:Decrypt", "kms:GenerateDataKey*"}
        assert grants[0]["Condition"] == {
            "StringEquals": {"aws:SourceAccount": PSEUDO["AWS::AccountId"]}
        }
    assert not str(key or "").startswith("alias/aws/")
    (policy,) = [
        resolver.resolve(r["Properties"])
        for r in of_type(resources, "AWS::SNS::TopicPolicy").values()
    ]
    assert policy["Topics"] == ["<AlarmTopic>"]
    (publish,) = policy["PolicyDocument"]["Statement"]
    assert publish["Effect"] == "Allow"
    assert publish["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert publish["Action"] == "sns:Publish"
    assert publish["Resource"] == "<AlarmTopic>"
    assert publish["Condition"]["StringEquals"] == {"aws:SourceAccount": PSEUDO["AWS::AccountId"]}
    assert publish["Condition"]["ArnLike"] == {
        "aws:SourceArn": "arn:aws:cloudwatch:us-east-1:123456789012:alarm:*"
    }


@pytest.mark.parametrize("variant", ["defaults", "everything"])
def test_names_in_shared_namespaces_carry_the_stack_name(variant: str) -> None:
    """Two stacks in one account and region (and one stack name in two regions, for names that
    are global to the account) must not claim the same name: every name the template sets in a
    shared namespace changes with the stack name (and with the region where the namespace is
    the account). Names the template leaves out are generated by CloudFormation, unique per
    stack ("If you don't specify a name, AWS CloudFormation generates a unique physical ID",
    CloudFormation User Guide, "Name type"). A resource type not classified below fails this
    test, so that a new resource's namespace is decided when it is added."""
    parameters = variants()[variant]
    first = Resolver(parameters)
    same_region = Resolver(parameters)
    same_region.values["AWS::StackName"] = "cmstoken-staging"
    other_region = Resolver(parameters)
    other_region.values["AWS::Region"] = "eu-west-1"
    resources = transformed()["Resources"]
    checked = 0
    for logical_id, resource in resources.items():
        kind = resource["Type"]
        assert kind in NAMED or kind in NAMELESS, f"{logical_id}: classify {kind}'s name"
        if kind in NAMELESS or not first.present(resource):
            continue
        prop, scope = NAMED[kind]
        name = first.resolve(resource["Properties"]).get(prop)
        if name is None:
            continue
        checked += 1
        assert name != same_region.resolve(resource["Properties"])[prop], logical_id
        if scope == "account":
            assert name != other_region.resolve(resource["Properties"])[prop], logical_id
    assert checked >= 6  # the schedule, the layer, two secrets, the log groups, the dashboard


def test_the_schedule_name_fits_for_a_stack_name_of_56_characters() -> None:
    """Schedule names are 1 to 64 characters of ``[0-9a-zA-Z-_.]`` (EventBridge Scheduler API
    reference, CreateSchedule, Name); the README limits stack names to 56 characters. Every
    schedule: the rotator's, and the links' reminder (OneClickReauthorization)."""
    resolver = Resolver(variants()["everything"])
    resolver.values["AWS::StackName"] = "s" * 56
    schedules = of_type(transformed()["Resources"], "AWS::Scheduler::Schedule").values()
    assert len(schedules) == 2
    for schedule in schedules:
        assert resolver.present(schedule)
        name = resolver.resolve(schedule["Properties"])["Name"]
        assert len(name) <= 64, name
        assert name.replace("-", "").replace("_", "").replace(".", "").isalnum()


def test_the_bus_and_alias_names_fit_for_a_stack_name_of_56_characters() -> None:
    """An event bus name is 1 to 256 letters, digits and ``/ . - _``, not starting ``aws.``
    (EventBridge API reference, CreateEventBus, Name); an alias name is 1 to 256 characters
    of ``[a-zA-Z0-9:/_-]``, starting ``alias/`` and never ``alias/aws/`` (AWS KMS API
    reference, CreateAlias, AliasName). The README limits stack names to 56 characters."""
    resolver = Resolver(variants()["everything"])
    resolver.values["AWS::StackName"] = "s" * 56
    resources = transformed()["Resources"]
    named = [
        (prop, resolver.resolve(resource["Properties"])[prop])
        for kind, prop in (("AWS::Events::EventBus", "Name"), ("AWS::KMS::Alias", "AliasName"))
        for resource in of_type(resources, kind).values()
        if resolver.present(resource)
    ]
    assert len(named) == 3  # the bus, the service token key's alias, the alarm topic key's
    for prop, name in named:
        assert 1 <= len(name) <= 256, name
        if prop == "Name":
            assert re.fullmatch(r"[/.\-_A-Za-z0-9]+", name), name
            assert not name.startswith("aws."), name
        else:
            assert re.fullmatch(r"alias/[a-zA-Z0-9:/_-]+", name), name
            assert not name.startswith("alias/aws/"), name


@pytest.mark.parametrize("variant", ["defaults", "everything"])
def test_every_alarm_can_say_its_incident_ended(variant: str) -> None:
    """An alarm's actions run on a state change into the state they are listed for
    ("Alarm actions", CloudWatch User Guide, "Using Amazon CloudWatch alarms"): without
    OKActions nobody hears that an incident is over. Every alarm here that notifies stands for
    an incident that can end, so it notifies the same targets on ALARM and on OK; an alarm with
    no actions at all must be read by a composite alarm that has them."""
    resolver = Resolver(variants()[variant])
    resources = transformed()["Resources"]
    present = {
        name: resolver.resolve(a["Properties"])
        for kind in ALARM_TYPES
        for name, a in of_type(resources, kind).items()
        if resolver.present(a)
    }
    rules = " ".join(str(alarm["AlarmRule"]) for alarm in present.values() if "AlarmRule" in alarm)
    notifying = 0
    for name, alarm in present.items():
        if not alarm.get("AlarmActions"):
            assert "OKActions" not in alarm, name
            assert f'"<{name}>"' in rules, f"{name} notifies nobody and no composite reads it"
            continue
        notifying += 1
        assert alarm.get("OKActions") == alarm["AlarmActions"], name
    assert notifying >= 5


@pytest.mark.parametrize("minutes", [5, 10, 15, 30, 60])
def test_alarm_windows_stay_within_cloudwatch_limits(minutes: int) -> None:
    """Period x EvaluationPeriods "can't be more than 604,800 seconds. For alarms with a period
    of less than one hour (3,600 seconds), the total evaluation period can't be longer than one
    day (86,400 seconds)"; Period is 10, 20, 30, or a multiple of 60; DatapointsToAlarm is at
    most EvaluationPeriods (CloudWatch API reference, PutMetricAlarm). Periods of one interval
    also keep every alarm evaluated each minute ("Alarm evaluation", CloudWatch User Guide)."""
    resolver = Resolver(parameter_values(RotationIntervalMinutes=minutes))
    alarms = of_type(transformed()["Resources"], "AWS::CloudWatch::Alarm").values()
    assert alarms
    for alarm in alarms:
        properties = resolver.resolve(alarm["Properties"])
        period, periods = int(properties["Period"]), int(properties["EvaluationPeriods"])
        assert period == minutes * 60
        assert period % 60 == 0
        assert period * periods <= 86400
        assert int(properties.get("DatapointsToAlarm", periods)) <= periods


def test_resource_policies_name_their_resource() -> None:
    """Resource-based policies grant on the resource they are attached to; the only ``"*"``
    allowed is a key policy's, where it means "this KMS key" ("In a key policy, the value of
    the Resource element is "*", which means "this KMS key"", AWS KMS Developer Guide, "Key
    policies in AWS KMS"), and the refresh secret's Deny, where it means this secret."""
    resources = transformed()["Resources"]
    checked = 0
    for kind in ("AWS::SNS::TopicPolicy", "AWS::SQS::QueuePolicy"):
        for policy in of_type(resources, kind).values():
            for statement in statements(policy["Properties"]["PolicyDocument"]):
                assert "*" not in as_list(statement["Resource"])
                checked += 1
    for name, secret_policy in of_type(resources, "AWS::SecretsManager::ResourcePolicy").items():
        for statement in statements(secret_policy["Properties"]["ResourcePolicy"]):
            # Only the shared service token's policy allows (other accounts' reads).
            assert statement["Effect"] == "Deny" or name == "ServiceTokenSecretPolicy"
            assert statement["Resource"] == "*"
    bus = resources["RefreshRequestBus"]["Properties"]
    for statement in statements(bus["Policy"]):
        assert statement["Resource"] == {
            "Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}"
            ":event-bus/${AWS::StackName}-refresh-requests"
        }
        assert statement["Resource"]["Fn::Sub"].endswith(bus["Name"]["Fn::Sub"])
        checked += 1
    assert checked >= 5


def test_refresh_requests_are_matched_from_this_account_only() -> None:
    """Events that another account sends to this bus carry that account's id in ``account``
    (EventBridge User Guide, "Amazon EventBridge events": "account: The 12-digit number
    identifying an AWS account"): matching on this stack's account keeps any source, as SPEC
    section 3 asks, and keeps other accounts out."""
    resolver = Resolver(parameter_values())
    rule = resolver.resolve(transformed()["Resources"]["RefreshRequestedRule"]["Properties"])
    assert rule["EventPattern"]["account"] == [PSEUDO["AWS::AccountId"]]
    assert "source" not in rule["EventPattern"]
    assert rule["EventPattern"]["detail-type"] == ["Service Token Refresh Requested"]


def test_no_unused_parameter_or_mapping() -> None:
    """cfn-lint reports unused parameters; mappings it does not: every AlarmWindows column is
    read by some alarm."""
    text = str(transformed()["Resources"])
    windows = transformed()["Mappings"]["AlarmWindows"]
    for column in next(iter(windows.values())):
        assert f"'{column}'" in text, column


def test_resolver_agrees_with_a_hand_resolved_alarm() -> None:
    """The rules above trust the resolver: one alarm resolved by hand."""
    resolver = Resolver(parameter_values(RotationIntervalMinutes=5))
    alarm = resolver.resolve(transformed()["Resources"]["RotatorHeartbeatAlarm"]["Properties"])
    assert alarm["Namespace"] == "CmsToken/cmstoken-prod"
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (300, 1)
    failing = resolver.resolve(transformed()["Resources"]["RotationFailingAlarm"]["Properties"])
    assert (failing["EvaluationPeriods"], failing["DatapointsToAlarm"]) == (6, 6)
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "cmstoken"}]
    composite = resolver.resolve(transformed()["Resources"]["RotatorSilentAlarm"]["Properties"])
    assert composite["AlarmRule"] == (
        'ALARM("<RotatorHeartbeatAlarm>") AND NOT INSUFFICIENT_DATA("<RotationFailingAlarm>")'
    )
    assert composite["AlarmActions"] == ["<AlarmTopic>"]


def _present(resolver: Resolver, resources: dict[str, Any]) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if resolver.present(r)}


def test_optional_resources_follow_their_parameters() -> None:
    resources = transformed()["Resources"]
    defaults = _present(Resolver(variants()["defaults"]), resources)
    everything = _present(Resolver(variants()["everything"]), resources)
    assert "AlarmTopicKey" not in defaults
    assert {"AlarmTopicKey", "AlarmTopicKeyAlias", "AlarmEmailSubscription"} <= set(everything)
