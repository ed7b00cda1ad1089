"""Security- and contract-relevant properties of template.yaml after the SAM transform."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from template_model import (
    Resolver,
    as_list,
    of_type,
    parameter_values,
    source,
    statements,
    transformed,
)

# Actions AWS cannot scope to a resource; any other action on "*" is a finding.
UNSCOPABLE = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "secretsmanager:GetRandomPassword",
    "secretsmanager:ListSecrets",
    "secretsmanager:BatchGetSecretValue",
}


@pytest.fixture
def resources() -> dict[str, Any]:
    return transformed()["Resources"]  # type: ignore[no-any-return]


def policy_documents(resources: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Identity policies: the roles' inline policies and the managed policies."""
    for name, resource in resources.items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            for policy in properties.get("Policies", []):
                yield name, policy["PolicyDocument"]
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            yield name, properties["PolicyDocument"]


def test_every_function_runs_python_3_13_on_arm64(resources: dict[str, Any]) -> None:
    functions = of_type(resources, "AWS::Lambda::Function")
    assert functions
    for function in functions.values():
        assert function["Properties"]["Runtime"] == "python3.13"
        assert function["Properties"]["Architectures"] == ["arm64"]


def test_the_rotator_reserves_concurrency_from_a_parameter_defaulting_to_1(
    resources: dict[str, Any],
) -> None:
    parameter = source()["Parameters"]["RotatorReservedConcurrency"]
    assert parameter["Default"] == 1
    reserved = resources["RotatorFunction"]["Properties"]["ReservedConcurrentExecutions"]
    assert reserved == {
        "Fn::If": [
            "ReserveRotatorConcurrency",
            {"Ref": "RotatorReservedConcurrency"},
            {"Ref": "AWS::NoValue"},
        ]
    }


def test_the_rotator_timeout_covers_the_refresh_guard(resources: dict[str, Any]) -> None:
    """A due run reads both secrets (two Secrets Manager calls at their longest), and still has
    the refresh guard left: the claim, the refresh's whole time limit twice (the second
    presents the token again after a lost answer) and the reserve for storing its answer."""
    from cmstoken.aws.secrets import StoreTimeouts
    from cmstoken.rotation.refreshing import LOST_RESERVE_SECONDS
    from cmstoken.rotation.rotator import PRESENTATIONS, WRITE_CALLS
    from cmstoken.upstream.http import Timeouts

    attempt = StoreTimeouts().attempt_limit
    reserve = LOST_RESERVE_SECONDS + WRITE_CALLS * attempt
    guard = attempt + PRESENTATIONS * Timeouts().total + reserve
    assert guard == 86
    assert resources["RotatorFunction"]["Properties"]["Timeout"] >= 2 * attempt + guard


def test_functions_get_the_contract_environment(resources: dict[str, Any]) -> None:
    variables = resources["RotatorFunction"]["Properties"]["Environment"]["Variables"]
    assert {
        "SERVICE_BASE_URL",
        "REFRESH_SECRET_ID",
        "SERVICE_TOKEN_SECRET_ID",
        "REFRESH_MARGIN_SECONDS",
        "MIN_REFRESH_INTERVAL_SECONDS",
        "VERIFY_SERVICE_TOKEN",
        "ABSOLUTE_LIFETIME_SECONDS",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_SERVICE_NAME",
    } <= set(variables)
    assert variables["REFRESH_SECRET_ID"] == {"Ref": "RefreshCredentialSecret"}
    assert variables["SERVICE_TOKEN_SECRET_ID"] == {"Ref": "ServiceTokenSecret"}


