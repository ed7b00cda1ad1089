"""``get-token``'s command line: the help text, the parser, and the options resolved from the
arguments, the environment and standard input (usage errors exit 2 before anything is sent)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import TextIO

from cmstoken import __version__
from cmstoken.cli.console import is_terminal
from cmstoken.cli.get_token.options import (
    ENV_BASE_URL,
    ENV_REFRESH_TOKEN,
    FORMATS,
    FROM_STDIN,
    PROG,
    REFRESH_FILE_OPTION,
    Options,
)
from cmstoken.cli.get_token.retries import RETRY_STORY
from cmstoken.cli.get_token.usage import RedactingParser
from cmstoken.core.errors import ConfigurationError
from cmstoken.core.urls import validate_url

DESCRIPTION = """\
Get a Cluster Management Service token. Without --refresh or --refresh-file: log in with
the device authorization flow (open the printed address, approve the login, then press y).
With --refresh: renew from a refresh token. With --refresh-file: renew the refresh token
kept in a file, in place; a file that does not exist yet (or is empty) is created by a
login. Either way the raw access token is then exchanged for the service token, which is
printed with the new refresh token.
"""


EPILOG = f"""\
environment:
  {ENV_BASE_URL}    the service's address (https://api.example.com, not its /api),
                      used when --base-url is not given; https, or http on 127.0.0.1,
                      ::1 or localhost
  {ENV_REFRESH_TOKEN}   a refresh token to renew from when neither -r nor --refresh-file
                      is given (kept out of the process list and shell history, unlike
                      -r TOKEN); set but empty is a usage error

keeping the refresh token in a file (the same line every time), outside any repository:
  get-token --refresh-file ~/.local/state/cmstoken/refresh-token
      (the first run logs in and creates the file and its folders; each later run renews
      it in place; a file in a git work tree that does not ignore it gets a warning)

renewing from a token you keep elsewhere (it is void afterwards: keep the new one):
  get-token -r - < file        or   printf %s "$token" | get-token -r -
  {ENV_REFRESH_TOKEN}=... get-token   (-r TOKEN works too, but shows in ps and history)

--refresh-file PATH:
  PATH holds the refresh token on one line. Before anything is sent, get-token checks that
  the file can be replaced: it creates a temporary file beside it (so the directory must be
  writable); if it cannot, it exits 2 and the token is not spent. Once the identity
  provider has answered, the new refresh token is written back atomically (the temporary
  file is written and flushed to disk, renamed over PATH, the directory flushed; mode 0600)
  before anything is printed, so the next run uses it. Runs on files in one directory take
  turns, so that two at once never present the same token.
  A PATH that does not exist yet or an empty file holds no token: get-token logs in, and
  the login creates the file the same way (mode 0600), and its missing folders (0700). A
  login never replaces a file that holds a token: to log in again after the token was
  refused, delete the file first.
  A symlink is followed: the file it points to is replaced and the link kept. Replacing the
  link with a file would leave its target holding the spent token, and whatever reads the
  target next would present it again: a reuse, which revokes every token of the login.
  If the write fails after the answer, the new refresh token is saved to a new file of mode
  0600 (beside the file, else in the state or temporary folder) that a warning names, and
  the exit code is 1. The file is the refresh token's one place: it is never printed, and
  the output names the file instead (refresh_token_file).

