"""Interrupts held while a refresh token is spent and its successor not yet kept (SPEC 4.1).

From the moment a refresh (or a device-code poll) is sent until its answer is stored, SIGINT and
SIGTERM are held: the first says on one line that the new token is being saved, the second what
is at stake and how to recover, and only the third exits at once (``KeyboardInterrupt``), as a
person who insists may. A held interrupt takes effect when the hold is released: ``release``
raises ``KeyboardInterrupt`` then. Signal handlers can only be set in the main thread: elsewhere
nothing is held.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType, TracebackType
from typing import Any, TextIO

from cmstoken.cli.console import say
from cmstoken.cli.get_token.options import PROG, REFRESH_FILE_OPTION

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTS_TO_EXIT = 3


def saving(*, in_file: bool, login: bool = False) -> str:
    """The first interrupt's line: the new token is being kept, then the run ends."""
    where = "in the refresh file" if in_file else "on standard output"
    if login:
        return (
            f"{PROG}: interrupted: the login's tokens may be on their way; waiting for the "
            f"answer to save its refresh token {where}, then exiting"
        )
    return (
        f"{PROG}: interrupted: the refresh token sent is spent; waiting for the answer to save "
        f"the new one {where}, then exiting"
    )


def at_stake(*, in_file: bool, login: bool = False) -> str:
    """The second interrupt's line: what exiting now loses, and how to recover."""
    if login:
        lost, again = "the login just approved (its tokens are handed out once)", f"run {PROG}"
    else:
        lost = "the login (the token sent is spent, its successor would be nowhere)"
        again = f"run {PROG} without -r"
    if in_file:
        again = f"delete the refresh file, then run the same {PROG} {REFRESH_FILE_OPTION} command"
    return (
        f"{PROG}: interrupted again: exiting before the answer is saved loses {lost} and a "
        f"person must log in again ({again}); still waiting: interrupt once more to exit anyway"
    )


class HeldInterrupts:
    """SIGINT and SIGTERM held between ``hold`` and ``release`` (or the end of the ``with``
    block, which restores the previous handlers without raising)."""

    def __init__(self, stderr: TextIO, *, in_file: bool, login: bool = False) -> None:
        self.stderr = stderr
        self.in_file = in_file
        self.login = login
        self.received = 0
        self._previous: dict[int, Any] | None = None

    def __enter__(self) -> HeldInterrupts:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._restore()

    @property
    def holding(self) -> bool:
        return self._previous is not None

    def hold(self) -> None:
        """Hold interrupts from now on (before a request that spends a token is sent)."""
        if self._previous is not None or threading.current_thread() is not threading.main_thread():
            return
        self._previous = {number: signal.getsignal(number) for number in HELD_SIGNALS}
        for number in HELD_SIGNALS:
            signal.signal(number, self._received)

    def release(self) -> None:
        """Stop holding (the answer is stored, or there was nothing to store); an interrupt
        held meanwhile is raised now as ``KeyboardInterrupt``."""
        self._restore()
        if self.received:
            raise KeyboardInterrupt

    def _restore(self) -> None:
        previous, self._previous = self._previous, None
        for number, handler in (previous or {}).items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)

    def _received(self, number: int, frame: FrameType | None) -> None:
        self.received += 1
        if self.received >= INTERRUPTS_TO_EXIT:
            self._restore()
            raise KeyboardInterrupt
        say_it = at_stake if self.received > 1 else saving
        text = say_it(in_file=self.in_file, login=self.login)
        # A closed stream, or one being written when the signal came: the line is lost.
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            say(self.stderr, text)
