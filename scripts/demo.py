"""Local demo, no AWS account and no internet: the upstream lifecycle against the emulator.

Starts the emulator on 127.0.0.1, runs the device authorization (approving it automatically
through the emulator's activation pages, or waiting for you to do it in a browser when
INTERACTIVE=1), exchanges the raw token for a service token, lists projects with it, rotates the
refresh token, shows that the used refresh token is void, and prints a summary of what happened
(metadata only, never a secret).
"""

from __future__ import annotations

import os
import re
import sys
import time

import requests

from cmsemu import Emulator, EmulatorConfig
from cmstoken.clock import SystemClock, to_iso
from cmstoken.device_flow import start_device_authorization
from cmstoken.redaction import fingerprint
from cmstoken.service import ServiceClient


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
            action = requests.compat.urljoin(page.url, form.group(1))
            page = browser.post(action, data=fields, timeout=5)
        if "all set" not in page.text:
            raise SystemExit("demo: the activation pages did not approve the code")


def main() -> int:
    interactive = os.environ.get("INTERACTIVE") == "1"
    config = EmulatorConfig(poll_interval=1, service_token_lifetime=3600)
    rows: list[tuple[str, str]] = []
    started_at = time.monotonic()
    with Emulator(config) as emulator:
        print(f"emulator listening on {emulator.base_url}", file=sys.stderr)
        clock = SystemClock()
        service = ServiceClient(emulator.base_url, clock=clock)
        started = start_device_authorization(service, free_trial=False)
        authorization = started.authorization
        print(
            f"\n  Open {authorization.verification_uri} and enter the code "
            f"{authorization.user_code}\n  (or open {authorization.verification_uri_complete})\n",
            file=sys.stderr,
        )
        if interactive:
            print("  waiting for you to approve it in a browser...", file=sys.stderr)
        else:
            print("  approving automatically through the activation pages", file=sys.stderr)
            approve_in_browser_pages(authorization.verification_uri_complete)
        poller = started.poller()
        tokens = poller.run()
        assert tokens is not None
        rows.append(("authorized", f"after {poller.polls} poll(s); scope {tokens.scope}"))
        service_token = service.exchange(
            tokens.access_token, fallback_expires_at=tokens.access_token_expires_at
        )
        rows.append(("service token", f"expires {to_iso(service_token.expires_at)}"))
        projects = service.list_projects(service_token.token)
        rows.append(("projects", ", ".join(p.project_id for p in projects)))
        rotated = started.identity.refresh(
            client_id=started.client_id, refresh_token=tokens.refresh_token
        )
        rows.append(
            (
                "refresh rotated",
                f"{fingerprint(tokens.refresh_token)} -> {fingerprint(rotated.refresh_token)}",
            )
        )
        void = not emulator.refresh_token_valid(tokens.refresh_token)
        rows.append(("old refresh token void", "yes" if void else "NO"))
        fresh = service.exchange(
            rotated.access_token, fallback_expires_at=rotated.access_token_expires_at
        )
        rows.append(("new service token", f"expires {to_iso(fresh.expires_at)}"))
        rows.append(
            ("upstream calls", ", ".join(f"{k} {v}" for k, v in sorted(emulator.counts.items())))
        )
    rows.append(("elapsed", f"{time.monotonic() - started_at:.1f} s"))
    width = max(len(name) for name, _ in rows)
    print("\nsummary (fingerprints are sha256 prefixes; no secret is printed)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    return 0 if void else 1


if __name__ == "__main__":
    sys.exit(main())
