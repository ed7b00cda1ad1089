"""``get-token``: the vendor's token script in Python (``command``: ``main`` and ``run``).

Its parts: ``parser`` (the command line and its help, with ``usage`` for usage errors that never
echo a value and ``options``), ``refresh_file`` (``--refresh-file``), ``retries`` (the upstream
steps sent again), ``flows`` (device authorization, refresh, exchange), ``holding`` (interrupts
held while a spent token's successor is not yet kept) and ``output``.
Imports ``cli``'s shared modules, ``upstream`` and ``core``: no boto3, no Powertools.
"""

from cmstoken.cli.get_token.command import main

__all__ = ["main"]
