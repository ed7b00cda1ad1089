"""The objects a warm Lambda container reuses: settings (validated once), the Secrets Manager
store and the upstream client with its pooled session."""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING

from cmstoken.aws.notifications import Notifier
from cmstoken.aws.secrets import SecretStore
from cmstoken.core.clock import SystemClock
from cmstoken.core.settings import LinksSettings, Settings

if TYPE_CHECKING:
    from cmstoken.bootstrap import Bootstrapper
    from cmstoken.links.app import LinksApp
    from cmstoken.rotation.rotator import Rotator
    from cmstoken.upstream.service import ServiceClient

CLOCK = SystemClock()


@cache
def settings() -> Settings:
    """The settings from the environment; the first call validates them."""
    return Settings.from_environ(os.environ)


@cache
def store() -> SecretStore:
    """The Secrets Manager store (its boto3 client is created on first use)."""
    return SecretStore()


@cache
def service() -> ServiceClient:
    """The service client, with the connection pool shared by every upstream call, each call's
    latency recorded as a metric."""
    # The upstream client is loaded by the functions that call upstream (not the links').
    from cmstoken.observability import record_upstream_latency
    from cmstoken.upstream.http import HttpTransport
    from cmstoken.upstream.service import ServiceClient

    transport = HttpTransport(observer=record_upstream_latency)
    return ServiceClient(settings().service_base_url, transport=transport, clock=CLOCK)


@cache
def notifier() -> Notifier:
    """The EventBridge notifier (its client is created on first use)."""
    return Notifier()


def rotator(owner: str) -> Rotator:
    """A rotator for one invocation (``owner`` names it in leases)."""
    from cmstoken.rotation.rotator import Rotator

    return Rotator(
        settings(),
        store=store(),
        service=service(),
        clock=CLOCK,
        owner=owner,
        notifier=notifier(),
    )


def bootstrapper() -> Bootstrapper:
    """A bootstrapper for one invocation."""
    from cmstoken.bootstrap import Bootstrapper  # not loaded by the rotator's cold start

    return Bootstrapper(
        settings(), store=store(), service=service(), clock=CLOCK, notifier=notifier()
    )


@cache
def links_settings() -> LinksSettings:
    """The links function's settings from the environment; the first call validates them."""
    return LinksSettings.from_environ(os.environ)


@cache
def links_url(function: str) -> str:
    """The links function's own URL, looked up once per container."""
    from cmstoken.aws.functions import FunctionCaller

    return FunctionCaller(function).url()


def links(function_arn: str) -> LinksApp:
    """The links function's application for one invocation (``function_arn``: the invoked
    function, which names the account, region and function)."""
    from cmstoken.aws.functions import FunctionCaller
    from cmstoken.aws.link_state import LinkState
    from cmstoken.aws.topic import Topic
    from cmstoken.links.app import LinksApp
    from cmstoken.links.portal import AwsPortal
    from cmstoken.links.stack import Stack

    config = links_settings()
    _, _, _, region, account, _, function = function_arn.split(":")[:7]
    stack = Stack(name=config.stack_name, account=account, region=region)

    def portal(url: str | None) -> AwsPortal:
        return AwsPortal(
            stack=stack,
            locate=(lambda: url) if url is not None else (lambda: links_url(function)),
            secrets=store(),
            key_secret_id=config.key_secret_id,
            bootstrap=FunctionCaller(config.bootstrap_function, timeout=20),
            table=LinkState(config.table),
            topic=Topic(config.topic_arn),
            starts_per_hour=config.starts_per_hour,
        )

    return LinksApp(portal, config.warning_seconds, lambda: int(CLOCK.now()))


def reset() -> None:
    """Forget the cached objects (tests change the environment between runs)."""
    for cached in (settings, store, service, notifier, links_settings, links_url):
        cached.cache_clear()
