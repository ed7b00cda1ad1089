"""The Node.js consumer module (recipes/node/cmstoken.mjs) through the real ``node``, with the AWS
SDK clients its package-lock.json pins (``make node`` runs ``npm ci``), against moto's server and
the emulator over HTTP: docs/consume-node.md's Lambda handler as pasted, the cache, a refused
token replaced from the secret, a refresh request that the rotator answers (one for concurrent
callers), and the errors it says at once. Every line node prints is scanned for the tokens.

tests/node/consumer.mjs runs the module; the rotator runs in this process when the request
reaches the queue that the template's rule pattern feeds (``refresh_request_queue``)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import template_model
from cmstoken.core.redaction import fingerprint
from eventbridge_stub import refusing_eventbridge
from harness import SERVICE_SECRET, Stack, refresh_request_queue, secret_values
from support import killed_if_running, recipe

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "node"
DRIVER = ROOT / "tests" / "node" / "consumer.mjs"
HOUR = 3600
CALLERS = 5
# Short waits, so that real time stays small: the module's defaults are 10, 5 and 60 s.
FAST = {"refusedSpreadSeconds": 1, "pollIntervalSeconds": 0.5, "refreshWaitSeconds": 30}
# A token that the emulator never issued (it refuses it), long enough for the leak scans.
REFUSED_TOKEN = "eyJhbGciOiJIUzI1NiJ9.refused-token-0123456789.c2lnbmF0dXJl"


@pytest.fixture(scope="module", autouse=True)
def _node_modules() -> None:
    assert shutil.which("node"), "node is not on PATH: run `make node`"
    assert (RECIPE / "node_modules" / "@aws-sdk" / "client-secrets-manager").is_dir(), (
        "the recipe's SDK clients are not installed: run `make node` (npm ci in recipes/node)"
    )


@dataclass
class NodeConsumer:
    """A seeded stack, the template's refresh request rule feeding a queue, and node."""

    stack: Stack
    sqs: Any
    queue_url: str
    arn: str
    outputs: list[str]

    def env(self, **extra: str) -> dict[str, str]:
        """node's environment: moto's endpoint and credentials (the fixtures'), the emulator's
        time as the module's clock."""
        return {
            **os.environ,
            "AWS_REGION": os.environ["AWS_DEFAULT_REGION"],  # the SDK for JavaScript reads this one
            "SECRET_ID": self.arn,
            "CLOCK_OFFSET": str(self.stack.clock.now() - time.time()),
            **extra,
        }

    def start(self, scenario: str, *, options: dict[str, Any] | None = None, **extra: str) -> Any:
        env = self.env(PROVIDER_OPTIONS=json.dumps({**FAST, **(options or {})}), **extra)
        return subprocess.Popen(
            ["node", str(DRIVER), scenario],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, process: Any) -> dict[str, Any]:
        """The outcome (the last line of standard output); every line kept for the scans."""
        with killed_if_running(process):
            out, err = process.communicate(timeout=60)
        self.outputs.append(out + err)
        assert process.returncode == 0, err
        lines = out.strip().splitlines()
        assert lines, err
        outcome: dict[str, Any] = json.loads(lines[-1])
        return outcome

    def run(self, scenario: str, *, options: dict[str, Any] | None = None, **extra: str) -> Any:
        return self.finish(self.start(scenario, options=options, **extra))

    def requests(self, wait: float = 0) -> list[dict[str, Any]]:
        """The refresh requests that reached the queue (removed from it). moto's EventBridge
        puts a matched event on the queue within the ``PutEvents`` call, so once node has
        exited, every request it sent is there: no wait (``wait``: for a node still running)."""
        answer = self.sqs.receive_message(
            QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=int(wait)
        )
        messages = answer.get("Messages", [])
        for message in messages:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        return [json.loads(message["Body"]) for message in messages]

    def deliver_when_requested(self, process: Any) -> dict[str, Any]:
        """Wait (30 s at most) for the refresh request, hand it to the rotator as the template
        does; the event."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and process.poll() is None:
            events = self.requests(wait=1)
            if events:
                assert len(events) == 1, events
                assert self.stack.invoke("rotator", events[0])["outcome"] == "rotated"
                return events[0]
        pytest.fail(f"no refresh request reached the rule's target: {self.finish(process)}")

    def republish(self, **fields: Any) -> None:
        """The published document with ``fields`` changed (times as the emulator's clock)."""
        text = self.stack.secretsmanager.get_secret_value(SecretId=SERVICE_SECRET)["SecretString"]
        document = json.loads(text)
        document.update(fields)
        self.stack.secretsmanager.put_secret_value(
            SecretId=SERVICE_SECRET, SecretString=json.dumps(document)
        )

    def published(self) -> str:
        return self.stack.service_document().token


def iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


@pytest.fixture
def node(server_stack: Stack) -> Iterator[NodeConsumer]:
    """A stack bootstrapped an hour ago (forced refreshes not debounced), the template's rule
    (in moto's account) sending refresh requests to a queue; no token in anything node printed."""
    rule = template_model.source()["Resources"]["RefreshRequestedRule"]["Properties"]
    pattern = copy.deepcopy(rule["EventPattern"])
    pattern["account"] = ["123456789012"]
    sqs, queue_url = refresh_request_queue(pattern=pattern)
    server_stack.seed()
    server_stack.emulator.advance(HOUR)
    arn = server_stack.secretsmanager.describe_secret(SecretId=SERVICE_SECRET)["ARN"]
    consumer = NodeConsumer(server_stack, sqs, queue_url, arn, [])
    yield consumer
    assert consumer.outputs, "node never ran"
    tokens = {*secret_values(server_stack), REFUSED_TOKEN}
    for output in consumer.outputs:
        for token in tokens:
            assert token not in output


# --- docs/consume-node.md's handler, as pasted ---------------------------------------------


def test_the_documented_lambda_handler_lists_projects_with_one_read(
    node: NodeConsumer, tmp_path: Path
) -> None:
    """The handler next to a copy of cmstoken.mjs, as the page says; two invocations in one
    warm environment: one read of the secret, two listings."""
    shutil.copy(RECIPE / "cmstoken.mjs", tmp_path / "cmstoken.mjs")
    (tmp_path / "node_modules").symlink_to(RECIPE / "node_modules")
    (tmp_path / "index.mjs").write_text(recipe("node-lambda-handler"))
    invoke = (
        "import { handler } from './index.mjs';"
        "for (const _ of [1, 2]) console.log(JSON.stringify(await handler({}, {})));"
    )
    gets = node.stack.emulator.counts["projects"]
    result = subprocess.run(
        ["node", "--input-type=module", "-e", invoke],
        cwd=tmp_path,
        env={**node.env(), "CMS_TOKEN_SECRET_ARN": node.arn},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    node.outputs.append(result.stdout + result.stderr)
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines()[-2:]:
        assert json.loads(line)["data"][0]["projectId"].startswith("prj_")
    assert node.stack.emulator.counts["projects"] - gets == 2


def test_the_documented_handler_needs_only_the_two_clients() -> None:
    """package.json pins exactly the two SDK clients, and the lock holds those versions."""
    package = json.loads((RECIPE / "package.json").read_text())
    assert package["dependencies"].keys() == {
        "@aws-sdk/client-secrets-manager",
        "@aws-sdk/client-eventbridge",
    }
    lock = json.loads((RECIPE / "package-lock.json").read_text())["packages"]
    for name, version in package["dependencies"].items():
        assert version[0].isdigit(), f"{name} is not pinned to one version"
        assert lock[f"node_modules/{name}"]["version"] == version
    module = (RECIPE / "cmstoken.mjs").read_text()
    assert "import(" not in module
    assert "require(" not in module
    assert set(re.findall(r'^(?:import .*|\}) from "([^"]+)";$', module, re.MULTILINE)) == {
        "node:crypto",
        "@aws-sdk/client-secrets-manager",
        "@aws-sdk/client-eventbridge",
    }


# --- reading and the cache ------------------------------------------------------------------


def test_the_module_reads_once_and_lists_projects(node: NodeConsumer) -> None:
    """Concurrent callers share one read; the document printed does not show the token."""
    outcome = node.run("listProjects", CALLERS=str(CALLERS))
    assert outcome["ok"], outcome
    published = fingerprint(node.published())
    assert outcome["before"] == outcome["after"] == published
    assert [answer["status"] for answer in outcome["answers"]] == [200] * CALLERS
    assert outcome["answers"][0]["body"]["data"][0]["projectId"].startswith("prj_")
    assert outcome["calls"] == {"GetSecretValue": 1}
    assert outcome["apiUrl"] == node.stack.emulator.api_url
    assert "apiUrl" in outcome["printed"]
    assert "token" not in outcome["printed"]


# --- refused tokens -------------------------------------------------------------------------


def test_a_refused_token_is_replaced_by_the_published_one_without_a_request(
    node: NodeConsumer,
) -> None:
    """The module cached a token, the stack rotated, the API refuses the cached one: the
    re-read finds the new one, the call is retried with it, nothing is requested."""
    process = node.start("listProjects", PAUSE="1")
    assert process.stdout is not None
    assert process.stdin is not None
    ready = json.loads(process.stdout.readline())
    old = node.published()
    assert ready == {"ready": fingerprint(old)}
    assert node.stack.invoke("rotator", {"force": True})["outcome"] == "rotated"
    node.stack.emulator.inject("projects", "status", status=401)
    process.stdin.write("go\n")
    process.stdin.flush()
    outcome = node.finish(process)
    assert outcome["ok"], outcome
    assert outcome["before"] == fingerprint(old)
    assert outcome["after"] == fingerprint(node.published()) != fingerprint(old)
    assert [answer["status"] for answer in outcome["answers"]] == [200]
    assert outcome["calls"] == {"GetSecretValue": 2}
    assert node.requests() == []


def test_concurrent_callers_refused_send_one_request_and_get_the_rotated_token(
    node: NodeConsumer,
) -> None:
    """Five calls at once are refused (401) with the published token: one re-read shows the
    same token, one refresh request reaches the rule's target, the rotator publishes, and all
    five are retried once with the new token."""
    old = node.published()
    node.stack.emulator.inject("projects", "status", times=CALLERS, status=401)
    gets = node.stack.emulator.counts["projects"]
    process = node.start("listProjects", CALLERS=str(CALLERS))
    event = node.deliver_when_requested(process)
    outcome = node.finish(process)
    assert outcome["ok"], outcome
    new = node.published()
    assert new != old
    assert node.stack.emulator.service_token_valid(new)
    assert outcome["before"] == fingerprint(old)
    assert outcome["after"] == fingerprint(new)
    assert [answer["status"] for answer in outcome["answers"]] == [200] * CALLERS
    # five refused, five retried, and the rotator's verification of the new token
    assert node.stack.emulator.counts["projects"] - gets == 2 * CALLERS + 1
    assert event["source"] == "cmstoken.consumer"
    assert event["detail-type"] == "Service Token Refresh Requested"
    assert event["detail"]["reason"] == "refused"
    assert event["detail"]["token_fingerprint"] == fingerprint(old)
    assert event["detail"]["secret_id"] == node.arn
    assert node.requests() == [], "one request for every caller"


def test_no_new_token_within_the_wait_is_a_refresh_timeout(node: NodeConsumer) -> None:
    node.republish(token=REFUSED_TOKEN)
    outcome = node.run("refused", options={"refreshWaitSeconds": 1})
    assert outcome["ok"] is False
    assert outcome["reason"] == "refresh_timeout"
    assert "no new one was published within 1 s" in outcome["message"]
    [event] = node.requests()
    assert event["detail"]["token_fingerprint"] == fingerprint(REFUSED_TOKEN)


def test_a_refresh_within_the_stacks_interval_is_debounced_at_once(node: NodeConsumer) -> None:
    refreshed = node.stack.clock.now() - 100
    node.republish(token=REFUSED_TOKEN, refreshed_at=iso(refreshed))
    started = time.monotonic()
    outcome = node.run("refused", options={"refusedSpreadSeconds": 0})
    assert time.monotonic() - started < 15  # no wait: node's start and two reads
    assert outcome["ok"] is False
    assert outcome["reason"] == "refresh_debounced"
    assert "skips forced refreshes within 600 s" in outcome["message"]
    assert outcome["retryAt"] == int(refreshed) + 600
    assert node.requests() == []


def test_a_stack_that_needs_reauthorization_is_said_at_once(node: NodeConsumer) -> None:
    node.republish(token=REFUSED_TOKEN, credential_status="reauthorization_required")
    outcome = node.run("refused", options={"refusedSpreadSeconds": 0})
    assert outcome["ok"] is False
    assert outcome["reason"] == "reauthorization_required"
    assert "cmstoken-admin --stack NAME bootstrap" in outcome["message"]
    assert node.requests() == []


def test_an_entry_eventbridge_refuses_is_a_request_failed(node: NodeConsumer) -> None:
    with refusing_eventbridge() as stub:
        node.republish(token=REFUSED_TOKEN)
        outcome = node.run(
            "refused", options={"refusedSpreadSeconds": 0}, AWS_ENDPOINT_URL_EVENTBRIDGE=stub.url
        )
    assert outcome["ok"] is False
    assert outcome["reason"] == "request_failed"
    assert "NotAuthorizedForSourceException: Not authorized for the source." in outcome["message"]
    assert "events:PutEvents" in outcome["message"]
    [entry] = stub.entries
    assert entry["Source"] == "cmstoken.consumer"
    assert entry["DetailType"] == "Service Token Refresh Requested"
    assert "EventBusName" not in entry  # the default bus


# --- no secret ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "reason"),
    [("mistyped ARN", "secret_not_found"), ("empty secret", "not_bootstrapped")],
)
def test_no_secret_value_says_which_and_calls_no_api(
    node: NodeConsumer, secret: str, reason: str
) -> None:
    """GetSecretValue answers ResourceNotFoundException for both; DescribeSecret tells them
    apart."""
    if secret == "mistyped ARN":
        arn = node.arn[:-1] + ("A" if node.arn[-1] != "A" else "B")
    else:
        arn = node.stack.secretsmanager.create_secret(Name="cmstoken/other-stack")["ARN"]
    outcome = node.run("listProjects", SECRET_ID=arn)
    assert outcome["ok"] is False
    assert outcome["reason"] == reason
    assert arn in outcome["message"]
    assert outcome["calls"] == {"GetSecretValue": 1, "DescribeSecret": 1}