def test_both_secrets_are_created_empty(resources: dict[str, Any]) -> None:
    """The two secrets of the credential; the only other secret is the links' signing key
    (OneClickReauthorization), which Secrets Manager generates (test_one_click.py)."""
    found = of_type(resources, "AWS::SecretsManager::Secret")
    secrets = {name: s for name, s in found.items() if "Condition" not in s}
    assert set(secrets) == {"RefreshCredentialSecret", "ServiceTokenSecret"}
    assert {name: s["Condition"] for name, s in found.items() if name not in secrets} == {
        "LinkSigningKeySecret": "OneClickEnabled"
    }
    for secret in secrets.values():
        assert "SecretString" not in secret["Properties"]
        assert "GenerateSecretString" not in secret["Properties"]
    # KmsKeyArn, or the default key; a shared service token has its own (test_sharing.py).
    assert secrets["RefreshCredentialSecret"]["Properties"]["KmsKeyId"]["Fn::If"][0] == "HasKmsKey"
    shared, _, single = secrets["ServiceTokenSecret"]["Properties"]["KmsKeyId"]["Fn::If"]
    assert shared == "UseServiceTokenKey"
    assert single["Fn::If"][0] == "HasKmsKey"


def test_no_wildcard_resource_except_for_unscopable_actions(resources: dict[str, Any]) -> None:
    for name, document in policy_documents(resources):
        for statement in statements(document):
            if statement["Effect"] == "Allow" and "*" in as_list(statement["Resource"]):
                assert set(as_list(statement["Action"])) <= UNSCOPABLE, (name, statement)


def test_the_rotator_role_touches_only_the_two_secrets(resources: dict[str, Any]) -> None:
    secret_statements = [
        statement
        for _, document in policy_documents({"RotatorRole": resources["RotatorRole"]})
        for statement in statements(document)
        if any(a.startswith("secretsmanager:") for a in as_list(statement["Action"]))
    ]
    assert len(secret_statements) == 2
    statement, versions = secret_statements
    assert set(statement["Action"]) == {
        "secretsmanager:GetSecretValue",
        "secretsmanager:PutSecretValue",
    }
    assert statement["Resource"] == [
        {"Ref": "RefreshCredentialSecret"},
        {"Ref": "ServiceTokenSecret"},
    ]
    # The version budget counts the refresh credential's versions (core.version_budget).
    assert versions["Action"] == "secretsmanager:ListSecretVersionIds"
    assert versions["Resource"] == {"Ref": "RefreshCredentialSecret"}


def test_the_consumer_policy_reads_the_service_token_secret_and_nothing_else(
    resources: dict[str, Any],
) -> None:
    """Single-account (sharing parameters empty): the service token secret, and KmsKeyArn
    through Secrets Manager when given. Sharing replaces the key and adds the replicas
    (test_sharing.py)."""
    policy = resources["ConsumerPolicy"]["Properties"]
    for key in ("", "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"):
        document = Resolver(parameter_values(KmsKeyArn=key)).resolve(policy)["PolicyDocument"]
        read, *decrypt = document["Statement"]
        assert set(read["Action"]) == {
            "secretsmanager:GetSecretValue",
            "secretsmanager:DescribeSecret",
        }
        assert read["Resource"] == "<ServiceTokenSecret>"
        if not key:
            assert decrypt == []
            continue
        assert decrypt == [
            {
                "Sid": "DecryptThroughSecretsManager",
                "Effect": "Allow",
                "Action": "kms:Decrypt",
                "Resource": key,
                "Condition": {
                    "StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}
                },
            }
        ]


def test_only_the_products_functions_may_read_the_refresh_credential(
    resources: dict[str, Any],
) -> None:
    policy = resources["RefreshCredentialSecretPolicy"]["Properties"]
    assert policy["SecretId"] == {"Ref": "RefreshCredentialSecret"}
    deny, *hardening = policy["ResourcePolicy"]["Statement"]
    assert [statement["Fn::If"][0] for statement in hardening] == ["HardenRefreshCredential"] * 2
    assert deny["Effect"] == "Deny"
    assert deny["Principal"] == "*"
    assert deny["Action"] == "secretsmanager:GetSecretValue"
    allowed = deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
    assert {item["Fn::GetAtt"][0] for item in allowed} == {"RotatorRole", "BootstrapRole"}


