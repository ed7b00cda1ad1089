"""`make demo`: the product's whole lifecycle on this machine, no AWS account, no internet.

Starts the emulator (identity provider and service) and moto's Secrets Manager server on
127.0.0.1, creates the stack's two secrets there, and drives the real handlers in-process through
the operator command's code: bootstrap (the address and code are printed; the demo approves them
through the emulator's activation pages and says so, or with INTERACTIVE=1 waits for you to open
the page), a rotator run (skipped: the token is fresh), the clock moved 19 hours, a rotator run
(rotated), and a project listing through the consumer helper. Then one-click re-authorization
(scripts/local_links.py: the links function behind a local function URL, a local Lambda API, the
key, table and alarm topic in moto): the identity provider revokes the credential's family, the
clock moves 19 hours, a rotator run finds the credential refused (it raises, by design), the
links function's reminder sends a link to the topic, the demo prints the link, opens it with its
own browser-free client, presses the button and approves the code through the emulator's
activation pages (INTERACTIVE=1: you open the link in a browser), the bootstrap's background poll
finishes and its outcome notice says "authorized". It prints a summary of metadata only, never a
secret (a link is not one; the one-click's code is never printed), and stops its servers on exit
and on Ctrl-C.

With KEEP=1 (or true, yes: any case) the stack stays up afterwards for `cmstoken-admin` (until
Ctrl-C): moto also holds what the command and the runbook read of a deployed stack (its
outputs, alarms, schedule, log groups, the refresh requests' rule and queues, the dead letter
queues; scripts/local_aws.py), a local Lambda endpoint runs the functions, the rotator runs on
its schedule and on the refresh requests' queue, the alarms follow the metrics, and the
environment that points the command at it (and puts the venv's commands on PATH) is written to
.venv/local-stack.env (LOCAL_STACK_ENV names another file). The clock is not moved then, so
that the stack's times are real ones, and the one-click part is left out, so that the stack
stays healthy. Either way it ends with what to try next.
"""

from __future__ import annotations

import _thread
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests

from local_aws import LocalAlarms, RefreshRequestPump, queue_names
from local_links import LocalLinks, local_links, started, title
from local_stack import (
    BOOTSTRAP,
    INTERVAL_MINUTES,
    REFRESH_SECRET,
    REGION,
    ROOT,
    ROTATOR,
    SERVICE_SECRET,
    STACK,
    TIMEOUTS,
    ApprovingInvoker,
    EmulatorTime,
    LambdaEndpoint,
    LocalSchedule,
    ReportingInvoker,
    configure_environment,
    create_secrets,
    describe_stack,
    load_handler,
)

HOURS_FORWARD = 19
LINKS = "local-links"


def approve_in_browser_pages(verification_uri_complete: str, shows: str | None = None) -> None:
    """Walk the activation pages as a person would: Continue, Confirm, Confirm. With ``shows``
    (the code the link's page said the identity provider's page must show), stop before
    confirming unless the confirmation page shows it."""
    with requests.Session() as browser:
        page = browser.get(verification_uri_complete, timeout=5)
        for step in range(3):
            form = re.search(r'<form[^>]*action="([^"]*)"', page.text)
            fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page.text))
            button = re.search(
                r'<button[^>]*name="([^"]+)"[^>]*value="(continue|confirm)"', page.text
            )
            if form is None or button is None:
                break
            if step == 1 and shows is not None and f"<strong>{shows}</strong>" not in page.text:
                raise RuntimeError("the identity provider's page shows another code: stopped")
            fields[button.group(1)] = button.group(2)
            page = browser.post(requests.compat.urljoin(page.url, form.group(1)), data=fields)
        if "all set" not in page.text:
            raise RuntimeError("the activation pages did not approve the code")


