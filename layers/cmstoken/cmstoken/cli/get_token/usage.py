"""``get-token``'s usage errors, which never echo an argument's value: a token pasted into the
wrong place would reach the terminal and logs."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from cmstoken.core.redaction import REDACTED, printable

_UNRECOGNIZED = "unrecognized arguments: "
# argparse's complaints about a missing value: they quote nothing.
_COUNT_EXPECTED = re.compile(r"expected (?:one|at most one|at least one|\d+) arguments?")
# A word shown in "unrecognized arguments": an option name (lower case, as option names are
# written, and short); anything else may be a value, pasted in the wrong place.
_OPTION_NAME = re.compile(r"--?[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_MAX_OPTION_NAME = 20


class RedactingParser(argparse.ArgumentParser):
    """An argument parser whose usage errors never echo an argument's value: each message is
    rebuilt from the parser's own structure, naming the option and what it expects, and of the
    words it does not know only option names are shown, values as ``[redacted]``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(exit_on_error=False, **kwargs)

    def parse_words(self, words: Sequence[str]) -> argparse.Namespace:
        """Parse ``words``; usage errors exit 2 without echoing any value."""
        try:
            namespace, extras = self.parse_known_args(words)
        except argparse.ArgumentError as exc:
            self.refuse(self._rebuilt(exc.argument_name, exc.message))
        if extras:
            self.refuse(_unrecognized(extras))
        return namespace

    def refuse(self, message: str) -> NoReturn:
        """Print usage and ``message`` (words of this program's own, no value) to stderr and
        exit 2."""
        super().error(printable(message))

    def error(self, message: str) -> NoReturn:
        """argparse's own error path, whose ``message`` may quote a value: only what it says
        about this parser's options is kept."""
        self.refuse(self._from_text(message))

    def _rebuilt(self, name: str | None, problem: str) -> str:
        """The message for ``problem`` (argparse's text, which may quote the value) with the
        argument ``name``, from what the argument expects."""
        action = self._action_named(name)
        if action is None:
            return self._from_text(problem) if name is None else "invalid arguments (see --help)"
        if action.choices is not None and problem.startswith("invalid choice"):
            return f"argument {name}: invalid choice ({_expects(action)})"
        if action.nargs == 0 and problem.startswith("ignored explicit argument"):
            return f"argument {name}: takes no value"
        conflict = re.fullmatch(r"not allowed with argument (\S+)", problem)
        if conflict and self._action_named(conflict[1]) is not None:
            return f"argument {name}: not allowed with argument {conflict[1]}"
        if _COUNT_EXPECTED.fullmatch(problem):
            return f"argument {name}: {problem}"
        return f"argument {name}: invalid value ({_expects(action)})"

    def _from_text(self, message: str) -> str:
        """A message rebuilt from argparse's text: option names kept, nothing else quoted."""
        named = re.fullmatch(r"argument (\S+): (.*)", message, re.DOTALL)
        if named and self._action_named(named[1]) is not None:
            return self._rebuilt(named[1], named[2])
        if message.startswith(_UNRECOGNIZED):
            return _unrecognized(message.removeprefix(_UNRECOGNIZED).split())
        for prefix in ("the following arguments are required: ", "ambiguous option: "):
            if message.startswith(prefix):
                names = [
                    word
                    for word in re.split(r"[\s,]+", message.removeprefix(prefix))
                    if self._action_named(word) or word in self._option_string_actions
                ]
                return prefix.rstrip(": ") + (f" ({', '.join(names)})" if names else "")
        return "invalid arguments (see --help)"

    def _action_named(self, name: str | None) -> argparse.Action | None:
        """The argument that argparse's messages call ``name`` (``-o/--format``)."""
        for action in self._actions:
            if name is not None and name in ("/".join(action.option_strings), action.metavar):
                return action
        return None


def _unrecognized(words: Sequence[str]) -> str:
    shown = []
    for word in words:
        name, equals, _ = word.partition("=")
        if word in ("-", "--"):
            shown.append(word)
        elif _OPTION_NAME.fullmatch(name) and len(name) <= _MAX_OPTION_NAME:
            shown.append(name + (f"={REDACTED}" if equals else ""))
        else:
            shown.append(REDACTED)
    return _UNRECOGNIZED + " ".join(shown)


def _expects(action: argparse.Action) -> str:
    if action.choices is not None:
        return "choose from " + ", ".join(str(choice) for choice in action.choices)
    if action.nargs == 0:
        return "takes no value"
    return f"expects {action.metavar or action.dest.upper()}"
