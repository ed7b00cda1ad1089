"""A stack on this machine, for the demo and the benchmark: the emulator and moto's Secrets
Manager server on 127.0.0.1, the functions' environment pointed at them, and the real handlers
run in-process through the operator command's invoker."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BOOTSTRAP, ROTATOR = "local-bootstrap", "local-rotator"
REFRESH_SECRET, SERVICE_SECRET = "local/refresh-credential", "local/service-token"
TIMEOUTS = {BOOTSTRAP: 900.0, ROTATOR: 120.0}


def load_handler(function: str) -> Callable[[Any, Any], Any]:
    """``functions/<function>/app.py``'s handler, loaded as its own module."""
    path = ROOT / "functions" / function / "app.py"
    spec = importlib.util.spec_from_file_location(f"{function}_app", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    handler: Callable[[Any, Any], Any] = module.lambda_handler
    return handler


class EmulatorTime:
    """The functions' clock: the emulator's time (real time plus its offset). Waiting either
    sleeps for real (a person is involved) or moves the emulator's clock (no one is)."""

    def __init__(self, emulator: Any, *, real_waits: bool) -> None:
        self.emulator = emulator
        self.real_waits = real_waits

    def now(self) -> float:
        return float(self.emulator.now())

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self.real_waits:
            import time

            time.sleep(seconds)
        else:
            self.emulator.advance(seconds)


@contextmanager
def local_servers(**emulator_config: Any) -> Iterator[tuple[Any, str]]:
    """The emulator and moto's server on 127.0.0.1 (ephemeral ports), stopped on the way out
    (Ctrl-C included)."""
    from moto.server import ThreadedMotoServer

    from cmsemu import Emulator, EmulatorConfig

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: no request lines
    emulator = Emulator(EmulatorConfig(**emulator_config)).start()
    moto: Any = None
    try:
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        yield emulator, f"http://{host}:{port}"
    finally:
        if moto is not None:
            moto.stop()
        emulator.stop()


def configure_environment(
    emulator: Any, aws_endpoint: str, extra: Mapping[str, str] | None = None
) -> None:
    """What the template sets for the functions, pointed at the local servers, with dummy
    credentials (nothing can reach an AWS account) and Powertools kept quiet."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_PROFILE"):
        os.environ.pop(name, None)
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "SERVICE_BASE_URL": emulator.base_url,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
            "POWERTOOLS_SERVICE_NAME": "cmstoken",
            "POWERTOOLS_METRICS_NAMESPACE": "CmsToken/local",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            **(extra or {}),
        }
    )


def create_secrets(client: Any) -> None:
    """The stack's two secrets, empty, as the template creates them."""
    client.create_secret(Name=REFRESH_SECRET)
    client.create_secret(Name=SERVICE_SECRET)


class ApprovingInvoker:
    """The operator command's in-process invoker for the local functions; when ``approve`` is
    given, it is called with a new pending authorization (the start result)."""

    def __init__(
        self, clock: EmulatorTime, approve: Callable[[Mapping[str, Any]], None] | None
    ) -> None:
        from cmstoken.admin import LocalInvoker

        handlers = {BOOTSTRAP: load_handler("bootstrap"), ROTATOR: load_handler("rotator")}
        self.local = LocalInvoker(handlers, timeout_seconds=TIMEOUTS, clock=clock.now)
        self.approve = approve

    def invoke(self, function: str, payload: Mapping[str, Any]) -> Any:
        """Invoke, then approve a freshly started authorization if asked to."""
        result = self.local.invoke(function, payload)
        started = payload.get("action") == "start" and result.get("status") == "pending"
        if started and self.approve is not None:
            self.approve(result)
        return result
