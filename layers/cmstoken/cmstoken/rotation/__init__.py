"""The rotator's protocol: claim, refresh, exchange, verify and publish (``rotator``, applying the
pure functions of ``decisions``: is a run due or skipped, whose lease, exchange or refresh, what
a failed refresh means, the result), and the publication of a verified service token
(``publishing``, also used by the bootstrap).

Imports ``upstream``, ``aws`` and ``core``.
"""
