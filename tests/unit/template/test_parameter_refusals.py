"""What CloudFormation refuses before it creates or changes anything (issue 29, item 9): the key
parameters take a key's ARN or a multi-Region key's (``key/mrk-...``) in every partition, and
nothing else; ReplicaRegions never lists the stack's own Region, nor more than five Regions, nor
an empty item; a given ServiceTokenKmsKeyArn with replicas is a multi-Region key.

Where each refusal happens, from AWS's documents:

- a parameter's ``AllowedPattern`` (for a ``CommaDelimitedList``, each item's) and the ``Rules``
  are checked before anything is created: "All validations occur before CloudFormation creates or
  updates any resources" (Template Reference, "Rule functions"). A rule function takes whole
  parameter values (``Ref``) and other rule functions only (same page, "Supported functions"),
  so a rule can test a Region's membership of a list, never a part of a key's ARN;
- "At stack creation or stack update, AWS CloudFormation evaluates all the conditions in your
  template before creating any resources" (User Guide, "Conditions"), and ``Fn::Select`` "does not
  check ... if the index is out of bounds of the array ... will result in a stack error"
  (Template Reference, "Fn::Select"): a condition whose ``Fn::Select`` runs past its list stops
  the operation before any resource. template.yaml's ReplicaRegionsFitTheirPlaces and
  GivenKeyHasReplicas do exactly that for the two refusals no rule can make; CloudFormation words
  the error "Template error: Fn::Select cannot select nonexistent value at index N"."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from template_model import PSEUDO, broken_rules, parameter_values, refusals, source, transformed

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEY_PARAMETERS = ("KmsKeyArn", "ServiceTokenKmsKeyArn", "AlarmTopicKmsKey")
STACK_REGION = PSEUDO["AWS::Region"]
# Every partition, and Regions of each (the KMS API Reference's pattern for a Region of a
# multi-Region key, MultiRegionKey: ^([a-z]+-){2,3}\d+$).
PARTITIONS = {
    "aws": ("us-east-1", "eu-west-1", "ap-southeast-2", "il-central-1", "mx-central-1"),
    "aws-cn": ("cn-north-1", "cn-northwest-1"),
    "aws-us-gov": ("us-gov-west-1", "us-gov-east-1"),
    "aws-iso": ("us-iso-east-1",),
    "aws-iso-b": ("us-isob-east-1",),
    "aws-iso-e": ("eu-isoe-west-1",),
    "aws-iso-f": ("us-isof-south-1",),
    "aws-eusc": ("eusc-de-east-1",),
}
OTHER_REGIONS = (
    "eu-west-1",
    "us-west-2",
    "ap-southeast-2",
    "eu-central-1",
    "sa-east-1",
    "eu-north-1",
)
HEX = "0123456789abcdef"

accounts = st.from_regex(r"[0-9]{12}", fullmatch=True)
uuid_ids = st.uuids().map(str)  # a KMS key id: 1234abcd-12ab-34cd-56ef-1234567890ab
multi_region_ids = st.text(HEX, min_size=32, max_size=32).map(lambda hexes: f"mrk-{hexes}")


@st.composite
def key_arns(draw: st.DrawFn, ids: st.SearchStrategy[str]) -> str:
    partition = draw(st.sampled_from(sorted(PARTITIONS)))
    region = draw(st.sampled_from(PARTITIONS[partition]))
    return f"arn:{partition}:kms:{region}:{draw(accounts)}:key/{draw(ids)}"


# A valid ARN made malformed, each in one way.
MALFORMATIONS: dict[str, Callable[[str], str]] = {
    "an alias": lambda arn: re.sub(r":key/.*", ":alias/aws/secretsmanager", arn),
    "an alias of its own": lambda arn: re.sub(r":key/.*", ":alias/cmstoken", arn),
    "the bare key id": lambda arn: arn.rsplit("/", 1)[1],
    "a capital letter": lambda arn: arn[:-1] + "A",
    "a character short": lambda arn: arn[:-1],
    "a character more": lambda arn: arn + "0",
    "not hexadecimal": lambda arn: arn[:-1] + "g",
    "no account": lambda arn: re.sub(r":[0-9]{12}:", "::", arn),
    "another service": lambda arn: arn.replace(":kms:", ":secretsmanager:", 1),
    "no partition": lambda arn: arn.replace("arn:aws", "arn:", 1),
    "a space after it": lambda arn: arn + " ",
    "two keys": lambda arn: f"{arn},{arn}",
    "an empty key id": lambda arn: arn.rsplit("/", 1)[0] + "/",
}


def allowed(name: str, value: str) -> bool:
    return re.fullmatch(source()["Parameters"][name]["AllowedPattern"], value) is not None


@PROPERTY
@given(name=st.sampled_from(KEY_PARAMETERS), arn=key_arns(uuid_ids | multi_region_ids))
def test_the_key_parameters_take_a_key_or_a_multi_region_key_in_every_partition(
    name: str, arn: str
) -> None:
    """A key's ARN ends in key/ and its key id, 1234abcd-12ab-34cd-56ef-1234567890ab; a
    multi-Region key's id is mrk- and 32 hexadecimal digits, as in
    arn:aws:kms:us-east-2:111122223333:key/mrk-1234abcd12ab34cd56ef1234567890ab (AWS KMS API
    Reference, ReplicateKey's KeyId and TagResource's KeyId)."""
    assert allowed(name, arn)
    assert allowed(name, "")
    assert allowed(name, "create") is (name == "AlarmTopicKmsKey")


@PROPERTY
@given(
    name=st.sampled_from(KEY_PARAMETERS),
    arn=key_arns(uuid_ids | multi_region_ids),
    malformation=st.sampled_from(sorted(MALFORMATIONS)),
)
def test_the_key_parameters_refuse_anything_else(name: str, arn: str, malformation: str) -> None:
    """Not an alias, as before: the template takes a replica key's ARN apart (its account and key
    id) and names the key in IAM policies' Resource, both of which need the key's own ARN."""
    assert not allowed(name, MALFORMATIONS[malformation](arn))


# --- ReplicaRegions and the key of its replicas ----------------------------------------------

replica_lists = st.lists(st.sampled_from(OTHER_REGIONS), min_size=1, max_size=5, unique=True)


def refused(**parameters: str) -> list[str]:
    return refusals(parameter_values(**parameters))


@PROPERTY
@given(regions=st.lists(st.sampled_from(OTHER_REGIONS), max_size=4, unique=True), data=st.data())
def test_the_stacks_own_region_in_replica_regions_is_refused_by_a_rule(
    regions: list[str], data: st.DataObject
) -> None:
    """A secret has no replica in its own Region: a replica's ARN "is the same as the primary
    secret except for the Region" (Secrets Manager User Guide, "Replicate secrets across
    Regions"), so there it would be the secret itself. (Secrets Manager's API Reference lists no
    error of its own for it: ReplicateSecretToRegions and CreateSecret answer a parameter they
    refuse with InvalidParameterException, "The parameter name or value is invalid"; moto's
    Secrets Manager answers "Invalid replica region.") The rule refuses it wherever it stands in
    the list, before anything is created."""
    position = data.draw(st.integers(0, len(regions)))
    listed = ",".join([*regions[:position], STACK_REGION, *regions[position:]])
    assert broken_rules(parameter_values(ReplicaRegions=listed)) == [
        "ReplicaRegionsLeaveOutTheStacksRegion"
    ]
    (reason,) = refused(ReplicaRegions=listed)
    assert reason.startswith("ReplicaRegions lists this stack's own Region")


@PROPERTY
@given(regions=replica_lists, place=st.sampled_from(["first", "inside", "last", "twice"]))
def test_an_empty_item_in_replica_regions_is_refused_by_a_rule(
    regions: list[str], place: str
) -> None:
    value = {
        "first": "," + ",".join(regions),
        "inside": ",,".join(regions) if len(regions) > 1 else regions[0] + ",",
        "last": ",".join(regions) + ",",
        "twice": ",".join(regions) + ",,",
    }[place]
    assert broken_rules(parameter_values(ReplicaRegions=value)) == ["ReplicaRegionsHaveNoEmptyItem"]


@pytest.mark.parametrize("count", [6, 7, 12])
def test_more_than_five_replica_regions_are_refused_before_any_resource(count: int) -> None:
    """The template has five replica places; a sixth Region would have none. Each item passes
    the pattern, so the refusal is ReplicaRegionsFitTheirPlaces' Fn::Select past its list. The
    first five alone are accepted, with the stack's key or a given multi-Region key."""
    regions = [f"xx-region-{n}" for n in range(count)]
    assert refused(ReplicaRegions=",".join(regions)) == [
        "Template error: Fn::Select cannot select nonexistent value at index 5"
    ]
    given_key = f"arn:aws:kms:{STACK_REGION}:123456789012:key/mrk-{'ab' * 16}"
    for accepted in range(1, 6):
        five = ",".join(regions[:accepted])
        assert refused(ReplicaRegions=five) == []
        assert refused(ReplicaRegions=five, ServiceTokenKmsKeyArn=given_key) == []


