"""``get-token`` without sockets: argument parsing, the (y/N) answer, output rendering, and the
exchange-failure path, on a scripted transport and a fake clock."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cmstoken.cli.get_token import command as get_token
from cmstoken.cli.get_token import flows as get_token_flows
from cmstoken.cli.get_token import parser as get_token_parser
from cmstoken.cli.get_token import refresh_file as get_token_refresh_file
from cmstoken.cli.get_token import rescue
from cmstoken.cli.get_token import retries as get_token_retries
from cmstoken.cli.get_token.command import run
from cmstoken.cli.get_token.flows import AbortedError
from cmstoken.cli.get_token.options import Options
from cmstoken.cli.get_token.output import Result, render
from cmstoken.cli.get_token.parser import parse_args
from cmstoken.core.errors import (
    AccessDeniedError,
    InvalidGrantError,
    MalformedResponseError,
    RateLimitedError,
    TransientError,
    UpstreamConnectionError,
    UpstreamTimeoutError,
)
from cmstoken.upstream.http import HttpResponse
from cmstoken.upstream.models import RawTokens, ServiceToken
from cmstoken.upstream.service import ServiceClient
from support import (
    DEVICE_DOCUMENT,
    PROVIDER_DOCUMENT,
    TOKENS_DOCUMENT,
    Answer,
    FakeClock,
    ScriptedTransport,
    make_jwt,
    response,
)

BASE_URL = "https://cms.example.com"


def service(script: list[Answer]) -> tuple[ServiceClient, ScriptedTransport, FakeClock]:
    clock = FakeClock()
    transport = ScriptedTransport(script=script, clock=clock)
    return ServiceClient(BASE_URL, transport=transport, clock=clock), transport, clock


def options(**changes: object) -> Options:
    values: dict[str, object] = {
        "base_url": BASE_URL,
        "free_trial": False,
        "output_format": "json",
        "refresh_token": None,
        "refresh_file": None,
    }
    values.update(changes)
    return Options(**values)  # type: ignore[arg-type]


def service_token_document(clock: FakeClock, lifetime: int = 3600) -> dict[str, str]:
    return {"token": make_jwt({"exp": int(clock.now()) + lifetime, "sub": "user"})}


# -- parsing -----------------------------------------------------------------------------------


def test_defaults_and_the_environment() -> None:
    parsed = parse_args([], {"SERVICE_BASE_URL": BASE_URL + "/"})
    assert parsed == options()


def test_flags_and_base_url_beat_the_environment() -> None:
    parsed = parse_args(
        ["-ft", "-o", "plain", "-r", "v1.refresh", "--base-url", "http://127.0.0.1:8080"],
        {"SERVICE_BASE_URL": BASE_URL},
    )
    assert parsed == Options("http://127.0.0.1:8080", True, "plain", "v1.refresh")
    long_form = parse_args(
        ["--freetrial", "--format=json", "--refresh=v1.refresh"], {"SERVICE_BASE_URL": BASE_URL}
    )
    assert long_form == options(free_trial=True, refresh_token="v1.refresh")


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        ([], {}, "SERVICE_BASE_URL"),
        ([], {"SERVICE_BASE_URL": "  "}, "SERVICE_BASE_URL"),
        (["--base-url", "http://cms.example.com"], {}, "https"),
        (["--base-url", BASE_URL, "-o", "xml"], {}, "invalid choice"),
        (["--base-url", BASE_URL, "-f"], {}, "-ft"),
        (["--base-url", BASE_URL, "-r", ""], {}, "empty"),
        (["--base-url", BASE_URL, "--bogus"], {}, "--bogus"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str],
    environ: dict[str, str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as raised:
        parse_args(argv, environ)
    assert raised.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: get-token" in captured.err
    assert message in captured.err


def test_stray_words_are_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--base-url", BASE_URL, "v1.stray-refresh-token", "--bogus"], {})
    err = capsys.readouterr().err
    assert "v1.stray-refresh-token" not in err
    assert "--bogus" in err


def test_main_returns_exit_codes_for_help_and_usage(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SERVICE_BASE_URL", raising=False)
    assert get_token.main(["-h"]) == 0
    assert "exit codes" in capsys.readouterr().out
    assert get_token.main(["--bogus"]) == 2
    assert get_token.main([]) == 2


# -- rendering ---------------------------------------------------------------------------------


def result(clock: FakeClock, *, exchanged: bool = True) -> Result:
    tokens = RawTokens.parse(TOKENS_DOCUMENT, received_at=clock.now(), endpoint="refresh")
    token = ServiceToken(token="eyJ.service.token", expires_at=clock.now() + 3600.7)
    return Result(tokens=tokens, scope="openid", service_token=token if exchanged else None)


def test_render_json() -> None:
    clock = FakeClock()
    text = render(result(clock), "json", now=clock.now())
    assert text.endswith("\n")
    assert json.loads(text) == {
        "access_token": "eyJ.service.token",
        "refresh_token": TOKENS_DOCUMENT["refresh_token"],
        "scope": "openid",
        "expires_in": 3600,
        "token_type": "Bearer",
    }


def test_render_plain() -> None:
    clock = FakeClock()
    assert render(result(clock), "plain", now=clock.now() + 600) == (
        "access_token: eyJ.service.token\n"
        f"refresh_token: {TOKENS_DOCUMENT['refresh_token']}\n"
        "expires_in: 3000\n"
    )


def test_render_never_goes_negative_nor_prints_null() -> None:
    clock = FakeClock()
    assert json.loads(render(result(clock), "json", now=clock.now() + 10**6))["expires_in"] == 0
    partial = render(result(clock, exchanged=False), "json", now=clock.now())
    assert json.loads(partial) == {
        "refresh_token": TOKENS_DOCUMENT["refresh_token"],
        "scope": "openid",
    }
    assert "null" not in partial
    plain = render(result(clock, exchanged=False), "plain", now=clock.now())
    assert plain == f"refresh_token: {TOKENS_DOCUMENT['refresh_token']}\n"


# -- the device flow and the refresh, scripted ------------------------------------------------


def device_script(clock: FakeClock) -> list[Answer]:
    return [
        response(200, PROVIDER_DOCUMENT),
        response(200, DEVICE_DOCUMENT),
        response(403, {"error": "authorization_pending", "error_description": "pending"}),
        response(200, TOKENS_DOCUMENT),
        response(200, service_token_document(clock)),
    ]


@pytest.mark.parametrize("answer", ["y\n", "Y\n", "yes\n", "YES\n", " Yes \n", "y"])
def test_yes_continues(answer: str) -> None:
    client, transport, clock = service([])
    transport.script = device_script(clock)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(options(), client, stdin=io.StringIO(answer), stdout=stdout, stderr=stderr)
    assert code == 0
    document = json.loads(stdout.getvalue())
    assert document["expires_in"] == 3600 - 10  # two polls at a 5 s interval
    assert document["scope"] == TOKENS_DOCUMENT["scope"]
    err = stderr.getvalue()
    assert DEVICE_DOCUMENT["verification_uri_complete"] in err
    assert DEVICE_DOCUMENT["user_code"] in err
    assert "15 minutes" in err
    assert get_token_flows.PROMPT in err
    for secret in [
        DEVICE_DOCUMENT["device_code"],
        TOKENS_DOCUMENT["refresh_token"],
        document["access_token"],
    ]:
        assert secret not in err
    assert [sent.endpoint for sent in transport.sent] == [
        "provider",
        "device_code",
        "device_token",
        "device_token",
        "exchange",
    ]


@pytest.mark.parametrize("answer", ["n\n", "no\n", "\n", "yy\n", ""])
def test_anything_else_aborts_before_polling(answer: str) -> None:
    client, transport, clock = service([])
    transport.script = device_script(clock)
    stdout = io.StringIO()
    with pytest.raises(AbortedError, match="aborted"):
        run(options(), client, stdin=io.StringIO(answer), stdout=stdout, stderr=io.StringIO())
    assert stdout.getvalue() == ""
    assert [sent.endpoint for sent in transport.sent] == ["provider", "device_code"]


def test_free_trial_uses_the_free_trial_client() -> None:
    client, transport, clock = service([])
    transport.script = device_script(clock)
    run(
        options(free_trial=True),
        client,
        stdin=io.StringIO("y\n"),
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    forms = [sent.form for sent in transport.sent if sent.form is not None]
    assert {form["client_id"] for form in forms} == {PROVIDER_DOCUMENT["freetrialClientId"]}


def test_denial_propagates() -> None:
    client, transport, _ = service([])
    transport.script = [
        response(200, PROVIDER_DOCUMENT),
        response(200, DEVICE_DOCUMENT),
        response(403, {"error": "access_denied", "error_description": "User cancelled."}),
    ]
    with pytest.raises(AccessDeniedError, match="denied"):
        run(
            options(),
            client,
            stdin=io.StringIO("y\n"),
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )


def test_refresh_with_the_scope_fallback_and_a_reminder() -> None:
    client, transport, clock = service([])
    tokens = {key: value for key, value in TOKENS_DOCUMENT.items() if key != "scope"}
    transport.script = [
        response(200, PROVIDER_DOCUMENT),
        response(200, tokens),
        response(200, service_token_document(clock)),
    ]
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(
        options(refresh_token="v1.old-refresh-token", output_format="plain"),
        client,
        stdin=None,
        stdout=stdout,
        stderr=stderr,
    )
    assert code == 0
    assert stdout.getvalue().splitlines()[1] == f"refresh_token: {TOKENS_DOCUMENT['refresh_token']}"
    assert "void" in stderr.getvalue()
    assert "v1.old-refresh-token" not in stderr.getvalue()
    assert transport.sent[1].form == {
        "grant_type": "refresh_token",
        "client_id": PROVIDER_DOCUMENT["clientId"],
        "refresh_token": "v1.old-refresh-token",
    }


def test_refused_exchange_still_prints_the_new_refresh_token() -> None:
    client, transport, _ = service([])
    refused = {"error": {"status": 500, "message": "failed to get token", "details": "no"}}
    transport.script = [
        response(200, PROVIDER_DOCUMENT),
        response(200, TOKENS_DOCUMENT),
        response(400, refused),
    ]
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(
        options(refresh_token="v1.old-refresh-token"),
        client,
        stdin=None,
        stdout=stdout,
        stderr=stderr,
    )
    assert code == 1
    assert json.loads(stdout.getvalue())["refresh_token"] == TOKENS_DOCUMENT["refresh_token"]
    assert "exchange: HTTP 400" in stderr.getvalue()
    assert TOKENS_DOCUMENT["refresh_token"] not in stderr.getvalue()


def test_the_refresh_token_is_kept_out_of_reprs() -> None:
    from cmstoken.cli.get_token.parser import parse_args

    options = parse_args(["--base-url", "https://api.example.com", "-r", "v1.secret-value"], {})
    assert options.refresh_token == "v1.secret-value"
    assert "v1.secret-value" not in repr(options)


def test_r_dash_reads_standard_input_and_the_flag_beats_the_environment() -> None:
    import io

    from cmstoken.cli.get_token.parser import parse_args

    environ = {"CMS_REFRESH_TOKEN": "v1.from-environment"}
    options = parse_args(
        ["--base-url", "https://api.example.com", "-r", "-"], environ, io.StringIO("v1.piped\n")
    )
    assert options.refresh_token == "v1.piped"
    options = parse_args(["--base-url", "https://api.example.com"], environ)
    assert options.refresh_token == "v1.from-environment"
    options = parse_args(["--base-url", "https://api.example.com"], {})
    assert options.refresh_token is None


def test_printable_neutralises_control_characters() -> None:
    from cmstoken.core.redaction import printable

    assert printable("ok: réseau ✓") == "ok: réseau ✓"
    assert printable("a\x1b[31mb\x9bc\u202ed\r\n") == "a?[31mb?c?d??"


# -- usage errors never echo a value -----------------------------------------------------------

# Test data shaped like what gets pasted into the wrong place.
REFRESH_LIKE = "v1.MTestOnlyRefreshToken-0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGH"
JWT_LIKE = make_jwt({"sub": "test-only", "exp": 1})
# "{}" stands for the value.
MALFORMED: list[list[str]] = [
    ["--freetrial={}"],
    ["-ft={}"],
    ["-ft{}"],
    ["-o", "{}"],
    ["-o{}"],
    ["-o={}"],
    ["--format={}"],
    ["--format", "{}"],
    ["--help={}"],
    ["-h={}"],
    ["--version={}"],
    ["{}"],
    ["-r", "x", "{}"],
    ["--{}"],
    ["-{}"],
    ["--bogus={}"],
    ["--bogus", "{}"],
    ["-f{}"],
    ["-x{}"],
    ["-f", "{}"],
    ["--fr{}"],
    ["--", "{}"],
    ["-o", "json", "{}"],
    ["{}", "--base-url"],
    ["-ft", "-o", "plain", "{}", "-r"],
    ["--base-url", "{}"],
    ["--base-url={}"],
    ["--base-url=https://cms.example.com:{}/"],
    ["--base-url", "https://{}@cms.example.com"],
    ["--base-url", "http://cms.example.com/{}"],
    ["--base-url", "https://cms.example.com/?t={}"],
    ["--base-url", "https://[{}/"],
]


def usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str], environ: dict[str, str] | None = None
) -> str:
    """The standard error of a usage error (exit 2, nothing on standard output)."""
    with pytest.raises(SystemExit) as raised:
        parse_args(argv, {"SERVICE_BASE_URL": BASE_URL} if environ is None else environ)
    captured = capsys.readouterr()
    assert raised.value.code == 2
    assert captured.out == ""
    assert "usage: get-token" in captured.err
    return captured.err


def echoed_runs(secret: str, text: str, size: int = 12) -> list[str]:
    return [
        secret[i : i + size] for i in range(len(secret) - size + 1) if secret[i : i + size] in text
    ]


@pytest.mark.parametrize("secret", [REFRESH_LIKE, JWT_LIKE], ids=["refresh-like", "jwt-like"])
@pytest.mark.parametrize("shape", MALFORMED, ids=" ".join)
def test_usage_errors_never_echo_a_value(
    shape: list[str], secret: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error([word.replace("{}", secret) for word in shape], capsys)
    assert echoed_runs(secret, err) == []


def test_the_environment_s_base_url_is_not_echoed_either(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = usage_error([], capsys, {"SERVICE_BASE_URL": f"https://cms.example.com:{REFRESH_LIKE}"})
    assert echoed_runs(REFRESH_LIKE, err) == []
    assert "service base URL is not a valid URL" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-o", "v1.secret-abc"], "argument -o/--format: invalid choice (choose from json, plain)"),
        (
            ["--format=v1.secret-abc"],
            "argument -o/--format: invalid choice (choose from json, plain)",
        ),
        (["--freetrial=v1.secret-abc"], "argument -ft/--freetrial: takes no value"),
        (["-ft=v1.secret-abc"], "argument -ft/--freetrial: takes no value"),
        (["--help=v1.secret-abc"], "argument -h/--help: takes no value"),
        (["--version=v1.secret-abc"], "argument --version: takes no value"),
        (["-r"], "argument -r/--refresh: expected one argument"),
        (
            ["v1.secret-abc", "--bogus=v1.secret-abc"],
            "unrecognized arguments: [redacted] --bogus=[redacted]",
        ),
        (["--bogus", "v1.secret-abc"], "unrecognized arguments: --bogus [redacted]"),
        (["-ftv1.secret-abc"], "unrecognized arguments: [redacted]"),
        (["-f"], "unrecognized arguments: -f (the free-trial flag is -ft)"),
    ],
)
def test_usage_errors_say_what_is_wrong_and_what_is_expected(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error(argv, capsys)
    assert err.splitlines()[-1] == f"get-token: error: {message}"
    assert "secret-abc" not in err


def test_help_and_version_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    from cmstoken import __version__

    assert get_token.main(["--version"]) == 0
    assert capsys.readouterr().out == f"get-token {__version__}\n"
    assert get_token.main(["--help"]) == 0
    assert "usage: get-token" in capsys.readouterr().out


VALID_WORDS = [
    "-ft",
    "--freetrial",
    "-o",
    "--format",
    "json",
    "plain",
    "--format=plain",
    "-r",
    "--refresh",
    "--base-url",
    BASE_URL,
    "--",
    "-f",
    "-",
]
# Values a user might paste: long enough to be told from an option name.
pasted_secrets = st.text(
    alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=",
    min_size=24,
    max_size=80,
)
SECRET_FORMS = [
    "{}",
    "--{}",
    "-{}",
    "-o{}",
    "-ft{}",
    "-r{}",
    "--format={}",
    "--freetrial={}",
    "--bogus={}",
    "-h={}",
    "--version={}",
    "--base-url={}",
    "--refresh={}",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    words=st.lists(st.sampled_from(VALID_WORDS), max_size=6),
    secret=pasted_secrets,
    form=st.sampled_from(SECRET_FORMS),
    position=st.integers(min_value=0, max_value=6),
)
def test_a_pasted_secret_never_reaches_the_output(
    words: list[str], secret: str, form: str, position: int
) -> None:
    argv = list(words)
    argv.insert(min(position, len(argv)), form.replace("{}", secret))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parse_args(argv, {"SERVICE_BASE_URL": BASE_URL}, io.StringIO(""))
            code: object = 0
        except SystemExit as exc:
            code = exc.code
    assert code in (0, 2, None)
    assert secret not in out.getvalue() + err.getvalue()
    if code == 2:
        assert out.getvalue() == ""
        assert echoed_runs(secret, err.getvalue(), size=20) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "argument -o/--format: invalid choice: 'v1.secret-abc' (choose from 'json', 'plain')",
            "argument -o/--format: invalid choice (choose from json, plain)",
        ),
        (
            "argument --version: ignored explicit argument 'v1.secret-abc'",
            "argument --version: takes no value",
        ),
        (
            "argument -r/--refresh: invalid str value: 'v1.secret-abc'",
            "argument -r/--refresh: invalid value (expects TOKEN)",
        ),
        (
            "argument --v1.secret-abc: expected one argument",
            "invalid arguments (see --help)",
        ),
        (
            "unrecognized arguments: --bogus=v1.secret-abc v1.secret-abc -x",
            "unrecognized arguments: --bogus=[redacted] [redacted] -x",
        ),
        (
            "ambiguous option: -v1.secret-abc could match -ft, --format",
            "ambiguous option (-ft, --format)",
        ),
        (
            "the following arguments are required: --base-url, v1.secret-abc",
            "the following arguments are required (--base-url)",
        ),
        ("anything else: v1.secret-abc", "invalid arguments (see --help)"),
    ],
)
def test_argparse_s_own_error_text_is_rebuilt_too(
    text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        get_token_parser.build_parser().error(text)
    assert raised.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"get-token: error: {message}"


# -- issue 18: --refresh-file with -r, an empty CMS_REFRESH_TOKEN, retries, the countdown --------


@pytest.mark.parametrize(
    "argv",
    [
        ["-r", "v1.secret-abc", "--refresh-file", "token.txt"],
        ["--refresh-file=token.txt", "--refresh=v1.secret-abc"],
    ],
)
def test_r_and_refresh_file_exclude_each_other(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error(argv, capsys)
    last = err.splitlines()[-1]
    assert re.fullmatch(
        r"get-token: error: argument (-r/--refresh|--refresh-file): not allowed with "
        r"argument (-r/--refresh|--refresh-file)",
        last,
    )
    assert "-r/--refresh" in last
    assert "--refresh-file:" in last or last.endswith("--refresh-file")
    assert "secret-abc" not in err


def test_the_refresh_file_is_parsed() -> None:
    parsed = parse_args(["--refresh-file", "token.txt"], {"SERVICE_BASE_URL": BASE_URL})
    assert parsed == options(refresh_file="token.txt")


@pytest.mark.parametrize("path", ["", "-"])
def test_a_refresh_file_needs_a_path(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(["--refresh-file", path], capsys)
    assert "--refresh-file" in err.splitlines()[-1]


@pytest.mark.parametrize("value", ["", " ", "\t\n"])
def test_an_empty_refresh_token_variable_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = usage_error([], capsys, {"SERVICE_BASE_URL": BASE_URL, "CMS_REFRESH_TOKEN": value})
    assert "CMS_REFRESH_TOKEN" in err.splitlines()[-1]
    # Not in the way when the token comes from elsewhere.
    parsed = parse_args(
        ["-r", "v1.given"], {"SERVICE_BASE_URL": BASE_URL, "CMS_REFRESH_TOKEN": value}
    )
    assert parsed.refresh_token == "v1.given"


def renew(client: ServiceClient) -> int:
    """``get-token -r`` with a token, its output discarded."""
    return run(
        options(refresh_token="v1.old-refresh-token"),
        client,
        stdin=None,
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )


def refresh_run(script: list[Answer]) -> tuple[int, ScriptedTransport, FakeClock, str]:
    client, transport, clock = service([])
    transport.script = script
    stderr = io.StringIO()
    code = run(
        options(refresh_token="v1.old-refresh-token"),
        client,
        stdin=None,
        stdout=io.StringIO(),
        stderr=stderr,
    )
    return code, transport, clock, stderr.getvalue()


def rate_limited(seconds: int = 1) -> HttpResponse:
    body = {"error": "too_many_requests", "error_description": "Global limit has been reached"}
    return response(429, body, headers={"Retry-After": str(seconds)})


def test_a_rate_limited_refresh_is_sent_again_after_the_hint() -> None:
    clock = FakeClock()
    code, transport, clock, err = refresh_run(
        [
            response(503, {"error": {"status": 503, "message": "Service Unavailable"}}),
            response(200, PROVIDER_DOCUMENT),
            rate_limited(1),
            response(200, TOKENS_DOCUMENT),
            response(200, service_token_document(clock, lifetime=10**10)),
        ]
    )
    assert code == 0
    assert [sent.endpoint for sent in transport.sent] == [
        "provider",
        "provider",
        "refresh",
        "refresh",
        "exchange",
    ]
    assert clock.sleeps[1] == 1.0
    assert "trying again in 1 s" in err
    assert "v1.old-refresh-token" not in err


LOST_ANSWERS = [
    response(502, {"error": "bad_gateway"}),
    response(504, {"error": "gateway_timeout"}),
    UpstreamTimeoutError("refresh: no answer", endpoint="refresh", outcome_unknown=True),
    UpstreamConnectionError("refresh: dropped", endpoint="refresh", outcome_unknown=True),
    MalformedResponseError("refresh: garbled", endpoint="refresh", status=200),
]
LOST_IDS = ["502", "504", "timeout", "dropped", "2xx-garbled"]
INVALID_GRANT = response(
    403, {"error": "invalid_grant", "error_description": "Unknown or invalid refresh token."}
)


def refresh_endpoints(transport: ScriptedTransport) -> list[str]:
    return [sent.endpoint for sent in transport.sent]


@pytest.mark.parametrize("failure", LOST_ANSWERS, ids=LOST_IDS)
def test_a_refresh_whose_answer_was_lost_is_sent_again_at_once(failure: Answer) -> None:
    """SPEC 4.2b: once no answer can arrive, the same token is presented again, at once."""
    clock = FakeClock()
    code, transport, clock, err = refresh_run(
        [
            response(200, PROVIDER_DOCUMENT),
            failure,
            response(200, TOKENS_DOCUMENT),
            response(200, service_token_document(clock, lifetime=10**10)),
        ]
    )
    assert code == 0
    assert refresh_endpoints(transport) == ["provider", "refresh", "refresh", "exchange"]
    assert transport.sent[1].form == transport.sent[2].form  # the same token, once more
    assert clock.sleeps == []  # at once
    assert "the answer was lost" in err
    assert "presenting the same token again, once" in err
    assert "v1.old-refresh-token" not in err


@pytest.mark.parametrize("failure", LOST_ANSWERS, ids=LOST_IDS)
def test_a_refresh_lost_twice_is_not_sent_a_third_time(failure: Answer) -> None:
    client, transport, _ = service([response(200, PROVIDER_DOCUMENT), failure, failure])
    stderr = io.StringIO()
    with pytest.raises(TransientError):
        run(
            options(refresh_token="v1.old-refresh-token"),
            client,
            stdin=None,
            stdout=io.StringIO(),
            stderr=stderr,
        )
    assert refresh_endpoints(transport) == ["provider", "refresh", "refresh"]
    assert "may be void" in stderr.getvalue()


def test_invalid_grant_after_a_lost_answer_says_the_token_is_void() -> None:
    client, transport, _ = service(
        [response(200, PROVIDER_DOCUMENT), response(502, {}), INVALID_GRANT]
    )
    with pytest.raises(InvalidGrantError) as raised:
        renew(client)
    message = str(raised.value)
    assert "answer to the first refresh was lost" in message
    assert "void" in message
    assert "log in again" in message
    assert "\n" not in message
    assert refresh_endpoints(transport) == ["provider", "refresh", "refresh"]


def test_invalid_grant_without_a_lost_answer_is_left_as_it_is() -> None:
    client, transport, _ = service([response(200, PROVIDER_DOCUMENT), INVALID_GRANT])
    with pytest.raises(InvalidGrantError) as raised:
        renew(client)
    assert "lost" not in str(raised.value)
    assert refresh_endpoints(transport) == ["provider", "refresh"]


def test_the_refresh_sent_again_waits_out_a_429_like_the_first() -> None:
    clock = FakeClock()
    code, transport, clock, err = refresh_run(
        [
            response(200, PROVIDER_DOCUMENT),
            UpstreamConnectionError("refresh: dropped", endpoint="refresh", outcome_unknown=True),
            rate_limited(1),
            response(200, TOKENS_DOCUMENT),
            response(200, service_token_document(clock, lifetime=10**10)),
        ]
    )
    assert code == 0
    assert refresh_endpoints(transport) == [
        "provider",
        "refresh",
        "refresh",
        "refresh",
        "exchange",
    ]
    assert clock.sleeps == [1.0]
    assert "trying again in 1 s" in err


def test_a_connection_that_cannot_be_made_fails_at_once() -> None:
    refused = UpstreamConnectionError("provider: cannot reach", endpoint="provider")
    client, transport, clock = service([refused])
    with pytest.raises(UpstreamConnectionError):
        renew(client)
    assert len(transport.sent) == 1
    assert clock.sleeps == []


def test_retries_wait_at_most_the_budget_in_all() -> None:
    client, transport, clock = service([])
    transport.script = [rate_limited(20) for _ in range(20)]
    with pytest.raises(RateLimitedError):
        renew(client)
    assert sum(clock.sleeps) <= get_token_retries.RETRY_BUDGET_SECONDS
    assert clock.sleeps  # it did wait, within the budget
    assert len(transport.sent) == len(clock.sleeps) + 1


def test_a_hint_longer_than_the_policy_allows_is_not_waited_for() -> None:
    code_hint = int(get_token_retries.RETRIES.max_retry_after) + 1
    client, transport, clock = service([response(200, PROVIDER_DOCUMENT), rate_limited(code_hint)])
    with pytest.raises(RateLimitedError):
        renew(client)
    assert clock.sleeps == []
    assert len(transport.sent) == 2


def test_the_device_code_is_requested_again_after_a_503() -> None:
    client, transport, clock = service([])
    unavailable = {"error": "temporarily_unavailable", "error_description": "busy"}
    script = device_script(clock)
    script[1:1] = [response(503, unavailable), response(200, PROVIDER_DOCUMENT)]
    transport.script = script
    code = run(
        options(), client, stdin=io.StringIO("y\n"), stdout=io.StringIO(), stderr=io.StringIO()
    )
    assert code == 0
    # The device authorization starts again: provider information, then a new device code.
    assert [sent.endpoint for sent in transport.sent][:4] == [
        "provider",
        "device_code",
        "provider",
        "device_code",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_countdown_is_live_on_a_terminal_only() -> None:
    clock = FakeClock()
    terminal = Terminal()
    with get_token_flows.Countdown(terminal, clock.now() + 125, clock.now):
        pass
    shown = terminal.getvalue()
    assert shown.startswith("\rwaiting for approval: 02:05 left")
    assert shown.endswith("\n")
    pipe = io.StringIO()
    with get_token_flows.Countdown(pipe, clock.now() + 125, clock.now):
        pass
    assert pipe.getvalue() == ""


def test_the_device_flow_shows_the_countdown_on_a_terminal() -> None:
    client, transport, clock = service([])
    transport.script = device_script(clock)
    terminal = Terminal()
    code = run(options(), client, stdin=io.StringIO("y\n"), stdout=io.StringIO(), stderr=terminal)
    assert code == 0
    assert "\rwaiting for approval: 15:00 left" in terminal.getvalue()


def test_a_file_of_another_user_in_a_sticky_directory_is_refused_before_sending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like /tmp: the rename over the file would be refused at the end, once the token is
    spent; it is found out before anything is sent."""
    directory = tmp_path / "shared"
    directory.mkdir()
    path = directory / "refresh-token.txt"
    path.write_text("v1.some-refresh-token\n")
    directory.chmod(0o1777)
    monkeypatch.setattr(os, "geteuid", lambda: path.stat().st_uid + 4242)
    with pytest.raises(get_token_refresh_file.RefreshFileError, match="belongs to another user"):
        get_token_refresh_file.RefreshFile.open(str(path), stderr=io.StringIO())
    assert sorted(os.listdir(directory)) == ["refresh-token.txt"]


