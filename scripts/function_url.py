"""A Lambda handler served on 127.0.0.1 the way a Lambda function URL (AuthType NONE, invoke mode
BUFFERED) serves it: each request becomes a payload format 2.0 event, the handler's answer
becomes the HTTP response. A context manager: `with FunctionUrl(handler) as url: url.base_url`.

Sources, checked 2026-11-24:
- [urls] "Invoking Lambda function URLs", Request and response payloads,
  https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads (text as in
  the guide's source, github.com/awsdocs/aws-lambda-developer-guide doc_source/urls-invocation.md
  at a83f69bc, 2022-11-14). Its examples: tests/data/function-url/ (README there).
- [2.0] https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html
  (the schema [urls] follows): header names lower case; repeated headers and query parameters
  joined with commas; every cookie header goes to `cookies`; each response cookie becomes a
  set-cookie header. A result without statusCode: 200, application/json, the result as body.
- [limit] https://docs.aws.amazon.com/lambda/latest/dg/config-rs-invoke-furls.html: BUFFERED
  payloads at most 6 MB; Invoke's RequestEntityTooLargeException says "Request must be smaller
  than 6291456 bytes". A function URL answers such a request 413 (seen in
  github.com/ducktors/turborepo-remote-cache/issues/677). The limit is on the event, so a
  base64 body counts at 4/3 of its size.
Undocumented, as observed:
- AuthType NONE: requestContext.accountId "anonymous", no authorizer or authentication, the
  host header is the domainName, x-forwarded-for/-port/-proto present (an event captured by
  Powertools: aws-powertools/powertools-lambda-python tests/events/lambdaFunctionUrlEvent.json);
  pathParameters and stageVariables left out ([urls]: "null or excludes this from the JSON").
- base64: [urls] says only "If the content type of the request is binary". application/json
  arrives as text (localstack/localstack#9842), application/x-www-form-urlencoded base64-encoded
  (LeanerCloud/CUDly#1483). Rule here, LocalStack's: text when the content type contains "text",
  "json" or "xml" and the body is UTF-8, otherwise base64. So a form POST arrives base64-encoded.
- A function error answers 502 "Internal Server Error" (LocalStack's router;
  awsdocs/aws-lambda-developer-guide#430); the content type is not known (text/plain here).

Host and Origin: in AWS the browser's origin is https://<domain> and the host header the domain.
Here the browser talks to http://127.0.0.1:<port>, so with rewrite_origin (the default) the
adapter maps that local origin to the reported one both ways: host becomes the domain, an Origin
equal to base_url becomes `origin`, a Referer under base_url moves under `origin`, and a Location
under `origin` in the answer moves back under base_url. Any other Origin passes unchanged, so a
forged request from another local server (another port: same-site, cross-origin; a page on
"localhost": cross-site) still shows a foreign Origin. Sec-Fetch-Site is the browser's own and
matches AWS for pages served here. rewrite_origin=False shows the handler the raw local values.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

Handler = Callable[[dict[str, Any], Any], Any]
Answer = tuple[int, list[tuple[str, str]], bytes]
MAX_PAYLOAD = 6 * 1024 * 1024  # [limit]: 6291456 bytes
TEXT_MARKERS = ("text", "json", "xml")
DEFAULT_URL_ID = "x7k2m9q4w1e8r5t3y6u0i2o4p7a9s1d3"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DROPPED = frozenset({"connection", "keep-alive", "cookie"})
LOG = logging.getLogger(__name__)


class MalformedAnswerError(ValueError):
    """The handler answered something a function URL cannot turn into a response (502)."""


def request_time(epoch: float) -> str:
    """requestContext.time: "12/Mar/2020:19:03:58 +0000" (UTC, English month names)."""
    t = time.gmtime(epoch)
    day = f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}"
    return f"{day}:{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"


def encode_body(body: bytes, content_type: str) -> tuple[str, bool]:
    """The event's body and isBase64Encoded (the rule in the module docstring)."""
    if any(marker in content_type.lower() for marker in TEXT_MARKERS):
        try:
            return body.decode("utf-8"), False
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), True


def to_event(
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    domain: str,
    source_ip: str,
    request_id: str,
    protocol: str = "HTTP/1.1",
    now: float | None = None,
) -> dict[str, Any]:
    """The payload format 2.0 event a function URL on `domain` sends for this request
    (`target`: the request line's path and query)."""
    now = time.time() if now is None else now
    path, _, query = target.partition("?")
    merged: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies += [part.strip() for part in value.split(";") if part.strip()]
        if key not in _DROPPED:
            merged[key] = f"{merged[key]},{value}" if key in merged else value
    merged |= {
        "x-forwarded-for": source_ip,
        "x-forwarded-port": "443",
        "x-forwarded-proto": "https",
    }
    event: dict[str, Any] = {"version": "2.0", "routeKey": "$default"}
    event |= {"rawPath": path, "rawQueryString": query}
    if cookies:
        event["cookies"] = cookies
    event["headers"] = merged
    if query:
        params: dict[str, str] = {}
        for key, value in parse_qsl(query, keep_blank_values=True):
            params[key] = f"{params[key]},{value}" if key in params else value
        event["queryStringParameters"] = params
    prefix = domain.split(".", 1)[0]
    event["requestContext"] = {
        "accountId": "anonymous",
        "apiId": prefix,
        "domainName": domain,
        "domainPrefix": prefix,
        "http": {
            "method": method,
            "path": path,
            "protocol": protocol,
            "sourceIp": source_ip,
            "userAgent": merged.get("user-agent", ""),
        },
        "requestId": request_id,
        "routeKey": "$default",
        "stage": "$default",
        "time": request_time(now),
        "timeEpoch": int(now * 1000),
    }
    if body:
        event["body"], event["isBase64Encoded"] = encode_body(body, merged.get("content-type", ""))
    else:
        event["isBase64Encoded"] = False
    return event


