"""Shared library of the credential-rotation functions (the Lambda layer's package).

Its folders are its layers; imports only go down (a module never imports from a folder above
its own):

- ``runtime`` (the composition root) and ``observability`` (Powertools Logger and Metrics):
  what the handlers in ``functions/`` import;
- ``bootstrap/``: the one-time device authorization (may import ``rotation/`` for the first
  publication);
- ``rotation/``: the rotator's protocol (refresh, exchange, verify, publish);
- ``cli/``: the command-line tools ``get-token`` and ``cmstoken-admin``;
- ``consumer/``: the helper workloads use to read the token (shipped as the cmstoken-consumer
  wheel, with ``aws/`` and ``core/``);
- ``upstream/``: everything that speaks HTTP to the identity provider and the service;
- ``aws/``: everything that speaks to AWS (boto3 only here), and the secrets' documents;
- ``core/``: errors, clock, settings, URLs, retries, redaction: the standard library only.
"""

import logging

__version__ = "0.1.0"

# A library does not print: without a configured handler its records go nowhere (the functions
# route them to Powertools; command-line tools report for themselves).
logging.getLogger(__name__).addHandler(logging.NullHandler())