# -- issue 30: the login creates the refresh file, and never replaces one that holds a token ----


@pytest.mark.parametrize("before", [None, ""])
def test_a_login_never_replaces_a_file_written_meanwhile(
    tmp_path: Path, before: str | None
) -> None:
    """The file did not exist (or was empty) when the login started; something else wrote a
    token there before the login's answer: it is kept, and the save fails (the caller then
    prints the new token as its only copy)."""
    path = tmp_path / "refresh-token.txt"
    if before is not None:
        path.write_text(before)
    store = get_token_refresh_file.RefreshFile.open(str(path), stderr=io.StringIO())
    assert store.login
    path.write_text("v1.written-meanwhile\n")
    with pytest.raises(get_token_refresh_file.RefreshFileError, match="was not replaced"):
        store.save("v1.from-the-login")
    assert path.read_text() == "v1.written-meanwhile\n"
    assert sorted(os.listdir(tmp_path)) == ["refresh-token.txt"]


def test_a_login_creates_the_file_with_mode_0600_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "refresh-token.txt"
    previous = os.umask(0o022)
    try:
        store = get_token_refresh_file.RefreshFile.open(str(path), stderr=io.StringIO())
        store.save("v1.from-the-login")
    finally:
        os.umask(previous)
    assert path.read_text() == "v1.from-the-login\n"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert sorted(os.listdir(tmp_path)) == ["refresh-token.txt"]


