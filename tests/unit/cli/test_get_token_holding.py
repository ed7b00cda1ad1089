"""``holding.HeldInterrupts``: SIGINT and SIGTERM held between ``hold`` and ``release``, the
previous handlers restored, nothing held outside the main thread."""

from __future__ import annotations

import io
import os
import signal
import threading

import pytest

from cmstoken.cli.get_token.holding import HeldInterrupts, at_stake, saving


def test_an_interrupt_is_held_then_raised_on_release() -> None:
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    stderr = io.StringIO()
    with HeldInterrupts(stderr, in_file=True) as held:
        held.hold()
        os.kill(os.getpid(), signal.SIGTERM)
        assert held.received == 1
        assert stderr.getvalue() == saving(in_file=True) + "\n"
        with pytest.raises(KeyboardInterrupt):
            held.release()
    assert {number: signal.getsignal(number) for number in before} == before


def test_the_second_says_what_is_at_stake_and_the_third_exits() -> None:
    stderr = io.StringIO()
    with HeldInterrupts(stderr, in_file=False) as held:
        held.hold()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert stderr.getvalue().splitlines() == [saving(in_file=False), at_stake(in_file=False)]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert not held.holding  # the handlers are restored once it gives up


def test_the_end_of_the_block_restores_without_raising() -> None:
    before = signal.getsignal(signal.SIGINT)
    with HeldInterrupts(io.StringIO(), in_file=True) as held:
        held.hold()
        os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_nothing_is_held_outside_the_main_thread() -> None:
    states: list[bool] = []

    def hold() -> None:
        with HeldInterrupts(io.StringIO(), in_file=True) as held:
            held.hold()
            states.append(held.holding)

    worker = threading.Thread(target=hold)
    worker.start()
    worker.join()
    assert states == [False]


def test_no_line_holds_more_than_one_line() -> None:
    for in_file in (True, False):
        for login in (True, False):
            for text in (
                saving(in_file=in_file, login=login),
                at_stake(in_file=in_file, login=login),
            ):
                assert "\n" not in text
                assert text.startswith("get-token: interrupted")