ADMINISTRATORS = "arn:aws:iam::123456789012:role/platform-admin,arn:aws:iam::123456789012:user/ops"
# With RefreshCredentialAdministrators set, the refresh credential secret's policy denies these
# actions to every principal but the ones named. The functions write the value with
# PutSecretValue and nothing else (store.py); every other action that changes the secret is the
# named administrators' alone.
WRITTEN_BY_THE_FUNCTIONS_AND_ADMINISTRATORS = {"secretsmanager:PutSecretValue"}
CHANGED_BY_ADMINISTRATORS_ONLY = {
    "secretsmanager:UpdateSecret",  # a new AWSCURRENT value (SecretString), or another KMS key
    "secretsmanager:UpdateSecretVersionStage",  # AWSCURRENT back to a used refresh token
    "secretsmanager:RotateSecret",  # a rotation function of someone else's writes the value
    "secretsmanager:CancelRotateSecret",
    "secretsmanager:DeleteSecret",
    "secretsmanager:RestoreSecret",
    "secretsmanager:PutResourcePolicy",  # drop the denies, then read or write
    "secretsmanager:DeleteResourcePolicy",
    "secretsmanager:ReplicateSecretToRegions",  # a copy (with a key of one's choice) elsewhere
    "secretsmanager:RemoveRegionsFromReplication",
    "secretsmanager:StopReplicationToReplica",  # a replica promoted to a secret of its own
    "secretsmanager:TagResource",  # tags can grant or withdraw access (ABAC)
    "secretsmanager:UntagResource",
}
# The Secrets Manager operations that change nothing, or (CreateSecret) act on another secret:
# the hardening leaves them alone (GetSecretValue, and BatchGetSecretValue that needs it per
# secret, is the first statement's).
LEFT_TO_IDENTITY_POLICIES = {
    "secretsmanager:BatchGetSecretValue",
    "secretsmanager:CreateSecret",
    "secretsmanager:DescribeSecret",
    "secretsmanager:GetRandomPassword",
    "secretsmanager:GetResourcePolicy",
    "secretsmanager:GetSecretValue",
    "secretsmanager:ListSecretVersionIds",
    "secretsmanager:ListSecrets",
    "secretsmanager:ValidateResourcePolicy",
}


def refresh_secret_policy(**parameters: str) -> list[dict[str, Any]]:
    resolver = Resolver(parameter_values(**parameters))
    policy = transformed()["Resources"]["RefreshCredentialSecretPolicy"]["Properties"]
    return resolver.resolve(policy)["ResourcePolicy"]["Statement"]  # type: ignore[no-any-return]


def test_the_refresh_secret_hardening_is_off_unless_administrators_are_named() -> None:
    (read_deny,) = refresh_secret_policy()
    assert read_deny["Action"] == "secretsmanager:GetSecretValue"


def test_the_refresh_secret_hardening_denies_changes_to_all_but_functions_and_administrators() -> (
    None
):
    """A principal with ``secretsmanager:*`` could otherwise delete the read deny, move the
    AWSCURRENT stage back to a used token, or write a value of its own. The exception names
    role ARNs: for a request made with an assumed role, ``aws:PrincipalArn`` is the role's ARN,
    not the session's (IAM User Guide, "AWS global condition context keys", aws:PrincipalArn),
    which is why the parameter refuses assumed-role session ARNs.

    The denied actions are every action of the Secrets Manager API that can change this
    secret (AWS Secrets Manager API Reference, "Actions",
    https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_Operations.html; their
    access levels Write, Permissions management and Tagging in the Service Authorization
    Reference, "Actions, resources, and condition keys for AWS Secrets Manager",
    https://docs.aws.amazon.com/service-authorization/latest/reference/list_awssecretsmanager.html):
    ``UpdateSecret`` with ``SecretString`` or ``SecretBinary`` creates a new version and moves
    AWSCURRENT to it, and can change ``KmsKeyId`` (API Reference, UpdateSecret);
    ``TagResource``/``UntagResource`` "can change permissions" where tags are part of the
    security strategy (API Reference, TagResource); replication copies the secret's data and
    its resource policy to other Regions (Secrets Manager User Guide, "Replicate AWS Secrets
    Manager secrets across Regions"). The functions are excepted for ``PutSecretValue`` only:
    it is the one write their code makes (``SecretStore.write``)."""
    read_deny, write_deny, change_deny = refresh_secret_policy(
        RefreshCredentialAdministrators=ADMINISTRATORS
    )
    assert read_deny["Action"] == "secretsmanager:GetSecretValue"
    for deny in (write_deny, change_deny):
        assert deny["Effect"] == "Deny"
        assert deny["Principal"] == "*"
        assert deny["Resource"] == "*"
        assert set(deny) == {"Sid", "Effect", "Principal", "Action", "Resource", "Condition"}
    assert set(as_list(write_deny["Action"])) == WRITTEN_BY_THE_FUNCTIONS_AND_ADMINISTRATORS
    assert write_deny["Condition"] == {
        "ArnNotEquals": {
            "aws:PrincipalArn": [
                "<RotatorRole.Arn>",
                "<BootstrapRole.Arn>",
                *ADMINISTRATORS.split(","),
            ]
        }
    }
    assert set(as_list(change_deny["Action"])) == CHANGED_BY_ADMINISTRATORS_ONLY
    assert len(as_list(change_deny["Action"])) == len(CHANGED_BY_ADMINISTRATORS_ONLY)
    assert change_deny["Condition"] == {
        "ArnNotEquals": {"aws:PrincipalArn": ADMINISTRATORS.split(",")}
    }