def test_a_login_that_cannot_save_rescues_its_token_and_prints_it_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The login's refresh token when the file cannot be written: rescued to a new file of
    mode 0600, which a loud warning names with words that fit a login (no spent token in the
    file); exit 1, nothing printed, the token on neither stream."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    client, transport, clock = service([])
    transport.script = device_script(clock)
    path = tmp_path / "refresh-token.txt"
    store = get_token_refresh_file.RefreshFile.open(str(path), stderr=io.StringIO())
    path.write_text("v1.written-meanwhile\n")
    stdout, stderr = io.StringIO(), io.StringIO()
    code = run(
        options(refresh_file=str(path)),
        client,
        stdin=io.StringIO("y\n"),
        stdout=stdout,
        stderr=stderr,
        refresh_file=store,
    )
    assert code == 1
    assert stdout.getvalue() == ""
    err = stderr.getvalue()
    (rescued,) = tmp_path.glob(rescue.PREFIX + "*")
    assert rescued.read_text() == TOKENS_DOCUMENT["refresh_token"] + "\n"
    assert os.stat(rescued).st_mode & 0o777 == 0o600
    assert f"It was saved to {rescued} (mode 0600)" in err
    assert "The login's refresh token is nowhere else" in err
    assert "spent" not in err
    assert TOKENS_DOCUMENT["refresh_token"] not in err
    assert path.read_text() == "v1.written-meanwhile\n"


