"""``get-token``: the interactive helper of service-api.md section 4, in Python.

Runs the device authorization (or a refresh), exchanges the raw access token for a service token
and prints the result on standard output, in JSON (for jq) or plain text. Prompts, the
verification address, progress and errors go to standard error, which never carries a token, a
refresh token or a device code.

Only the upstream clients are imported: no boto3, no Powertools, so the command starts quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TextIO

from cmstoken import __version__
from cmstoken.core.clock import Clock, SystemClock, to_iso
from cmstoken.core.errors import (
    CmsTokenError,
    ConfigurationError,
    MalformedResponseError,
    RateLimitedError,
    ServerError,
    TransientError,
    UpstreamError,
    may_send_again,
)
from cmstoken.core.redaction import REDACTED, printable
from cmstoken.core.retry import RetryPolicy, call_with_retries
from cmstoken.core.urls import validate_url
from cmstoken.upstream.device_flow import StartedAuthorization, start_device_authorization
from cmstoken.upstream.identity import IdentityClient
from cmstoken.upstream.models import RawTokens, ServiceToken, TokenAnswer
from cmstoken.upstream.service import ServiceClient

PROG = "get-token"
ENV_BASE_URL = "SERVICE_BASE_URL"
ENV_REFRESH_TOKEN = "CMS_REFRESH_TOKEN"  # noqa: S105 -- the variable's name, not a secret
FROM_STDIN = "-"
FORMATS = ("json", "plain")
PROMPT = "Press y once you have approved the login in your browser (y/N): "
YES = frozenset({"y", "yes"})
TOKEN_TYPE = "Bearer"  # noqa: S105 -- a token type, not a secret

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

REFRESH_FILE_OPTION = "--refresh-file"
MAX_REFRESH_FILE_BYTES = 64 * 1024
REFRESH_FILE_MODE = 0o600

# Upstream steps refused for a while (429, 503...) are sent again under this policy, with at
# most RETRY_BUDGET_SECONDS of waiting over the whole run; a wait hint longer than
# max_retry_after, or than what is left of the budget, is not waited for. Only a request that
# provably was not acted on is sent again (errors.may_send_again), except the exchange, which
# spends nothing the next attempt needs.
RETRIES = RetryPolicy(attempts=5, base_delay=1.0, max_delay=8.0, max_retry_after=30.0)
RETRY_BUDGET_SECONDS = 45.0
# The countdown while the approval is awaited, on a terminal.
COUNTDOWN_TICK_SECONDS = 1.0

DESCRIPTION = """\
Get a Cluster Management Service token. Without --refresh or --refresh-file: log in with
the device authorization flow (open the printed address, approve the login, then press y).
With --refresh: renew from a refresh token; with --refresh-file: renew the refresh token
kept in a file, in place. Either way the raw access token is then exchanged for the service
token, which is printed with the new refresh token.
"""

EPILOG = f"""\
environment:
  {ENV_BASE_URL}    the service's address ({{base_url}}), used when --base-url is not
                      given; https, or http on 127.0.0.1, ::1 or localhost
  {ENV_REFRESH_TOKEN}   a refresh token to renew from when neither -r nor --refresh-file
                      is given (kept out of the process list and shell history, unlike
                      -r TOKEN); set but empty is a usage error

renewing without exposing the refresh token:
  get-token --refresh-file refresh-token.txt   (the file is renewed in place: run it again
                                                 next time, as is)
  get-token -r - < file        or   printf %s "$token" | get-token -r -
  {ENV_REFRESH_TOKEN}=... get-token   (-r TOKEN works too, but shows in ps and history)
  With -r and {ENV_REFRESH_TOKEN} the token given is void afterwards: keep the new one.

--refresh-file PATH:
  PATH holds the refresh token on one line. Before anything is sent, get-token checks that
  the file can be replaced: it creates a temporary file beside it (so the directory must be
  writable); if it cannot, it exits 2 and the token is not spent. Once the identity
  provider has answered, the new refresh token is written back atomically (the temporary
  file is written and flushed to disk, renamed over PATH, the directory flushed; mode 0600)
  before anything is printed, so the next run uses it. Runs on files in one directory take
  turns, so that two at once never present the same token.
  A symlink is followed: the file it points to is replaced and the link kept. Replacing the
  link with a file would leave its target holding the spent token, and whatever reads the
  target next would present it again: a reuse, which revokes every token of the login.
  If the write fails after the answer, the new refresh token is printed on standard error
  (it is then its only copy: save it) and the exit code is 1.

