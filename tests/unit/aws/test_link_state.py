"""The links' DynamoDB table on moto in-process: a link is used once, a need is notified at
most once per period (a claim lapsing before Lambda's retry), starts and polls are counted up
to a limit per hour, each decided by one
conditional write; and AWS errors become the project's types."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws

from cmstoken.aws.link_state import KEY, LEASE_SECONDS, TTL, LinkState, LinkUse, link_key
from cmstoken.core.errors import LinkStateAccessError, LinkStateError, LinkStateUnavailableError
from support import client_error, fail_with

TABLE = "links"
NOW = 1_795_000_000
DAY = 86_400
NONCE = "bm9uY2Utb2YtMTYtYnl0ZXM"
PRESS = "0123456789abcdef"


@pytest.fixture
def client(aws_credentials: None) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(
            TableName=TABLE,
            AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
            KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def items(client: Any) -> dict[str, dict[str, Any]]:
    return {item[KEY]["S"]: item for item in client.scan(TableName=TABLE)["Items"]}


def test_a_link_is_used_once_and_its_item_expires_with_it(client: Any) -> None:
    state = LinkState(TABLE, client)
    assert state.link_use(NONCE) is None
    assert state.use_link(NONCE, now=NOW, expires_at=NOW + 3600, press=PRESS) is True
    assert state.link_use(NONCE) == LinkUse(used_at=NOW, started_at=None)
    assert state.link_use(NONCE + "x") is None
    assert state.use_link(NONCE, now=NOW + 5, expires_at=NOW + 3600, press=PRESS) is False
    assert state.use_link(NONCE + "x", now=NOW + 5, expires_at=NOW + 3600, press=PRESS) is True
    stored = items(client)[link_key(NONCE)]
    assert stored[TTL] == {"N": str(NOW + 3600)}
    assert stored["used_at"] == {"N": str(NOW)}  # the second use wrote nothing


def test_the_table_holds_no_part_of_a_link(client: Any) -> None:
    LinkState(TABLE, client).use_link(NONCE, now=NOW, expires_at=NOW + 60, press=PRESS)
    assert NONCE not in str(client.scan(TableName=TABLE)["Items"])


def test_a_double_click_uses_the_link_once(client: Any) -> None:
    """Two invocations that race for the same link: exactly one wins."""
    state = LinkState(TABLE, client)
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def click() -> None:
        barrier.wait()
        results.append(state.use_link(NONCE, now=NOW, expires_at=NOW + 60, press=PRESS))

    threads = [threading.Thread(target=click) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 7 + [True]


def test_a_need_is_notified_at_most_once_per_period(client: Any) -> None:
    state = LinkState(TABLE, client)
    need = "refused#1700000000"
    assert state.claim_notice(need, now=NOW, every=DAY) is True
    assert state.notice_sent(need, claimed_at=NOW, now=NOW + 2, every=DAY) is True
    assert state.claim_notice(need, now=NOW + DAY + 1, every=DAY) is False
    assert state.claim_notice(need, now=NOW + DAY + 2, every=DAY) is True
    assert state.notice_sent(need, claimed_at=NOW + DAY + 2, now=NOW + DAY + 3, every=DAY)
    assert state.claim_notice(need, now=NOW + DAY + 4, every=DAY) is False
    # another need (a new authorization's) has its own period
    assert state.claim_notice("refused#1800000000", now=NOW + DAY + 4, every=DAY) is True
    stored = items(client)[f"notice#{need}"]
    assert stored["sent_at"] == {"N": str(NOW + DAY + 3)}
    assert stored[TTL] == {"N": str(NOW + 3 * DAY + 3)}
    assert "lease_until" not in stored


def test_a_claim_holds_while_its_invocation_may_run_and_lapses_before_a_retry(
    client: Any,
) -> None:
    """An invocation that dies holding a claim (between claiming and sending) delays the
    notice until Lambda retries it, a minute later: not until the next day."""
    state = LinkState(TABLE, client)
    assert state.claim_notice("n", now=NOW, every=DAY) is True
    assert state.claim_notice("n", now=NOW + LEASE_SECONDS - 1, every=DAY) is False
    assert LEASE_SECONDS < 60  # Lambda's first retry of a failed asynchronous invocation
    assert state.claim_notice("n", now=NOW + LEASE_SECONDS, every=DAY) is True
    # the first invocation's late record finds its claim taken: the notice may go twice
    assert state.notice_sent("n", claimed_at=NOW, now=NOW + LEASE_SECONDS, every=DAY) is False
    assert "sent_at" not in items(client)["notice#n"]


def test_starts_are_counted_up_to_the_limit_in_each_hour(client: Any) -> None:
    state = LinkState(TABLE, client)
    hour = NOW - NOW % 3600
    counted = [state.count("start", now=hour + i, limit=3) for i in range(5)]
    assert counted == [True, True, True, False, False]
    assert state.count("start", now=hour + 3600, limit=3) is True  # the next hour
    assert state.count("poll", now=hour, limit=3) is True  # another kind counts apart
    assert items(client)[f"start#{hour}"]["counted"] == {"N": "3"}


def test_a_link_use_is_given_back_only_by_its_own_press_and_only_before_a_start(
    client: Any,
) -> None:
    state = LinkState(TABLE, client)
    assert state.use_link(NONCE, now=NOW, expires_at=NOW + 60, press=PRESS) is True
    state.unuse_link(NONCE, press="another-press")  # another press's: this use stays
    assert state.link_use(NONCE) == LinkUse(used_at=NOW, started_at=None)
    state.unuse_link(NONCE, press=PRESS)
    assert state.link_use(NONCE) is None
    assert state.use_link(NONCE, now=NOW + 1, expires_at=NOW + 60, press=PRESS) is True
    state.link_started(NONCE, now=NOW + 2, expires_at=NOW + 60)  # by any press
    state.unuse_link(NONCE, press=PRESS)  # too late: the link started an authorization
    assert state.link_use(NONCE) == LinkUse(used_at=NOW + 1, started_at=NOW + 2)


def test_a_start_is_recorded_even_after_the_first_press_gave_the_use_back(client: Any) -> None:
    """A double click: the first press failed and gave the use back while the second, which
    found the link used, started the authorization."""
    state = LinkState(TABLE, client)
    state.link_started(NONCE, now=NOW, expires_at=NOW + 60)
    assert state.link_use(NONCE) == LinkUse(used_at=None, started_at=NOW)
    assert items(client)[link_key(NONCE)][TTL] == {"N": str(NOW + 60)}
    assert state.use_link(NONCE, now=NOW, expires_at=NOW + 60, press=PRESS) is False


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (client_error("ProvisionedThroughputExceededException"), LinkStateUnavailableError),
        (client_error("InternalServerError", 500), LinkStateUnavailableError),
        (EndpointConnectionError(endpoint_url="http://x"), LinkStateUnavailableError),
        (client_error("AccessDeniedException"), LinkStateAccessError),
        (client_error("ResourceNotFoundException"), LinkStateAccessError),
    ],
)
def test_aws_errors_become_the_projects_types_with_their_code(
    client: Any, error: Exception, kind: type[LinkStateError]
) -> None:
    fail_with(client, "PutItem", error)
    with pytest.raises(kind) as raised:
        LinkState(TABLE, client).use_link(NONCE, now=NOW, expires_at=NOW + 60, press=PRESS)
    expected = (
        error.response["Error"]["Code"]
        if isinstance(error, ClientError)
        else "EndpointConnectionError"
    )
    assert raised.value.code == expected
    assert expected in str(raised.value)
    assert NONCE not in str(raised.value)


def test_a_missing_table_is_an_access_error(client: Any) -> None:
    with pytest.raises(LinkStateAccessError, match="ResourceNotFoundException"):
        LinkState("no-such-table", client).claim_notice("n", now=NOW, every=DAY)
    with pytest.raises(LinkStateAccessError, match="ResourceNotFoundException"):
        LinkState("no-such-table", client).link_use(NONCE)


def test_a_released_notice_can_be_claimed_again_but_not_a_later_claim(client: Any) -> None:
    state = LinkState(TABLE, client)
    assert state.claim_notice("n", now=NOW, every=DAY) is True
    state.release_notice("n", claimed_at=NOW)
    assert state.claim_notice("n", now=NOW + 1, every=DAY) is True
    state.release_notice("n", claimed_at=NOW)  # an older claim's release: the newer one stays
    assert state.claim_notice("n", now=NOW + 2, every=DAY) is False


def test_a_dead_press_is_taken_over_once_and_never_after_a_start(client: Any) -> None:
    """A press that used the link and started nothing (it died): of the presses that find
    it, one takes the use over; none once the link started an authorization."""
    state = LinkState(TABLE, client)
    assert state.use_link(NONCE, now=NOW, expires_at=NOW + 3600, press=PRESS) is True
    taken = [state.take_over_link(NONCE, now=NOW + 60, used_at=NOW, press=p) for p in "ab"]
    assert taken == [True, False]
    assert state.link_use(NONCE) == LinkUse(used_at=NOW + 60, started_at=None)
    state.unuse_link(NONCE, press=PRESS)  # the dead press's use is no longer its own
    assert items(client)[link_key(NONCE)]["press"] == {"S": "a"}
    state.link_started(NONCE, now=NOW + 61, expires_at=NOW + 3600)
    assert state.take_over_link(NONCE, now=NOW + 200, used_at=NOW + 60, press="c") is False
    assert state.take_over_link(NONCE + "x", now=NOW, used_at=NOW, press="c") is False


def test_a_poll_is_claimed_once_given_back_when_not_sent_and_lapses(client: Any) -> None:
    state = LinkState(TABLE, client)
    assert state.claim_follow(NONCE, now=NOW) is False  # no such link used
    state.use_link(NONCE, now=NOW, expires_at=NOW + 3600, press=PRESS)
    assert [state.claim_follow(NONCE, now=NOW) for _ in range(2)] == [True, False]
    state.release_follow(NONCE, claimed_at=NOW - 1)  # not this claim: it stays
    assert state.claim_follow(NONCE, now=NOW + 1) is False
    state.release_follow(NONCE, claimed_at=NOW)  # nothing was sent
    assert state.claim_follow(NONCE, now=NOW + 2) is True
    # a press that died holding the claim delays the poll by the lease only
    assert state.claim_follow(NONCE, now=NOW + 2 + LEASE_SECONDS - 1) is False
    assert state.claim_follow(NONCE, now=NOW + 2 + LEASE_SECONDS) is True
    state.link_followed(NONCE, now=NOW + 100)
    assert "follow_lease_until" not in items(client)[link_key(NONCE)]
    assert state.claim_follow(NONCE, now=NOW + 1000) is False  # queued: never again


def test_when_a_notice_was_last_sent_is_read_back(client: Any) -> None:
    state = LinkState(TABLE, client)
    assert state.notice_sent_at("n") is None
    assert state.claim_notice("n", now=NOW, every=DAY) is True
    assert state.notice_sent_at("n") is None  # claimed, not sent
    state.notice_sent("n", claimed_at=NOW, now=NOW, every=DAY)
    assert state.notice_sent_at("n") == NOW
