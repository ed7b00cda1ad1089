"""The links function's part of the local stack, as scripts/local_links.py sets it up for the
demo and the tests: the signing key, the links' table and the alarm topic in moto's server, the
bootstrap (and the links function) behind a local Lambda API; and a valid link's page as a
function URL asks for it (a payload format 2.0 ``GET``), the link signed with the stack's key
and bound to its current credential."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from function_url import to_event
from local_links import LocalLinks, local_links
from local_stack import ACCOUNT, BOOTSTRAP, REGION, TIMEOUTS, load_handler

LINKS = "local-links"
STACK_NAME = "cmstoken-bench"
TIMEOUT_SECONDS = 30.0  # template.yaml: LinksFunction's Timeout
# What a cold start of the links function needs besides the template's defaults: the local
# resources local_links created (the template's !Ref values) and the local Lambda API.
LOCAL_VARIABLES = (
    "STACK_NAME",
    "LINKS_KEY_SECRET_ID",
    "LINKS_TABLE",
    "BOOTSTRAP_FUNCTION_NAME",
    "ALARM_TOPIC_ARN",
    "AWS_ENDPOINT_URL_LAMBDA",
)
LINK_LIFETIME = 86_400  # the longest a link is valid: the whole bench
# What a browser sends with a link it opens (typed, or from a mail or chat client).
BROWSER_HEADERS = (
    ("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"),
    ("accept-language", "en-US,en;q=0.9"),
    ("sec-fetch-dest", "document"),
    ("sec-fetch-mode", "navigate"),
    ("sec-fetch-site", "none"),
    ("user-agent", "Mozilla/5.0 (X11; Linux aarch64) cmstoken-bench"),
)
Handler = Callable[[Any, Any], Any]


@dataclass
class LinksSite:
    """The links function's local stack (``local``), the variables a cold start of it needs
    (``variables``: ``LOCAL_VARIABLES``' local values), the seconds each invocation of the
    bootstrap behind the Lambda API took (``status_seconds``: a page asks it for the stack's
    status), and a browser's ``GET`` of a valid link's page (``page``, once the stack is
    bootstrapped and its link signed)."""

    local: LocalLinks
    variables: dict[str, str]
    status_seconds: list[float] = field(default_factory=list)
    page: dict[str, Any] | None = None

    @property
    def domain(self) -> str:
        return self.local.url.domain

    def key(self) -> bytes:
        """The links' signing key, read from moto with a session of its own (not counted)."""
        import boto3

        client = boto3.session.Session().client("secretsmanager")
        text: str = client.get_secret_value(SecretId=self.variables["LINKS_KEY_SECRET_ID"])[
            "SecretString"
        ]
        return text.encode()

    def link(self, binding: int, now: int) -> str:
        """A new link (its token) for the stack's credential authorized at ``binding``, valid
        from ``now`` for a day, signed with the stack's key."""
        from cmstoken.links import tokens
        from cmstoken.links.stack import Stack

        token, _ = tokens.new_link(
            Stack(name=STACK_NAME, account=ACCOUNT, region=REGION),
            binding=binding,
            key=self.key(),
            now=now,
            lifetime=LINK_LIFETIME,
            nonce=secrets.token_bytes(tokens.NONCE_BYTES),
        )
        return token

    def page_event(self, link: str) -> dict[str, Any]:
        """A browser's ``GET`` of ``link``'s page, as the function URL hands it to the
        function."""
        return page_event(self.domain, link)


def page_event(domain: str, link: str, now: float | None = None) -> dict[str, Any]:
    """A browser's ``GET`` of the page of ``link`` (a token) at the function URL ``domain``:
    the payload format 2.0 event a function URL sends (function_url.to_event)."""
    headers = [("host", domain), *BROWSER_HEADERS]
    return to_event(
        "GET",
        f"/l/{link}",
        headers,
        b"",
        domain,
        "198.51.100.7",
        "00000000-0000-4000-8000-00000000beef",
        now=now,
    )


def timed(handler: Handler, seconds: list[float]) -> Handler:
    """``handler``, appending each invocation's wall-clock seconds to ``seconds``."""

    def run(event: Any, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return handler(event, context)
        finally:
            seconds.append(time.perf_counter() - started)

    return run


@contextmanager
def links_site(bootstrap: Handler, clock: Callable[[], float]) -> Iterator[LinksSite]:
    """The links function of the stack ``STACK_NAME`` while the context lasts, through
    local_links: ``bootstrap`` (the in-process handler) and the links function's handler
    behind the local Lambda API, on ``clock``. The links function's environment is set in
    this process (its handler runs here too) and kept for the cold starts."""
    variables: dict[str, str] = {}

    def setenv(name: str, value: str) -> None:
        os.environ[name] = value
        variables[name] = value

    status_seconds: list[float] = []
    handlers = {BOOTSTRAP: timed(bootstrap, status_seconds), LINKS: load_handler("links")}
    with local_links(
        handlers,
        stack_name=STACK_NAME,
        bootstrap=BOOTSTRAP,
        links=LINKS,
        setenv=setenv,
        timeouts={BOOTSTRAP: TIMEOUTS[BOOTSTRAP], LINKS: TIMEOUT_SECONDS},
        clock=clock,
    ) as local:
        wanted = {name: variables[name] for name in LOCAL_VARIABLES}
        yield LinksSite(local, wanted, status_seconds)