def test_a_token_no_place_takes_is_reported_lost_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the file's folder, the state folder nor the temporary folder takes the rescue:
    the warning says the token is lost and how to log in again; it is printed nowhere."""
    monkeypatch.setattr(tempfile, "mkstemp", _refuse_to_create)
    assert rescue.rescue("v1.nowhere", str(tmp_path / "refresh-token.txt")) is None
    message = get_token._unsaved(PermissionError(13, "Permission denied"), None)
    assert "it is lost, and you must log in again" in message
    assert "v1.nowhere" not in message


def _refuse_to_create(*_: object, **__: object) -> tuple[int, str]:
    raise PermissionError(13, "Permission denied")


# -- issue 30: what the help and docs/get-token.md say of the retries is what the code does ----


@pytest.mark.parametrize(
    ("status", "sent_again"),
    [
        *[(status, True) for status in (429, 500, 501, 503)],
        *[(status, False) for status in (502, 504, 400, 401, 403, 404)],
    ],
)
def test_the_retry_story_is_what_the_retries_do(status: int, sent_again: bool) -> None:
    """RETRY_STORY: 429, and a 5xx other than a gateway's 502 or 504, from the provider or the
    service, are sent again; nothing else is (by the retries: a refresh's lost answer is the
    flows' business)."""
    from cmstoken.upstream.responses import oauth_error, service_error

    answer = response(status, {"error": "some_error", "error_description": "d"})
    for error in (
        oauth_error(answer, endpoint="refresh", now=0.0),
        service_error(answer, endpoint="provider", now=0.0),
    ):
        assert get_token_retries.refused_for_now(error) is sent_again
    story = get_token_retries.RETRY_STORY
    assert f"up to {get_token_retries.RETRIES.attempts:.0f} attempts" in story
    assert f"at most {get_token_retries.RETRY_BUDGET_SECONDS:.0f} s of waiting" in story
    assert f"honoured, up to {get_token_retries.RETRIES.max_retry_after:.0f} s" in story


@pytest.mark.parametrize(
    "failure",
    [
        response(502, {"error": {"status": 502, "message": "Bad Gateway"}}),
        UpstreamTimeoutError("exchange: no answer in time", endpoint="exchange"),
        UpstreamConnectionError("exchange: cannot reach", endpoint="exchange"),
    ],
)
def test_the_exchange_is_also_sent_again_after_a_gateway_error_a_timeout_or_no_connection(
    failure: Answer,
) -> None:
    clock = FakeClock()
    service_token = service_token_document(clock)
    code, transport, _, _ = refresh_run(
        [
            response(200, PROVIDER_DOCUMENT),
            response(200, TOKENS_DOCUMENT),
            failure,
            response(200, service_token),
        ]
    )
    assert code == 0
    assert [sent.endpoint for sent in transport.sent].count("exchange") == 2


def test_the_help_names_no_placeholder() -> None:
    text = get_token_parser.build_parser().format_help()
    assert "{base_url}" not in text
    assert "https://api.example.com" in text
