"""Fixtures for integration tests: the upstream emulator on 127.0.0.1."""

from collections.abc import Iterator

import pytest

from cmsemu import Emulator


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started emulator (fresh state, ephemeral port), stopped after the test."""
    with Emulator() as emu:
        yield emu