class CtrlC:
    """Ctrl-C stops the demo even when Python loses the first ``KeyboardInterrupt``: one raised
    while a finalizer (``__del__``) runs is printed as "Exception ignored" and dropped. From the
    first Ctrl-C until the demo begins to stop, the interrupt is raised again every second. Once
    it stops (``settle``), a further Ctrl-C ends the process at once."""

    def __init__(self) -> None:
        self.pressed = threading.Event()
        self.settled = threading.Event()

    def __enter__(self) -> CtrlC:
        signal.signal(signal.SIGINT, self._on_signal)
        return self

    def __exit__(self, *_: object) -> None:
        self.settle()

    def settle(self) -> None:
        """The demo is stopping: no more repeats, and Ctrl-C's default action again."""
        self.settled.set()
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    def _on_signal(self, *_: object) -> None:
        if self.settled.is_set():
            return  # a repeat that was on its way when the demo began to stop
        if not self.pressed.is_set():
            self.pressed.set()
            threading.Thread(target=self._repeat, name="ctrl-c", daemon=True).start()
        raise KeyboardInterrupt

    def _repeat(self) -> None:
        while not self.settled.wait(1.0):
            _thread.interrupt_main()


ON, OFF = ("1", "true", "yes"), ("", "0", "false", "no")


class UsageError(Exception):
    """A make variable the demo does not understand."""


def flag(name: str) -> bool:
    """A make variable that turns something on (KEEP=1, true or yes, any case) or leaves it off
    (unset, empty, 0, false or no); anything else is refused rather than ignored."""
    value = os.environ.get(name, "").strip()
    if value.lower() in ON:
        return True
    if value.lower() in OFF:
        return False
    raise UsageError(
        f"{name}={value!r} is not understood: use {name}=1 (or true, yes) or leave it out"
    )


def next_steps(keep: bool) -> str:
    """What to try after the demo: the kept stack's commands, and the documents to read."""
    stack = f"cmstoken-admin --stack {STACK}"
    lines = ["", "next:"]
    if not keep:
        lines.append("  make demo KEEP=1    # the same, and the local stack stays up; then, in")
        lines.append("                      # another terminal:")
    lines += [
        "  . .venv/local-stack.env",
        f"  {stack} status",
        f"  {stack} rotate",
        f"  {stack} logs",
        f"  {stack} bootstrap   # approve in a browser: the emulator's page",
        "  read: README.md (deploy to AWS), docs/operate.md (cmstoken-admin, the alarms),",
        "        docs/consume.md (read the token), docs/get-token.md (a token on your machine)",
    ]
    return "\n".join(lines)


def main() -> int:
    try:
        interactive = flag("INTERACTIVE")
        keep = flag("KEEP")
    except UsageError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: no request lines

    from cmsemu import Emulator, EmulatorConfig

    rows: list[tuple[str, str]] = []
    started = time.monotonic()
    emulator = Emulator(EmulatorConfig(poll_interval=1 if not interactive else 5)).start()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    ctrl_c = CtrlC()
    try:
        with ctrl_c:
            host, port = moto.get_host_and_port()
            # Kept: the functions' metrics reach moto's CloudWatch, in the stack's namespace.
            metrics = {"POWERTOOLS_METRICS_NAMESPACE": f"CmsToken/{STACK}"}
            metrics["POWERTOOLS_METRICS_DISABLED"] = "false"
            # It runs one invocation at a time (ReportingInvoker), as a rotator whose concurrency
            # is reserved at 1 (RotatorReservedConcurrency): its lease says so.
            metrics["ROTATOR_RESERVED_CONCURRENCY"] = "1"
            configure_environment(emulator, f"http://{host}:{port}", metrics if keep else None)
            alarms = None
            if keep:
                alarms = LocalAlarms(
                    STACK, metrics["POWERTOOLS_METRICS_NAMESPACE"], INTERVAL_MINUTES
                )
            clock = run_lifecycle(emulator, interactive, rows, alarms=alarms)
            if not keep:  # the kept stack stays as the lifecycle left it: healthy
                run_one_click(emulator, clock, interactive, rows)
            calls = ", ".join(f"{k} {v}" for k, v in sorted(emulator.counts.items()))
            rows.append(("upstream calls", calls))
            rows.append(("elapsed", f"{time.monotonic() - started:.1f} s"))
            width = max(len(name) for name, _ in rows)
            print(
                "\nsummary (metadata only: fingerprints are sha256 prefixes, no secret is printed)"
            )
            for name, value in rows:
                print(f"  {name:<{width}}  {value}")
            if alarms is not None:
                return keep_up(clock, f"http://{host}:{port}", ctrl_c, alarms)
            print(next_steps(keep=False), flush=True)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; servers stopped", file=sys.stderr)
        return 130
    finally:
        ctrl_c.settle()
        moto.stop()
        emulator.stop()
    return 0