output (standard output only; everything else goes to standard error):
  json    one JSON object: {{"access_token": <service token>, "refresh_token": <new refresh
          token>, "scope": <granted scope>, "expires_in": <seconds until the service token
          expires>, "token_type": "Bearer"}}
  plain   three lines: "access_token: ...", "refresh_token: ...", "expires_in: ..."
  If the exchange fails after new tokens were issued, only the new refresh token (and scope)
  is printed, so that it is not lost, and the exit code is 1.

waits and retries:
  Calls refused for a while (HTTP 429, honouring Retry-After or X-RateLimit-Reset, and 503
  or 500) are sent again, waiting at most {RETRY_BUDGET_SECONDS:.0f} s in all; a longer wait hint
  is not waited for, and a connection that cannot be made fails at once, naming why. A
  refresh is never sent again once the provider may have acted on it (no answer in time, a
  dropped connection, a gateway's 502 or 504, any 2xx answer). While the approval is
  awaited, a countdown shows on standard error when it is a terminal.

exit codes:
  0    success
  1    upstream or authorization failure (denied, expired, unreachable, refused, aborted),
       or the new refresh token could not be saved to the --refresh-file (see above)
  2    usage error (bad option or value, missing or invalid base URL, an empty
       {ENV_REFRESH_TOKEN}, a --refresh-file that is missing, empty or cannot be
       replaced); no token was sent
  130  interrupted (Ctrl-C)
"""


@dataclass(frozen=True)
class Options:
    """The parsed command line."""

    base_url: str
    free_trial: bool
    output_format: str
    refresh_token: str | None = field(default=None, repr=False)
    refresh_file: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Result:
    """What the command prints: the raw token response, the service token (absent when the
    exchange failed) and the scope to report."""

    tokens: RawTokens
    scope: str
    service_token: ServiceToken | None = None


class AbortedError(CmsTokenError):
    """The user did not confirm the login."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors never echo an argument's value (a token pasted
    into the wrong place would reach the terminal and logs): each message is rebuilt from the
    parser's own structure, naming the option and what it expects, and of the words it does
    not know only option names are shown, values as ``[redacted]``."""

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


_UNRECOGNIZED = "unrecognized arguments: "
# argparse's complaints about a missing value: they quote nothing.
_COUNT_EXPECTED = re.compile(r"expected (?:one|at most one|at least one|\d+) arguments?")
# A word shown in "unrecognized arguments": an option name (lower case, as option names are
# written, and short); anything else may be a value, pasted in the wrong place.
_OPTION_NAME = re.compile(r"--?[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_MAX_OPTION_NAME = 20


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


def build_parser() -> _Parser:
    """The command-line parser, with the help text."""
    parser = _Parser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "-ft",
        "--freetrial",
        action="store_true",
        dest="free_trial",
        help="log in with a free-trial account (uses the provider's freetrialClientId)",
    )
    parser.add_argument(
        "-o",
        "--format",
        choices=FORMATS,
        default="json",
        dest="output_format",
        help="output format (default: json)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "-r",
        "--refresh",
        metavar="TOKEN",
        dest="refresh_token",
        help=(
            f"renew from a refresh token instead of logging in; '{FROM_STDIN}' reads it from "
            f"standard input (preferred: a TOKEN argument shows in ps and shell history); "
            f"default: ${ENV_REFRESH_TOKEN} when set. The token given is void afterwards: keep "
            "the new refresh_token of the output (use the same -ft as when it was obtained)"
        ),
    )
    source.add_argument(
        REFRESH_FILE_OPTION,
        metavar="PATH",
        dest="refresh_file",
        help=(
            "renew the refresh token kept in the file PATH, in place: the new one is written "
            "back atomically before anything is printed (see --refresh-file PATH below)"
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help=f"the service's address ({{base_url}}); default: ${ENV_BASE_URL}",
    )
    return parser


def parse_args(
    argv: Sequence[str] | None, environ: Mapping[str, str], stdin: TextIO | None = None
) -> Options:
    """Parse the command line and resolve the base URL and the refresh token (``-r -`` reads
    it from ``stdin``); exits 2 (with usage) on a usage error."""
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    # argparse takes "-f" for "-ft" (single-dash prefixes match even without abbreviations)
    if "-f" in words[: words.index("--") if "--" in words else None]:
        parser.refuse("unrecognized arguments: -f (the free-trial flag is -ft)")
    args = parser.parse_words(words)
    base_url = args.base_url if args.base_url is not None else environ.get(ENV_BASE_URL, "")
    if not base_url.strip():
        parser.refuse(f"no service address: pass --base-url or set {ENV_BASE_URL}")
    try:
        base_url = validate_url(base_url, what="service base URL")
    except ConfigurationError as exc:
        parser.refuse(str(exc))  # validate_url's words never repeat any part of the URL
    refresh_file = args.refresh_file
    if refresh_file is not None and refresh_file.strip() in ("", FROM_STDIN):
        parser.refuse(
            f"argument {REFRESH_FILE_OPTION}: expects the path of a file holding the refresh "
            f"token (to read the token from standard input, use -r {FROM_STDIN})"
        )
    refresh_token = args.refresh_token
    if refresh_token == FROM_STDIN:
        refresh_token = _read_secret(sys.stdin if stdin is None else stdin)
        if not refresh_token:
            parser.refuse("argument -r/--refresh: no refresh token on standard input")
    elif refresh_token is None and refresh_file is None and ENV_REFRESH_TOKEN in environ:
        refresh_token = environ[ENV_REFRESH_TOKEN].strip()
        if not refresh_token:
            parser.refuse(
                f"{ENV_REFRESH_TOKEN} is set but empty: set it to the refresh token, or unset "
                "it to log in with the device flow"
            )
    if refresh_token is not None and not refresh_token.strip():
        parser.refuse("argument -r/--refresh: the refresh token is empty")
    return Options(
        base_url=base_url,
        free_trial=args.free_trial,
        output_format=args.output_format,
        refresh_token=refresh_token,
        refresh_file=refresh_file,
    )


class RefreshFileError(Exception):
    """A ``--refresh-file`` that cannot be used, or a token that cannot be kept in one. The
    message names neither the path nor anything the file holds."""


@dataclass
class RefreshFile:
    """The refresh token kept in a file, renewed in place (``--refresh-file``).

    ``open`` follows a symlink to the file it points to (that file is replaced, the link is
    kept), takes the directory's lock (runs on files of one directory take turns, so that two
    never present the same token), reads the token, then creates the temporary file that
    ``save`` writes and renames over the file: a place where that file cannot be created fails
    before anything is sent. ``close`` removes the temporary file if unused and releases the
    lock.
    """

    path: str = field(repr=False)
    token: str = field(default="", repr=False)
    _temp: tuple[int, str] | None = field(default=None, repr=False)
    _directory_fd: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, given: str, *, stderr: TextIO) -> RefreshFile:
        """The file named ``given``, locked and checked; raises ``RefreshFileError``."""
        import tempfile

        target = os.path.realpath(given)
        try:
            mode = os.stat(target).st_mode
        except FileNotFoundError:
            link = " (it is a symlink to a missing file)" if os.path.islink(given) else ""
            raise RefreshFileError(f"the file does not exist{link}") from None
        except OSError as exc:
            raise RefreshFileError(f"cannot read the file ({_reason(exc)})") from None
        if not stat.S_ISREG(mode):
            raise RefreshFileError("not a regular file")
        directory = os.path.dirname(target)
        if _owned_by_another_in_a_sticky_directory(target, directory):
            raise RefreshFileError(
                "the file cannot be replaced: it belongs to another user, in a directory "
                "where only a file's owner may replace it (like /tmp)"
            )
        store = cls(path=target)
        try:
            store._directory_fd = _lock_directory(directory, stderr)
            store.token = _read_token(target)
            try:
                store._temp = tempfile.mkstemp(
                    dir=directory, prefix=f".{os.path.basename(target)}.", suffix=".tmp"
                )
            except OSError as exc:
                raise RefreshFileError(
                    "the file cannot be replaced: no file can be created in its directory "
                    f"({_reason(exc)})"
                ) from None
        except BaseException:
            store.close()
            raise
        return store

    def save(self, token: str) -> None:
        """Replace the file's token with ``token``: written to the temporary file, flushed to
        disk, renamed over the file (mode 0600), then the directory flushed; the lock is then
        released. Raises ``OSError`` or ``RefreshFileError``, the file then unchanged."""
        if self._temp is None:
            raise RefreshFileError("the refresh file was already written")
        (descriptor, temporary), self._temp = self._temp, None
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                if not _is_token_text(token):
                    raise RefreshFileError(
                        "the new refresh token is not one line of printable text"
                    )
                if hasattr(os, "fchmod"):
                    os.fchmod(out.fileno(), REFRESH_FILE_MODE)
                out.write(token + "\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        if self._directory_fd is not None:
            # The rename is done and seen by every reader; a file system that cannot flush a
            # directory (some cannot) does not make it a failure.
            with contextlib.suppress(OSError):
                os.fsync(self._directory_fd)
        self.close()

    def close(self) -> None:
        """Remove the temporary file if it was not used, and release the lock."""
        if self._temp is not None:
            (descriptor, temporary), self._temp = self._temp, None
            with contextlib.suppress(OSError):
                os.close(descriptor)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if self._directory_fd is not None:
            descriptor, self._directory_fd = self._directory_fd, None
            with contextlib.suppress(OSError):
                os.close(descriptor)


def _owned_by_another_in_a_sticky_directory(path: str, directory: str) -> bool:
    """True when a rename over ``path`` would be refused by the directory's sticky bit."""
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        return False
    try:
        folder, owner = os.stat(directory), os.stat(path).st_uid
    except OSError:
        return False  # the checks that follow say what is wrong
    me = os.geteuid()
    return bool(folder.st_mode & stat.S_ISVTX) and me not in (owner, folder.st_uid)


