"""The in-memory models of tests/simulation, on their own and under the real clients and rotator.
(Their agreement with moto's server and the emulator: tests/integration/
test_simulation_conformance.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from cmstoken.aws.secrets import SecretStore, next_version_id
from cmstoken.core.errors import (
    CredentialRejectedError,
    ReauthorizationRequiredError,
    TokenRefusedError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
    VersionConflictError,
)
from cmstoken.core.triggers import RotationRequest
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.service import ServiceClient
from simulation.dynamodb import DynamoDBModel
from simulation.secretsmanager import SecretsManagerModel
from simulation.sns import SnsModel
from simulation.upstream import (
    BASE_URL,
    CLIENT_ID,
    FREETRIAL_CLIENT_ID,
    ISSUER_URL,
    IdentityProviderModel,
    SimulatedUpstream,
)
from simulation.world import HOUR, SimClock, World

TOKEN_A = "a" * 32
SCHEDULED = RotationRequest(forced=False, source="schedule")
TOKEN_B = "b" * 32


def code(error: ClientError) -> tuple[str | None, int | None]:
    return (
        error.response.get("Error", {}).get("Code"),
        error.response.get("ResponseMetadata", {}).get("HTTPStatusCode"),
    )


# --- Secrets Manager ----------------------------------------------------------------------


def test_an_empty_secret_reads_as_no_value_through_the_real_store() -> None:
    model = SecretsManagerModel()
    model.create_secret(Name="s")
    with pytest.raises(ClientError) as raised:
        model.get_secret_value(SecretId="s")
    assert code(raised.value) == ("ResourceNotFoundException", 404)
    assert "staging label: AWSCURRENT" in str(raised.value)
    value = SecretStore(cast(Any, model)).read("s")
    assert (value.text, value.version_id) == (None, None)


def test_writes_are_idempotent_per_token_and_conflicts_are_refused() -> None:
    model = SecretsManagerModel()
    model.create_secret(Name="s")
    store = SecretStore(cast(Any, model))
    first = store.write("s", "one", replacing=None)
    assert first == next_version_id(None)
    assert store.write("s", "one", replacing=None) == first  # a retried write: no-op
    with pytest.raises(VersionConflictError):
        store.write("s", "other", replacing=None)  # another writer from the same read
    second = store.write("s", "two", replacing=first)
    assert store.read("s").text == "two"
    assert store.read("s").version_id == second
    assert model.texts("s") == ["one", "two"]


def test_staging_labels_move_and_old_versions_are_deprecated() -> None:
    model = SecretsManagerModel()
    model.create_secret(Name="s")
    tokens = [str(n) * 32 for n in range(1, 5)]
    for n, token in enumerate(tokens):
        answer = model.put_secret_value(
            SecretId="s", SecretString=f"v{n}", ClientRequestToken=token
        )
        assert answer["VersionStages"] == ["AWSCURRENT"]
    stages = model.describe_secret(SecretId="s")["VersionIdsToStages"]
    assert stages == {tokens[2]: ["AWSPREVIOUS"], tokens[3]: ["AWSCURRENT"]}
    listed = model.list_secret_version_ids(SecretId="s")["Versions"]
    assert [v["VersionId"] for v in listed] == tokens[2:]
    everything = model.list_secret_version_ids(SecretId="s", IncludeDeprecated=True)["Versions"]
    assert [v["VersionStages"] for v in everything] == [[], [], ["AWSPREVIOUS"], ["AWSCURRENT"]]
    assert model.get_secret_value(SecretId="s", VersionStage="AWSPREVIOUS")["SecretString"] == "v2"
    assert model.get_secret_value(SecretId="s", VersionId=tokens[0])["VersionStages"] == []
    again = model.put_secret_value(SecretId="s", SecretString="v0", ClientRequestToken=tokens[0])
    assert again["VersionStages"] == []  # the same request again changes nothing
    assert model.current_text("s") == "v3"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda m: m.get_secret_value(SecretId="nope"), ("ResourceNotFoundException", 404)),
        (
            lambda m: m.put_secret_value(
                SecretId="nope", SecretString="x", ClientRequestToken=TOKEN_A
            ),
            ("ResourceNotFoundException", 404),
        ),
        (lambda m: m.describe_secret(SecretId="nope"), ("ResourceNotFoundException", 404)),
        (lambda m: m.create_secret(Name="s"), ("ResourceExistsException", 400)),
        (
            lambda m: m.get_secret_value(SecretId="s", VersionId=TOKEN_B),
            ("ResourceNotFoundException", 404),
        ),
        (
            lambda m: m.get_secret_value(
                SecretId="s", VersionId=TOKEN_A, VersionStage="AWSPREVIOUS"
            ),
            ("InvalidRequestException", 400),
        ),
        (
            lambda m: m.get_secret_value(SecretId="s", VersionStage="AWSPREVIOUS"),
            ("ResourceNotFoundException", 404),
        ),
    ],
)
def test_errors_carry_the_aws_codes_and_statuses(
    call: Callable[[SecretsManagerModel], object], expected: tuple[str, int]
) -> None:
    model = SecretsManagerModel()
    model.create_secret(Name="s", SecretString="x", ClientRequestToken=TOKEN_A)
    with pytest.raises(ClientError) as raised:
        call(model)
    assert code(raised.value) == expected


def test_a_client_request_token_is_validated_as_boto3_does() -> None:
    model = SecretsManagerModel()
    model.create_secret(Name="s")
    with pytest.raises(ParamValidationError):
        model.put_secret_value(SecretId="s", SecretString="x", ClientRequestToken="short")
    assert model.calls == [("CreateSecret", "s")]  # refused before it was sent
    generated = model.put_secret_value(SecretId="s", SecretString="x")["VersionId"]
    assert len(generated) == 36


def test_stale_reads_answer_any_of_the_last_values_only_when_enabled() -> None:
    picks: list[int] = []
    offered: list[int] = []

    def choose(count: int) -> int:
        offered.append(count)
        return picks.pop(0)

    model = SecretsManagerModel(stale_reads=2, choose=choose)
    model.create_secret(Name="s")
    for n in range(3):
        model.put_secret_value(SecretId="s", SecretString=f"v{n}", ClientRequestToken=str(n) * 32)
    picks.extend([0, 1, 2])
    assert [model.get_secret_value(SecretId="s")["SecretString"] for _ in range(3)] == [
        "v2",
        "v1",
        "v0",
    ]
    assert offered == [3, 3, 3]
    # Right after the first write, a stale read may still find no value at all.
    fresh = SecretsManagerModel(stale_reads=1, choose=lambda count: count - 1)
    fresh.create_secret(Name="s")
    fresh.put_secret_value(SecretId="s", SecretString="x", ClientRequestToken=TOKEN_A)
    assert SecretStore(cast(Any, fresh)).read("s").text is None
    # Off by default: always the newest.
    plain = SecretsManagerModel(choose=lambda count: pytest.fail("no choice without stale reads"))
    plain.create_secret(Name="s")
    plain.put_secret_value(SecretId="s", SecretString="x", ClientRequestToken=TOKEN_A)
    plain.put_secret_value(SecretId="s", SecretString="y", ClientRequestToken=TOKEN_B)
    assert plain.get_secret_value(SecretId="s")["SecretString"] == "y"


def test_every_call_passes_the_interceptor() -> None:
    seen: list[tuple[str, str]] = []

    def interceptor(service: str, operation: str, act: Callable[[], Any]) -> Any:
        seen.append((service, operation))
        return act()

    model = SecretsManagerModel(interceptor=interceptor)
    model.create_secret(Name="s")
    model.put_secret_value(SecretId="s", SecretString="x", ClientRequestToken=TOKEN_A)
    model.get_secret_value(SecretId="s")
    assert seen == [
        ("secretsmanager", "CreateSecret"),
        ("secretsmanager", "PutSecretValue"),
        ("secretsmanager", "GetSecretValue"),
    ]


# --- identity provider and service, through the real clients ---------------------------


def upstream(reuse_interval: float = 0) -> tuple[SimClock, SimulatedUpstream, IdentityClient]:
    clock = SimClock()
    transport = SimulatedUpstream(IdentityProviderModel(clock, reuse_interval=reuse_interval))
    return clock, transport, IdentityClient(ISSUER_URL, transport=transport, clock=clock)


def test_every_refresh_rotates_and_reuse_revokes_the_family() -> None:
    _, transport, client = upstream()
    first = transport.identity.authorize()["refresh_token"]
    second = client.refresh(client_id=CLIENT_ID, refresh_token=first).refresh_token
    assert second != first
    assert not transport.identity.usable(first)
    assert transport.identity.usable(second)
    with pytest.raises(CredentialRejectedError) as raised:
        client.refresh(client_id=CLIENT_ID, refresh_token=first)
    assert (raised.value.status, raised.value.code) == (403, "invalid_grant")
    assert transport.identity.family_revoked(second)
    assert not transport.identity.usable(second)


def test_the_previous_token_is_accepted_again_within_the_reuse_interval_only() -> None:
    clock, transport, client = upstream(reuse_interval=60)
    first = transport.identity.authorize()["refresh_token"]
    client.refresh(client_id=CLIENT_ID, refresh_token=first)
    clock.advance(60)
    again = client.refresh(client_id=CLIENT_ID, refresh_token=first).refresh_token
    assert transport.identity.usable(again)
    clock.advance(1)
    with pytest.raises(CredentialRejectedError):
        client.refresh(client_id=CLIENT_ID, refresh_token=first)
    assert transport.identity.family_revoked(again)


def test_clients_are_checked_like_the_emulator_does() -> None:
    _, transport, client = upstream()
    token = transport.identity.authorize()["refresh_token"]
    with pytest.raises(CredentialRejectedError) as raised:
        client.refresh(client_id="stranger", refresh_token=token)
    assert (raised.value.status, raised.value.code) == (401, "invalid_client")
    with pytest.raises(CredentialRejectedError) as raised:
        client.refresh(client_id=FREETRIAL_CLIENT_ID, refresh_token=token)
    assert (raised.value.status, raised.value.code) == (403, "invalid_grant")
    assert transport.identity.usable(token)


def test_families_end_with_their_idle_and_absolute_lifetimes() -> None:
    clock, transport, client = upstream()
    token = transport.identity.authorize()["refresh_token"]
    clock.advance(29 * 86400)
    token = client.refresh(client_id=CLIENT_ID, refresh_token=token).refresh_token
    clock.advance(86400)  # idle 1 day, but 30 days since the authorization
    assert not transport.identity.usable(token)
    with pytest.raises(CredentialRejectedError):
        client.refresh(client_id=CLIENT_ID, refresh_token=token)


@pytest.mark.parametrize(
    ("how", "error"), [("connection", UpstreamConnectionError), ("timeout", UpstreamTimeoutError)]
)
def test_a_lost_response_acts_first(how: Any, error: type[Exception]) -> None:
    _, transport, client = upstream()
    token = transport.identity.authorize()["refresh_token"]
    transport.lose("refresh", how)
    with pytest.raises(error) as raised:
        client.refresh(client_id=CLIENT_ID, refresh_token=token)
    assert getattr(raised.value, "outcome_unknown", False)
    assert getattr(raised.value, "status", None) is None
    assert not transport.identity.usable(token)  # spent: its successor is lost to the caller
    assert [(e.endpoint, e.status) for e in transport.log] == [("refresh", None)]


def test_the_service_exchanges_and_verifies_only_tokens_it_issued() -> None:
    clock, transport, client = upstream()
    service = ServiceClient(BASE_URL, transport=transport, clock=clock)
    access = client.refresh(
        client_id=CLIENT_ID, refresh_token=transport.identity.authorize()["refresh_token"]
    ).access_token
    assert access is not None
    token = service.exchange(access, fallback_expires_at=clock.now() + 60)
    assert token.expires_at == clock.now() + 86400
    assert len(service.list_projects(token.token)) == 1
    with pytest.raises(TokenRefusedError):
        service.list_projects("forged")
    assert service.provider_info().issuer_url.rstrip("/") == ISSUER_URL.rstrip("/")
    clock.advance(86400)
    with pytest.raises(TokenRefusedError):
        service.list_projects(token.token)


# --- the real rotator on the models -------------------------------------------------------


def test_the_real_rotator_rotates_on_the_models() -> None:
    world = World()
    world.seed()
    old = world.newest_refresh_token()
    world.clock.advance(19 * HOUR)
    result = world.rotator("one").run(SCHEDULED, deadline=world.clock.now() + 120)
    assert (result.outcome, result.refreshed) == ("rotated", True)
    newest = world.newest_refresh_token()
    assert newest != old
    assert world.identity.usable(newest)
    assert world.upstream.service.valid(world.service_document().token)
    assert [e.endpoint for e in world.upstream.log] == ["refresh", "exchange", "projects"]
    assert world.replayed_refresh_tokens() == []
    # Fresh now: the next run is one read of the published token.
    calls = len(world.secretsmanager.calls)
    result = world.rotator("two").run(SCHEDULED, deadline=world.clock.now() + 120)
    assert result.outcome == "skipped"
    assert world.secretsmanager.calls[calls:] == [("GetSecretValue", "cmstoken/service-token")]


def test_a_lost_refresh_answer_is_presented_again_by_its_run_and_reported() -> None:
    world = World()
    world.seed()
    world.clock.advance(19 * HOUR)
    world.upstream.lose("refresh")
    spent = world.newest_refresh_token()
    with pytest.raises(ReauthorizationRequiredError):
        world.rotator("one").run(SCHEDULED, deadline=world.clock.now() + 120)
    refreshes = [(e.endpoint, e.status) for e in world.upstream.log]
    assert refreshes == [("refresh", None), ("refresh", 403)]
    # The one second presentation (at once, by the run that lost the answer), nothing after.
    assert world.replayed_refresh_tokens() == [spent]
    credential = world.refresh_document().credential
    assert credential is not None
    assert credential.status == "reauthorization_required"


def test_a_gateway_loss_acts_and_answers_504() -> None:
    world = World(reuse_interval=30)
    world.seed()
    world.clock.advance(19 * HOUR)
    world.upstream.lose("refresh", "gateway")
    result = world.rotator("one").run(SCHEDULED, deadline=world.clock.now() + 120)
    assert result.outcome == "rotated"
    # acted (its answer lost behind the gateway's 504), then presented again inside 30 s
    assert [(e.endpoint, e.status) for e in world.upstream.log][:2] == [
        ("refresh", None),
        ("refresh", 200),
    ]
    assert world.replayed_refresh_tokens() == []


# --- DynamoDB and SNS (the links' table and topic) -----------------------------------------


def _links_table() -> DynamoDBModel:
    model = DynamoDBModel()
    model.create_table(TableName="links", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    return model


def test_a_conditional_write_is_made_or_refused_whole() -> None:
    model = _links_table()
    put: dict[str, Any] = {
        "TableName": "links",
        "Item": {"pk": {"S": "k"}, "n": {"N": "1"}},
        "ConditionExpression": "attribute_not_exists(#k)",
        "ExpressionAttributeNames": {"#k": "pk"},
    }
    model.put_item(**put)
    with pytest.raises(ClientError) as raised:
        model.put_item(**{**put, "Item": {"pk": {"S": "k"}, "n": {"N": "2"}}})
    assert code(raised.value) == ("ConditionalCheckFailedException", 400)
    assert model.get_item(TableName="links", Key={"pk": {"S": "k"}})["Item"]["n"] == {"N": "1"}


def test_updates_set_add_and_remove_and_compare_numbers_as_numbers() -> None:
    model = _links_table()
    key = {"pk": {"S": "k"}}
    update: dict[str, Any] = {
        "UpdateExpression": "ADD #c :one SET #t = :t REMOVE #gone",
        "ConditionExpression": "attribute_not_exists(#c) OR #c < :limit",
        "ExpressionAttributeNames": {"#c": "c", "#t": "t", "#gone": "g"},
        "ExpressionAttributeValues": {":one": {"N": "1"}, ":t": {"N": "9"}, ":limit": {"N": "10"}},
    }
    for _ in range(10):  # "9" < "10" as numbers, not as strings
        model.update_item(TableName="links", Key=key, **update)
    with pytest.raises(ClientError):
        model.update_item(TableName="links", Key=key, **update)
    item = model.get_item(TableName="links", Key=key)["Item"]
    assert item == {"pk": {"S": "k"}, "c": {"N": "10"}, "t": {"N": "9"}}


def test_names_and_values_the_expressions_do_not_use_are_refused() -> None:
    model = _links_table()
    with pytest.raises(ClientError) as raised:
        model.delete_item(
            TableName="links",
            Key={"pk": {"S": "k"}},
            ConditionExpression="#a = :a",
            ExpressionAttributeNames={"#a": "a", "#b": "b"},
            ExpressionAttributeValues={":a": {"N": "1"}},
        )
    assert code(raised.value) == ("ValidationException", 400)
    assert "unused" in str(raised.value)


def test_every_item_call_passes_the_interceptor_with_its_key() -> None:
    seen: list[tuple[str, str]] = []

    def intercept(service: str, operation: str, act: Callable[[], Any]) -> Any:
        seen.append((service, operation))
        return act()

    model = _links_table()
    model.interceptor = intercept
    model.get_item(TableName="links", Key={"pk": {"S": "link#1"}})
    model.put_item(TableName="links", Item={"pk": {"S": "link#1"}})
    assert seen == [("dynamodb", "GetItem:link#1"), ("dynamodb", "PutItem:link#1")]


@pytest.mark.parametrize(
    ("subject", "message"),
    [
        ("two\nlines", '{"default": "text"}'),
        ("x" * 100, '{"default": "text"}'),
        ("ok", '{"email": "text"}'),
        ("ok", "not json"),
        ("ok", '{"default": 1}'),
    ],
)
def test_sns_refuses_what_its_publish_reference_refuses(subject: str, message: str) -> None:
    """SNS Publish API reference: a subject is "UTF-8 text with no line breaks or control
    characters, and less than 100 characters long"; with MessageStructure json the message is
    "a syntactically valid JSON object" with "a top-level JSON key of 'default' with a value
    that is a string" (moto checks neither: the conformance test says so)."""
    model = SnsModel()
    arn = model.create_topic(Name="alarms")["TopicArn"]
    with pytest.raises(ClientError) as raised:
        model.publish(TopicArn=arn, Subject=subject, Message=message, MessageStructure="json")
    assert code(raised.value) == ("InvalidParameter", 400)
    assert model.published == []
    model.publish(
        TopicArn=arn, Subject="ok", Message='{"default": "text"}', MessageStructure="json"
    )
    assert [p.body("email") for p in model.published] == ["text"]
