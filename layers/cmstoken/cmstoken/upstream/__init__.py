"""Everything that speaks HTTP to the upstream: the transport (``http``) and what its failures
mean (``failures``: the cause in words, and whether the request may have been acted on), the
identity provider's and the service's clients, the answers' parsing (``responses``) and models,
and the device authorization grant (``device_flow``).

Imports ``core`` only (and ``requests``, on the first request).
"""
