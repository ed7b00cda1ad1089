"""A slow answer is not a lost one (SPEC 4.2): a request that may have reached the identity
provider is waited for up to the call's total limit and never sent again.

The answers here take 11 s of real time, longer than the 10 s per-read timeout that once ended
such a call (which was then sent again: a reuse that revoked the family, or a second poll of a
spent device code that dropped the approval), and well inside the default total limit (30 s).
They run with the product's default transport timeouts, as deployed. get-token's renewal runs
in a process of its own against an emulator of its own, started with the module (``renewal``),
so that its 11 s pass while the other tests wait for theirs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from cmsemu import Emulator
from cmstoken.upstream.http import Timeouts
from harness import Stack, approve_pending
from support import get_token_env

pytestmark = pytest.mark.integration

SLOW_SECONDS = 11.0


def refreshes_sent(emulator: Emulator) -> list[str | None]:
    return [record.credential for record in emulator.requests if record.endpoint == "refresh"]


def outlast_the_slow_answer(started: float) -> None:
    """Wait until the slow request has surely been served, so that what it did (a reuse, if it
    had been sent again meanwhile) shows in the emulator's state."""
    time.sleep(max(0.0, started + SLOW_SECONDS + 1.0 - time.monotonic()))


def test_the_defaults_wait_for_a_slow_answer() -> None:
    assert Timeouts().total > SLOW_SECONDS + 5  # room for a busy machine


def test_a_slow_refresh_answer_is_waited_for_and_the_token_presented_once(stack: Stack) -> None:
    stack.seed()
    stack.emulator.advance(19 * 3600)  # the service token is due
    old = stack.newest_refresh_token()
    stack.emulator.inject("refresh", "delay", seconds=SLOW_SECONDS)
    started = time.monotonic()
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    outlast_the_slow_answer(started)
    assert len(refreshes_sent(stack.emulator)) == 1
    assert not stack.emulator.refresh_token_valid(old)
    assert stack.emulator.refresh_token_valid(stack.newest_refresh_token())
    assert stack.published_token_works()


def test_a_slow_approved_poll_is_waited_for_and_not_sent_again(stack: Stack) -> None:
    started = stack.invoke("bootstrap", {"action": "start"})
    assert started["status"] == "pending"
    approve_pending(stack)
    # The provider hands out the tokens (the device code is spent), then answers slowly.
    stack.emulator.inject("device_token", "delay", seconds=SLOW_SECONDS, acted=True)
    result = stack.invoke("bootstrap", {"action": "poll"}, remaining_ms=120_000)
    assert result["status"] == "authorized", result
    assert stack.emulator.counts["device_token"] == 1
    assert stack.published_token_works()


@dataclass
class Renewal:
    """``get-token -r -`` started against ``emulator``, whose refresh answers slowly."""

    emulator: Emulator
    old: str
    process: subprocess.Popen[str]


@pytest.fixture(scope="module", autouse=True)
def renewal() -> Iterator[Renewal]:
    """get-token renewing ``old``, the refresh's answer delayed: started with the first test of
    the module (its own process and emulator, nothing shared with the other tests), checked by
    ``test_get_token_waits_for_a_slow_refresh_answer``; killed at the module's end."""
    with Emulator() as emulator:
        old = emulator.issue_tokens()["refresh_token"]
        emulator.inject("refresh", "delay", seconds=SLOW_SECONDS)
        read, write = os.pipe()  # standard input: the token, then its end
        os.write(write, (old + "\n").encode())
        os.close(write)
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cmstoken.cli.get_token",
                    "--base-url",
                    emulator.base_url,
                    "-r",
                    "-",
                ],
                stdin=read,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=get_token_env(),
            )
        finally:
            os.close(read)
        try:
            yield Renewal(emulator, old, process)
        finally:
            process.kill()
            process.communicate()


def test_get_token_waits_for_a_slow_refresh_answer(renewal: Renewal) -> None:
    emulator, old, process = renewal.emulator, renewal.old, renewal.process
    stdout, stderr = process.communicate(timeout=SLOW_SECONDS + 60)
    assert process.returncode == 0, stderr
    document = json.loads(stdout)
    assert len(refreshes_sent(emulator)) == 1
    assert emulator.refresh_token_valid(document["refresh_token"])
    assert old not in stderr