def test_the_refresh_secret_hardening_accounts_for_every_secrets_manager_operation() -> None:
    """Every operation of the Secrets Manager API (botocore's service model, the machine-readable
    form of the API Reference's "Actions" list; each operation's IAM action has its name, per
    the Service Authorization Reference) is either denied by the hardening or changes nothing
    on this secret. An operation AWS adds fails this test until it is classified."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("secretsmanager")
    operations = {f"secretsmanager:{name}" for name in model.operation_names}
    denied = WRITTEN_BY_THE_FUNCTIONS_AND_ADMINISTRATORS | CHANGED_BY_ADMINISTRATORS_ONLY
    assert not denied & LEFT_TO_IDENTITY_POLICIES
    assert operations == denied | LEFT_TO_IDENTITY_POLICIES, sorted(
        operations ^ (denied | LEFT_TO_IDENTITY_POLICIES)
    )


def test_the_functions_are_excepted_only_for_the_secrets_manager_calls_their_code_makes() -> None:
    """The functions' roles allow, and the hardening lets them make, exactly the Secrets
    Manager calls the shared library makes (a call the template did not allow would fail in
    AWS; an allowance no code uses is a widening)."""
    from pathlib import Path

    import botocore.session

    import cmstoken

    model = botocore.session.get_session().get_service_model("secretsmanager")
    by_method = {botocore.xform_name(name): name for name in model.operation_names}
    # The functions' code: the library less what runs elsewhere (the consumer helper and its
    # DescribeSecret adapter, in workloads, whose policy grants DescribeSecret too; the
    # operator's and the user's tools).
    package = Path(cmstoken.__file__).parent
    elsewhere = {package / "consumer", package / "aws" / "secret_lookup.py", package / "cli"}
    code = "\n".join(
        p.read_text() for p in package.rglob("*.py") if not elsewhere & {p, *p.parents}
    )
    called = {
        f"secretsmanager:{by_method[method]}"
        for method in re.findall(r"\.([a-z_]+)\(", code)
        if method in by_method
    }
    counted = {"secretsmanager:ListSecretVersionIds"}  # the version budget, both functions'
    assert called == {"secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue"} | counted
    users = {
        p.relative_to(package).parts[0]
        for p in package.rglob("*.py")
        if ".room(" in p.read_text() and p.name != "vault.py"
    }
    assert users == {"rotation", "bootstrap"}
    resources = transformed()["Resources"]
    for role, uses in (("RotatorRole", called), ("BootstrapRole", called)):
        allowed = {
            action
            for _, document in policy_documents({role: resources[role]})
            for statement in statements(document)
            for action in as_list(statement["Action"])
            if action.startswith("secretsmanager:")
        }
        assert allowed == uses, role
    _, write_deny, _ = refresh_secret_policy(RefreshCredentialAdministrators=ADMINISTRATORS)
    writes = called - LEFT_TO_IDENTITY_POLICIES
    assert writes == set(as_list(write_deny["Action"]))


def test_the_readme_says_exactly_what_the_hardening_denies() -> None:
    """The README's security model lists the denied actions in two items (the functions
    excepted, then administrators only): the same sets as the template's policy."""
    from support import documentation

    readme = documentation()
    section = readme.split("The secret's policy then also denies:", 1)[1]
    section = section.split("Reads that return no value", 1)[0]
    functions_item, administrators_item = section.strip().split("\n  - ")
    _, write_deny, change_deny = refresh_secret_policy(
        RefreshCredentialAdministrators=ADMINISTRATORS
    )
    for item, deny in ((functions_item, write_deny), (administrators_item, change_deny)):
        named = {f"secretsmanager:{name}" for name in re.findall(r"`([A-Za-z]+)`", item)}
        assert named == set(as_list(deny["Action"]))


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("", True),
        (ADMINISTRATORS, True),
        ("arn:aws:iam::123456789012:role/path/to/admin", True),
        ("arn:aws:sts::123456789012:assumed-role/admin/session", False),  # not a principal ARN
        ("arn:aws:iam::123456789012:role/a, arn:aws:iam::123456789012:role/b", False),
        ("admin", False),
    ],
)
def test_administrators_must_be_role_or_user_arns(value: str, accepted: bool) -> None:
    pattern = source()["Parameters"]["RefreshCredentialAdministrators"]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is accepted


