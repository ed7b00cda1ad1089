"""The objects a warm Lambda container reuses: settings (validated once), the Secrets Manager
store and the upstream client with its pooled session."""

from __future__ import annotations

import os
from functools import cache
from typing import TYPE_CHECKING

from cmstoken.aws.notifications import Notifier
from cmstoken.aws.secrets import SecretStore
from cmstoken.core.clock import SystemClock
from cmstoken.core.settings import Settings
from cmstoken.observability import record_upstream_latency
from cmstoken.rotation.rotator import Rotator
from cmstoken.upstream.http import HttpTransport
from cmstoken.upstream.service import ServiceClient

if TYPE_CHECKING:
    from cmstoken.bootstrap import Bootstrapper

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
    transport = HttpTransport(observer=record_upstream_latency)
    return ServiceClient(settings().service_base_url, transport=transport, clock=CLOCK)


@cache
def notifier() -> Notifier:
    """The EventBridge notifier (its client is created on first use)."""
    return Notifier()


def rotator(owner: str) -> Rotator:
    """A rotator for one invocation (``owner`` names it in leases)."""
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


def reset() -> None:
    """Forget the cached objects (tests change the environment between runs)."""
    for cached in (settings, store, service, notifier):
        cached.cache_clear()
