"""``cmstoken-admin``: the operator's command for a deployed stack (``command``: the command
line, ``rotate`` and ``main``).

Its parts: ``bootstrap``; the ``status`` report and its lines by source (``status_credential``,
``status_rotator``, ``status_alarms``, ``status_lines``); ``link_key`` (``rotate-link-key``:
a new key for the re-authorization links); ``invokers`` (how a function is
invoked: Lambda, or in-process for tests and the demo); ``stack`` (the session and the stack's
outputs); ``errors`` (every failure in one line); ``consumer_command``
(``check-consumer``, run in a consumer account on the stack's ARNs). Imports ``cli``'s shared
modules, ``core``, the consumer helper's reading, and boto3 for the operator's own AWS calls.
"""

from cmstoken.cli.admin.command import main

__all__ = ["main"]
