"""The one-click path over HTTP (tests/links_harness.py, set up by scripts/local_links.py as
`make demo` sets it up): the `one_click` fixture, and `person_paced` for tests in which a person
takes real time between the button and the approval."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cmstoken import runtime
from harness import Stack
from links_harness import OneClick, PersonPacedClock
from local_links import local_links
from support import load_handler


@pytest.fixture
def one_click(server_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[OneClick]:
    handlers = {"bootstrap": load_handler("bootstrap"), "links": load_handler("links")}
    with local_links(
        handlers,
        stack_name="cmstoken-prod",
        bootstrap="bootstrap",
        links="links",
        setenv=monkeypatch.setenv,
    ) as links:
        yield OneClick(**vars(links), stack=server_stack)


@pytest.fixture
def person_paced(
    one_click: OneClick, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PersonPacedClock]:
    """The functions' clock at a person's pace (``PersonPacedClock``) for the whole test; at
    its end the clock hurries, so that a poll still pending runs out before the Lambda API
    stops."""
    clock = PersonPacedClock(one_click.stack.emulator)
    monkeypatch.setattr(runtime, "CLOCK", clock)
    runtime.service.cache_clear()  # the service client holds the clock it was made with
    try:
        yield clock
    finally:
        clock.hurry()
