"""The one-time device authorization that gives the stack its refresh credential.

Imports ``rotation`` (the first token is published as a rotation publishes), ``upstream``,
``aws`` and ``core``.
"""