def test_the_example_consumer_gets_the_consumer_policies_only(resources: dict[str, Any]) -> None:
    role = resources["ExampleConsumerRole"]
    assert role["Condition"] == "DeployExample"
    assert role["Properties"]["ManagedPolicyArns"] == [
        {"Ref": "ConsumerPolicy"},
        {"Ref": "ConsumerRefreshRequestPolicy"},
    ]
    for _, document in policy_documents({"ExampleConsumerRole": role}):
        for statement in statements(document):
            assert not any(a.startswith("secretsmanager:") for a in as_list(statement["Action"]))
    assert resources["ExampleConsumerFunction"]["Condition"] == "DeployExample"


def test_consumers_may_request_a_refresh_only_as_consumers(resources: dict[str, Any]) -> None:
    document = resources["ConsumerRefreshRequestPolicy"]["Properties"]["PolicyDocument"]
    (statement,) = document["Statement"]
    assert statement["Action"] == "events:PutEvents"
    assert statement["Resource"]["Fn::Sub"].endswith(":event-bus/default")
    assert statement["Condition"] == {"StringEquals": {"events:source": "cmstoken.consumer"}}


def test_each_function_has_its_own_role(resources: dict[str, Any]) -> None:
    functions = of_type(resources, "AWS::Lambda::Function")
    roles = [f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()]
    assert len(roles) == len(set(roles))


def test_the_schedule_retries_and_dead_letters(resources: dict[str, Any]) -> None:
    schedule = resources["RotatorFunctionSchedule"]["Properties"]
    assert schedule["ScheduleExpression"] == {"Fn::Sub": "rate(${RotationIntervalMinutes} minutes)"}
    target = schedule["Target"]
    assert target["Arn"] == {"Fn::GetAtt": ["RotatorFunction", "Arn"]}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2
    assert target["DeadLetterConfig"]["Arn"] == {"Fn::GetAtt": ["RotationDeadLetterQueue", "Arn"]}


def test_refresh_requests_from_any_source_of_this_account_coalesce_for_the_rotator(
    resources: dict[str, Any],
) -> None:
    """The rule takes any source of this account; its requests go to the queue where they
    coalesce (test_refresh_requests.py), never straight to the rotator."""
    rule = resources["RefreshRequestedRule"]["Properties"]
    assert rule["EventPattern"] == {
        "account": [{"Ref": "AWS::AccountId"}],
        "detail-type": ["Service Token Refresh Requested"],
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["RefreshRequestQueue", "Arn"]}
    assert target["DeadLetterConfig"]["Arn"] == {
        "Fn::GetAtt": ["UndeliveredRefreshRequestQueue", "Arn"]
    }
    permissions = of_type(resources, "AWS::Lambda::Permission").values()
    on_the_rotator = [
        p for p in permissions if p["Properties"]["FunctionName"] == {"Ref": "RotatorFunction"}
    ]
    assert on_the_rotator == []  # nothing but the schedule invokes it asynchronously


