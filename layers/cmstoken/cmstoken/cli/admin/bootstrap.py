"""``cmstoken-admin bootstrap``: start the stack's device authorization, show where to approve
it, and poll until it ends.

Everything printed from a function's result goes through ``shown``: the user code and addresses
come from the identity provider by way of a stored document, and no escape sequence in them may
reach the terminal.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from cmstoken.cli.admin.errors import AdminError
from cmstoken.cli.admin.invokers import Invoker
from cmstoken.cli.admin.stack import StackFunctions
from cmstoken.cli.console import EXIT_OK, shown
from cmstoken.cli.countdown import Countdown
from cmstoken.core.clock import parse_iso
from cmstoken.core.redaction import displayable

# One poll invocation waits at most this long, so progress can be shown between them.
POLL_SLICE_SECONDS = 20


class _Countdown(Countdown):
    """While a poll runs: a live line on a terminal (from the poll's first second), a plain
    line per poll elsewhere."""

    tail = "  "
    at_once = False
    line_elsewhere = True


def bootstrap(
    invoker: Invoker,
    functions: StackFunctions,
    *,
    free_trial: bool | None,
    out: TextIO,
    now: Callable[[], float] = time.time,
    qr: bool = False,
    new_identity: bool = False,
    command: str = "cmstoken-admin bootstrap",
) -> int:
    """Start the device authorization, show where to approve it, and wait until it ends.
    ``new_identity`` lets the approval switch the stack to another account (identity);
    ``command`` is how the operator runs this again (named in failure messages)."""
    event: dict[str, Any] = {"action": "start"}
    if free_trial is not None:
        event["free_trial"] = free_trial
    if new_identity:
        event["allow_new_identity"] = True
    started = invoker.invoke(functions.bootstrap, event)
    if started.get("status") != "pending":
        raise AdminError(f"start failed: {started.get('message', started)}")
    _announce(started, out, qr=qr)
    expires_at = parse_iso(started["expires_at"])
    approved = False
    while True:
        result = _poll(invoker, functions, expires_at, out, now, approved=approved)
        if result.get("status") != "pending":
            return _ended(result, invoker, functions, out, approved=approved, command=command)
        if result.get("approved") and not approved:
            approved = True
            out.write("\nApproved; verifying the new credential and publishing its token.\n")


def _poll(
    invoker: Invoker,
    functions: StackFunctions,
    expires_at: float,
    out: TextIO,
    now: Callable[[], float],
    *,
    approved: bool,
) -> Any:
    """One poll: before the approval, a slice of the wait under the countdown; after it, as
    long as the function takes to verify and publish."""
    wait = max(1, min(POLL_SLICE_SECONDS, int(expires_at - now())))
    if approved:
        return invoker.invoke(functions.bootstrap, {"action": "poll"})
    with _Countdown(out, expires_at, now):
        return invoker.invoke(functions.bootstrap, {"action": "poll", "max_wait_seconds": wait})


def _ended(
    result: Mapping[str, Any],
    invoker: Invoker,
    functions: StackFunctions,
    out: TextIO,
    *,
    approved: bool,
    command: str,
) -> int:
    """The outcome of a poll that is no longer pending: authorized, or ``AdminError``."""
    status = result.get("status")
    if status == "authorized":
        identity = result.get("identity")
        out.write(
            f"\nAuthorized{f' (identity {shown(identity)})' if identity else ''}. The "
            f"service token is published (expires "
            f"{shown(result.get('service_token_expires_at'))}); re-authorize by "
            f"{shown(result.get('reauthorize_by') or 'no fixed date')}.\n"
        )
        return EXIT_OK
    if status == "none" and approved and _published(invoker, functions):
        # The rotator finished the approved authorization between two polls.
        out.write("\nAuthorized. The service token is published.\n")
        return EXIT_OK
    raise AdminError(f"{status}: {_in_admin_terms(str(result.get('message', '')), command)}")


# The bootstrap function's advice names its own actions, in any case ("run start again", "Run
# start again", "run start first"), and to allow a new identity its event field and, for
# whoever reads its result directly, this command's flag: 'start again allowing it
# ("allow_new_identity": true; cmstoken-admin bootstrap --new-identity)'.
_NEW_IDENTITY = re.compile(
    r'\b(?P<s>[Ss])tart again allowing (?P<what>it|a new identity) \("allow_new_identity": '
    r"true[^)]*\)"
)
_START = re.compile(r"\b(?P<r>[Rr])un start (?P<when>again|first)\b")


def _in_admin_terms(message: str, command: str) -> str:
    """The bootstrap function's advice worded for the operator of this command: its actions
    become this command (the case of the sentence kept), the new-identity advice this
    command's ``--new-identity``, named once."""

    def new_identity(found: re.Match[str]) -> str:
        run = "Run" if found["s"] == "S" else "run"
        allow = " to allow it" if found["what"] == "it" else ""
        return f"{run} `{command} --new-identity`{allow}"

    def start(found: re.Match[str]) -> str:
        return f"{found['r']}un `{command}`" + (" again" if found["when"] == "again" else "")

    return _START.sub(start, _NEW_IDENTITY.sub(new_identity, message))


def _published(invoker: Invoker, functions: StackFunctions) -> bool:
    """True when the stack's credential is active and its service token published."""
    credential = invoker.invoke(functions.bootstrap, {"action": "status"}).get("credential") or {}
    return credential.get("status") == "active" and bool(credential.get("service_token_expires_at"))


def _announce(started: Mapping[str, Any], out: TextIO, *, qr: bool) -> None:
    line = "=" * 64
    address = str(started["verification_uri_complete"])
    # No QR code of an address that does not print as what it is.
    if qr and displayable(address):
        _qr_code(address, out)
    out.write(
        f"\n{line}\n"
        f"  Open:   {shown(address)}\n"
        f"  or go to {shown(started['verification_uri'])} and enter the code\n\n"
        f"          {shown(started['user_code'])}\n\n"
        f"  Approve: Continue, then Confirm, then Confirm.\n"
        f"  The code expires at {shown(started['expires_at'])}.\n"
        f"{line}\n\n"
    )
    out.flush()


def _qr_code(address: str, out: TextIO) -> None:
    """The address as a QR code in block characters, for a phone's camera (needs segno)."""
    try:
        import segno
    except ImportError:
        return
    segno.make(address, error="l").terminal(out=out, compact=True, border=2)
