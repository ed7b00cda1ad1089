"""One-click re-authorization on this machine, for `make demo` and the tests: the links function
behind a local function URL (function_url.py), the bootstrap and the links function behind a
local Lambda API (local_stack.LambdaEndpoint: queued invocations, the bootstrap's alias
``links`` that the links function invokes and its destination, the links function, and the
links function's URL), and in moto (at ``AWS_ENDPOINT_URL``) the signing key, the
links' table and the alarm topic with a queue subscribed, from which the notices are read.
`LocalLinks.press` is a browser-free client: it opens a link and presses its button with the
page's proof and the headers a browser sends with a page's own form (same origin)."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import requests

from function_url import FunctionUrl
from local_stack import ACCOUNT, REGION, LambdaEndpoint

if TYPE_CHECKING:
    from cmstoken.cli.admin.invokers import LocalInvoker

Handler = Callable[[Any, Any], Any]
PROOF = re.compile(r'name="proof" value="([^"]+)"')
CODE = re.compile(r'<p class="code">([A-Z0-9-]+)</p>')
ONWARD = re.compile(r'<a class="go" href="([^"]+)"')
TITLE = re.compile(r"<title>([^<]*)</title>")
WARNING_SECONDS = 25 * 86_400  # the template's default ReauthorizationWarningSeconds


class LinkPageError(RuntimeError):
    """A link's page did not answer what a person would have seen next."""


@dataclass(frozen=True)
class Started:
    """What the page after the button shows: the code to compare at the identity provider,
    and the way there (its ``verification_uri_complete``). Both are secrets: never print
    them."""

    code: str
    onward: str


@dataclass
class LocalLinks:
    """The links function at ``url``, the Lambda API at ``endpoint`` (running ``invoker``'s
    functions), and the alarm ``topic`` with the ``queue`` subscribed to it."""

    url: FunctionUrl
    endpoint: LambdaEndpoint
    invoker: LocalInvoker
    sqs: Any
    queue: str
    topic: str

    def notices(self, wait: float = 10) -> list[dict[str, Any]]:
        """The notices the topic delivered to the queue since the last call (their facts),
        waiting up to ``wait`` seconds for one. Each is read once (then deleted)."""
        deadline = time.monotonic() + wait
        while True:
            found = self.sqs.receive_message(
                QueueUrl=self.queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", [])
            if found:
                self.sqs.delete_message_batch(
                    QueueUrl=self.queue,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                        for n, m in enumerate(found)
                    ],
                )
            if found or time.monotonic() > deadline:
                return [json.loads(json.loads(m["Body"])["Message"]) for m in found]

    def local(self, link: str) -> str:
        """The notice's link, reached at the local function URL."""
        return self.url.base_url + "/l/" + link.rsplit("/l/", 1)[1]

    def open(self, link: str) -> requests.Response:
        """What a browser does with the link: ``GET`` its page (which changes nothing)."""
        page = requests.get(self.local(link), timeout=30)
        if page.status_code != 200:
            raise LinkPageError(f"the link's page answered {page.status_code}: {page.text}")
        return page

    def press(self, link: str) -> requests.Response:
        """What a browser does: open the link, then press its button (the form's ``proof``,
        posted from the page: the page's origin, ``Sec-Fetch-Site: same-origin``)."""
        proof = PROOF.search(self.open(link).text)
        if proof is None:
            raise LinkPageError("the link's page has no button to press")
        return requests.post(
            self.local(link),
            data={"proof": proof[1]},
            headers={"Origin": self.url.base_url, "Sec-Fetch-Site": "same-origin"},
            timeout=30,
        )


def started(answer: requests.Response) -> Started:
    """The code and the way on, from the page the button answered."""
    code, onward = CODE.search(answer.text), ONWARD.search(answer.text)
    if answer.status_code != 200 or code is None or onward is None:
        raise LinkPageError(f"the button answered {answer.status_code}: {title(answer)}")
    return Started(code=code[1], onward=unescape(onward[1]))


