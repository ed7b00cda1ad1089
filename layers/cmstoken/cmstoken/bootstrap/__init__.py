"""The one-time device authorization that gives the stack its refresh credential.

``states`` holds the authorization's stages and the pure transitions between them (no I/O);
the shell around it reads and writes the secrets and calls the upstream: ``bootstrapper`` (the
``start``, ``poll`` and ``status`` actions), ``polling``, ``approval`` (storing an approval)
and ``finishing`` (verifying, promoting, publishing); ``request`` validates the event,
``identity`` tells who authorized, ``results`` words what an invocation returns.

Imports ``rotation`` (the first token is published as a rotation publishes), ``upstream``,
``aws`` and ``core``.
"""

from cmstoken.bootstrap.bootstrapper import Bootstrapper
from cmstoken.bootstrap.request import BootstrapRequest

__all__ = ["BootstrapRequest", "Bootstrapper"]
