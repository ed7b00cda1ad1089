"""The rotator's protocol: claim, refresh, exchange, verify and publish (``rotator``), and the
publication of a verified service token (``publishing``, also used by the bootstrap).

Imports ``upstream``, ``aws`` and ``core``.
"""
