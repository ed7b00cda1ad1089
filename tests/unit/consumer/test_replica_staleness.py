"""When a replica's document is stale, and which document is served when both were read
(``cmstoken.consumer.staleness``, issue 29 item 7): properties over any times and tokens."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cmstoken.aws.documents import ServiceTokenDocument
from cmstoken.consumer.staleness import Need, behind, lag, preferred, stale_because
from cmstoken.core.clock import to_iso

NOW = 1_795_000_000.0
TOKENS = ("eyJ.token-a.sig", "eyJ.token-b.sig", "eyJ.token-c.sig")

times = st.floats(min_value=NOW - 3 * 86400, max_value=NOW + 3 * 86400)


@st.composite
def documents(draw: st.DrawFn) -> ServiceTokenDocument:
    return ServiceTokenDocument(
        token=draw(st.sampled_from(TOKENS)),
        expires_at=draw(times),
        api_url="https://cms.example.com/api",
        issued_at=draw(times),
    )


needs = st.builds(
    Need,
    now=st.just(NOW),
    min_validity_seconds=st.floats(min_value=0, max_value=3600),
    refused=st.none() | st.sampled_from(TOKENS),
    newest_issued_at=st.none() | times,
)


@given(documents(), needs)
def test_a_replica_is_served_alone_exactly_when_it_is_valid_long_enough_new_and_not_refused(
    document: ServiceTokenDocument, need: Need
) -> None:
    usable = (
        need.now < document.expires_at - need.min_validity_seconds
        and document.token != need.refused
        and (need.newest_issued_at is None or document.issued_at >= need.newest_issued_at)
    )
    why = stale_because(document, need)
    assert (why is None) == usable
    assert why is None or document.token not in why


@given(documents(), needs)
def test_an_expired_replica_is_always_stale(document: ServiceTokenDocument, need: Need) -> None:
    if need.now >= document.expires_at:
        assert stale_because(document, need) == (
            f"its token expired at {to_iso(document.expires_at)}"
        )


@given(documents(), documents())
def test_an_expired_token_is_never_preferred_to_a_valid_primary(
    replica: ServiceTokenDocument, primary: ServiceTokenDocument
) -> None:
    chosen = preferred(replica, primary, NOW)
    assert chosen is replica or chosen is primary
    if primary.expires_at > NOW:
        assert chosen.expires_at > NOW


@given(documents(), documents())
def test_the_primary_is_served_when_the_replica_is_behind_and_on_a_tie(
    replica: ServiceTokenDocument, primary: ServiceTokenDocument
) -> None:
    chosen = preferred(replica, primary, NOW)
    if behind(replica, primary, NOW):
        assert chosen is primary
        assert not behind(primary, replica, NOW)
    if (replica.issued_at, replica.expires_at) == (primary.issued_at, primary.expires_at):
        assert chosen is primary
        assert not behind(replica, primary, NOW)


@given(documents(), documents())
def test_a_newer_valid_primary_is_ahead(
    replica: ServiceTokenDocument, primary: ServiceTokenDocument
) -> None:
    if primary.expires_at > NOW and replica.expires_at > NOW:
        newer = (primary.issued_at, primary.expires_at) > (replica.issued_at, replica.expires_at)
        assert behind(replica, primary, NOW) == newer


def test_lag_reads_as_a_length_of_time() -> None:
    assert [lag(s) for s in (0, 59, 60, 3599, 3600, 7500, 47 * 3600, 48 * 3600)] == [
        "0 s",
        "59 s",
        "1 min",
        "59 min",
        "1 h 00 min",
        "2 h 05 min",
        "47 h 00 min",
        "2.0 days",
    ]