def _lock_directory(directory: str, stderr: TextIO) -> int | None:
    """An open descriptor of ``directory`` holding its exclusive lock (waited for, saying so),
    or None where directories cannot be opened (not POSIX). A file system without locks is
    used unlocked."""
    if os.name != "posix":
        return None
    import fcntl

    try:
        descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise RefreshFileError(f"cannot open its directory ({_reason(exc)})") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(
                stderr,
                f"{PROG}: another {PROG} is renewing a refresh file in that directory; "
                "waiting for it to finish...",
            )
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError:
            pass
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _read_token(path: str) -> str:
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_REFRESH_FILE_BYTES + 1)
    except OSError as exc:
        raise RefreshFileError(f"cannot read the file ({_reason(exc)})") from None
    if len(data) > MAX_REFRESH_FILE_BYTES:
        raise RefreshFileError("the file is too large to hold a refresh token")
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RefreshFileError("the file is not text") from None
    if not token:
        raise RefreshFileError("the file is empty")
    if not _is_token_text(token):
        raise RefreshFileError("the file must hold only the refresh token, on one line")
    return token


def _is_token_text(token: str) -> bool:
    return bool(token) and not any(char.isspace() or not char.isprintable() for char in token)


def _reason(error: BaseException) -> str:
    """An error's reason without the file name an ``OSError`` carries."""
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    return str(error) if isinstance(error, RefreshFileError) else type(error).__name__


