"""The consumer helper under real threads and real time, against moto's server and the emulator
over HTTP: one shared wait per refused token, 403s, the stack's refresh interval, a Secrets
Manager outage near expiry, client creation, and a workload with only requests and boto3.

Waits are short (configurable) and timings are asserted as bounds. The provider's clock is the
emulator's time (so that the documents' times agree) with real sleeps."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError

from cmstoken import consumer
from cmstoken.aws import clients as aws
from cmstoken.consumer import ConsumerError, ServiceTokenAuth, ServiceTokenProvider
from harness import SERVICE_SECRET, Stack, approve_pending, refresh_request_queue
from support import no_spread

pytestmark = pytest.mark.integration

HOUR = 3600
WAIT = 1.5  # refresh_wait_seconds in these tests
THREADS = 5


class RealTimeClock:
    """The emulator's time, and real sleeps: safe to share between threads."""

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator

    def now(self) -> float:
        return float(self.emulator.now())

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


@dataclass
class Workload:
    """A seeded stack whose last refresh is an hour old, an EventBridge rule that copies
    refresh requests to an SQS queue, and counted Secrets Manager reads."""

    stack: Stack
    sqs: Any
    queue_url: str
    reads: Counter[str] = field(default_factory=Counter)
    delivered: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)

    def client(self, **config: Any) -> Any:
        client = boto3.client("secretsmanager", config=Config(**config))
        client.meta.events.register(
            "before-call.secrets-manager.*", lambda model, **_: self.reads.update([model.name])
        )
        return client

    def provider(self, **options: Any) -> ServiceTokenProvider:
        options.setdefault("random_fraction", no_spread)
        options.setdefault("refresh_wait_seconds", WAIT)
        options.setdefault("poll_interval_seconds", 0.05)
        options.setdefault("secrets_client", self.client())
        return ServiceTokenProvider(
            SERVICE_SECRET, clock=RealTimeClock(self.stack.emulator), **options
        )

    def receive(self, wait_seconds: int = 0) -> list[dict[str, Any]]:
        """The queued requests (taken off the queue); waits up to ``wait_seconds`` for one."""
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_seconds
        )
        messages = answer.get("Messages", [])
        for message in messages:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return [json.loads(message["Body"]) for message in messages]

    def deliver_after(self, seconds: float) -> threading.Thread:
        """The rotator, in a thread: after ``seconds``, runs every queued request (waiting up
        to 5 s more for one: a request sent after ``seconds`` still comes)."""

        def run() -> None:
            time.sleep(seconds)
            for event in self.receive(wait_seconds=5):
                self.delivered.append(event)
                self.outcomes.append(self.stack.invoke("rotator", event)["outcome"])

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def published(self) -> str:
        return self.stack.service_document().token


@pytest.fixture
def workload(server_stack: Stack) -> Workload:
    sqs, queue_url = refresh_request_queue()
    server_stack.seed()
    server_stack.emulator.advance(HOUR)
    return Workload(server_stack, sqs, queue_url)


@dataclass
class Finished:
    seconds: float
    value: Any


def together(count: int, call: Callable[[], Any]) -> list[Finished]:
    """Run ``call`` in ``count`` threads released at once; each one's time and result (or
    exception)."""
    barrier = threading.Barrier(count)
    results: list[Finished | None] = [None] * count

    def run(index: int) -> None:
        barrier.wait()
        started = time.monotonic()
        try:
            value = call()
        except Exception as exc:  # the outcome under test
            value = exc
        results[index] = Finished(time.monotonic() - started, value)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(result is not None for result in results), "a thread did not finish"
    return [result for result in results if result is not None]


def list_projects(provider: ServiceTokenProvider) -> requests.Response:
    with requests.Session() as session:
        return session.get(
            f"{provider.api_url}/v3/projects", auth=ServiceTokenAuth(provider), timeout=10
        )


# --- item 6: one wait per token, shared ---------------------------------------------------


def test_threads_refused_with_one_token_share_one_request_and_one_wait(
    workload: Workload,
) -> None:
    provider = workload.provider()
    old = provider.token()
    results = together(THREADS, lambda: provider.refused(old))
    errors = [r.value for r in results]
    assert all(isinstance(e, ConsumerError) for e in errors), errors
    assert {e.reason for e in errors} == {consumer.REFRESH_TIMEOUT}
    assert len({id(e) for e in errors}) == THREADS, "each thread raises its own error"
    times = sorted(r.seconds for r in results)
    # One wait for all, and every waiter gets its outcome when it ends: serial waits would end
    # WAIT apart (the last (THREADS - 1) * WAIT after the first). How long the request itself
    # took before the wait is the machine's, not asserted.
    assert times[0] >= WAIT, times
    assert times[-1] - times[0] < WAIT, times
    assert len(workload.receive()) == 1, "one refresh request"


