"""Whatever reaches the public URL, the links function answers one of its pages, starts
nothing, reads no more than the signing key and does not say which stack it is (hypothesis:
any method, path, headers and body, and any JSON as the event). Presses of one button at once:
test_link_presses."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmstoken.core.errors import ConfigurationError
from cmstoken.links.events import read_event
from cmstoken.links.web import Request, handle
from support import load_event
from unit.links.links_world import DOMAIN, NOW, STACK, World, world

__all__ = ["world"]  # the fixture

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80)
PATHS = st.one_of(
    TEXT.map(lambda text: "/" + text),
    st.from_regex(r"/l/[A-Za-z0-9._-]{0,600}", fullmatch=True),
    st.from_regex(r"/l/v1\.[A-Za-z0-9_-]{0,200}\.[A-Za-z0-9_-]{0,60}", fullmatch=True),
)
ANSWERS = {200, 403, 404, 405, 413}
LENIENT = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@LENIENT
@given(
    method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]),
    path=PATHS,
    headers=st.dictionaries(st.sampled_from(["origin", "sec-fetch-site", "cookie"]), TEXT),
    body=st.binary(max_size=5000),
)
def test_any_request_gets_a_page_and_starts_nothing(
    world: World, method: str, path: str, headers: dict[str, str], body: bytes
) -> None:
    world.aws_calls.clear()
    answer = handle(Request(method, path, DOMAIN, headers, body), world.portal, NOW)
    assert answer["statusCode"] in ANSWERS
    assert answer["headers"]["Content-Type"] == "text/html; charset=utf-8"
    # no link this stack signed: at most the signing key is read, the stack is not named
    assert world.bootstrap.calls == []
    assert world.bootstrap.sent == []
    assert world.aws_calls in ([], ["GetSecretValue"])
    assert STACK.account not in answer["body"]
    assert STACK.name not in answer["body"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
SAMPLES = [load_event(name) for name in ("links-page", "links-remind", "links-alarm")]
SAMPLES.append(load_event("links-poll-outcome"))


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document (keys and list positions from the root)."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += paths(value, (*prefix, index))
    return found


@st.composite
def near_events(draw: st.DrawFn) -> Any:
    """A sample event with one place replaced by any JSON, or removed: the events AWS sends,
    changed where a test would not think to."""
    event = copy.deepcopy(draw(st.sampled_from(SAMPLES)))
    place = draw(st.sampled_from(paths(event)))
    if not place:
        return draw(JSON)
    parent = event
    for step in place[:-1]:
        parent = parent[step]
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[place[-1]]
    else:
        parent[place[-1]] = draw(JSON)
    return event


@settings(max_examples=500, deadline=None)
@given(event=near_events() | JSON)
def test_any_event_is_read_or_refused_by_name_never_with_a_crash(event: Any) -> None:
    with contextlib.suppress(ConfigurationError):  # refused by name: the only way out
        read_event(event)
