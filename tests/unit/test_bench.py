"""scripts/bench (`make bench`), the parts that need no build, server or timing: the links
function's first invocation (a browser's GET of a link's page, as its function URL sends it,
shows the page the subject expects), the environment of its cold start (the template's), the
AWS calls counted apart by thread, the links' call budgets (exact), the check that a handler
loads none of what it has no use for, and a cold-start budget for every handler, documented."""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.build import Layout
from bench.calls import (
    IDLE_REMINDER_AWS_CALLS,
    NOTHING_NEEDED,
    PAGE,
    PAGE_AWS_CALLS,
    REMINDER_AWS_CALLS,
    REMINDER_SENT,
    STATUS_AWS_CALLS,
    AwsCalls,
    Run,
    Runs,
    report_links_calls,
)
from bench.cold_starts import COLD_START_BUDGETS
from bench.environment import lambda_environment
from bench.links import LOCAL_VARIABLES, STACK_NAME, page_event
from bench.loaded_modules import report_unneeded
from bench.probe import HANDLERS, LINK_PAGE, Probe
from bench.report import Report
from cmstoken.core.settings import LinksSettings
from cmstoken.links import tokens, web
from cmstoken.links.events import read_event
from cmstoken.links.stack import Stack
from cmstoken.links.stack_state import StackState
from local_stack import ACCOUNT, REGION

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = "x7k2m9q4w1e8r5t3y6u0i2o4p7a9s1d3.lambda-url.us-east-1.on.aws"
KEY = b"k" * 48
NOW = 1_800_000_000
AUTHORIZED_AT = NOW - 3600


class Portal:
    """The page's view of a bootstrapped stack whose link was never used."""

    stack = Stack(STACK_NAME, ACCOUNT, REGION)

    def key(self) -> bytes:
        return KEY

    def state(self) -> StackState:
        return StackState("active", AUTHORIZED_AT, None, None, None)

    def used(self, claims: tokens.Claims) -> None:
        return None


def link(binding: int = AUTHORIZED_AT) -> str:
    stack = Stack(name=STACK_NAME, account=ACCOUNT, region=REGION)
    token, _ = tokens.new_link(stack, binding=binding, key=KEY, now=NOW, nonce=bytes(16))
    return token


def answer(token: str) -> dict[str, Any]:
    request = read_event(page_event(DOMAIN, token, now=NOW))
    assert isinstance(request, web.Request)
    return web.handle(request, Portal(), NOW)  # type: ignore[arg-type]  # the page needs no more


def test_the_page_event_is_a_get_of_the_link_at_the_function_url() -> None:
    request = read_event(page_event(DOMAIN, link(), now=NOW))
    assert isinstance(request, web.Request)
    assert (request.method, request.path, request.domain) == ("GET", f"/l/{link()}", DOMAIN)
    assert request.headers["sec-fetch-site"] == "none"
    assert request.body == b""


def test_the_links_subject_expects_the_page_of_a_valid_link() -> None:
    page = answer(link())
    assert LINK_PAGE.with_event({}).expect(page) is None
    # The same link once the stack was authorized again: refused, not the page.
    refused = answer(link(binding=AUTHORIZED_AT - 60))
    assert refused["statusCode"] == 403
    assert "expected the link's page" in str(LINK_PAGE.expect(refused))
    assert LINK_PAGE.expect({**page, "body": "<p>no button</p>"}) is not None


def test_the_links_cold_start_has_the_templates_environment_pointed_here() -> None:
    layout = Layout(build=Path("/b"), runtime=Path("/r"), cwd=Path("/c"))
    emulator = SimpleNamespace(base_url="http://127.0.0.1:1")
    local = {name: f"local-{name.lower()}" for name in LOCAL_VARIABLES}
    env = lambda_environment(layout, LINK_PAGE, emulator, "http://127.0.0.1:2", local)
    assert {name: env[name] for name in LOCAL_VARIABLES} == local
    # Not local: the template's values (its parameter's default, not the demo's 5 days).
    assert env["REAUTHORIZATION_WARNING_SECONDS"] == "2160000"
    assert env["LINKS_STARTS_PER_HOUR"] == "6"
    assert env["BENCH_TIMEOUT_SECONDS"] == "30.0"  # the template's Timeout
    assert env["PYTHONPATH"].split(":")[0] == "/b/LinksFunction"
    settings = LinksSettings.from_environ(env)
    assert (settings.stack_name, settings.warning_seconds) == (local["STACK_NAME"], 2_160_000)