def test_threads_refused_with_one_token_all_get_the_rotated_one_at_once(
    workload: Workload,
) -> None:
    provider = workload.provider(refresh_wait_seconds=10)
    old = provider.token()
    delivery = workload.deliver_after(0.5)
    results = together(THREADS, lambda: provider.refused(old))
    delivery.join(timeout=30)
    assert workload.outcomes == ["rotated"], "one request, one rotation"
    new = workload.published()
    assert [r.value for r in results] == [new] * THREADS
    times = sorted(r.seconds for r in results)
    # Each got it when it was published, not at the end of a wait of its own (10 s): together.
    assert times[0] >= 0.5, times
    assert times[-1] - times[0] < 5, times
    assert workload.stack.emulator.service_token_valid(new)
    # A late thread refused with the old token gets the new one from the cache, no AWS call.
    reads = workload.reads["GetSecretValue"]
    assert provider.refused(old) == new
    assert workload.reads["GetSecretValue"] == reads


# --- item 7: a 403 is not a refused token -------------------------------------------------


def test_a_permission_403_comes_back_at_once_with_no_refresh_request(
    workload: Workload,
) -> None:
    provider = workload.provider(refresh_wait_seconds=60)
    provider.token()
    workload.stack.emulator.inject("projects", "status", times=THREADS, status=403)
    results = together(THREADS, lambda: list_projects(provider))
    assert [r.value.status_code for r in results] == [403] * THREADS
    assert all(r.value.history == [] for r in results), "not retried: the token did not change"
    assert max(r.seconds for r in results) < 30, "no wait for a refresh (60 s)"
    assert workload.receive() == [], "no refresh request"
    assert workload.reads["GetSecretValue"] <= 2, "at most one re-read for all the 403s"


def test_a_403_retries_once_with_a_token_published_meanwhile(workload: Workload) -> None:
    stack = workload.stack
    provider = workload.provider(max_age_seconds=None)  # the old token stays cached
    old = provider.token()
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    new = workload.published()
    assert provider.token() == old, "the cache still holds the old, valid token"
    stack.emulator.inject("projects", "status", times=THREADS, status=403)
    results = together(THREADS, lambda: list_projects(provider))
    assert {r.value.status_code for r in results} <= {200, 403}
    retried = [r.value for r in results if r.value.history]
    assert retried, "a 403 with a newer published token is retried"
    for answer in retried:
        assert answer.request.headers["Authorization"] == f"Bearer {new}"
    # The emulator hands its THREADS injected 403s to whichever requests come first, so a
    # retry may take one meant for another thread's first request: a 403 reaches the caller
    # only after its one retry (this made the test fail now and then when it required 200).
    assert all(r.value.history for r in results if r.value.status_code == 403)
    assert provider.token() == new
    assert workload.receive() == []
    assert workload.reads["GetSecretValue"] <= 2


# --- item 8: the README's snippet -------------------------------------------------------


def readme_block(marker: str) -> str:
    from support import block

    return block(marker)


class Created(requests.adapters.HTTPAdapter):
    """Answers every request with 201 (the emulator has no call that creates a resource)."""

    def send(self, request: Any, *args: Any, **kwargs: Any) -> requests.Response:
        answer = requests.Response()
        answer.status_code = 201
        answer._content = b'{"id": "created"}'
        answer.request = request
        answer.url = request.url
        return answer


