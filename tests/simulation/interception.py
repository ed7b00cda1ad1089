"""The one hook every model call passes through: a scheduling point."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Interceptor(Protocol):
    """Runs one model operation: ``act`` performs it and returns its answer (or raises the
    service's error). An interceptor may pause before calling ``act`` (a scheduling point),
    raise instead of calling it (the caller crashed, or the request never arrived), or call it
    and then raise (the service acted and the answer was lost)."""

    def __call__(self, service: str, operation: str, act: Callable[[], Any]) -> Any: ...


def direct(service: str, operation: str, act: Callable[[], Any]) -> Any:
    """The default interceptor: just do it."""
    return act()