def to_answer(result: Any) -> Answer:
    """The HTTP status, headers and body a function URL makes of the handler's result."""
    if not (isinstance(result, dict) and "statusCode" in result):
        return 200, [("Content-Type", "application/json")], json.dumps(result).encode()
    status, body = result["statusCode"], result.get("body") or ""
    headers, cookies = result.get("headers") or {}, result.get("cookies") or []
    if type(status) is not int or not 100 <= status <= 599:
        raise MalformedAnswerError(f"statusCode {status!r}")
    if not (isinstance(headers, dict) and isinstance(cookies, list) and isinstance(body, str)):
        raise MalformedAnswerError("headers must be an object, cookies a list, body a string")
    fields = [(str(k), str(v)) for k, v in headers.items()] + [
        ("Set-Cookie", str(c)) for c in cookies
    ]
    if any("\r" in text or "\n" in text for field in fields for text in field):
        raise MalformedAnswerError("a line break in a header")
    if result.get("isBase64Encoded") is True:
        try:
            return status, fields, base64.b64decode(body, validate=True)
        except binascii.Error as exc:
            raise MalformedAnswerError("body is not base64") from exc
    return status, fields, body.encode()


class FunctionUrl:
    """`handler` behind a function URL on 127.0.0.1 (ephemeral port) while the context lasts.
    `events` holds every event the handler was given, `errors` every exception it raised."""

    def __init__(
        self,
        handler: Handler,
        *,
        url_id: str = DEFAULT_URL_ID,
        region: str = "us-east-1",
        domain: str | None = None,
        rewrite_origin: bool = True,
        context_factory: Callable[[str], Any] | None = None,
    ) -> None:
        self.handler = handler
        self.domain = domain or f"{url_id}.lambda-url.{region}.on.aws"
        self.origin = f"https://{self.domain}"
        self.rewrite_origin = rewrite_origin
        self.context_factory = context_factory or (lambda rid: SimpleNamespace(aws_request_id=rid))
        self.events: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """http://127.0.0.1:<port>, where the tests (and the browser) send requests."""
        assert self._server is not None, "not started: use `with FunctionUrl(...)`"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FunctionUrl:
        self._server = _Server(("127.0.0.1", 0), _Request, self)
        serve = functools.partial(self._server.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _reported(self, name: str, value: str) -> str:
        """A request header as the handler would see it in AWS (module docstring)."""
        key, local = name.lower(), self.base_url
        if key == "host":
            return self.domain
        if key == "origin" and value == local:
            return self.origin
        if key == "referer" and (value == local or value.startswith(local + "/")):
            return self.origin + value[len(local) :]
        return value

    def invoke(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        source_ip: str = "127.0.0.1",
        protocol: str = "HTTP/1.1",
    ) -> Answer:
        """One request through the mapping, the size limit and the handler."""
        request_id = str(uuid.uuid4())
        if self.rewrite_origin:
            headers = [(name, self._reported(name, value)) for name, value in headers]
        event = to_event(
            method, target, headers, body, self.domain, source_ip, request_id, protocol
        )
        if len(json.dumps(event).encode()) > MAX_PAYLOAD:
            return _plain(413, "Request Entity Too Large", request_id)
        self.events.append(event)
        try:
            status, fields, data = to_answer(self.handler(event, self.context_factory(request_id)))
        except Exception as exc:  # the function's error, or an answer Lambda cannot map
            self.errors.append(exc)
            LOG.error("function URL handler failed", exc_info=exc)
            return _plain(502, "Internal Server Error", request_id)
        if self.rewrite_origin:
            fields = [(k, self._local(v) if k.lower() == "location" else v) for k, v in fields]
        return status, [*fields, ("x-amzn-RequestId", request_id)], data

    def _local(self, location: str) -> str:
        if location == self.origin or location.startswith(self.origin + "/"):
            return self.base_url + location[len(self.origin) :]
        return location


def _plain(status: int, text: str, request_id: str | None = None) -> Answer:
    fields = [("Content-Type", "text/plain"), ("x-amzn-RequestId", request_id or str(uuid.uuid4()))]
    return status, fields, text.encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], request: type[_Request], url: FunctionUrl):
        super().__init__(address, request)
        self.url = url


class _Request(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def serve(self) -> None:
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit() or "Transfer-Encoding" in self.headers:  # browsers send a length
            self.close_connection = True
            return self._send(_plain(411, "Length Required"))
        if int(length) > MAX_PAYLOAD:  # the event would be bigger still: refuse before reading
            self.close_connection = True
            return self._send(_plain(413, "Request Entity Too Large"))
        body, headers = self.rfile.read(int(length)), list(self.headers.items())
        ip, version = self.client_address[0], self.request_version
        return self._send(
            self.server.url.invoke(self.command, self.path, headers, body, ip, version)
        )

    def _send(self, answer: Answer) -> None:
        status, fields, data = answer
        self.send_response(status)
        for name, value in fields:
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read `events` and `errors`, not an access log."""


for _method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):  # [urls]'s methods
    setattr(_Request, f"do_{_method}", _Request.serve)
