"""The one-click path over HTTP, locally (the `one_click` fixture of tests/integration/links,
set up by scripts/local_links.py as `make demo` sets it up): the links function behind a local
function URL, the real bootstrap behind a local Lambda API, moto's server (key, table, topic
with a queue subscribed) and the emulator. What the tests read of it: the notices, the messages
as published, the secrets, and a link scanner."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from typing import Any

import requests

from cmsemu import Emulator
from harness import REFRESH_SECRET, SERVICE_SECRET, Stack
from local_links import CODE, LocalLinks
from local_stack import ACCOUNT, REGION

__all__ = [
    "ACCOUNT",
    "CODE",
    "REGION",
    "SCANNER_HEADERS",
    "URL",
    "OneClick",
    "PersonPacedClock",
    "message_urls",
    "scan",
    "secrets_now",
]
URL = re.compile(r"https?://[^\s<>\"'`)\]]+")
# What mail security gateways and chat unfurlers send: no cookies, no Origin, their own agent.
SCANNER_HEADERS = {"User-Agent": "Mozilla/5.0 (compatible; LinkScanner/1.0; +preview)"}


@dataclass
class OneClick(LocalLinks):
    """The local one-click path (``LocalLinks``: the notices, the links, the button) of the
    test's ``stack``."""

    stack: Stack

    def published(self) -> list[dict[str, str]]:
        """Every message published to the topic, as published: the message for each kind of
        subscriber (``email``, ``https``, ``sqs``...) and the ``Subject``, oldest first. Read
        from moto's server, which runs in this process (an e-mail subscription delivers
        nothing there)."""
        from moto.sns.models import sns_backends

        topic = sns_backends[ACCOUNT][REGION].topics[self.topic]
        return [
            {**json.loads(message), "Subject": subject or ""}
            for _, message, subject, _, _ in topic.sent_notifications
        ]


def message_urls(message: dict[str, str]) -> list[str]:
    """Every URL in a published message's e-mail text and chat notification (its
    description and next steps), in order, each once."""
    chat = json.loads(message["https"])["content"]
    texts = [message["email"], chat["description"], *chat["nextSteps"]]
    return list(dict.fromkeys(url.rstrip(".,;:") for text in texts for url in URL.findall(text)))


def scan(one_click: OneClick, message: dict[str, str], rounds: int = 3) -> list[str]:
    """Fetch every URL in ``message`` with GET and HEAD, ``rounds`` times, as a mail security
    gateway and a chat unfurler do before a person clicks; each answers 200. The URLs."""
    urls = message_urls(message)
    assert urls, "the message has no link"
    for _ in range(rounds):
        for url in urls:
            assert url.startswith(one_click.url.origin + "/l/"), url  # nothing else to fetch
            for method in ("GET", "HEAD"):
                answer = requests.request(
                    method, one_click.local(url), headers=SCANNER_HEADERS, timeout=30
                )
                assert answer.status_code == 200, (method, url, answer.status_code)
    return urls


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


class PersonPacedClock:
    """The emulator's clock at a person's pace. ``EmulatorClock`` moves the emulator's clock
    on every sleep, so a background poll runs through a code's whole lifetime in a fraction of
    a second; with this clock a sleep waits for real (the emulator's clock follows real time),
    so the poll keeps to its interval while a person reads the pages and clicks. ``hurry()``
    turns sleeps back into moves of the emulator's clock, so that a poll a test left pending
    runs out at once instead of for the code's lifetime."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self._hurry = threading.Event()

    def now(self) -> float:
        return float(self.emulator.now())

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self._hurry.wait(seconds):
            self.emulator.advance(seconds)

    def hurry(self) -> None:
        self._hurry.set()
