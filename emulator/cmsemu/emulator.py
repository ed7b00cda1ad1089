"""Emulator: the public face of the emulated identity provider and service."""

import threading
from collections import Counter
from types import TracebackType
from typing import Any, Self

from cmsemu.config import EmulatorConfig
from cmsemu.records import RequestRecord
from cmsemu.server import EmulatorServer
from cmsemu.state import SERVICE, State
from cmsemu.urls import Urls

POLL_INTERVAL = 0.02


class Emulator:
    """A real HTTP server on 127.0.0.1 plus controls for tests (clock, approvals, faults)."""

    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self._state = State(config or EmulatorConfig())
        self._server: EmulatorServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def config(self) -> EmulatorConfig:
        """The live configuration; change its fields (or replace it) at any time."""
        return self._state.config

    @config.setter
    def config(self, config: EmulatorConfig) -> None:
        with self._state.lock:
            self._state.config = config

    def start(self, host: str = "127.0.0.1", port: int = 0) -> Self:
        """Bind (an ephemeral port by default) and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError("the emulator is already running")
        server = EmulatorServer((host, port), self._state)
        bound_host, bound_port = server.server_address[:2]
        self._state.urls = Urls(f"http://{bound_host!s}:{bound_port}")
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL},
            name="cmsemu",
            daemon=True,
        )
        self._server = server
        self._thread.start()
        return self

    def stop(self) -> None:
        """Shut the server down (interrupting delay faults) and join its thread."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        if self._server is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _urls(self) -> Urls:
        if self._server is None:
            raise RuntimeError("the emulator is not running")
        return self._state.urls

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:PORT"""
        return self._urls().base_url

    @property
    def issuer_url(self) -> str:
        """The issuerUri, with its trailing slash."""
        return self._urls().issuer_url

    @property
    def api_url(self) -> str:
        """The audience, base_url + "/api"."""
        return self._urls().api_url

    def now(self) -> float:
        """The emulator clock (epoch seconds)."""
        return self._state.now()

    def advance(self, seconds: float) -> None:
        """Move the emulator clock forward."""
        with self._state.lock:
            self._state.clock.advance(seconds)

    def approve(self, user_code: str, subject: str | None = None) -> None:
        """Approve a user code as if the user completed the pages, signed in as `subject`
        (default: the provider's one user, `self.subject`); KeyError if unknown."""
        with self._state.lock:
            self._state.devices.set_status(user_code, "approved", subject)

    @property
    def subject(self) -> str:
        """The `sub` of the provider's default user (named by its tokens)."""
        return self._state.subject

    def deny(self, user_code: str) -> None:
        """Deny a user code as if the user cancelled; KeyError if unknown."""
        with self._state.lock:
            self._state.devices.set_status(user_code, "denied")

    def inject(self, endpoint: str, fault: str, times: int = 1, **params: Any) -> None:
        """Queue `fault` for the next `times` requests to `endpoint`."""
        with self._state.lock:
            self._state.faults.add(endpoint, fault, times, params)

    def clear_faults(self) -> None:
        """Forget every queued fault."""
        with self._state.lock:
            self._state.faults.clear()

    @property
    def counts(self) -> dict[str, int]:
        """Requests received per endpoint name (a Counter copy: a missing name counts 0)."""
        with self._state.lock:
            return Counter(self._state.counts)

    @property
    def requests(self) -> list[RequestRecord]:
        """The request log (a copy)."""
        with self._state.lock:
            return list(self._state.records)

    def reset(self) -> None:
        """Forget all codes, tokens, families, faults, counts and the clock offset."""
        with self._state.lock:
            self._state.reset()

    def issue_tokens(
        self, client_id: str | None = None, scope: str | None = None
    ) -> dict[str, Any]:
        """Authorize a new refresh family now, as if a device flow completed; return tokens."""
        with self._state.lock:
            config = self._state.config
            return self._state.start_family(client_id or config.client_id, scope or config.scope)

    def family_revoked(self, refresh_token: str) -> bool:
        """True if the token's family is revoked; KeyError if it was never issued."""
        with self._state.lock:
            return self._state.families.get(refresh_token).family.revoked

    def revoke_family(self, refresh_token: str) -> None:
        """Revoke the token's family as an admin would; KeyError if it was never issued."""
        with self._state.lock:
            self._state.families.get(refresh_token).family.revoked = True

    def refresh_token_valid(self, refresh_token: str) -> bool:
        """True if the token is unused, its family alive and unexpired."""
        with self._state.lock:
            state = self._state
            return state.families.usable(refresh_token, state.now(), state.config)

    def service_token_valid(self, token: str) -> bool:
        """True if the project listing would accept this service token now."""
        with self._state.lock:
            return self._state.valid_claims(token, SERVICE) is not None