interrupts (Ctrl-C, SIGINT, SIGTERM):
  Before a refresh (or a login's poll) is sent, an interrupt ends the run at once. From its
  sending until its answer is saved (in the file, or printed), interrupts are held: the first
  says so, and the run exits 130 once the new refresh token is saved; the second says what
  is at stake; only a third ends the run at once, losing the login.

output (standard output only; everything else goes to standard error):
  json    one JSON object: {{"access_token": <service token>, "refresh_token": <new refresh
          token>, "scope": <granted scope>, "expires_in": <seconds until the service token
          expires>, "token_type": "Bearer"}}; with --refresh-file, "refresh_token_file":
          <PATH> in place of "refresh_token"
  plain   three lines: "access_token: ...", "refresh_token: ..." (with --refresh-file,
          "refresh_token_file: PATH"), "expires_in: ..."
  If the exchange fails (or is interrupted) after new tokens were issued, only the new
  refresh token (or its file) and the scope are printed, so that it is not lost, and the exit
  code is 1 (130). A closed standard output (a reader gone) is one line on standard error,
  exit 1; without --refresh-file, the new refresh token is then saved to a new file of mode
  0600 (as when a refresh file cannot take it), and the line names it.

waits and retries:
{textwrap.fill(RETRY_STORY, width=90, initial_indent="  ", subsequent_indent="  ")}
  A slow answer is waited for (up to the call's time limit). Once a refresh's answer can no
  longer arrive (a dropped connection, a gateway's 502 or 504, no answer in time, a 2xx
  answer that cannot be read), the provider may have rotated the token: the same token is
  presented again at once, once. That recovers it if the provider never acted, or allows a
  reuse interval; if it answers invalid_grant, the token is void: log in again. The same
  goes for a poll of the login. While the approval is awaited, a countdown shows on
  standard error when it is a terminal.

exit codes:
  0    success
  1    upstream or authorization failure (denied, expired, unreachable, refused, aborted),
       or the new refresh token could not be saved to the --refresh-file (see above), or
       standard output was closed
  2    usage error (bad option or value, missing or invalid base URL, an empty
       {ENV_REFRESH_TOKEN}, no refresh token at the prompt, a --refresh-file that cannot be
       read or replaced or holds something other than one token); no token was sent
  130  interrupted (Ctrl-C; during a renewal Ctrl-C or SIGTERM, once the new token is saved)
"""


def build_parser() -> RedactingParser:
    """The command-line parser, with the help text."""
    parser = RedactingParser(
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
            "back atomically before anything is printed; a PATH without a token yet is "
            "created by a login (see --refresh-file PATH below)"
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help=f"the service's address, such as https://api.example.com; default: ${ENV_BASE_URL}",
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
    base_url = _base_url(parser, args.base_url, environ)
    if args.refresh_file is not None and args.refresh_file.strip() in ("", FROM_STDIN):
        parser.refuse(
            f"argument {REFRESH_FILE_OPTION}: expects the path of a file holding the refresh "
            f"token (to read the token from standard input, use -r {FROM_STDIN})"
        )
    return Options(
        base_url=base_url,
        free_trial=args.free_trial,
        output_format=args.output_format,
        refresh_token=_refresh_token(parser, args, environ, stdin),
        refresh_file=args.refresh_file,
    )


def _base_url(parser: RedactingParser, given: str | None, environ: Mapping[str, str]) -> str:
    """``--base-url``, else ``$SERVICE_BASE_URL``, checked against the URL rule."""
    base_url = given if given is not None else environ.get(ENV_BASE_URL, "")
    if not base_url.strip():
        parser.refuse(f"no service address: pass --base-url or set {ENV_BASE_URL}")
    try:
        return validate_url(base_url, what="service base URL")
    except ConfigurationError as exc:
        parser.refuse(str(exc))  # validate_url's words never repeat any part of the URL


def _refresh_token(
    parser: RedactingParser,
    args: argparse.Namespace,
    environ: Mapping[str, str],
    stdin: TextIO | None,
) -> str | None:
    """The refresh token to renew from: ``-r TOKEN``, ``-r -`` (standard input), else
    ``$CMS_REFRESH_TOKEN`` when neither ``-r`` nor ``--refresh-file`` is given; ``None`` for
    the device flow (or the refresh file, read later)."""
    refresh_token: str | None = args.refresh_token
    if refresh_token == FROM_STDIN:
        refresh_token = _read_secret(sys.stdin if stdin is None else stdin)
        if not refresh_token:
            parser.refuse("argument -r/--refresh: no refresh token on standard input")
    elif refresh_token is None and args.refresh_file is None and ENV_REFRESH_TOKEN in environ:
        refresh_token = environ[ENV_REFRESH_TOKEN].strip()
        if not refresh_token:
            parser.refuse(
                f"{ENV_REFRESH_TOKEN} is set but empty: set it to the refresh token, or unset "
                "it to log in with the device flow"
            )
    if refresh_token is not None and not refresh_token.strip():
        parser.refuse("argument -r/--refresh: the refresh token is empty")
    return refresh_token


class EndOfInput(Exception):  # noqa: N818 -- what happened, not an error of the program
    """End of input (Ctrl-D) at the ``refresh token:`` prompt: a usage error, nothing sent."""


def _read_secret(stdin: TextIO) -> str:
    """One line from standard input, without echo when it is a terminal (``EndOfInput`` when
    the person there ends the input instead)."""
    if is_terminal(stdin):
        import getpass

        try:
            return getpass.getpass("refresh token: ", stream=sys.stderr).strip()
        except EOFError:
            raise EndOfInput from None
    return stdin.readline().strip()
