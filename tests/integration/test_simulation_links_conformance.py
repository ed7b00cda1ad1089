"""The links' models cannot drift: the same operation sequences (generated, bounded,
derandomized) run through the real table adapter (``cmstoken.aws.link_state.LinkState``) on the
in-memory DynamoDB and on moto's server, with the same outcomes; and a notice published through
the real topic adapter on the in-memory SNS and on moto's server.

Outcomes compared: every adapter call's answer (written or refused, when a link was used) or
its error type and AWS code, and the table's items after every step; for SNS, published or the
error code. Times are drawn around every boundary the conditions compare against (a claim's
lease, a day, an hour).

``make verify`` runs each comparison's full count of sequences, ``make test`` a third
(``support.examples``).
"""

from __future__ import annotations

import json
from typing import Any, cast

import boto3
import pytest
import requests
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmstoken.aws.link_state import KEY, LEASE_SECONDS, LinkState, LinkUse
from cmstoken.aws.topic import Topic
from cmstoken.core.errors import CmsTokenError
from simulation.dynamodb import DynamoDBModel
from simulation.sns import SnsModel
from support import examples

pytestmark = pytest.mark.integration

CONFORMANCE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=examples(60),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TABLE = "links"
NOW = 1_795_003_600  # on the hour
DAY = 86_400
TIMES = tuple(
    NOW + offset
    for offset in (
        *(0, 1, LEASE_SECONDS - 1, LEASE_SECONDS, LEASE_SECONDS + 1, 3599, 3600),
        *(DAY - 1, DAY, DAY + LEASE_SECONDS),
    )
)
Op = tuple[Any, ...]

link_ops = st.one_of(
    st.tuples(
        st.just("use"),
        st.sampled_from(("n1", "n2")),
        st.sampled_from(TIMES),
        st.sampled_from(("p1", "p2")),
    ),
    st.tuples(st.just("unuse"), st.sampled_from(("n1", "n2")), st.sampled_from(("p1", "p2"))),
    st.tuples(st.just("link_use"), st.sampled_from(("n1", "n2"))),
    st.tuples(st.just("started"), st.sampled_from(("n1", "n2")), st.sampled_from(TIMES)),
    st.tuples(
        st.just("take_over"),
        st.sampled_from(("n1", "n2")),
        st.sampled_from(TIMES),
        st.sampled_from(TIMES),
        st.sampled_from(("p1", "p2")),
    ),
    st.tuples(st.just("claim_follow"), st.sampled_from(("n1", "n2")), st.sampled_from(TIMES)),
    st.tuples(st.just("followed"), st.sampled_from(("n1", "n2")), st.sampled_from(TIMES)),
    st.tuples(st.just("release_follow"), st.sampled_from(("n1", "n2")), st.sampled_from(TIMES)),
    st.tuples(st.just("sent_at"), st.sampled_from(("a", "b"))),
    st.tuples(st.just("claim"), st.sampled_from(("a", "b")), st.sampled_from(TIMES), st.just(DAY)),
    st.tuples(
        st.just("sent"),
        st.sampled_from(("a", "b")),
        st.sampled_from(TIMES),
        st.sampled_from(TIMES),
    ),
    st.tuples(st.just("release"), st.sampled_from(("a", "b")), st.sampled_from(TIMES)),
    st.tuples(
        st.just("count"),
        st.sampled_from(("start", "poll")),
        st.sampled_from(TIMES),
        st.sampled_from((1, 2)),
    ),
)


def _call(state: LinkState, op: Op) -> Any:
    kind = op[0]
    if kind == "use":
        return state.use_link(op[1], now=op[2], expires_at=op[2] + DAY, press=op[3])
    if kind == "unuse":
        return state.unuse_link(op[1], press=op[2])
    if kind == "link_use":
        return state.link_use(op[1])
    if kind == "started":
        return state.link_started(op[1], now=op[2], expires_at=op[2] + DAY)
    if kind == "take_over":
        return state.take_over_link(op[1], now=op[2], used_at=op[3], press=op[4])
    if kind == "claim_follow":
        return state.claim_follow(op[1], now=op[2])
    if kind == "followed":
        return state.link_followed(op[1], now=op[2])
    if kind == "release_follow":
        return state.release_follow(op[1], claimed_at=op[2])
    if kind == "sent_at":
        return state.notice_sent_at(op[1])
    if kind == "claim":
        return state.claim_notice(op[1], now=op[2], every=op[3])
    if kind == "sent":
        return state.notice_sent(op[1], claimed_at=op[2], now=op[3], every=DAY)
    if kind == "release":
        return state.release_notice(op[1], claimed_at=op[2])
    return state.count(op[1], now=op[2], limit=op[3])


