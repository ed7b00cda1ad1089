"""``get-token``: the interactive helper of service-api.md section 4, in Python.

Runs the device authorization (or a refresh), exchanges the raw access token for a service token
and prints the result on standard output, in JSON (for jq) or plain text. Prompts, the
verification address, progress and errors go to standard error, which never carries a token, a
refresh token or a device code.

This module is the command (``main``, ``run``); the package's docstring lists its parts.

Only the upstream clients are imported: no boto3, no Powertools, so the command starts quickly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import TextIO

from cmstoken.cli.console import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    say,
    shown,
)
from cmstoken.cli.get_token.flows import exchange, run_device_flow, run_refresh
from cmstoken.cli.get_token.holding import HeldInterrupts
from cmstoken.cli.get_token.options import PROG, REFRESH_FILE_OPTION, Options
from cmstoken.cli.get_token.output import Result, render
from cmstoken.cli.get_token.parser import EndOfInput, build_parser, parse_args
from cmstoken.cli.get_token.placement import prepare
from cmstoken.cli.get_token.refresh_file import RefreshFile, RefreshFileError, reason
from cmstoken.cli.get_token.rescue import rescue, state_folder
from cmstoken.cli.get_token.retries import Retries
from cmstoken.core.clock import Clock, SystemClock
from cmstoken.core.errors import CmsTokenError, InvalidGrantError, UpstreamError
from cmstoken.upstream.service import ServiceClient

NO_TOKEN_GIVEN = "no refresh token given (end of input at the prompt); nothing was sent"  # noqa: S105
CLOSED_OUTPUT = "standard output was closed (a broken pipe): the result could not be printed"
VOID_FILE = (
    "the refresh token in the file is void: delete the file, then run the same command to "
    "log in again (a login never replaces a file that holds a token)"
)


def run(
    options: Options,
    service: ServiceClient,
    *,
    stdin: TextIO | None,
    stdout: TextIO,
    stderr: TextIO,
    refresh_file: RefreshFile | None = None,
) -> int:
    """Obtain the tokens, keep the new refresh token in ``refresh_file`` (when given: renewed,
    or created by the login when it held no token), exchange, print; returns the exit code.
    From a refresh's (or a poll's) sending until its answer is kept, interrupts are held
    (``holding``); one held then ends the run once it is kept (exit 130). ``CmsTokenError``
    and ``KeyboardInterrupt`` before the tokens exist propagate to the caller."""
    retries = Retries(service.clock, stderr)
    in_file = refresh_file is not None
    with HeldInterrupts(stderr, in_file=in_file, login=options.refresh_token is None) as held:
        if options.refresh_token is None:
            result = run_device_flow(
                service,
                free_trial=options.free_trial,
                stdin=stdin,
                stderr=stderr,
                retries=retries,
                held=held,
            )
            if refresh_file is not None and not _kept(
                result.tokens.refresh_token, refresh_file, stderr
            ):
                return EXIT_FAILURE
        else:
            result = run_refresh(
                service,
                options.refresh_token,
                free_trial=options.free_trial,
                stderr=stderr,
                retries=retries,
                held=held,
            )
            if not _kept(result.tokens.refresh_token, refresh_file, stderr):
                return EXIT_FAILURE
        if refresh_file is not None:
            result = dataclasses.replace(result, refresh_token_file=options.refresh_file)
        try:
            held.release()  # kept (in the file), or printed below whatever happens
            result = exchange(service, result, retries)
        except (CmsTokenError, KeyboardInterrupt) as exc:
            # The refresh token just issued is the only way back in without a new login: keep it.
            _print_result(stdout, result, options.output_format, service.clock)
            say(stderr, _exchange_failed(exc, in_file=in_file))
            return EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_FAILURE
    _print_result(stdout, result, options.output_format, service.clock)
    return EXIT_OK


def _kept(token: str, refresh_file: RefreshFile | None, stderr: TextIO) -> bool:
    """Whether the new refresh token of a refresh is kept: written to ``refresh_file`` (False
    when it cannot be: it is then rescued to a new file, never printed), else left to standard
    output."""
    if refresh_file is None:
        say(
            stderr,
            "The refresh token given is now void: keep the new refresh_token of this "
            "output for the next run.",
        )
        return True
    login = refresh_file.login
    try:
        refresh_file.save(token)
    except (OSError, RefreshFileError) as exc:
        say(stderr, _unsaved(exc, rescue(token, refresh_file.path), login=login))
        return False
    if login:
        say(
            stderr,
            f"The refresh file ({REFRESH_FILE_OPTION}) now holds the login's refresh token "
            "(mode 0600): run the same command to renew it.",
        )
    else:
        say(
            stderr,
            f"The refresh token in the file is spent; the file ({REFRESH_FILE_OPTION}) now "
            "holds the new one, for the next run.",
        )
    return True


def _print_result(stdout: TextIO, result: Result, output_format: str, clock: Clock) -> None:
    """Print the result. When it carries the new refresh token (no refresh file) and standard
    output is closed, the token is rescued to a new file of mode 0600 and ``UnprintedTokenError``
    says where (or that it is lost): a closed pipe must not lose a token already rotated."""
    try:
        stdout.write(render(result, output_format, now=clock.now()))
        stdout.flush()
    except OSError as exc:
        if result.refresh_token_file is not None:
            raise
        raise UnprintedTokenError(exc, rescue(result.tokens.refresh_token, None)) from exc


class UnprintedTokenError(Exception):
    """Standard output failed while it was the new refresh token's one place; ``path``: the
    new file of mode 0600 that holds it instead (``None``: none took it)."""

    def __init__(self, error: OSError, path: str | None) -> None:
        super().__init__(type(error).__name__)
        self.error = error
        self.path = path

    def line(self) -> str:
        """One line on standard error; never the token."""
        why = (
            CLOSED_OUTPUT
            if isinstance(self.error, BrokenPipeError)
            else f"standard output could not be written ({reason(self.error)})"
        )
        if self.path is None:
            return (
                f"{PROG}: {why}, and no file took the new refresh token either ({state_folder()}, "
                f"the temporary folder): it is lost, and the one given is spent: log in again"
            )
        return (
            f"{PROG}: {why}; the new refresh token was saved to {self.path} (mode 0600): renew "
            f"with {PROG} {REFRESH_FILE_OPTION} {self.path}"
        )


def _exchange_failed(error: BaseException, *, in_file: bool) -> str:
    """One line: why the exchange failed (or was not made), and how to try again with the new
    refresh token (printed on standard output, or kept in the refresh file: ``in_file``)."""
    if isinstance(error, KeyboardInterrupt):
        why = "interrupted before the service token was obtained"
    else:
        why = f"{shown(error)}; the exchange failed"
    again = (
        f"the new refresh token is kept in the refresh file: run {PROG} {REFRESH_FILE_OPTION} "
        "again to try again"
        if in_file
        else f"the new refresh token is on standard output: run {PROG} -r with it to try again"
    )
    return f"{PROG}: {why}; {again}"


def _unsaved(error: BaseException, rescued: str | None, *, login: bool = False) -> str:
    """The loud paragraph when the new refresh token could not be written to the refresh file:
    where it was rescued to (a new file of mode 0600), or that it is lost. Never the token."""
    if login:
        why = "The login's refresh token is nowhere else."
    else:
        why = (
            "The identity provider has already rotated it: the token still in the file is "
            "spent, and presenting it again would revoke the new one too."
        )
    head = (
        f"{PROG}: WARNING: THE NEW REFRESH TOKEN COULD NOT BE SAVED to the refresh file "
        f"({REFRESH_FILE_OPTION}): {reason(error)}. {why}"
    )
    if rescued is None:
        return (
            f"{head} No other place took it either (beside the file, {state_folder()}, the "
            "temporary folder): it is lost, and you must log in again (delete the refresh "
            "file, then run the same command). Nothing was printed on standard output."
        )
    return (
        f"{head} It was saved to {rescued} (mode 0600) instead: move it over the refresh "
        "file, then renew with it as before; without it you must log in again. Nothing was "
        "printed on standard output."
    )


def main(argv: list[str] | None = None) -> int:
    """The ``get-token`` console script; returns the exit code (0, 1, 2 or 130). Ctrl-C
    anywhere (a prompt, a wait), end of input at the ``refresh token:`` prompt and a closed
    standard output end in one line on standard error, never a traceback."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        say(sys.stderr, f"\n{PROG}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError as exc:
        return _closed_output(exc)
    except UnprintedTokenError as rescued:
        _quiet_stdout()
        with contextlib.suppress(OSError, ValueError):
            say(sys.stderr, rescued.line())
        return EXIT_FAILURE


