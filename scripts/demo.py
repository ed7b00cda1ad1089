"""`make demo`: the product's whole lifecycle on this machine, no AWS account, no internet.

Starts the emulator (identity provider and service) and moto's Secrets Manager server on
127.0.0.1, creates the stack's two secrets there, and drives the real handlers in-process through
the operator command's code: bootstrap (the address and code are printed; the demo approves them
through the emulator's activation pages and says so, or with INTERACTIVE=1 waits for you to open
the page), a rotator run (skipped: the token is fresh), the clock moved 19 hours, a rotator run
(rotated), and a project listing with the published token. It prints a summary of metadata only,
never a secret, and stops its servers on exit and on Ctrl-C.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
HOURS_FORWARD = 19
BOOTSTRAP, ROTATOR = "demo-bootstrap", "demo-rotator"
REFRESH_SECRET, SERVICE_SECRET = "demo/refresh-credential", "demo/service-token"


def load_handler(function: str) -> Callable[[Any, Any], Any]:
    """``functions/<function>/app.py``'s handler, loaded as its own module."""
    spec = importlib.util.spec_from_file_location(
        f"{function}_app", ROOT / "functions" / function / "app.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    handler: Callable[[Any, Any], Any] = module.lambda_handler
    return handler


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


class EmulatedTime:
    """The functions' clock: the emulator's time (real time plus the demo's jumps)."""

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator

    def now(self) -> float:
        return float(self.emulator.now())

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


def configure_environment(emulator: Any, aws_endpoint: str) -> None:
    """What the template sets for the functions, pointed at the local servers."""
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ACCESS_KEY_ID": "demo",
            "AWS_SECRET_ACCESS_KEY": "demo",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "SERVICE_BASE_URL": emulator.base_url,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
            "POWERTOOLS_SERVICE_NAME": "cmstoken-demo",
            "POWERTOOLS_METRICS_NAMESPACE": "CmsTokenDemo",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    )


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
    from cmstoken.documents import RefreshSecret, ServiceTokenDocument
    from cmstoken.redaction import fingerprint
    from cmstoken.service import ServiceClient

    secrets = boto3.client("secretsmanager")
    secrets.create_secret(Name=REFRESH_SECRET)
    secrets.create_secret(Name=SERVICE_SECRET)
    clock = EmulatedTime(emulator)
    runtime.CLOCK = clock  # type: ignore[assignment]
    runtime.reset()
    functions = StackFunctions(bootstrap=BOOTSTRAP, rotator=ROTATOR)
    invoker = _ApprovingInvoker(
        {BOOTSTRAP: load_handler("bootstrap"), ROTATOR: load_handler("rotator")},
        timeout_seconds={BOOTSTRAP: 900, ROTATOR: 120},
        clock=clock.now,
        approve=None if interactive else approve_in_browser_pages,
    )
    if interactive:
        print("INTERACTIVE=1: open the address below in a browser and approve.", file=sys.stderr)
    else:
        print("Approving automatically through the emulator's activation pages.", file=sys.stderr)

    def read(secret_id: str) -> str:
        return str(secrets.get_secret_value(SecretId=secret_id)["SecretString"])

    bootstrap(invoker, functions, free_trial=None, out=sys.stderr, now=clock.now)
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
    projects = ServiceClient(emulator.base_url).list_projects(document.token)
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


class _ApprovingInvoker:
    """The in-process invoker, approving a new device code the way a person would."""

    def __init__(
        self,
        handlers: Mapping[str, Callable[[Any, Any], Any]],
        *,
        timeout_seconds: Mapping[str, float],
        clock: Callable[[], float],
        approve: Callable[[str], None] | None,
    ) -> None:
        from cmstoken.admin import LocalInvoker

        self.local = LocalInvoker(handlers, timeout_seconds=timeout_seconds, clock=clock)
        self.approve = approve

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        result = self.local.invoke(function, payload)
        if self.approve and payload.get("action") == "start" and result.get("status") == "pending":
            address = result["verification_uri_complete"]
            threading.Timer(1.0, self.approve, args=(address,)).start()
        return result


if __name__ == "__main__":
    sys.exit(main())