def test_calls_on_other_threads_are_counted_apart() -> None:
    counter = AwsCalls()

    def call(service: str, name: str) -> None:
        counter(SimpleNamespace(name=name, service_model=SimpleNamespace(service_id=service)))

    call("Lambda", "Invoke")
    thread = threading.Thread(target=call, args=("Secrets Manager", "GetSecretValue"))
    thread.start()
    thread.join()
    assert counter.calls == Counter({"Lambda:Invoke": 1})
    assert counter.elsewhere == Counter({"GetSecretValue": 1})
    counter.clear()
    assert not counter.calls
    assert not counter.elsewhere


def run(
    outcome: str,
    aws: dict[str, int],
    *,
    behind: Counter[str] | None = None,
    upstream: Counter[str] | None = None,
) -> Run:
    """A counted links run; behind each ``Invoke``, the bootstrap's status unless ``behind``."""
    invokes = aws.get("Lambda:Invoke", 0)
    status = Counter({name: count * invokes for name, count in STATUS_AWS_CALLS.items()})
    return Run(outcome, Counter(aws), upstream or Counter(), status if behind is None else behind)


def links_runs(**changes: Run) -> Runs:
    unused = Run("skipped", Counter(), Counter())
    runs = {
        "noop": unused,
        "rotation": unused,
        "reminder": run(REMINDER_SENT, REMINDER_AWS_CALLS),
        "page": run(PAGE, PAGE_AWS_CALLS),
        "idle_reminder": run(NOTHING_NEEDED, IDLE_REMINDER_AWS_CALLS),
    }
    return Runs(**{**runs, **changes})


def test_the_links_calls_meet_their_budgets_when_exact() -> None:
    report = Report()
    report_links_calls(report, links_runs())
    assert [row.ok for row in report.rows] == [True] * 4
    assert not report.failures


@pytest.mark.parametrize(
    "changed",
    [
        {"page": run(PAGE, {**PAGE_AWS_CALLS, "DynamoDB:GetItem": 2})},  # one more
        {"reminder": run(REMINDER_SENT, {**REMINDER_AWS_CALLS, "SNS:Publish": 0})},  # fewer
        {"page": run(PAGE, PAGE_AWS_CALLS, behind=Counter({"GetSecretValue": 3}))},
        {"page": run("status 403", PAGE_AWS_CALLS)},  # not the page
        {"reminder": run(REMINDER_SENT, REMINDER_AWS_CALLS, upstream=Counter({"refresh": 1}))},
    ],
    ids=["more", "fewer", "bootstrap-behind", "outcome", "upstream"],
)
def test_the_links_calls_miss_their_budget_when_not_exact(changed: dict[str, Run]) -> None:
    report = Report()
    report_links_calls(report, links_runs(**changed))
    assert len(report.failures) == 1, report.failures


def probes(**loaded: list[str]) -> dict[str, Probe]:
    """A probe per handler that loaded ``loaded[name]`` besides the library's own modules."""
    return {
        s.name: Probe(
            0.1, {}, {m: f"/opt/{m}.py" for m in ["cmstoken", *loaded.get(s.name, [])]}, ""
        )
        for s in HANDLERS
    }


def test_a_handler_loading_what_it_has_no_use_for_misses_the_budget() -> None:
    report = Report()
    report_unneeded(report, probes(links=["requests_toolbelt", "cmstoken.linksx"]))
    assert not report.failures  # names that only start alike are other modules
    report_unneeded(report, probes(links=["requests.adapters"], rotator=["cmstoken.bootstrap"]))
    assert [f.split(":")[0] for f in report.failures] == [
        "functions/rotator (scheduled no-op)",
        "functions/links (GET of a link's page)",
    ]
    assert "requests (budget none)" in report.failures[1]


def test_every_handler_has_a_documented_cold_start_budget() -> None:
    assert set(COLD_START_BUDGETS) == {s.function for s in HANDLERS}
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    bench = text.split("## Benchmark: `make bench`", 1)[1].split("\n## ", 1)[0]
    for function, budget in COLD_START_BUDGETS.items():
        assert re.search(rf"{function}\b[^.]*<= {budget:.2f} x the floor", bench), function