def title(answer: requests.Response) -> str:
    """A page's title (what a person reads first)."""
    found = TITLE.search(answer.text)
    return unescape(found[1]) if found else "(no title)"


def lambda_context(function: str, *, region: str = REGION, account: str = ACCOUNT) -> Any:
    """A Lambda-like context for one invocation of ``function`` (30 s left)."""
    return SimpleNamespace(
        function_name=function,
        function_version="$LATEST",
        memory_limit_in_mb=256,
        invoked_function_arn=f"arn:aws:lambda:{region}:{account}:function:{function}",
        aws_request_id=f"local-{time.monotonic_ns()}",
        get_remaining_time_in_millis=lambda: 30_000,
    )


def create_resources(stack_name: str) -> dict[str, str]:
    """The signing key (random), the links' table, the alarm topic and a queue subscribed to
    it, in moto, named after ``stack_name``: the key's ARN, the table, the topic's ARN and
    the queue's URL."""
    import boto3

    from cmstoken.aws.link_state import KEY

    key = boto3.client("secretsmanager").create_secret(
        Name=f"{stack_name}/link-signing-key", SecretString=secrets.token_urlsafe(48)
    )
    table = f"{stack_name}-links"
    boto3.client("dynamodb").create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    sns, sqs = boto3.client("sns"), boto3.client("sqs")
    topic = sns.create_topic(Name=f"{stack_name}-alarms")["TopicArn"]
    queue = sqs.create_queue(QueueName=f"{stack_name}-inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn["Attributes"]["QueueArn"])
    return {"key": key["ARN"], "table": table, "topic": topic, "queue": queue}


@contextmanager
def local_links(
    handlers: Mapping[str, Handler],
    *,
    stack_name: str,
    bootstrap: str,
    links: str,
    setenv: Callable[[str, str], None] = os.environ.__setitem__,
    timeouts: Mapping[str, float] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[LocalLinks]:
    """The one-click path of the stack ``stack_name`` while the context lasts: ``handlers``
    holds the ``bootstrap`` and ``links`` functions' handlers (by those names); ``setenv``
    sets the links function's environment (the template's, pointed at the local resources)
    and ``AWS_ENDPOINT_URL_LAMBDA``; ``clock`` is the invocations' (their remaining time)."""
    import boto3

    from cmstoken.cli.admin.invokers import LocalInvoker
    from cmstoken.core.link_tags import LINKS_ALIAS

    made = create_resources(stack_name)
    for name, value in {
        "STACK_NAME": stack_name,
        "LINKS_KEY_SECRET_ID": made["key"],
        "LINKS_TABLE": made["table"],
        "BOOTSTRAP_FUNCTION_NAME": f"{bootstrap}:{LINKS_ALIAS}",
        "ALARM_TOPIC_ARN": made["topic"],
        "REAUTHORIZATION_WARNING_SECONDS": str(WARNING_SECONDS),
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        setenv(name, value)
    invoker = LocalInvoker(
        handlers,
        timeout_seconds=timeouts or {bootstrap: 900, links: 30},
        clock=clock,
        region=REGION,
        account=ACCOUNT,
    )
    with FunctionUrl(
        handlers[links], region=REGION, context_factory=lambda _: lambda_context(links)
    ) as url:
        endpoint = LambdaEndpoint(
            invoker,
            (bootstrap, links),
            destinations={f"{bootstrap}:{LINKS_ALIAS}": links},
            urls={links: url.origin + "/"},
            aliases={bootstrap: (LINKS_ALIAS,)},
        ).start()
        setenv("AWS_ENDPOINT_URL_LAMBDA", endpoint.url)
        sqs = boto3.client("sqs")
        try:
            yield LocalLinks(url, endpoint, invoker, sqs, made["queue"], made["topic"])
        except BaseException:
            endpoint.stop(drain=0)  # interrupted: a background poll ends with the servers
            raise
        endpoint.stop()