def test_the_readme_snippet_requests_a_refresh_only_after_creating_a_resource(
    workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = workload.stack
    arn = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    monkeypatch.setenv("CMS_TOKEN_SECRET_ARN", arn)
    module: dict[str, Any] = {"__name__": "readme_snippet"}
    exec(compile(readme_block("consumer-helper: python"), "README.md", "exec"), module)  # noqa: S102
    module["provider"].clock = RealTimeClock(stack.emulator)  # the documents' time
    for _ in range(10):  # one call a minute for ten minutes
        projects = module["lambda_handler"]({}, None)
        assert projects["data"][0]["projectId"].startswith("prj_")
        stack.emulator.advance(60)
    assert workload.receive() == [], "no refresh request on ordinary calls"
    old = workload.published()
    module["session"].mount(f"{stack.emulator.api_url}/v3/clusters", Created())
    module["provider"].refresh_wait_seconds = 10
    module["provider"].poll_interval_seconds = 0.05
    delivery = workload.deliver_after(0.3)
    assert module["create"]("/v3/clusters", {"name": "c1"}) == {"id": "created"}
    delivery.join(timeout=30)
    assert [e["detail"]["reason"] for e in workload.delivered] == ["new_resource"]
    assert workload.outcomes == ["rotated"]
    assert module["provider"].token() == workload.published() != old


# --- item 9: the stack's refresh interval -----------------------------------------------


@pytest.fixture
def long_interval(monkeypatch: pytest.MonkeyPatch) -> int:
    from cmstoken import runtime

    monkeypatch.setenv("MIN_REFRESH_INTERVAL_SECONDS", "7200")
    runtime.reset()
    return 7200


def test_the_bootstrap_and_the_rotator_publish_the_stacks_interval(
    server_stack: Stack, long_interval: int
) -> None:
    stack = server_stack
    assert stack.invoke("bootstrap", {"action": "start"})["status"] == "pending"
    approve_pending(stack)
    assert stack.invoke("bootstrap", {"action": "poll"})["status"] == "authorized"
    assert stack.service_document().min_refresh_interval_seconds == long_interval
    stack.emulator.advance(20 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    assert stack.service_document().min_refresh_interval_seconds == long_interval


def test_a_refresh_the_rotator_would_skip_is_said_at_once_in_every_thread(
    workload: Workload, long_interval: int
) -> None:
    stack = workload.stack
    stack.seed()  # again, published with the stack's 7200 s interval
    stack.emulator.advance(HOUR)  # an hour later: past the helper's old 600 s default
    document = stack.service_document()
    assert document.min_refresh_interval_seconds == long_interval
    assert document.refreshed_at is not None
    provider = workload.provider(refresh_wait_seconds=60)
    old = provider.token()
    results = together(THREADS, lambda: provider.refused(old))
    assert {r.value.reason for r in results} == {consumer.REFRESH_DEBOUNCED}
    assert {r.value.retry_at for r in results} == {document.refreshed_at + long_interval}
    # Said at once, not after the 60 s wait (bounded generously for a busy machine).
    assert max(r.seconds for r in results) < 30, "said at once, not after the 60 s wait"
    started = time.monotonic()
    assert provider.new_resource() == old
    assert time.monotonic() - started < 30
    assert workload.receive() == [], "no request the rotator would skip"
    # The rotator agrees: a forced run now is skipped...
    assert stack.invoke("rotator", {"force": True})["outcome"] == "skipped"
    # ...and once the interval has passed, the helper asks and the rotator rotates.
    stack.emulator.advance(long_interval - HOUR)
    provider.refresh_wait_seconds = 10
    delivery = workload.deliver_after(0.3)
    assert provider.refused(old) == workload.published() != old
    delivery.join(timeout=30)
    assert workload.outcomes == ["rotated"]


# --- item 10: Secrets Manager down near expiry ---------------------------------------------


def test_the_cached_token_is_served_until_it_expires_while_secrets_manager_is_down(
    workload: Workload,
) -> None:
    stack = workload.stack
    down = threading.Event()

    def outage(request: Any, **_: Any) -> None:
        if down.is_set():
            time.sleep(0.3)  # a slow failure, so that readers overlap
            raise EndpointConnectionError(endpoint_url=request.url)

    client = workload.client(retries={"max_attempts": 1})
    client.meta.events.register("before-send.secrets-manager.GetSecretValue", outage)
    provider = workload.provider(secrets_client=client, min_validity_seconds=60)
    old = provider.token()
    expires_at = provider.document().expires_at
    stack.emulator.advance(19 * HOUR)
    assert stack.invoke("rotator", {})["outcome"] == "rotated"
    new = workload.published()
    stack.emulator.advance(expires_at - 30 - stack.clock.now())  # its last 60 s
    down.set()
    reads = workload.reads["GetSecretValue"]

    def calls() -> list[str]:
        tokens = []
        for _ in range(5):
            tokens.append(provider.token())
            time.sleep(0.1)
        return tokens

    results = together(THREADS, calls)
    assert [r.value for r in results] == [[old] * 5] * THREADS
    assert workload.reads["GetSecretValue"] - reads <= 3, "one reader, backing off"
    assert max(r.seconds for r in results) < 15  # bounds a stuck reader, not a speed check
    # Not past its expiry: then the failure is raised.
    stack.emulator.advance(expires_at - stack.clock.now())
    with pytest.raises(ConsumerError, match="retry later") as caught:
        provider.token()
    assert caught.value.reason == consumer.UNAVAILABLE
    down.clear()
    assert provider.token() == new


# --- item 11: clients are made once, from the provider's own session ---------------------


def test_threads_make_one_session_and_one_client_each_never_the_default_session(
    workload: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: Counter[str] = Counter()
    make_session, make_client = aws.session, aws.client

    def slow_session() -> Any:
        made["session"] += 1
        time.sleep(0.1)  # widen the window a second creation would need
        return make_session()

    def counted_client(name: str, *, session: Any = None, region_name: Any = None) -> Any:
        assert session is not None, "the provider's own session"
        made[name] += 1
        time.sleep(0.05)
        return make_client(name, session=session, region_name=region_name)

    def default_session(*_: Any, **__: Any) -> Any:
        raise AssertionError("boto3's default session is not the helper's")

    monkeypatch.setattr(aws, "session", slow_session)
    monkeypatch.setattr(aws, "client", counted_client)
    monkeypatch.setattr(boto3, "client", default_session)
    monkeypatch.setattr(boto3, "setup_default_session", default_session)
    provider = ServiceTokenProvider(SERVICE_SECRET, clock=RealTimeClock(workload.stack.emulator))

    def use() -> tuple[str, Any, Any]:
        return provider.token(), provider.events_client, provider.secrets_client

    results = together(8, use)
    values = [r.value for r in results]
    assert not [v for v in values if isinstance(v, BaseException)], values
    assert {v[0] for v in values} == {workload.published()}
    assert len({id(v[1]) for v in values}) == 1
    assert len({id(v[2]) for v in values}) == 1
    assert made == Counter({"session": 1, "secretsmanager": 1, "events": 1})


# --- item 12: a workload with only requests and boto3 --------------------------------------

WORKLOAD = r"""
import importlib.abc, importlib.metadata, json, os, re, sys, threading

def requirement_names(dist):
    for text in importlib.metadata.requires(dist) or []:
        if "extra ==" not in text:
            yield re.split(r"[ ;<>=!~\[(]", text, maxsplit=1)[0].lower().replace("_", "-")

allowed, todo = set(), [d.lower() for d in json.loads(os.environ["INSTALL"])]
while todo:
    dist = todo.pop()
    if dist not in allowed:
        allowed.add(dist)
        todo.extend(requirement_names(dist))
owners = importlib.metadata.packages_distributions()

def installed(top):
    if top in sys.stdlib_module_names or top == "cmstoken":
        return True
    return any(d.lower().replace("_", "-") in allowed for d in owners.get(top, []))

class OnlyWhatTheReadmeInstalls(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if not installed(top):
            raise ModuleNotFoundError(f"not installed: {top}", name=top)
        return None

sys.meta_path.insert(0, OnlyWhatTheReadmeInstalls())

import requests
from cmstoken.consumer import ServiceTokenAuth, ServiceTokenProvider

provider = ServiceTokenProvider(os.environ["CMS_TOKEN_SECRET_ARN"])
statuses = []

def call():
    with requests.Session() as session:
        session.auth = ServiceTokenAuth(provider)
        statuses.append(session.get(provider.api_url + "/v3/projects", timeout=10).status_code)

threads = [threading.Thread(target=call) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
outside = sorted({m.partition(".")[0] for m in sys.modules} - set(sys.stdlib_module_names))
print(json.dumps({"statuses": statuses, "modules": outside}))
"""


def test_the_helper_works_with_only_what_the_readme_says_to_install(
    workload: Workload, tmp_path: Any
) -> None:
    install = readme_block("consumer-helper: install")
    assert "make dist" in install
    assert "pip install dist/cmstoken_consumer-" in install
    # What that wheel brings: its declared dependencies (test_dist.py checks the built wheel).
    root = Path(__file__).resolve().parents[3]
    consumer = tomllib.loads((root / "packaging" / "consumer" / "pyproject.toml.in").read_text())
    packages = [re.split(r"[<>=!~ ;]", d)[0] for d in consumer["project"]["dependencies"]]
    assert sorted(packages) == ["boto3", "requests"], install
    stack = workload.stack
    arn = stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    result = subprocess.run(
        [sys.executable, "-c", WORKLOAD],
        env={**os.environ, "CMS_TOKEN_SECRET_ARN": arn, "INSTALL": json.dumps(packages)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["statuses"] == [200] * 4
    assert "aws_lambda_powertools" not in outcome["modules"]
    assert "segno" not in outcome["modules"]
    assert "cmsemu" not in outcome["modules"]