class _Retries:
    """``call_with_retries`` for the upstream steps of one run, under ``RETRIES``, with at
    most ``budget`` seconds of waiting in all; each wait is announced on ``stderr``."""

    def __init__(
        self, clock: Clock, stderr: TextIO | None, budget: float = RETRY_BUDGET_SECONDS
    ) -> None:
        self.clock = clock
        self.stderr = stderr
        self.left = budget

    def call[T](
        self,
        operation: Callable[[], T],
        *,
        description: str,
        retryable: Callable[[BaseException], bool] | None,
    ) -> T:
        """``operation``, its ``TransientError``s approved by ``retryable`` (``None``: all)
        sent again."""
        failures: list[BaseException] = []

        def attempt() -> T:
            try:
                return operation()
            except TransientError as exc:
                failures.append(exc)
                raise

        return call_with_retries(
            attempt,
            retry_on=(TransientError,),
            policy=RETRIES,
            clock=_AnnouncedWaits(self, failures),
            deadline=self.clock.now() + self.left,
            description=description,
            retryable=retryable,
        )


class _AnnouncedWaits:
    """The run's clock, whose waits are announced and taken from the retry budget."""

    def __init__(self, retries: _Retries, failures: list[BaseException]) -> None:
        self.retries = retries
        self.failures = failures

    def now(self) -> float:
        return self.retries.clock.now()

    def sleep(self, seconds: float) -> None:
        if self.retries.stderr is not None and self.failures:
            _say(
                self.retries.stderr,
                f"{PROG}: {printable(str(self.failures[-1]))}; trying again in {seconds:.3g} s",
            )
        self.retries.left -= max(0.0, seconds)
        self.retries.clock.sleep(seconds)


