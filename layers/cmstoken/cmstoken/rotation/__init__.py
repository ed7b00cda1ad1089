"""The rotator's protocol: claim, refresh, exchange, verify and publish.

``rotator`` runs it, applying the pure functions of ``decisions`` (is a run due or skipped,
whose lease, exchange or refresh, what a failed refresh means, the result) to what it read;
``refreshing`` sends the refresh and stores its answer under the lease, ``reauthorization``
marks a refused credential, and ``publishing`` publishes a verified service token (also used
by the bootstrap).

Imports ``upstream``, ``aws`` and ``core``.
"""