def test_failed_asynchronous_invocations_go_to_the_dead_letter_queue(
    resources: dict[str, Any],
) -> None:
    config = resources["RotatorFunctionEventInvokeConfig"]["Properties"]
    assert config["MaximumRetryAttempts"] == 2
    destination = config["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": ["RotationDeadLetterQueue", "Arn"]}


def test_logs_go_to_log_groups_with_retention(resources: dict[str, Any]) -> None:
    groups = of_type(resources, "AWS::Logs::LogGroup")
    for group in groups.values():
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    for function in of_type(resources, "AWS::Lambda::Function").values():
        assert function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"] in groups


def test_outputs_name_everything_a_user_needs_next() -> None:
    outputs = source()["Outputs"]
    assert {
        "RefreshCredentialSecretArn",
        "ServiceTokenSecretArn",
        "ConsumerPolicyArn",
        "RotatorFunctionName",
        "RotatorFunctionArn",
        "RotationDeadLetterQueueUrl",
    } <= set(outputs)


def test_the_bootstrap_can_wait_for_a_whole_device_code(resources: dict[str, Any]) -> None:
    assert resources["BootstrapFunction"]["Properties"]["Timeout"] >= 900
    assert "BootstrapFunctionName" in source()["Outputs"]


def alarms(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        name: r["Properties"] for name, r in of_type(resources, "AWS::CloudWatch::Alarm").items()
    }


def composite_alarms(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        name: r["Properties"]
        for name, r in of_type(resources, "AWS::CloudWatch::CompositeAlarm").items()
    }


def description(alarm: dict[str, Any]) -> str:
    text = alarm["AlarmDescription"]
    return str(text["Fn::Sub"] if isinstance(text, dict) else text)


PRODUCT_ALARMS = {
    "AuthorizationRequiredAlarm": "AuthorizationRequired",
    "CredentialLostAlarm": "CredentialLost",
    "ServiceTokenExpiringAlarm": "ServiceTokenSecondsToExpiry",
    "RotationFailingAlarm": "RotationFailed",
    "RefreshFamilyAgingAlarm": "RefreshFamilyAgeSeconds",
}


def notifying(resources: dict[str, Any]) -> dict[str, Any]:
    """The alarms that notify the topic: the metric alarms and the composite alarm."""
    found = {**alarms(resources), **composite_alarms(resources)}
    return {name: alarm for name, alarm in found.items() if alarm.get("AlarmActions")}


def test_every_alarm_notifies_the_topic_and_says_what_to_do(resources: dict[str, Any]) -> None:
    found = notifying(resources)
    assert set(found) == {*PRODUCT_ALARMS, "RotatorSilentAlarm"}
    for alarm in found.values():
        assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]
        assert alarm["OKActions"] == [{"Ref": "AlarmTopic"}]
        assert description(alarm).startswith("Incident: ")
        assert "cmstoken-admin" in description(alarm)
        assert "Clears" in description(alarm)


