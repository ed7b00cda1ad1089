"""``get-token``: the interactive helper of service-api.md section 4, in Python.

Runs the device authorization (or a refresh), exchanges the raw access token for a service token
and prints the result on standard output, in JSON (for jq) or plain text. Prompts, the
verification address, progress and errors go to standard error, which never carries a token, a
refresh token or a device code.

Only the upstream clients are imported: no boto3, no Powertools, so the command starts quickly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TextIO

from . import __version__
from .clock import Clock, SystemClock, to_iso
from .device_flow import start_device_authorization
from .errors import (
    CmsTokenError,
    ConfigurationError,
    MalformedResponseError,
    TransientError,
    UpstreamError,
)
from .http import validate_url
from .identity import IdentityClient
from .models import RawTokens, ServiceToken, TokenAnswer
from .redaction import REDACTED, printable
from .retry import RetryPolicy, call_with_retries
from .service import ServiceClient

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

# The exchange is the one step worth retrying here: the raw token is already spent on it.
EXCHANGE_RETRIES = RetryPolicy(attempts=3, base_delay=1.0, max_delay=4.0, max_retry_after=30.0)

DESCRIPTION = """\
Get a Cluster Management Service token. Without --refresh: log in with the device
authorization flow (open the printed address, approve the login, then press y). With
--refresh: renew from a refresh token. Either way the raw access token is then exchanged
for the service token, which is printed with the new refresh token.
"""

EPILOG = f"""\
environment:
  {ENV_BASE_URL}    the service's address ({{base_url}}), used when --base-url is not
                      given; https, or http on 127.0.0.1, ::1 or localhost
  {ENV_REFRESH_TOKEN}   a refresh token to renew from when -r is not given (kept out of
                      the process list and shell history, unlike -r TOKEN)

renewing without exposing the refresh token:
  get-token -r - < file        or   printf %s "$token" | get-token -r -
  {ENV_REFRESH_TOKEN}=... get-token   (-r TOKEN works too, but shows in ps and history)

output (standard output only; everything else goes to standard error):
  json    one JSON object: {{"access_token": <service token>, "refresh_token": <new refresh
          token>, "scope": <granted scope>, "expires_in": <seconds until the service token
          expires>, "token_type": "Bearer"}}
  plain   three lines: "access_token: ...", "refresh_token: ...", "expires_in: ..."
  If the exchange fails after new tokens were issued, only the new refresh token (and scope)
  is printed, so that it is not lost, and the exit code is 1.

exit codes:
  0    success
  1    upstream or authorization failure (denied, expired, unreachable, refused, aborted)
  2    usage error (bad option or value, missing or invalid base URL)
  130  interrupted (Ctrl-C)
"""


@dataclass(frozen=True)
class Options:
    """The parsed command line."""

    base_url: str
    free_trial: bool
    output_format: str
    refresh_token: str | None = field(default=None, repr=False)


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
    parser.add_argument(
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
    refresh_token = args.refresh_token
    if refresh_token == FROM_STDIN:
        refresh_token = _read_secret(sys.stdin if stdin is None else stdin)
        if not refresh_token:
            parser.refuse("argument -r/--refresh: no refresh token on standard input")
    elif refresh_token is None:
        refresh_token = environ.get(ENV_REFRESH_TOKEN, "").strip() or None
    if refresh_token is not None and not refresh_token.strip():
        parser.refuse("argument -r/--refresh: the refresh token is empty")
    return Options(
        base_url=base_url,
        free_trial=args.free_trial,
        output_format=args.output_format,
        refresh_token=refresh_token,
    )


def _read_secret(stdin: TextIO) -> str:
    """One line from standard input, without echo when it is a terminal."""
    if _is_terminal(stdin):
        import getpass

        return getpass.getpass("refresh token: ", stream=sys.stderr).strip()
    return stdin.readline().strip()


def run_device_flow(
    service: ServiceClient, *, free_trial: bool, stdin: TextIO | None, stderr: TextIO
) -> Result:
    """Provider information and a device code, the address on stderr, the (y/N) confirmation,
    then RFC 8628 polling until the tokens arrive (or a terminal error)."""
    started = start_device_authorization(service, free_trial=free_trial)
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
    tokens = started.poller().run()
    if tokens is None:  # only with a stop_at, which is not given
        raise AbortedError("polling stopped before the authorization finished")
    _say(stderr, "Authorized.")
    return _result(tokens, started.provider.scope, stderr)


def run_refresh(
    service: ServiceClient, refresh_token: str, *, free_trial: bool, stderr: TextIO
) -> Result:
    """Provider information, then a refresh with the provider's (free-trial) client id."""
    provider = service.provider_info()
    identity = IdentityClient(provider.issuer_url, transport=service.transport, clock=service.clock)
    _say(stderr, "Refreshing...")
    try:
        answer = identity.refresh(
            client_id=provider.client_id_for(free_trial), refresh_token=refresh_token
        )
    except TransientError as exc:
        if exc.outcome_unknown:
            _say(
                stderr, "The identity provider may have acted: the refresh token given may be void."
            )
        raise
    _say(
        stderr,
        "The refresh token given is now void: keep the new refresh_token of this output "
        "for the next run.",
    )
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


def exchange(service: ServiceClient, result: Result) -> Result:
    """The raw access token exchanged for the service token (transient failures retried)."""
    tokens = result.tokens
    if not tokens.access_token:
        raise MalformedResponseError(
            "refresh: the answer holds no access token to exchange", endpoint="refresh", status=200
        )
    service_token = call_with_retries(
        lambda: service.exchange(
            tokens.access_token, fallback_expires_at=tokens.access_token_expires_at
        ),
        retry_on=(TransientError,),
        policy=EXCHANGE_RETRIES,
        clock=service.clock,
        description="exchange",
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
) -> int:
    """Obtain the tokens, exchange, print; returns the exit code. ``CmsTokenError`` and
    ``KeyboardInterrupt`` before the tokens exist propagate to the caller."""
    if options.refresh_token is not None:
        result = run_refresh(
            service, options.refresh_token, free_trial=options.free_trial, stderr=stderr
        )
    else:
        result = run_device_flow(service, free_trial=options.free_trial, stdin=stdin, stderr=stderr)
    try:
        result = exchange(service, result)
    except (CmsTokenError, KeyboardInterrupt) as exc:
        # The refresh token just issued is the only way back in without a new login: keep it.
        stdout.write(render(result, options.output_format, now=service.clock.now()))
        stdout.flush()
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else printable(str(exc))
        _say(
            stderr,
            f"{PROG}: {reason}\n{PROG}: the exchange failed; the new refresh token is on "
            f"standard output: run {PROG} -r with it to try again",
        )
        return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_FAILURE
    stdout.write(render(result, options.output_format, now=service.clock.now()))
    stdout.flush()
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """The ``get-token`` console script; returns the exit code (0, 1, 2 or 130)."""
    try:
        options = parse_args(argv, os.environ, sys.stdin)
    except SystemExit as exc:  # argparse: -h (0) or a usage error (2)
        if exc.code is None:
            return EXIT_OK
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    clock: Clock = SystemClock()
    service = ServiceClient(options.base_url, clock=clock)
    try:
        return run(options, service, stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr)
    except CmsTokenError as exc:
        _say(sys.stderr, f"{PROG}: {printable(str(exc))}")
        hint = _api_suffix_hint(options.base_url, exc)
        if hint:
            _say(sys.stderr, f"{PROG}: {hint}")
            return EXIT_USAGE
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _say(sys.stderr, f"\n{PROG}: interrupted")
        return EXIT_INTERRUPTED
    finally:
        service.transport.close()


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