def _outcome(state: LinkState, client: Any, op: Op) -> tuple[Any, list[str]]:
    try:
        answer = _call(state, op)
    except CmsTokenError as exc:
        answer = (type(exc).__name__, getattr(exc, "code", None))
    items = client.scan(TableName=TABLE)["Items"]
    return answer, sorted(json.dumps(item, sort_keys=True) for item in items)


def _table(client: Any) -> None:
    client.create_table(
        TableName=TABLE,
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )


@settings(CONFORMANCE, max_examples=examples(120))
@given(ops=st.lists(link_ops, min_size=1, max_size=14))
def test_the_dynamodb_model_answers_the_links_table_as_moto_does(
    moto_server: str, ops: list[Op]
) -> None:
    requests.post(f"{moto_server}/moto-api/reset", timeout=10).raise_for_status()
    moto = boto3.client("dynamodb")
    model = DynamoDBModel()
    for client in (moto, model):
        _table(client)
    on_moto, on_model = LinkState(TABLE, moto), LinkState(TABLE, cast(Any, model))
    for step, op in enumerate(ops):
        expected = _outcome(on_moto, moto, op)
        assert _outcome(on_model, model, op) == expected, f"step {step}: {op}"


def test_the_links_table_comparison_sees_every_kind_of_answer(moto_server: str) -> None:
    """The generated sequences above can only be trusted if the comparison tells the answers
    apart: one fixed sequence, checked against moto's own answers."""
    moto = boto3.client("dynamodb")
    _table(moto)
    state = LinkState(TABLE, moto)
    steps: list[Op] = [
        ("use", "n1", NOW, "p1"),
        ("use", "n1", NOW + 1, "p2"),
        ("link_use", "n1"),
        ("unuse", "n1", "p2"),
        ("link_use", "n1"),
        ("unuse", "n1", "p1"),
        ("link_use", "n1"),
        ("started", "n1", NOW),
        ("use", "n1", NOW + 1, "p1"),
        ("unuse", "n1", "p1"),
        ("link_use", "n1"),
        ("claim", "a", NOW, DAY),
        ("claim", "a", NOW + LEASE_SECONDS - 1, DAY),
        ("sent", "a", NOW, NOW + 1),
        ("claim", "a", NOW + DAY, DAY),
        ("claim", "a", NOW + DAY + 1, DAY),
        ("count", "start", NOW, 1),
        ("count", "start", NOW + 1, 1),
    ]
    answers = [_outcome(state, moto, op)[0] for op in steps]
    assert answers == [
        True, False, LinkUse(NOW, None), None, LinkUse(NOW, None), None, None,
        None, False, None, LinkUse(None, NOW),
        True, False, True, False, True,
        True, False,
    ]  # fmt: skip


def test_the_dynamodb_model_refuses_what_dynamodb_refuses(moto_server: str) -> None:
    """Requests the adapter never makes, answered as DynamoDB (and moto) answer them: an
    unused value, a missing table. (An undefined name is a ValidationException in DynamoDB; moto's
    server answers it with a 500, so it is not compared.)"""
    moto, model = boto3.client("dynamodb"), DynamoDBModel()
    for client in (moto, model):
        _table(client)
    requests_: list[dict[str, Any]] = [
        {
            "TableName": TABLE,
            "Key": {KEY: {"S": "x"}},
            "UpdateExpression": "SET #a = :a",
            "ExpressionAttributeNames": {"#a": "a"},
            "ExpressionAttributeValues": {":a": {"N": "1"}, ":b": {"N": "2"}},
        },
        {
            "TableName": "missing",
            "Key": {KEY: {"S": "x"}},
            "UpdateExpression": "SET a = :a",
            "ExpressionAttributeValues": {":a": {"N": "1"}},
        },
    ]
    for request in requests_:
        codes = []
        for client in (moto, model):
            with pytest.raises(ClientError) as raised:
                client.update_item(**request)
            codes.append(getattr(raised.value, "response", {}).get("Error", {}).get("Code"))
        assert codes[0] == codes[1], request
        assert codes[0] is not None


# --- SNS ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic_name", ["alarms", "missing"])
def test_the_sns_model_publishes_where_moto_does(moto_server: str, topic_name: str) -> None:
    """A notice as the links publish it, to the topic or to one that does not exist. (moto
    takes a malformed ``json`` message structure and a subject with a line break, which SNS
    refuses: the model follows SNS there, tested in tests/unit/simulation.)"""
    bodies = json.dumps({"default": "text", "email": "text", "sqs": "{}"})
    answers = []
    for client in (boto3.client("sns"), SnsModel()):
        arn = client.create_topic(Name="alarms")["TopicArn"].rsplit(":", 1)[0] + f":{topic_name}"
        try:
            Topic(arn, cast(Any, client)).publish(subject="cmstoken prod", message=bodies)
            answers.append("published")
        except CmsTokenError as exc:
            answers.append(str(getattr(exc, "code", None)))
    assert answers[0] == answers[1] == ("published" if topic_name == "alarms" else "NotFound")