def test_product_alarms_watch_the_functions_metrics(resources: dict[str, Any]) -> None:
    found = alarms(resources)
    for name, metric in {**PRODUCT_ALARMS, "RotatorHeartbeatAlarm": "RotationFailed"}.items():
        assert found[name]["MetricName"] == metric
        assert found[name]["Namespace"] == {"Fn::Sub": "CmsToken/${AWS::StackName}"}
        assert found[name]["Dimensions"] == [{"Name": "service", "Value": "cmstoken"}]
    variables = resources["RotatorFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == {"Fn::Sub": "CmsToken/${AWS::StackName}"}
    assert variables["POWERTOOLS_SERVICE_NAME"] == "cmstoken"


def test_only_the_heartbeat_counts_missing_data(resources: dict[str, Any]) -> None:
    """Gauges keep their state through a period without a run; silence is one incident."""
    for name, alarm in alarms(resources).items():
        expected = "breaching" if name == "RotatorHeartbeatAlarm" else "ignore"
        assert alarm["TreatMissingData"] == expected, name
    heartbeat = alarms(resources)["RotatorHeartbeatAlarm"]
    assert (heartbeat["Statistic"], heartbeat["ComparisonOperator"], heartbeat["Threshold"]) == (
        "SampleCount",
        "LessThanThreshold",
        1,
    )
    assert "AlarmActions" not in heartbeat
    assert "OKActions" not in heartbeat


def test_silence_alarms_only_after_the_rotator_has_reported(resources: dict[str, Any]) -> None:
    rule = composite_alarms(resources)["RotatorSilentAlarm"]["AlarmRule"]
    assert rule == {
        "Fn::Sub": 'ALARM("${RotatorHeartbeatAlarm}") AND NOT '
        'INSUFFICIENT_DATA("${RotationFailingAlarm}")'
    }


def test_alarm_periods_follow_the_rotation_interval(resources: dict[str, Any]) -> None:
    period = {
        "Fn::FindInMap": ["AlarmWindows", {"Ref": "RotationIntervalMinutes"}, "PeriodSeconds"]
    }
    for alarm in alarms(resources).values():
        assert alarm["Period"] == period
    allowed = source()["Parameters"]["RotationIntervalMinutes"]["AllowedValues"]
    windows = source()["Mappings"]["AlarmWindows"]
    assert {str(minutes) for minutes in allowed} == set(windows)
    for minutes in allowed:
        assert windows[str(minutes)]["PeriodSeconds"] == minutes * 60


def test_the_family_age_warning_defaults_to_25_days_and_can_be_disabled(
    resources: dict[str, Any],
) -> None:
    assert source()["Parameters"]["ReauthorizationWarningSeconds"]["Default"] == 25 * 86400
    assert resources["RefreshFamilyAgingAlarm"]["Condition"] == "WarnBeforeReauthorization"
    assert source()["Conditions"]["WarnBeforeReauthorization"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ReauthorizationWarningSeconds"}, 0]}]
    }


def test_the_email_subscription_is_optional(resources: dict[str, Any]) -> None:
    subscription = resources["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"]["TopicArn"] == {"Ref": "AlarmTopic"}


def test_the_dashboard_shows_every_metric_the_functions_emit() -> None:
    """Each metric observability.py emits is on the dashboard, as a widget's metric or as the
    metric of an alarm a widget annotates; so is the dead letter queue's depth."""
    import json
    from pathlib import Path

    import cmstoken.observability

    code = Path(cmstoken.observability.__file__).read_text()
    emitted = set(re.findall(r'(?:_count\(|name=|\()"([A-Z][A-Za-z]+)"', code))
    assert {"RotationFailed", "CredentialLost", "ServiceTokenSecondsToExpiry"} <= emitted
    resolver = Resolver(parameter_values())
    resources = transformed()["Resources"]
    body = json.loads(resolver.resolve(resources["Dashboard"]["Properties"]["DashboardBody"]))
    shown: set[str] = set()
    for widget in body["widgets"]:
        properties = widget["properties"]
        for metric in properties.get("metrics", []):
            shown.update(item for item in metric[:2] if isinstance(item, str))
        for alarm in properties.get("annotations", {}).get("alarms", []):
            logical_id = alarm.strip("<>").removesuffix(".Arn")
            shown.add(resources[logical_id]["Properties"]["MetricName"])
    assert emitted <= shown, sorted(emitted - shown)
    assert "ApproximateNumberOfMessagesVisible" in shown


def test_functions_may_put_events_on_the_default_bus_only(resources: dict[str, Any]) -> None:
    for role in ("RotatorRole", "BootstrapRole"):
        found = [
            statement
            for _, document in policy_documents({role: resources[role]})
            for statement in statements(document)
            if statement["Action"] == "events:PutEvents"
        ]
        assert len(found) == 1
        assert found[0]["Resource"] == {
            "Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}"
            ":event-bus/default"
        }


def test_the_dead_letter_queue_admits_only_the_refresh_rules_dead_letters(
    resources: dict[str, Any],
) -> None:
    """EventBridge delivers a rule target's dead letters only if the queue's policy lets
    events.amazonaws.com send them, for that rule (EventBridge User Guide, "Using dead-letter
    queues to process undelivered events", granting permissions to the dead-letter queue). The
    refresh rules' queue is one of their own, never RotationDeadLetterQueue (the rotator's
    failures, which the runbook reads): a member's flood beyond the requests' queue's 300 sends a
    second ends there. No alarm watches it, or the queue of requests that kept failing: neither
    is a rotation failure, and a flood must not page anyone."""
    policy = resources["UndeliveredRefreshRequestQueuePolicy"]
    assert policy["Properties"]["Queues"] == [{"Ref": "UndeliveredRefreshRequestQueue"}]
    # The rule of refresh requests from other accounts has its own statement (test_sharing.py).
    statement, remote = policy["Properties"]["PolicyDocument"]["Statement"]
    assert remote["Fn::If"][0] == "ShareAcrossAccounts"
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Resource"] == {"Fn::GetAtt": ["UndeliveredRefreshRequestQueue", "Arn"]}
    assert statement["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["RefreshRequestedRule", "Arn"]}}
    }
    for rule in ("RefreshRequestedRule", "RemoteRefreshRequestedRule"):
        targets = resources[rule]["Properties"]["Targets"]
        assert {t["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0] for t in targets} == {
            "UndeliveredRefreshRequestQueue"
        }
    # Nothing but the rotator's role and the schedule's role sends to the rotation queue.
    policies = of_type(resources, "AWS::SQS::QueuePolicy").values()
    rotation = {"Ref": "RotationDeadLetterQueue"}
    assert [p for p in policies if rotation in p["Properties"]["Queues"]] == []
    # A standard queue ("EventBridge DLQs are standard Amazon SQS queues"), kept 14 days, encrypted.
    queue = resources["UndeliveredRefreshRequestQueue"]["Properties"]
    assert "FifoQueue" not in queue
    assert queue["QueueName"] == {"Fn::Sub": "${AWS::StackName}-undelivered-requests"}
    assert (queue["MessageRetentionPeriod"], queue["SqsManagedSseEnabled"]) == (1209600, True)
    assert queue["RedriveAllowPolicy"] == {"redrivePermission": "denyAll"}
    # No alarm on either queue of the requests.
    quiet = {"UndeliveredRefreshRequestQueue", "FailedRefreshRequestQueue", "RefreshRequestQueue"}
    for name, alarm in of_type(resources, "AWS::CloudWatch::Alarm").items():
        assert not any(f'"{queue}"' in json.dumps(alarm) for queue in quiet), name


@pytest.mark.parametrize(("reserved", "one_at_a_time"), [("1", True), ("0", False)])
def test_the_rotator_is_told_exactly_the_concurrency_lambda_reserves(
    reserved: str, one_at_a_time: bool
) -> None:
    """The rotator takes over another invocation's lease only when it is told that Lambda runs
    one rotator at a time. Lambda: "Reserved concurrency is the maximum number of concurrent
    instances that you want to allocate to your function" (configuration-concurrency); moto does
    not run functions, so this holds the told value to the reservation the template makes: 1
    reserves exactly one execution, 0 reserves none (the account's unreserved pool: invocations
    may overlap)."""
    from cmstoken.core.settings import Settings
    from template_model import resolved_resources

    rotator = resolved_resources(RotatorReservedConcurrency=reserved)["RotatorFunction"]
    properties = rotator["Properties"]
    environment = {**properties["Environment"]["Variables"], "SERVICE_BASE_URL": "https://a.test"}
    settings = Settings.from_environ({k: str(v) for k, v in environment.items()})
    assert (settings.rotator_reserved_concurrency == 1) is one_at_a_time
    if one_at_a_time:
        assert str(properties["ReservedConcurrentExecutions"]) == "1"
    else:
        assert "ReservedConcurrentExecutions" not in properties