def keep_up(clock: EmulatorTime, aws_endpoint: str, ctrl_c: CtrlC, alarms: LocalAlarms) -> int:
    """Serve the local stack to `cmstoken-admin` until Ctrl-C (or SIGTERM): the Lambda endpoint,
    the rotator's schedule, the refresh requests' queue, the alarms' evaluation, and the
    environment file that points the command at them."""
    import boto3

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    invoker = ReportingInvoker(_Announcing(ApprovingInvoker(clock, None)), alarms)
    endpoint = LambdaEndpoint(invoker).start()
    created = boto3.client("scheduler").get_schedule(Name=f"{STACK}-rotator")["CreationDate"]
    sqs = boto3.client("sqs")
    queues = {
        key: sqs.get_queue_url(QueueName=name)["QueueUrl"]
        for key, name in queue_names(STACK).items()
    }

    def dead_letter(record: Mapping[str, Any]) -> None:
        sqs.send_message(
            QueueUrl=queues["RotationDeadLetterQueueUrl"], MessageBody=json.dumps(record)
        )

    interval = INTERVAL_MINUTES * 60
    schedule = LocalSchedule(invoker, interval, created.timestamp(), dead_letter).start()
    pump = RefreshRequestPump(invoker, ROTATOR, queues["RefreshRequestQueueUrl"], REGION).start()
    alarms.start_updating()
    path = Path(os.environ.get("LOCAL_STACK_ENV") or ROOT / ".venv" / "local-stack.env")
    exports = {
        "AWS_ENDPOINT_URL": aws_endpoint,
        "AWS_ENDPOINT_URL_LAMBDA": endpoint.url,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
    }
    lines = [f"export {name}={value}" for name, value in exports.items()]
    lines.append("unset AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN")
    lines.append(f'export PATH="{Path(sys.executable).parent}:$PATH"')
    text = (
        "# Points the AWS SDKs (and cmstoken-admin, put on PATH) of the shell that sources this\n"
        "# at the local stack of `make demo KEEP=1`, until it stops.\n" + "\n".join(lines) + "\n"
    )
    path.write_text(text)
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    steps = next_steps(keep=True).replace(". .venv/local-stack.env", f". {shown}")
    print(
        f"\nThe local stack {STACK} stays up until Ctrl-C. In another terminal, here:\n{steps}\n\n"
        f"{shown} sets:\n" + "".join(f"  {line}\n" for line in lines) + "\n"
        f"The rotator runs every {INTERVAL_MINUTES} minutes, and on each refresh request; its"
        " runs are printed here.",
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        ctrl_c.settle()
        print("\ndemo: local stack stopped", file=sys.stderr)
    finally:
        ctrl_c.settle()
        alarms.stop()
        pump.stop()
        schedule.stop()
        endpoint.stop()
        if path.exists() and path.read_text() == text:  # not another demo's since
            path.unlink()
    return 0


class _Announcing:
    """Prints each rotator run of the kept stack (outcome and reason: metadata only)."""

    def __init__(self, invoker: Any) -> None:
        self.invoker = invoker

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        from cmstoken.cli.admin.errors import AdminError

        stamp = time.strftime("%H:%M:%S")
        try:
            result = self.invoker.invoke(function, payload)
        except AdminError as exc:
            if function == ROTATOR:
                print(f"{stamp} rotator {_trigger(payload)}: failed: {exc}", file=sys.stderr)
            raise
        if function == ROTATOR and isinstance(result, dict):
            outcome = f"{result.get('outcome')}: {result.get('reason')}"
            print(f"{stamp} rotator {_trigger(payload)}: {outcome}", file=sys.stderr)
        return result


def _trigger(payload: Mapping[str, Any]) -> str:
    if "Records" in payload:
        return "refresh request"
    return "forced" if payload.get("force") is True else "scheduled"


def run_lifecycle(
    emulator: Any,
    interactive: bool,
    rows: list[tuple[str, str]],
    *,
    alarms: LocalAlarms | None = None,
) -> EmulatorTime:
    """Bootstrap, rotate (skipped), jump the clock, rotate (rotated), use the token; kept
    (``alarms`` given): the stack described for cmstoken-admin, the metrics published and its
    alarms evaluated, no jump."""
    import boto3

    from cmstoken import runtime
    from cmstoken.cli.admin.bootstrap import bootstrap
    from cmstoken.cli.admin.stack import StackFunctions
    from cmstoken.core.redaction import fingerprint

    create_secrets(boto3.client("secretsmanager"))
    clock = EmulatorTime(emulator, real_waits=True)
    runtime.CLOCK = clock  # type: ignore[assignment]
    runtime.reset()
    functions = StackFunctions(bootstrap=BOOTSTRAP, rotator=ROTATOR)

    def approve(started: Mapping[str, Any]) -> None:
        address = started["verification_uri_complete"]
        threading.Timer(1.0, approve_in_browser_pages, args=(address,)).start()

    invoker: Any = ApprovingInvoker(clock, None if interactive else approve)
    keep = alarms is not None
    if alarms is not None:
        describe_stack(emulator, alarms)
        invoker = ReportingInvoker(invoker, alarms)
    if interactive:
        print("INTERACTIVE=1: open the address below in a browser and approve.", file=sys.stderr)
    else:
        print("Approving automatically through the emulator's activation pages.", file=sys.stderr)

    # What an operator sees: the QR code and the framed address, once, on a terminal or not.
    bootstrap(invoker, functions, free_trial=None, out=sys.stderr, now=clock.now, qr=True)
    first_refresh = _refresh_token()
    rows.append(("bootstrap", f"authorized; refresh credential {fingerprint(first_refresh)}"))
    rows.append(("rotator, scheduled", _scheduled(invoker)))
    if not keep:
        emulator.advance(HOURS_FORWARD * 3600)
        rows.append(("clock moved", f"+{HOURS_FORWARD} h"))
        rows.append(("rotator, scheduled again", _scheduled(invoker)))
        void = not emulator.refresh_token_valid(first_refresh)
        rows.append(
            (
                "refresh credential",
                f"{fingerprint(first_refresh)} -> {fingerprint(_refresh_token())}"
                f" (old one void: {'yes' if void else 'NO'})",
            )
        )
    _use_token(clock, rows)
    return clock


def _use_token(clock: EmulatorTime, rows: list[tuple[str, str]]) -> None:
    """As a workload would: the consumer helper reads the secret and authenticates a call."""
    from cmstoken.aws.documents import ServiceTokenDocument
    from cmstoken.consumer import ServiceTokenAuth, ServiceTokenProvider
    from cmstoken.core.redaction import fingerprint
    from cmstoken.upstream.models import parse_project_listing

    document = ServiceTokenDocument.from_json(_read(SERVICE_SECRET))
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


def run_one_click(
    emulator: Any, clock: EmulatorTime, interactive: bool, rows: list[tuple[str, str]]
) -> None:
    """The one-click path: the identity provider refuses the credential, a scheduled run
    finds it (reauthorization required), the links function's reminder sends a link, the
    demo's browser-free client opens it and presses its button (INTERACTIVE=1: you, in a
    browser), the code is approved at the identity provider, the background poll finishes
    and reports the outcome."""
    from cmstoken.core.redaction import fingerprint

    handlers = {name: load_handler(name.removeprefix("local-")) for name in (*TIMEOUTS, LINKS)}
    with local_links(
        handlers,
        stack_name=STACK,
        bootstrap=BOOTSTRAP,
        links=LINKS,
        timeouts={**TIMEOUTS, LINKS: 30.0},
        clock=clock.now,
    ) as links:
        refused = _refresh_token()
        emulator.revoke_family(refused)
        rows.append(("identity provider", "refresh family revoked (as an admin would)"))
        emulator.advance(HOURS_FORWARD * 3600)
        rows.append(("clock moved again", f"+{HOURS_FORWARD} h"))
        rows.append(("rotator, scheduled (refused)", _refused_run(links.invoker)))
        outcome = _one_click(links, interactive)
        rows.append(("one-click", outcome))
        rows.append(
            ("refresh credential again", f"{fingerprint(refused)} -> {_refreshed(refused)}")
        )
        rows.append(("rotator, scheduled after", _scheduled(links.invoker)))


def _one_click(links: LocalLinks, interactive: bool) -> str:
    """Remind, read the notice, print its link, open it and approve (or wait for you), wait
    for the background poll: what happened, in a few words."""
    reminded = links.invoker.invoke(LINKS, {"action": "remind"})["done"]
    (notice,) = links.notices()
    link = notice["link"]
    print(
        f"\nThe links function's reminder ({reminded}) sent this link to the alarm topic"
        f" ({notice['kind']}):\n\n  {link}\n\nhere at the local function URL:"
        f" {links.local(link)}",
        file=sys.stderr,
    )
    if interactive:
        print(
            "INTERACTIVE=1: open the local address in a browser, press its button, approve.",
            file=sys.stderr,
        )
        found = _outcome(links, wait=None)
    else:
        opened = title(links.open(link))
        pressed = links.press(link)
        code_page = started(pressed)
        print(f"opened: {opened!r}; pressed: {title(pressed)!r}", file=sys.stderr)
        approve_in_browser_pages(code_page.onward, shows=code_page.code)
        print("approved through the emulator's activation pages", file=sys.stderr)
        found = _outcome(links, wait=60)
    what = f"link sent ({notice['kind'].replace('credential-', 'credential ')}), opened, approved"
    return f"{what}: {found}"


def _outcome(links: LocalLinks, wait: float | None) -> str:
    """The outcome notice of the background poll (``wait``: seconds, ``None``: until it
    comes), its kind and identity."""
    deadline = None if wait is None else time.monotonic() + wait
    while not (found := links.notices(wait=5)):
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError("no outcome from the background poll")
    links.endpoint.drain()
    (notice,) = found
    identity = notice.get("identityFingerprint")
    print(f"outcome notice: {notice['kind']}", file=sys.stderr)
    return f"{notice['kind']}" + (f" (identity {identity})" if identity else "")


def _refused_run(invoker: Any) -> str:
    """A scheduled run that finds the credential refused: it raises, by design (its alarm
    goes off), and marks the credential; what it said and the status it left."""
    from cmstoken.aws.documents import RefreshSecret
    from cmstoken.cli.admin.errors import AdminError

    print(
        "\nA scheduled rotator run; the identity provider refuses the credential.", file=sys.stderr
    )
    try:
        said = _scheduled(invoker)
    except AdminError as exc:
        said = f"raised {type(exc.__cause__ or exc).__name__} (by design: its alarm goes off)"
    credential = RefreshSecret.from_json(_read(REFRESH_SECRET)).credential
    return f"{said}; credential {credential.status if credential else 'absent'}"


def _refreshed(old: str) -> str:
    from cmstoken.core.redaction import fingerprint

    new = _refresh_token()
    return f"{fingerprint(new)} (new authorization)" if new != old else "unchanged"


def _read(secret_id: str) -> str:
    import boto3

    client = boto3.client("secretsmanager")
    return str(client.get_secret_value(SecretId=secret_id)["SecretString"])


def _refresh_token() -> str:
    """The stored refresh token (for fingerprints only)."""
    from cmstoken.aws.documents import RefreshSecret

    credential = RefreshSecret.from_json(_read(REFRESH_SECRET)).credential
    if credential is None:
        raise RuntimeError("no credential is stored")
    return credential.refresh_token


def _scheduled(invoker: Any) -> str:
    result = invoker.invoke(ROTATOR, {})
    return f"{result['outcome']}: {result['reason']}"


def _iso(epoch: float) -> str:
    from cmstoken.core.clock import to_iso

    return to_iso(epoch)


if __name__ == "__main__":
    sys.exit(main())
