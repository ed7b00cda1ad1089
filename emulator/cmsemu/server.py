"""The HTTP server: routing, body limits, faults, rate limits and the request log."""

import contextlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from cmsemu import activation, control, idp, service
from cmsemu.faults import Fault, garble, interruption, rewrite
from cmsemu.records import RequestRecord, fingerprint
from cmsemu.request import Request
from cmsemu.responses import OAuthError, Response, Style, oauth_error, styled_error
from cmsemu.state import State

MAX_BODY = 64 * 1024
MAX_DRAIN = 1024 * 1024
TOKEN_PATH = "/idp/oauth/token"
Action = Callable[[State, Request], Response]


@dataclass(frozen=True)
class Route:
    """An endpoint: its name, methods, error style, main response field and handler."""

    endpoint: str
    methods: tuple[str, ...]
    style: Style
    main_field: str | None
    action: Action


ROUTES = {
    "/api/v3/auth/provider": Route("provider", ("GET",), "service", "clientId", service.provider),
    "/idp/oauth/device/code": Route(
        "device_code", ("POST",), "oauth", "device_code", idp.device_code
    ),
    TOKEN_PATH: Route("token", ("POST",), "oauth", "access_token", idp.token),
    "/api/v3/auth/token": Route("exchange", ("POST",), "service", "token", service.exchange),
    "/api/v3/projects": Route("projects", ("GET",), "service", "data", service.projects),
    "/idp/activate": Route("activate", ("GET", "POST"), "html", None, activation.handle),
}
CONTROL = Route("control", ("GET", "POST", "DELETE"), "service", None, control.handle)
GRANT_ENDPOINTS = {idp.DEVICE_GRANT: "device_token", idp.REFRESH_GRANT: "refresh"}


def _route(path: str) -> Route | None:
    return CONTROL if path.startswith(control.PREFIX) else ROUTES.get(path)


def _identify(route: Route | None, request: Request) -> tuple[str, str | None, str | None]:
    """Return the endpoint name, grant type and presented credential of a request."""
    if route is None:
        return "unknown", None, None
    if request.path == TOKEN_PATH and request.method == "POST":
        form = request.form()
        grant_type = form.get("grant_type")
        credential = form.get("device_code") or form.get("refresh_token")
        return GRANT_ENDPOINTS.get(grant_type or "", "token"), grant_type, credential
    if route.endpoint == "exchange":
        payload = request.json()
        token = payload.get("token") if isinstance(payload, dict) else None
        return "exchange", None, token if isinstance(token, str) else None
    if route.endpoint == "projects":
        return "projects", None, request.bearer()
    return route.endpoint, None, None


def _run(route: Route, state: State, request: Request) -> Response:
    try:
        return route.action(state, request)
    except OAuthError as error:
        return error.response()


