"""Everything that speaks HTTP to the upstream: the transport (``http``), the identity
provider's and the service's clients, the answers' parsing (``responses``) and models, and the
device authorization grant (``device_flow``).

Imports ``core`` only (and ``requests``, on the first request).
"""
