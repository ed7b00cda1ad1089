"""One click from the alert to an authorized stack, over HTTP: the links function behind a
local function URL, the real bootstrap behind a local Lambda API (queued invocations and their
destination included), moto's server for the key, the table and the topic (a queue
subscribed), and the emulator as the identity provider. A scanner's fetches change nothing;
refusals leave both secrets byte for byte as they were."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
import requests

from cmstoken.aws.link_state import KEY
from cmstoken.cli.admin.invokers import LocalInvoker
from function_url import FunctionUrl
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack, secret_values
from local_stack import LambdaEndpoint
from support import load_handler

pytestmark = pytest.mark.integration

ACCOUNT, REGION = "123456789012", "us-east-1"
CODE = re.compile(r'<p class="code">([A-Z0-9-]+)</p>')
PROOF = re.compile(r'name="proof" value="([^"]+)"')


def context(function: str) -> Any:
    return SimpleNamespace(
        function_name=function,
        function_version="$LATEST",
        memory_limit_in_mb=256,
        invoked_function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function}",
        aws_request_id=f"test-{time.monotonic_ns()}",
        get_remaining_time_in_millis=lambda: 30_000,
    )


@dataclass
class OneClick:
    stack: Stack
    url: FunctionUrl
    endpoint: LambdaEndpoint
    invoker: LocalInvoker
    sqs: Any
    queue: str

    def notices(self, wait: float = 10) -> list[dict[str, Any]]:
        """The notices the topic delivered to the queue (their facts), waiting for one."""
        deadline = time.monotonic() + wait
        while True:
            found = self.sqs.receive_message(
                QueueUrl=self.queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", [])
            if found or time.monotonic() > deadline:
                return [json.loads(json.loads(m["Body"])["Message"]) for m in found]

    def local(self, link: str) -> str:
        """The notice's link, reached at the local function URL."""
        return self.url.base_url + "/l/" + link.rsplit("/l/", 1)[1]

    def press(self, link: str) -> requests.Response:
        """What a browser does: open the link, then press its button."""
        page = requests.get(self.local(link), timeout=30)
        assert page.status_code == 200, page.text
        proof = PROOF.search(page.text)
        assert proof is not None
        return requests.post(
            self.local(link),
            data={"proof": proof[1]},
            headers={"Origin": self.url.base_url, "Sec-Fetch-Site": "same-origin"},
            timeout=30,
        )


@pytest.fixture
def one_click(server_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[OneClick]:
    secrets, dynamodb = boto3.client("secretsmanager"), boto3.client("dynamodb")
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    key = secrets.create_secret(Name="cmstoken/link-signing-key", SecretString="k3Y" * 22)
    dynamodb.create_table(
        TableName="links",
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    topic = sns.create_topic(Name="alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"])
    for name, value in {
        "STACK_NAME": "cmstoken-prod",
        "LINKS_KEY_SECRET_ID": key["ARN"],
        "LINKS_TABLE": "links",
        "BOOTSTRAP_FUNCTION_NAME": "bootstrap",
        "ALARM_TOPIC_ARN": topic,
        "REAUTHORIZATION_WARNING_SECONDS": "432000",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    links = load_handler("links")
    invoker = LocalInvoker(
        {"bootstrap": load_handler("bootstrap"), "links": links},
        timeout_seconds={"bootstrap": 900, "links": 30},
        region=REGION,
        account=ACCOUNT,
    )
    with FunctionUrl(links, region=REGION, context_factory=lambda _: context("links")) as url:
        endpoint = LambdaEndpoint(
            invoker,
            ("bootstrap", "links"),
            destinations={"bootstrap": "links"},
            urls={"links": url.origin + "/"},
        ).start()
        monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint.url)
        try:
            yield OneClick(server_stack, url, endpoint, invoker, sqs, queue)
        finally:
            endpoint.stop()


def secrets_now(stack: Stack) -> dict[str, Any]:
    found = {}
    for secret in (REFRESH_SECRET, SERVICE_SECRET):
        try:
            found[secret] = stack.secretsmanager.get_secret_value(SecretId=secret)
        except stack.secretsmanager.exceptions.ResourceNotFoundException:  # no value yet
            found[secret] = None
        else:
            found[secret].pop("ResponseMetadata")
    return found


def test_one_click_from_the_notice_to_an_authorized_stack(one_click: OneClick) -> None:
    stack = one_click.stack
    assert one_click.invoker.invoke("links", {"action": "remind"}) == {
        "done": "not_bootstrapped: sent"
    }
    (notice,) = one_click.notices()
    assert notice["kind"] == "never-bootstrapped"
    link = notice["link"]
    assert link.startswith(one_click.url.origin + "/l/")

    # a mail scanner and a chat unfurler fetch the link first: nothing changes
    before = secrets_now(stack)
    for _ in range(3):
        assert requests.get(one_click.local(link), timeout=30).status_code == 200
        assert requests.head(one_click.local(link), timeout=30).status_code == 200
    assert secrets_now(stack) == before
    assert before[REFRESH_SECRET] is None  # still empty: not bootstrapped

    # the person presses the button, sees the code, approves it at the identity provider
    started = one_click.press(link)
    assert started.status_code == 200, started.text
    code = CODE.search(started.text)
    assert code is not None
    pending = stack.refresh_document().pending
    assert pending is not None
    assert pending.user_code == code[1]
    assert f"user_code={code[1]}" in started.text
    stack.emulator.approve(code[1])

    # the bootstrap polls in the background and the outcome reaches the topic
    one_click.endpoint.drain()
    outcome = one_click.notices()
    assert [n["kind"] for n in outcome] == ["authorized"]
    assert stack.refresh_document().credential is not None
    assert stack.published_token_works()

    # the link is void now that a new authorization succeeded
    again = requests.get(one_click.local(link), timeout=30)
    assert again.status_code == 403
    assert "no longer needed" in again.text


@pytest.mark.parametrize(
    "change",
    [
        lambda link: link[:-1] + ("A" if link[-1] != "A" else "B"),
        lambda link: link.replace("/l/v1.", "/l/v2."),
        lambda link: link + "x" * 600,
    ],
    ids=["tampered", "forged", "oversized"],
)
def test_a_refused_link_changes_neither_secret(one_click: OneClick, change: Any) -> None:
    one_click.stack.seed()
    secrets = one_click.stack.secretsmanager
    document = json.loads(secrets.get_secret_value(SecretId=REFRESH_SECRET)["SecretString"])
    document["status"] = "reauthorization_required"  # the identity provider refused it
    secrets.put_secret_value(SecretId=REFRESH_SECRET, SecretString=json.dumps(document))
    assert one_click.invoker.invoke("links", {"action": "remind"})["done"] == "refused: sent"
    (notice,) = one_click.notices()
    before, values = secrets_now(one_click.stack), secret_values(one_click.stack)
    bad = change(one_click.local(notice["link"]))
    for method in ("GET", "POST"):
        answer = requests.request(method, bad, data={"proof": "x"}, timeout=30)
        assert answer.status_code in (403, 404)
    assert secrets_now(one_click.stack) == before
    assert secret_values(one_click.stack) == values
    assert one_click.stack.refresh_document().pending is None