class EmulatorServer(ThreadingHTTPServer):
    """A threading HTTP server that carries the emulator state."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: State) -> None:
        self.state = state
        self.stopping = threading.Event()
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    """Routes each request, applying injected faults, rate limits and the request log."""

    server: EmulatorServer
    timeout = 10
    server_version = "cmsemu"

    def do_GET(self) -> None:
        """Handle GET."""
        self._dispatch()

    def do_POST(self) -> None:
        """Handle POST."""
        self._dispatch()

    def do_DELETE(self) -> None:
        """Handle DELETE."""
        self._dispatch()

    def do_PUT(self) -> None:
        """Handle PUT (always 405 or 404)."""
        self._dispatch()

    def do_PATCH(self) -> None:
        """Handle PATCH (always 405 or 404)."""
        self._dispatch()

    def log_message(self, format: str, *args: object) -> None:
        """Log to stderr only when the config asks for it."""
        if self.server.state.config.verbose:
            sys.stderr.write(f"cmsemu: {self.address_string()} {format % args}\n")

    def _dispatch(self) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        route = _route(url.path)
        body, too_large = self._read_body()
        request = Request(
            self.command, url.path, url.query, self.headers, body, self.client_address[0]
        )
        endpoint, grant_type, credential = _identify(route, request)
        with state.lock:
            at = state.now()
            state.counts[endpoint] += 1
        if too_large:
            response: Response | None = self._error(route, 413, "request body too large")
        else:
            response = self._respond(route, request, endpoint, credential)
        record = RequestRecord(
            endpoint=endpoint,
            method=self.command,
            path=url.path,
            status=response.status if response else None,
            at=at,
            grant_type=grant_type,
            error=response.error if response else None,
            credential=fingerprint(credential),
        )
        with state.lock:  # logged before answering, so a client that got its answer sees it
            state.records.append(record)
        if response is not None:
            self._write(response)

    def _read_body(self) -> tuple[bytes, bool]:
        """Return the body and whether it exceeded the cap (then drained, not kept)."""
        try:
            length = max(0, int(self.headers.get("Content-Length") or 0))
        except ValueError:
            length = 0
        if length <= MAX_BODY:
            return self.rfile.read(length), False
        self.rfile.read(min(length, MAX_DRAIN))
        return b"", True

    def _error(self, route: Route | None, status: int, description: str) -> Response:
        style: Style = route.style if route else "service"
        service_style = self.server.state.config.service_error_style
        return styled_error(style, status, "invalid_request", description, service_style)

    def _respond(
        self, route: Route | None, request: Request, endpoint: str, credential: str | None
    ) -> Response | None:
        """The response to send, or None to drop the connection."""
        if route is None:
            return self._error(None, 404, "route not found")
        if request.method not in route.methods:
            response = self._error(route, 405, "method not allowed")
            response.headers["Allow"] = ", ".join(route.methods)
            return response
        state = self.server.state
        with state.lock:
            fault = state.faults.take(endpoint)
            now = state.now()
        if fault is not None and fault.kind == "delay":
            if fault.acts:  # a slow answer: the request is carried out, its answer comes late
                response = self._act(route, request, credential)
                self.server.stopping.wait(float(fault.params["seconds"]))
                return response
            self.server.stopping.wait(float(fault.params["seconds"]))
            fault = None
        if fault is not None and fault.kind in ("status", "rate_limit"):
            if fault.acts:  # a gateway's 502/504 after the provider behind it acted
                self._act(route, request, credential)
            return interruption(fault, route.style, now, state.config.service_error_style)
        if fault is not None and not fault.acts:
            return garble(fault, route.main_field, None)
        response = self._act(route, request, credential)
        return self._shape(fault, route, response)

    def _act(self, route: Route, request: Request, credential: str | None) -> Response:
        """Apply the token endpoint's rate limit, then run the endpoint's handler."""
        state = self.server.state
        config = state.config
        with state.lock:
            allowed, headers = True, dict[str, str]()
            if config.rate_limit is not None and request.path == TOKEN_PATH:
                allowed, headers = state.limiter.hit(
                    (request.client_ip, fingerprint(credential) or ""),
                    state.now(),
                    config.rate_limit,
                    config.rate_limit_window,
                    config.rate_limit_retry_after,
                )
            if allowed:
                response = _run(route, state, request)
            else:
                response = oauth_error(429, "too_many_requests", "Global limit has been reached")
        response.headers.update(headers)
        return response

    @staticmethod
    def _shape(fault: Fault | None, route: Route, response: Response) -> Response | None:
        """Apply an acting fault (drop, rewrite, trickle, or malformed with acted=True) to the
        real response."""
        if fault is None:
            return response
        if fault.kind == "drop":
            return None
        if fault.kind == "rewrite":
            return rewrite(fault, response)
        if fault.kind == "trickle":
            interval = float(fault.params.get("interval", 0.05))
            response.trickle = (interval, int(fault.params.get("chunk", 1)))
            return response
        return garble(fault, route.main_field, response)

    def _write(self, response: Response) -> None:
        with contextlib.suppress(OSError):  # the client went away
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.send_header("Cache-Control", "no-store")
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if response.trickle is None:
                self.wfile.write(response.body)
                return
            interval, chunk = response.trickle
            for start in range(0, len(response.body), chunk):
                self.wfile.write(response.body[start : start + chunk])
                self.wfile.flush()
                if self.server.stopping.wait(interval):
                    return