def _closed_output(error: BrokenPipeError) -> int:
    """Standard output closed by its reader (``| head``, a reader killed by the same Ctrl-C):
    Python's recipe (the ``signal`` module's note on SIGPIPE), standard output pointed at
    devnull so that the flush at exit fails no more, and one line."""
    _quiet_stdout()
    interrupted = isinstance(error.__context__, KeyboardInterrupt)
    with contextlib.suppress(OSError, ValueError):
        say(sys.stderr, f"{PROG}: {'interrupted; ' if interrupted else ''}{CLOSED_OUTPUT}")
    return EXIT_INTERRUPTED if interrupted else EXIT_FAILURE


def _quiet_stdout() -> None:
    """Point standard output at devnull, so that the flush at exit fails no more."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _main(argv: list[str] | None) -> int:
    try:
        options = parse_args(argv, os.environ, sys.stdin)
    except SystemExit as exc:  # argparse: -h (0) or a usage error (2)
        return _exit_code(exc)
    except EndOfInput:
        say(sys.stderr, f"\n{PROG}: {NO_TOKEN_GIVEN}")
        return EXIT_USAGE
    refresh_file: RefreshFile | None = None
    try:
        if options.refresh_file is not None:
            prepare(options.refresh_file, stderr=sys.stderr)  # its folders; the git warning
            try:
                refresh_file = RefreshFile.open(options.refresh_file, stderr=sys.stderr)
            except RefreshFileError as exc:
                try:
                    build_parser().refuse(
                        f"argument {REFRESH_FILE_OPTION}: {exc}; nothing was sent"
                    )
                except SystemExit as usage:
                    return _exit_code(usage)
            # A file without a token yet: the login creates it (refresh_file.login).
            options = dataclasses.replace(options, refresh_token=refresh_file.token or None)
        return _run_command(options, refresh_file)
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
        void = isinstance(exc, InvalidGrantError) and refresh_file is not None
        say(sys.stderr, f"{PROG}: {shown(exc)}" + (f"; {VOID_FILE}" if void else ""))
        hint = _api_suffix_hint(options.base_url, exc)
        if hint:
            say(sys.stderr, f"{PROG}: {hint}")
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
