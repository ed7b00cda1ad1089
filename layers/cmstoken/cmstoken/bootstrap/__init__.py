"""The one-time device authorization that gives the stack its refresh credential.

``bootstrapper`` runs the ``start``, ``poll`` and ``status`` actions; ``request`` validates the
event, ``identity`` tells who authorized.

Imports ``rotation`` (the first token is published as a rotation publishes), ``upstream``,
``aws`` and ``core``.
"""

from cmstoken.bootstrap.bootstrapper import Bootstrapper
from cmstoken.bootstrap.request import BootstrapRequest

__all__ = ["BootstrapRequest", "Bootstrapper"]
