"""The example consumer function lists projects with the published token."""

from __future__ import annotations

import sys

import pytest

from harness import Stack
from support import load_handler

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def fresh_container() -> None:
    """Each test is a new container: no provider cached from another test's stack."""
    load_handler("consumer_example")
    sys.modules["consumer_example_app"]._session.cache_clear()


def test_the_example_consumer_lists_projects(stack: Stack) -> None:
    stack.seed()
    result = stack.invoke("consumer_example", {})
    (project,) = result["projects"]
    assert project["projectId"].startswith("prj_")
    assert stack.service_document().token not in str(result)


def test_the_example_consumer_follows_a_rotation(stack: Stack) -> None:
    """The cached token (the provider's clock is real time) is refused after the rotation and
    re-read: the re-read's fleet spread (``refused_spread_seconds``, 10 s by default, a random
    part of it waited) is scaled down to 1 s in this container, the path the same."""
    stack.seed()
    stack.invoke("consumer_example", {})
    provider, _ = sys.modules["consumer_example_app"]._session()
    provider.refused_spread_seconds = 1
    stack.emulator.advance(19 * 3600)
    stack.invoke("rotator", {})
    stack.emulator.advance(6 * 3600)  # the first token has expired; the cache must not serve it
    assert stack.invoke("consumer_example", {})["projects"]
