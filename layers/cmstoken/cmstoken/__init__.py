"""Shared library of the credential-rotation functions (the Lambda layer's package)."""

import logging

__version__ = "0.1.0"

# A library does not print: without a configured handler its records go nowhere (the functions
# route them to Powertools; command-line tools report for themselves).
logging.getLogger(__name__).addHandler(logging.NullHandler())
