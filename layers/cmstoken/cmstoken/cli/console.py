"""What both command-line tools share about their output: the exit codes, a line on a stream,
a value from elsewhere made safe to print, and whether a stream is a terminal."""

from __future__ import annotations

from typing import TextIO

from cmstoken.core.redaction import printable

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def say(stream: TextIO, text: str) -> None:
    """``text`` as one line on ``stream``, flushed."""
    print(text, file=stream, flush=True)


def shown(value: object) -> str:
    """``value`` (an upstream's text, a function's result, an error) safe to print on a
    terminal: no escape sequence in it reaches the terminal."""
    return printable(str(value))


def is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal (one that cannot tell, a closed one say, is not)."""
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False
