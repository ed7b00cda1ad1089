"""The function URL adapter (scripts/function_url.py) over real HTTP: requests become the payload
format 2.0 events AWS documents, the handler's answers the responses it documents. Each test
has a control that shows the check can fail."""

from __future__ import annotations

import base64
import http.client
import json
import re
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from function_url import MAX_PAYLOAD, FunctionUrl, request_time

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "function-url"
MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
TIME = re.compile(rf"^\d{{2}}/({MONTHS})/\d{{4}}:\d{{2}}:\d{{2}}:\d{{2}} \+0000$")
Reply = tuple[int, http.client.HTTPMessage, bytes]


def send(
    url: FunctionUrl,
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes | None = None,
) -> Reply:
    """One request as written (repeated headers kept), its status, headers and body."""
    parts = urlsplit(url.base_url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, response.msg, response.read()
    finally:
        conn.close()


def answering(result: Any) -> Any:
    return lambda event, context: result


# -- requests -> events ------------------------------------------------------------------------


def test_get_with_query_and_cookies() -> None:
    contexts: list[Any] = []

    def handler(event: dict[str, Any], context: Any) -> Any:
        contexts.append(context)
        return {"statusCode": 204}

    target = "/l/v1.abc.def?b=2&a=1&b=3&empty=&sp=a%20b"
    headers = [("Cookie", "s=1; t=2"), ("User-Agent", "probe/1")]
    with FunctionUrl(handler, url_id="abc123", region="eu-west-1") as url:
        before = time.time()
        status, reply, _ = send(url, "GET", target, headers)
        after = time.time()
        send(url, "GET", "/")  # control: no query, no cookies

    assert status == 204
    event, plain = url.events
    assert event["rawPath"] == "/l/v1.abc.def"
    assert event["rawQueryString"] == "b=2&a=1&b=3&empty=&sp=a%20b"
    assert event["queryStringParameters"] == {"b": "2,3", "a": "1", "empty": "", "sp": "a b"}
    assert event["cookies"] == ["s=1", "t=2"]
    assert "cookie" not in event["headers"]
    assert event["headers"]["host"] == "abc123.lambda-url.eu-west-1.on.aws"
    assert event["headers"]["user-agent"] == "probe/1"
    assert event["headers"]["x-forwarded-proto"] == "https"
    assert event["headers"]["x-forwarded-port"] == "443"
    assert event["headers"]["x-forwarded-for"] == "127.0.0.1"
    context = event["requestContext"]
    variable = {key: context.pop(key) for key in ("requestId", "time", "timeEpoch")}
    assert context == {
        "accountId": "anonymous",
        "apiId": "abc123",
        "domainName": "abc123.lambda-url.eu-west-1.on.aws",
        "domainPrefix": "abc123",
        "http": {
            "method": "GET",
            "path": "/l/v1.abc.def",
            "protocol": "HTTP/1.1",
            "sourceIp": "127.0.0.1",
            "userAgent": "probe/1",
        },
        "routeKey": "$default",
        "stage": "$default",
    }
    assert variable["requestId"] == contexts[0].aws_request_id == reply["x-amzn-RequestId"]
    assert isinstance(variable["timeEpoch"], int)
    assert int(before * 1000) <= variable["timeEpoch"] <= int(after * 1000) + 1
    assert TIME.match(variable["time"])
    assert variable["time"] == request_time(variable["timeEpoch"] / 1000)
    assert "body" not in event
    assert event["isBase64Encoded"] is False

    assert plain["rawPath"] == "/"
    assert plain["rawQueryString"] == ""
    assert "queryStringParameters" not in plain
    assert "cookies" not in plain
    assert plain["requestContext"]["requestId"] != variable["requestId"]


@pytest.mark.parametrize(
    ("content_type", "body", "as_text"),
    [
        ("application/x-www-form-urlencoded", b"proof=abc&x=1", False),
        ("multipart/form-data; boundary=x", b"--x\r\n\r\nv\r\n--x--\r\n", False),
        ("application/octet-stream", bytes(range(256)), False),
        (None, b"no content type", False),
        ("text/plain", b"\xff\xfe not UTF-8", False),
        ("application/json", b'{"a": 1}', True),
        ("text/plain; charset=utf-8", "h\u00e9llo".encode(), True),
        ("application/xml", b"<a/>", True),
    ],
)
def test_post_body_text_or_base64(content_type: str | None, body: bytes, as_text: bool) -> None:
    headers = [("Content-Type", content_type)] if content_type else []
    with FunctionUrl(answering({"statusCode": 200})) as url:
        status, _, _ = send(url, "POST", "/l/x", headers, body)

    assert status == 200
    (event,) = url.events
    assert event["requestContext"]["http"]["method"] == "POST"
    assert event["headers"]["content-length"] == str(len(body))
    assert event["isBase64Encoded"] is (not as_text)
    sent = event["body"].encode() if as_text else base64.b64decode(event["body"], validate=True)
    assert sent == body
    # control: base64 and text are told apart (a form body does not arrive as the text sent)
    assert (event["body"] == body.decode("utf-8", "replace")) is as_text


def test_repeated_headers_are_joined_with_commas() -> None:
    headers = [
        ("X-Multi", "a"),
        ("x-multi", "b"),
        ("X-MULTI", "c"),
        ("Cookie", "a=1"),
        ("Cookie", "b=2; c=3"),
        ("X-Custom-Name", "single"),
    ]
    with FunctionUrl(answering(None)) as url:
        send(url, "GET", "/", headers)

    (event,) = url.events
    assert event["headers"]["x-multi"] == "a,b,c"
    assert event["cookies"] == ["a=1", "b=2", "c=3"]
    assert event["headers"]["x-custom-name"] == "single"  # control: one header, nothing joined
    assert all(name == name.lower() for name in event["headers"])


def test_head_runs_the_handler_and_sends_no_body() -> None:
    page = {"statusCode": 200, "headers": {"Content-Type": "text/html"}, "body": "<p>page</p>"}
    with FunctionUrl(answering(page)) as url:
        head, get = (raw_exchange(url, method) for method in ("HEAD", "GET"))

    assert [event["requestContext"]["http"]["method"] for event in url.events] == ["HEAD", "GET"]
    status_line, _, rest = head.partition(b"\r\n")
    fields, _, after = rest.partition(b"\r\n\r\n")
    assert status_line == b"HTTP/1.1 200 OK"
    assert b"Content-Length: 11" in fields.split(b"\r\n")
    assert after == b""  # nothing after the head (read until the adapter closed)
    assert get.endswith(b"\r\n\r\n<p>page</p>")  # control: the same answer with its body


def raw_exchange(url: FunctionUrl, method: str) -> bytes:
    """Every byte the adapter sends for one request, read until it closes the connection."""
    parts = urlsplit(url.base_url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=10) as sock:
        sock.sendall(f"{method} /l/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


# -- the documented example --------------------------------------------------------------------

# The example is an AWS_IAM URL's: a NONE URL's event has no authentication or authorizer, and
# pathParameters and stageVariables may be left out ("null or excludes this from the JSON").
LEFT_OUT = {
    "pathParameters",
    "stageVariables",
    "requestContext.authentication",
    "requestContext.authorizer",
}
# Compared by type only: the account ("anonymous" for NONE, the example's is IAM's), the URL id
# (the example's apiId "<urlid>" differs from its own domainPrefix "<url-id>"), the client's
# address, and what each request makes new.
BY_TYPE = {
    "requestContext.accountId",
    "requestContext.apiId",
    "requestContext.http.sourceIp",
    "requestContext.requestId",
    "requestContext.time",
    "requestContext.timeEpoch",
}


def differences(doc: Any, ours: Any, path: str = "") -> list[str]:
    """Where `ours` departs from the documented event: keys, types, and deterministic values.
    `headers` may hold more than the example's (host, content-length, x-forwarded-*)."""
    if type(doc) is not type(ours):
        return [f"{path}: {type(ours).__name__}, documented {type(doc).__name__}"]
    if isinstance(doc, dict):
        name = (path + ".") if path else ""
        found = [
            f"{name}{k}: missing" for k in doc.keys() - ours.keys() if name + k not in LEFT_OUT
        ]
        if path != "headers":
            found += [f"{name}{k}: not documented" for k in ours.keys() - doc.keys()]
        for key in sorted(doc.keys() & ours.keys()):
            found += differences(doc[key], ours[key], name + key)
        return found
    if path in BY_TYPE or doc == ours:
        return []
    return [f"{path}: {ours!r}, documented {doc!r}"]


def test_the_documented_request_example() -> None:
    example = json.loads((DATA / "request-example.json").read_text())
    headers = [
        ("header1", "value1"),
        ("header2", "value1"),
        ("header2", "value2"),
        ("Cookie", "cookie1; cookie2"),
        ("User-Agent", "agent"),
        ("Content-Type", "text/plain"),
    ]
    target = example["rawPath"] + "?" + example["rawQueryString"]
    domain = example["requestContext"]["domainName"]
    with FunctionUrl(answering(None), domain=domain) as url:
        send(url, "POST", target, headers, example["body"].encode())

    (event,) = url.events
    assert differences(example, event) == []
    assert TIME.match(example["requestContext"]["time"])  # the format checked above is AWS's
    assert TIME.match(event["requestContext"]["time"])


def test_differences_finds_departures() -> None:
    example = json.loads((DATA / "request-example.json").read_text())
    ours = json.loads(json.dumps(example))
    for key in LEFT_OUT - {"pathParameters", "stageVariables"}:
        del ours["requestContext"][key.split(".")[1]]
    del ours["pathParameters"], ours["stageVariables"]
    ours["headers"]["host"] = "extra headers are fine"
    assert differences(example, ours) == []

    ours["requestContext"]["timeEpoch"] = str(ours["requestContext"]["timeEpoch"])
    ours["rawPath"] = "/other"
    del ours["routeKey"]
    ours["requestContext"]["extra"] = 1
    ours["headers"]["header2"] = "value1, value2"
    assert sorted(differences(example, ours)) == [
        "headers.header2: 'value1, value2', documented 'value1,value2'",
        "rawPath: '/other', documented '/my/path'",
        "requestContext.extra: not documented",
        "requestContext.timeEpoch: str, documented int",
        "routeKey: missing",
    ]


# -- answers -> responses ----------------------------------------------------------------------

RESPONSE_EXAMPLE = json.loads((DATA / "response-example.json").read_text())
PIXELS = bytes(range(256))


@pytest.mark.parametrize(
    ("result", "status", "content_type", "body"),
    [
        # the doc's "string response": a JSON string, content-length 15
        ("Hello, world!", 200, "application/json", b'"Hello, world!"'),
        # the doc's "JSON response": the object, serialised
        ({"message": "Hello, world!"}, 200, "application/json", b'{"message": "Hello, world!"}'),
        # control: without statusCode a dict is a JSON body, whatever keys it has
        (
            {"body": "x", "isBase64Encoded": True},
            200,
            "application/json",
            b'{"body": "x", "isBase64Encoded": true}',
        ),
        # the doc's custom response, with cookies
        (RESPONSE_EXAMPLE, 201, "application/json", b'{ "message": "Hello, world!" }'),
        # binary: a base64 body is decoded
        (
            {
                "statusCode": 200,
                "headers": {"Content-Type": "image/png"},
                "body": base64.b64encode(PIXELS).decode(),
                "isBase64Encoded": True,
            },
            200,
            "image/png",
            PIXELS,
        ),
        # control: the same text without isBase64Encoded is sent as it is
        (
            {"statusCode": 200, "headers": {"Content-Type": "text/plain"}, "body": "AAEC"},
            200,
            "text/plain",
            b"AAEC",
        ),
    ],
)
def test_documented_responses(result: Any, status: int, content_type: str, body: bytes) -> None:
    with FunctionUrl(answering(result)) as url:
        got_status, headers, got_body = send(url, "GET", "/")

    assert (got_status, headers["Content-Type"], got_body) == (status, content_type, body)
    assert headers["Content-Length"] == str(len(body))
    cookies = result.get("cookies", []) if isinstance(result, dict) else []
    assert headers.get_all("Set-Cookie", []) == cookies
    if result is RESPONSE_EXAMPLE:
        assert headers["My-Custom-Header"] == "Custom Value"
        assert len(cookies) == 2


@pytest.mark.parametrize(
    "result",
    [
        {"statusCode": "201"},
        {"statusCode": 99},
        {"statusCode": 200, "body": "not base64!", "isBase64Encoded": True},
        {"statusCode": 200, "headers": {"X-Split": "a\r\nSet-Cookie: forged=1"}},
        {"statusCode": 200, "body": {"an": "object"}},
        {"unserialisable": object()},
    ],
)
def test_answers_lambda_cannot_map_are_502(result: Any) -> None:
    with FunctionUrl(answering(result)) as url:
        status, headers, body = send(url, "GET", "/")

    assert (status, body) == (502, b"Internal Server Error")
    assert headers.get_all("Set-Cookie") is None
    assert len(url.errors) == 1


# -- failures and limits -----------------------------------------------------------------------


def test_a_handler_exception_is_a_bare_502() -> None:
    def handler(event: dict[str, Any], context: Any) -> Any:
        if event["rawPath"] == "/fail":
            raise RuntimeError("secret-detail in a traceback")
        return {"statusCode": 200, "body": "fine"}

    with FunctionUrl(handler) as url:
        status, headers, body = send(url, "GET", "/fail")
        control = send(url, "GET", "/ok")

    assert (status, body) == (502, b"Internal Server Error")
    assert "secret-detail" not in str(headers)
    assert [type(error) for error in url.errors] == [RuntimeError]
    assert control[0] == 200
    assert control[2] == b"fine"


def test_requests_over_the_payload_limit_are_413() -> None:
    binary = [("Content-Type", "application/octet-stream")]
    with FunctionUrl(answering({"statusCode": 200})) as url:
        declared = send(url, "POST", "/", [("Content-Length", str(MAX_PAYLOAD + 1))])
        # 4.6 MiB of bytes is 6.1 MiB of base64: over the limit once in the event
        inflated = send(url, "POST", "/", binary, b"\x00" * (46 * 1024 * 1024 // 10))
        assert not url.events
        # controls: 4 MiB of bytes (5.3 MiB of base64), 5.5 MiB of text
        small = send(url, "POST", "/", binary, b"\x00" * (4 * 1024 * 1024))
        text = send(url, "POST", "/", [("Content-Type", "text/plain")], b"a" * (11 * 1024 * 512))

    assert (declared[0], inflated[0], small[0], text[0]) == (413, 413, 200, 200)
    assert len(url.events) == 2


def test_origin_and_host_are_reported_as_in_aws() -> None:
    def handler(event: dict[str, Any], context: Any) -> Any:
        location = next(answers)
        if location.startswith("/"):
            location = "https://" + event["requestContext"]["domainName"] + location
        return {"statusCode": 303, "headers": {"Location": location}}

    for rewrite in (True, False):
        answers = iter(["/l/next", "https://idp.example/activate"])
        with FunctionUrl(handler, rewrite_origin=rewrite) as url:
            own = [("Origin", url.base_url), ("Referer", url.base_url + "/l/x?y=1")]
            first = send(url, "POST", "/l/x", own, b"proof=1")
            foreign = send(url, "POST", "/l/x", [("Origin", "http://127.0.0.1:9")], b"proof=1")
        mine, theirs = (event["headers"] for event in url.events)
        assert theirs["origin"] == "http://127.0.0.1:9"  # another origin passes unchanged
        assert foreign[1]["Location"] == "https://idp.example/activate"
        if rewrite:
            assert mine["origin"] == url.origin == f"https://{url.domain}"
            assert mine["referer"] == url.origin + "/l/x?y=1"
            assert mine["host"] == url.domain
            assert first[1]["Location"] == url.base_url + "/l/next"
        else:  # control: the raw local values
            assert mine["origin"] == url.base_url
            assert mine["host"] == url.base_url.removeprefix("http://")
            assert first[1]["Location"] == url.origin + "/l/next"
