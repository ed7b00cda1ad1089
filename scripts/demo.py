"""`make demo`: the product's whole lifecycle on this machine, no AWS account, no internet.

Starts the emulator (identity provider and service) and moto's Secrets Manager server on
127.0.0.1, creates the stack's two secrets there, and drives the real handlers in-process through
the operator command's code: bootstrap (the address and code are printed; the demo approves them
through the emulator's activation pages and says so, or with INTERACTIVE=1 waits for you to open
the page), a rotator run (skipped: the token is fresh), the clock moved 19 hours, a rotator run
(rotated), and a project listing through the consumer helper. It prints a summary of metadata only,
never a secret, and stops its servers on exit and on Ctrl-C.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import requests
from local_stack import (
    BOOTSTRAP,
    REFRESH_SECRET,
    ROTATOR,
    SERVICE_SECRET,
    ApprovingInvoker,
    EmulatorTime,
    configure_environment,
    create_secrets,
)

HOURS_FORWARD = 19


def approve_in_browser_pages(verification_uri_complete: str) -> None:
    """Walk the activation pages as a person would: Continue, Confirm, Confirm."""
    with requests.Session() as browser:
        page = browser.get(verification_uri_complete, timeout=5)
        for _ in range(3):
            form = re.search(r'<form[^>]*action="([^"]*)"', page.text)
            fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page.text))
            button = re.search(
                r'<button[^>]*name="([^"]+)"[^>]*value="(continue|confirm)"', page.text
            )
            if form is None or button is None:
                break
            fields[button.group(1)] = button.group(2)
            page = browser.post(requests.compat.urljoin(page.url, form.group(1)), data=fields)
        if "all set" not in page.text:
            raise RuntimeError("the activation pages did not approve the code")


def main() -> int:
    interactive = os.environ.get("INTERACTIVE") == "1"
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: no request lines

    from cmsemu import Emulator, EmulatorConfig

    rows: list[tuple[str, str]] = []
    started = time.monotonic()
    emulator = Emulator(EmulatorConfig(poll_interval=1 if not interactive else 5)).start()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    try:
        host, port = moto.get_host_and_port()
        configure_environment(emulator, f"http://{host}:{port}")
        run_lifecycle(emulator, interactive, rows)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; servers stopped", file=sys.stderr)
        return 130
    finally:
        moto.stop()
        emulator.stop()
    rows.append(("elapsed", f"{time.monotonic() - started:.1f} s"))
    width = max(len(name) for name, _ in rows)
    print("\nsummary (metadata only: fingerprints are sha256 prefixes, no secret is printed)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    return 0


def run_lifecycle(emulator: Any, interactive: bool, rows: list[tuple[str, str]]) -> None:
    """Bootstrap, rotate (skipped), jump the clock, rotate (rotated), use the token."""
    import boto3

    from cmstoken import runtime
    from cmstoken.admin import StackFunctions, bootstrap
    from cmstoken.consumer import ServiceTokenAuth, ServiceTokenProvider
    from cmstoken.documents import RefreshSecret, ServiceTokenDocument
    from cmstoken.models import parse_project_listing
    from cmstoken.redaction import fingerprint

    secrets = boto3.client("secretsmanager")
    create_secrets(secrets)
    clock = EmulatorTime(emulator, real_waits=True)
    runtime.CLOCK = clock  # type: ignore[assignment]
    runtime.reset()
    functions = StackFunctions(bootstrap=BOOTSTRAP, rotator=ROTATOR)

    def approve(started: Mapping[str, Any]) -> None:
        address = started["verification_uri_complete"]
        threading.Timer(1.0, approve_in_browser_pages, args=(address,)).start()

    invoker = ApprovingInvoker(clock, None if interactive else approve)
    if interactive:
        print("INTERACTIVE=1: open the address below in a browser and approve.", file=sys.stderr)
    else:
        print("Approving automatically through the emulator's activation pages.", file=sys.stderr)

    def read(secret_id: str) -> str:
        return str(secrets.get_secret_value(SecretId=secret_id)["SecretString"])

    # What an operator sees: the QR code and the framed address, once, on a terminal or not.
    bootstrap(invoker, functions, free_trial=None, out=sys.stderr, now=clock.now, qr=True)
    credential = RefreshSecret.from_json(read(REFRESH_SECRET)).credential
    assert credential is not None
    first_refresh = credential.refresh_token
    rows.append(("bootstrap", f"authorized; refresh credential {fingerprint(first_refresh)}"))
    rows.append(("rotator, scheduled", _scheduled(invoker, functions)))
    emulator.advance(HOURS_FORWARD * 3600)
    rows.append(("clock moved", f"+{HOURS_FORWARD} h"))
    rows.append(("rotator, scheduled again", _scheduled(invoker, functions)))
    credential = RefreshSecret.from_json(read(REFRESH_SECRET)).credential
    assert credential is not None
    void = not emulator.refresh_token_valid(first_refresh)
    rows.append(
        (
            "refresh credential",
            f"{fingerprint(first_refresh)} -> {fingerprint(credential.refresh_token)}"
            f" (old one void: {'yes' if void else 'NO'})",
        )
    )
    document = ServiceTokenDocument.from_json(read(SERVICE_SECRET))
    # As a workload would: the consumer helper reads the secret and authenticates the call.
    provider = ServiceTokenProvider(SERVICE_SECRET, clock=clock)
    with requests.Session() as session:
        session.auth = ServiceTokenAuth(provider)
        answer = session.get(f"{provider.api_url}/v3/projects", timeout=10)
        answer.raise_for_status()
    projects = parse_project_listing(answer.json())
    rows.append(
        ("service token", f"{fingerprint(document.token)}, expires {_iso(document.expires_at)}")
    )
    rows.append(("projects listed", ", ".join(p.project_id for p in projects)))
    rows.append(
        ("upstream calls", ", ".join(f"{k} {v}" for k, v in sorted(emulator.counts.items())))
    )


def _scheduled(invoker: Any, functions: Any) -> str:
    result = invoker.invoke(functions.rotator, {})
    return f"{result['outcome']}: {result['reason']}"


def _iso(epoch: float) -> str:
    from cmstoken.clock import to_iso

    return to_iso(epoch)


if __name__ == "__main__":
    sys.exit(main())