def _refused_for_now(error: BaseException) -> bool:
    """Whether a request to the service or the provider is sent again after ``error``: only
    when the upstream answered that it did not act and may later (429, or a 5xx other than a
    gateway's: ``may_send_again``). A connection that could not be made (a wrong address, more
    likely than not) fails at once, and an answer that may have been acted on (a timeout, a
    dropped connection, a 502 or 504, a garbled or any 2xx answer) is never sent again."""
    return isinstance(error, RateLimitedError | ServerError) and may_send_again(error)


class Countdown:
    """While the approval is awaited: on a terminal, a live ``waiting for approval: mm:ss
    left`` line, rewritten every second; elsewhere (a pipe, a log) nothing at all."""

    def __init__(self, out: TextIO, expires_at: float, now: Callable[[], float]) -> None:
        self.out = out
        self.expires_at = expires_at
        self.now = now
        self.live = _is_terminal(out)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _show(self) -> bool:
        left = max(0, int(self.expires_at - self.now()))
        try:
            self.out.write(
                f"\rwaiting for approval: {left // 60:02d}:{left % 60:02d} left "
                "(Ctrl-C to give up) "
            )
            self.out.flush()
        except (OSError, ValueError):  # the terminal went away: stop showing
            return False
        return True

    def _tick(self) -> None:
        while not self._stop.wait(COUNTDOWN_TICK_SECONDS) and self._show():
            pass

    def __enter__(self) -> Countdown:
        if self.live and self._show():
            self._thread = threading.Thread(target=self._tick, name="countdown", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            with contextlib.suppress(OSError, ValueError):
                self.out.write("\n")  # whatever is printed next starts on a line of its own
                self.out.flush()


def _read_secret(stdin: TextIO) -> str:
    """One line from standard input, without echo when it is a terminal."""
    if _is_terminal(stdin):
        import getpass

        return getpass.getpass("refresh token: ", stream=sys.stderr).strip()
    return stdin.readline().strip()


def run_device_flow(
    service: ServiceClient,
    *,
    free_trial: bool,
    stdin: TextIO | None,
    stderr: TextIO,
    retries: _Retries | None = None,
) -> Result:
    """Provider information and a device code, the address on stderr, the (y/N) confirmation,
    then RFC 8628 polling until the tokens arrive (or a terminal error), with a countdown on
    stderr when it is a terminal."""
    retries = retries or _Retries(service.clock, stderr)
    started: StartedAuthorization = retries.call(
        lambda: start_device_authorization(service, free_trial=free_trial),
        description="device authorization",
        retryable=_refused_for_now,
    )
    authorization = started.authorization
    account = " (free-trial account)" if free_trial else ""
    # Checked when parsed; made harmless here all the same, as everything the provider says.
    _say(
        stderr,
        f"\nTo log in{account}, open this address in a browser and approve the request:\n\n"
        f"    {printable(authorization.verification_uri_complete)}\n\n"
        f"and check that the page shows this code:\n\n"
        f"    {printable(authorization.user_code)}\n\n"
        f"The code is valid for {_duration(authorization.expires_in)} "
        f"(until {to_iso(authorization.expires_at)}).\n",
    )
    stderr.write(PROMPT)
    stderr.flush()
    answer = stdin.readline() if stdin is not None else ""
    if not answer or not _is_terminal(stdin):
        _say(stderr, "")  # nobody pressed Enter on this line
    if answer.strip().lower() not in YES:
        raise AbortedError("aborted")
    _say(stderr, "Waiting for the authorization...")
    with Countdown(stderr, authorization.expires_at, service.clock.now):
        tokens = started.poller().run()
    if tokens is None:  # only with a stop_at, which is not given
        raise AbortedError("polling stopped before the authorization finished")
    _say(stderr, "Authorized.")
    return _result(tokens, started.provider.scope, stderr)


def run_refresh(
    service: ServiceClient,
    refresh_token: str,
    *,
    free_trial: bool,
    stderr: TextIO,
    retries: _Retries | None = None,
) -> Result:
    """Provider information, then a refresh with the provider's (free-trial) client id. Either
    is sent again only when it provably was not acted on (``may_send_again``)."""
    retries = retries or _Retries(service.clock, stderr)
    provider = retries.call(
        service.provider_info, description="provider", retryable=_refused_for_now
    )
    identity = IdentityClient(provider.issuer_url, transport=service.transport, clock=service.clock)
    _say(stderr, "Refreshing...")
    try:
        answer = retries.call(
            lambda: identity.refresh(
                client_id=provider.client_id_for(free_trial), refresh_token=refresh_token
            ),
            description="refresh",
            retryable=_refused_for_now,
        )
    except TransientError as exc:
        if not may_send_again(exc):
            _say(
                stderr, "The identity provider may have acted: the refresh token given may be void."
            )
        raise
    return _result(answer, provider.scope, stderr)


def _result(answer: TokenAnswer, default_scope: str, stderr: TextIO) -> Result:
    """A 2xx token answer (refresh or device flow) as the result to print. Its refresh token is
    kept whatever else it lacks: without a usable access token the exchange fails, and the new
    refresh token is printed for the next run."""
    if answer.problems:
        _say(stderr, "The answer is not as specified: " + "; ".join(answer.problems) + ".")
    tokens = RawTokens(
        access_token=answer.usable_access_token or "",
        refresh_token=answer.refresh_token,
        id_token=answer.id_token,
        scope=answer.scope,
        expires_in=max(0, round(answer.access_token_expires_at - answer.received_at)),
        received_at=answer.received_at,
    )
    return Result(tokens=tokens, scope=tokens.scope or default_scope)


def exchange(service: ServiceClient, result: Result, retries: _Retries | None = None) -> Result:
    """The raw access token exchanged for the service token (transient failures retried: the
    raw token stays valid for the next attempt)."""
    tokens = result.tokens
    if not tokens.access_token:
        raise MalformedResponseError(
            "refresh: the answer holds no access token to exchange", endpoint="refresh", status=200
        )
    retries = retries or _Retries(service.clock, None)
    service_token = retries.call(
        lambda: service.exchange(
            tokens.access_token, fallback_expires_at=tokens.access_token_expires_at
        ),
        description="exchange",
        retryable=None,  # the raw access token it sends stays valid for another attempt
    )
    return Result(tokens=tokens, scope=result.scope, service_token=service_token)


def render(result: Result, output_format: str, *, now: float) -> str:
    """The standard output text (newline-terminated). Without a service token (failed
    exchange) only the refresh token and scope are rendered, so that they are not lost."""
    fields: dict[str, str | int] = {}
    if result.service_token is not None:
        fields["access_token"] = result.service_token.token
    fields["refresh_token"] = result.tokens.refresh_token
    if output_format == "plain":
        if result.service_token is not None:
            fields["expires_in"] = _seconds_left(result.service_token, now)
        return "".join(f"{key}: {value}\n" for key, value in fields.items())
    fields["scope"] = result.scope
    if result.service_token is not None:
        fields["expires_in"] = _seconds_left(result.service_token, now)
        fields["token_type"] = TOKEN_TYPE
    return json.dumps(fields) + "\n"


def run(
    options: Options,
    service: ServiceClient,
    *,
    stdin: TextIO | None,
    stdout: TextIO,
    stderr: TextIO,
    refresh_file: RefreshFile | None = None,
) -> int:
    """Obtain the tokens, keep the new refresh token in ``refresh_file`` (when given), exchange,
    print; returns the exit code. ``CmsTokenError`` and ``KeyboardInterrupt`` before the tokens
    exist propagate to the caller."""
    retries = _Retries(service.clock, stderr)
    if options.refresh_token is not None:
        result = run_refresh(
            service,
            options.refresh_token,
            free_trial=options.free_trial,
            stderr=stderr,
            retries=retries,
        )
        if refresh_file is not None:
            try:
                refresh_file.save(result.tokens.refresh_token)
            except (OSError, RefreshFileError) as exc:
                _say(stderr, _unsaved(exc, result.tokens.refresh_token))
                return EXIT_FAILURE
            _say(
                stderr,
                f"The refresh token in the file is spent; the file ({REFRESH_FILE_OPTION}) now "
                "holds the new one, for the next run.",
            )
        else:
            _say(
                stderr,
                "The refresh token given is now void: keep the new refresh_token of this "
                "output for the next run.",
            )
    else:
        result = run_device_flow(
            service, free_trial=options.free_trial, stdin=stdin, stderr=stderr, retries=retries
        )
    try:
        result = exchange(service, result, retries)
    except (CmsTokenError, KeyboardInterrupt) as exc:
        # The refresh token just issued is the only way back in without a new login: keep it.
        stdout.write(render(result, options.output_format, now=service.clock.now()))
        stdout.flush()
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else printable(str(exc))
        again = (
            f"it is kept in the refresh file: run {PROG} {REFRESH_FILE_OPTION} again to try again"
            if refresh_file is not None
            else f"the new refresh token is on standard output: run {PROG} -r with it to try again"
        )
        _say(stderr, f"{PROG}: {reason}\n{PROG}: the exchange failed; {again}")
        return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_FAILURE
    stdout.write(render(result, options.output_format, now=service.clock.now()))
    stdout.flush()
    return EXIT_OK


def _unsaved(error: BaseException, token: str) -> str:
    """The loud paragraph, and the token, when the new refresh token could not be written to
    the refresh file: standard error is then where its only copy goes."""
    shown = token if token.isprintable() else json.dumps(token)
    return (
        f"\n{PROG}: WARNING: THE NEW REFRESH TOKEN COULD NOT BE SAVED to the refresh file "
        f"({REFRESH_FILE_OPTION}): {_reason(error)}. The identity provider has already "
        "rotated it: the token still in the file is spent, and presenting it again would "
        "revoke the new one too. The line below is the ONLY copy of the new refresh token: "
        "save it now (for example in place of the file's content) and renew with it next "
        f"time; without it you must log in again. Nothing was printed on standard output.\n\n"
        f"{shown}\n"
    )


def main(argv: list[str] | None = None) -> int:
    """The ``get-token`` console script; returns the exit code (0, 1, 2 or 130)."""
    try:
        options = parse_args(argv, os.environ, sys.stdin)
    except SystemExit as exc:  # argparse: -h (0) or a usage error (2)
        return _exit_code(exc)
    refresh_file: RefreshFile | None = None
    try:
        if options.refresh_file is not None:
            try:
                refresh_file = RefreshFile.open(options.refresh_file, stderr=sys.stderr)
            except RefreshFileError as exc:
                try:
                    build_parser().refuse(
                        f"argument {REFRESH_FILE_OPTION}: {exc}; nothing was sent"
                    )
                except SystemExit as usage:
                    return _exit_code(usage)
            options = dataclasses.replace(options, refresh_token=refresh_file.token)
        return _run_command(options, refresh_file)
    except KeyboardInterrupt:
        _say(sys.stderr, f"\n{PROG}: interrupted")
        return EXIT_INTERRUPTED
    finally:
        if refresh_file is not None:
            refresh_file.close()


def _run_command(options: Options, refresh_file: RefreshFile | None) -> int:
    clock: Clock = SystemClock()
    service = ServiceClient(options.base_url, clock=clock)
    try:
        return run(
            options,
            service,
            stdin=sys.stdin,
            stdout=sys.stdout,
            stderr=sys.stderr,
            refresh_file=refresh_file,
        )
    except CmsTokenError as exc:
        _say(sys.stderr, f"{PROG}: {printable(str(exc))}")
        hint = _api_suffix_hint(options.base_url, exc)
        if hint:
            _say(sys.stderr, f"{PROG}: {hint}")
            return EXIT_USAGE
        return EXIT_FAILURE
    finally:
        service.transport.close()


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return EXIT_OK
    return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def _api_suffix_hint(base_url: str, error: CmsTokenError) -> str | None:
    """When the address given is the API's own (``{base_url}/api``), what to pass instead."""
    from urllib.parse import urlsplit

    path = urlsplit(base_url).path.rstrip("/")
    if not (
        path.endswith("/api")
        and isinstance(error, UpstreamError)
        and error.endpoint == "provider"
        and error.status == 404
    ):
        return None
    service = base_url.rstrip("/").removesuffix("/api")
    return (
        f"{base_url} is the API's own address; pass the service's address, without /api: "
        f"--base-url {service}"
    )


def _say(stream: TextIO, text: str) -> None:
    print(text, file=stream, flush=True)


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False


def _seconds_left(service_token: ServiceToken, now: float) -> int:
    return max(0, int(service_token.expires_at - now))


def _duration(seconds: int) -> str:
    if seconds % 60 or seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = seconds // 60
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


if __name__ == "__main__":
    sys.exit(main())