@PROPERTY
@given(
    key=key_arns(uuid_ids),
    regions=replica_lists,
    shared=st.sampled_from([{}, {"ConsumerAccountIds": "111111111111"}]),
    multi_region_id=multi_region_ids,
)
def test_a_single_region_key_with_replicas_is_refused_before_any_resource(
    key: str, regions: list[str], shared: dict[str, str], multi_region_id: str
) -> None:
    """Each replica is encrypted with the key ARN the template gives its Region: the given key's
    with that Region, which names a key only for a multi-Region key replicated there
    (AWS KMS API Reference, ReplicateKey: a primary key and its replicas "have the same key ID");
    a single-Region key's id names nothing in another Region, and the replica would fail ("The
    KMS key is disabled or not found": Secrets Manager User Guide, "Troubleshoot replication"),
    while CloudFormation may still report the secret created
    (cloudformation-coverage-roadmap#1459). GivenKeyHasReplicas refuses it. The controls: the
    same key without replicas (shared), a multi-Region key, or the stack's own key (empty:
    ServiceTokenKey, multi-Region) with them are accepted."""
    listed = ",".join(regions)
    assert refused(ServiceTokenKmsKeyArn=key, ReplicaRegions=listed, **shared) == [
        "Template error: Fn::Select cannot select nonexistent value at index 1"
    ]
    assert refused(ServiceTokenKmsKeyArn=key, ConsumerOrganizationId="o-a1b2c3d4e5") == []
    multi_region = key.rsplit("/", 1)[0] + "/" + multi_region_id
    assert refused(ServiceTokenKmsKeyArn=multi_region, ReplicaRegions=listed, **shared) == []
    assert refused(ReplicaRegions=listed, **shared) == []


def test_the_refusing_conditions_are_evaluated_whenever_replicas_are_asked_for() -> None:
    """HasReplicaRegions, which every replica's resource and statement is under, takes both: a
    CloudFormation that evaluated only the conditions in use would still evaluate them."""
    conditions = transformed()["Conditions"]
    requested = conditions["HasReplicaRegions"]["Fn::And"]
    assert {"Condition": "ReplicaRegionsFitTheirPlaces"} in requested
    assert {"Condition": "GivenKeyHasReplicas"} in requested
