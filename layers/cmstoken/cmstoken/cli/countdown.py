"""The countdown both tools show while a login's approval is awaited."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Self, TextIO

from cmstoken.cli.console import is_terminal

TICK_SECONDS = 1.0


class Countdown:
    """Around a wait for the approval: on a terminal, a live ``waiting for approval: mm:ss
    left`` line rewritten every second, then a line break, so that whatever is printed next
    starts on a line of its own; elsewhere (a pipe, a log) nothing, or the line once.

    Each tool's subclass sets how it looks: ``tail`` (written after the line), ``at_once`` (the
    live line shows as the wait begins, else a second later) and ``line_elsewhere`` (off a
    terminal, the line once). A terminal that goes away stops the live line.
    """

    tail = ""
    at_once = True
    line_elsewhere = False

    def __init__(self, out: TextIO, expires_at: float, now: Callable[[], float]) -> None:
        self.out = out
        self.expires_at = expires_at
        self.now = now
        self.live = is_terminal(out)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _line(self) -> str:
        """The time left, as the countdown shows it."""
        left = max(0, int(self.expires_at - self.now()))
        return f"waiting for approval: {left // 60:02d}:{left % 60:02d} left"

    def _show(self) -> bool:
        try:
            self.out.write(f"\r{self._line()}{self.tail}")
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away: stop showing
            return False
        return True

    def _tick(self) -> None:
        while not self._stop.wait(TICK_SECONDS) and self._show():
            pass

    def __enter__(self) -> Self:
        if not self.live:
            if self.line_elsewhere:
                self.out.write(self._line() + "\n")
                self.out.flush()
        elif not self.at_once or self._show():
            self._thread = threading.Thread(target=self._tick, name="countdown", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            with contextlib.suppress(OSError, ValueError):
                self.out.write("\n")
                self.out.flush()
