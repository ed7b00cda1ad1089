"""The re-authorization links on the models, as both simulations wire them
(``simulation.links_exploration``, ``simulation.week``): the real links application
(``LinksApp`` over ``AwsPortal`` and its DynamoDB, SNS, Secrets Manager and Lambda adapters) on
the models, the links' table, alarm topic and signing key created (``new_links_world``), the
bootstrap reached through its links alias (``LambdaModel``), and what a holder of the alarm
topic's messages reads of them (``notices``, ``user_code_of``)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, cast

from cmstoken.aws.functions import FunctionCaller
from cmstoken.aws.link_state import KEY, LinkState
from cmstoken.aws.secrets import SecretStore
from cmstoken.aws.topic import Topic
from cmstoken.core.link_tags import LINKS_ALIAS
from cmstoken.links import tokens
from cmstoken.links.app import LinksApp
from cmstoken.links.events import Outcome, Remind
from cmstoken.links.portal import AwsPortal
from cmstoken.links.stack import Stack
from cmstoken.links.web import Request
from simulation.dynamodb import DynamoDBModel
from simulation.secretsmanager import SecretsManagerModel
from simulation.sns import SnsModel
from simulation.world import World

STACK = Stack(name="cmstoken", account="123456789012", region="us-east-1")
DOMAIN = "links.lambda-url.us-east-1.on.aws"
URL = f"https://{DOMAIN}/"
TABLE = "links"
KEY_SECRET = "cmstoken/link-signing-key"
KEY_TEXT = "k" * 64
STARTS_PER_HOUR = 6
WARNING_SECONDS = 25 * 86_400


class LambdaModel:
    """Lambda's ``Invoke`` of the bootstrap function, for the real ``FunctionCaller``: a
    ``RequestResponse`` invocation passes a scheduling point (where Lambda may refuse it) and
    then runs the real bootstrap in-process (its calls are scheduling points of their own); an
    error it raises comes back as Lambda's ``FunctionError``. An ``Event`` invocation is queued
    (a scheduling point: the queue is shared). A crash inside the bootstrap ends the whole
    actor: the harness cannot end one process of an actor and let its caller go on, so a
    bootstrap that dies alone is explored as its calls refused (``busy``)."""

    def __init__(self, world: World, interceptor: Any) -> None:
        self.world, self.interceptor = world, interceptor
        self.queued: list[dict[str, Any]] = []

    def invoke(self, *, FunctionName: str, InvocationType: str, Payload: bytes) -> Any:  # noqa: N803
        payload = json.loads(Payload)
        if InvocationType == "Event":
            self.interceptor("lambda", "InvokeAsync:queue", lambda: self.queued.append(payload))
            return {"StatusCode": 202}
        self.interceptor("lambda", f"Invoke:{payload['action']}", lambda: None)
        via_links = FunctionName.endswith(f":{LINKS_ALIAS}")
        try:
            result = self.world.bootstrap(seconds=20, via_links=via_links, **payload)
        except Exception as exc:
            body = {"errorType": type(exc).__name__, "errorMessage": "(not shown)"}
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _body(body)}
        return {"StatusCode": 200, "Payload": _body(result)}


def _body(value: Any) -> io.BytesIO:
    return io.BytesIO(json.dumps(value).encode())


@dataclass
class LinksWorld:
    """A stack with one-click re-authorization on the models (``new_links_world`` creates
    its table, topic and key)."""

    world: World
    table: DynamoDBModel
    topic: SnsModel
    functions: LambdaModel
    topic_arn: str
    keys: SecretsManagerModel = field(default_factory=SecretsManagerModel)
    starts_per_hour: int = STARTS_PER_HOUR  # the links' start limit (LINKS_STARTS_PER_HOUR)
    warning_seconds: int = WARNING_SECONDS  # ReauthorizationWarningSeconds
    sent: dict[int, str] = field(default_factory=dict)  # links sent, by serial
    poll_results: dict[str, Any] = field(default_factory=dict)  # a poller's, once it ended
    poll_links: dict[str, str] = field(default_factory=dict)  # the link a poller polls for

    def app(self) -> LinksApp:
        portal = AwsPortal(
            stack=STACK,
            locate=lambda: URL,
            secrets=SecretStore(cast(Any, self.keys)),
            key_secret_id=KEY_SECRET,
            bootstrap=FunctionCaller(f"bootstrap:{LINKS_ALIAS}", client=cast(Any, self.functions)),
            table=LinkState(TABLE, client=cast(Any, self.table)),
            topic=Topic(self.topic_arn, client=cast(Any, self.topic)),
            starts_per_hour=self.starts_per_hour,
        )
        return LinksApp(
            lambda url: portal, self.warning_seconds, lambda: int(self.world.clock.now())
        )

    def link(self, serial: int) -> str:
        """A link for the current credential, issued now."""
        binding = self.binding()
        token, _ = tokens.new_link(
            STACK,
            binding=binding,
            key=KEY_TEXT.encode(),
            now=int(self.world.clock.now()),
            lifetime=86_400,
            nonce=serial.to_bytes(16, "big"),
        )
        return token

    def binding(self) -> int:
        credential = self.world.refresh_document().credential
        return 0 if credential is None else int(credential.authorized_at)

    def press(self, link: str) -> dict[str, Any]:
        """The person presses the button on ``link``'s page: the page's POST."""
        key = KEY_TEXT.encode()
        claims = tokens.check(link, key, expected(self.binding()), int(self.world.clock.now()))
        proof = "" if not isinstance(claims, tokens.Claims) else tokens.form_proof(key, claims)
        request = Request(
            method="POST",
            path=f"/l/{link}",
            domain=DOMAIN,
            headers={"origin": f"https://{DOMAIN}", "sec-fetch-site": "same-origin"},
            body=f"proof={proof}".encode(),
        )
        return cast(dict[str, Any], self.app().handle(request))

    def remind(self, reason: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.app().handle(Remind(reason)))

    def poll_and_report(self, poller: str, link: str) -> dict[str, Any]:
        """A queued background poll (by ``poller``) of what the link tagged ``link`` started,
        and its outcome delivered to the links."""
        self.poll_results.pop(poller, None)
        self.poll_links[poller] = link
        result = self.world.bootstrap("poll", seconds=60, via_links=True, link=link)
        self.poll_results[poller] = result
        return cast(dict[str, Any], self.app().handle(Outcome(result, link=link)))

    def link_of(self, serial: int) -> str:
        """The link with ``serial`` the stack sent before the scenario began."""
        return self.sent[serial]

    def resume_poll(self, poller: str) -> dict[str, Any]:
        """Lambda's retry of ``poller``'s poll and its outcome: the outcome alone when the poll
        ended (its destination record is kept), otherwise both."""
        link = self.poll_links[poller]
        if poller not in self.poll_results:
            return self.poll_and_report(poller, link)
        outcome = Outcome(self.poll_results[poller], link=link)
        return cast(dict[str, Any], self.app().handle(outcome))

    def items(self) -> dict[str, dict[str, Any]]:
        return {i[KEY]["S"]: i for i in self.table.scan(TableName=TABLE)["Items"]}


def expected(binding: int) -> tokens.Expected:
    """What a link of this stack for the credential authorized at ``binding`` must claim."""
    return tokens.Expected(
        stack=STACK.name, account=STACK.account, region=STACK.region, binding=binding
    )


def new_links_world(
    world: World,
    interceptor: Any,
    functions: LambdaModel,
    *,
    starts_per_hour: int = STARTS_PER_HOUR,
    warning_seconds: int = WARNING_SECONDS,
) -> LinksWorld:
    """The links of ``world``'s stack: the table and topic models passing ``interceptor``,
    the bootstrap through ``functions``; the topic and the table created (their calls pass
    ``interceptor``), then the signing key's secret (its model has none)."""
    lw = LinksWorld(
        world=world,
        table=DynamoDBModel(interceptor=interceptor),
        topic=SnsModel(interceptor=interceptor),
        functions=functions,
        topic_arn="",
        starts_per_hour=starts_per_hour,
        warning_seconds=warning_seconds,
    )
    lw.topic_arn = lw.topic.create_topic(Name="cmstoken-alarms")["TopicArn"]
    lw.table.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": KEY, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": KEY, "AttributeType": "S"}],
    )
    lw.keys.create_secret(Name=KEY_SECRET, SecretString=KEY_TEXT)
    return lw


def user_code_of(answer: Any) -> str | None:
    """The user code a started page shows."""
    if not isinstance(answer, dict) or answer.get("statusCode") != 200:
        return None
    body = str(answer.get("body", ""))
    marker = 'class="code">'
    if marker not in body:
        return None
    return body.split(marker, 1)[1].split("<", 1)[0]


NEEDS = ("credential-refused", "never-bootstrapped", "warning-window")


def notices(topic: SnsModel) -> list[dict[str, str]]:
    """The facts of every notice published, in order (what an ``sqs`` subscriber gets)."""
    return [json.loads(p.body("sqs")) for p in topic.published]
