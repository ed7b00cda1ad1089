"""The command-line tools: ``get-token`` (the vendor's script, in Python: ``get_token``; its
parts are the ``get_token_*`` modules) and ``cmstoken-admin`` (``admin``; what it asks AWS in
``admin_aws``; ``status`` in ``admin_status``); ``console`` (exit codes, printing) and
``countdown`` are for both.

Imports ``upstream`` and ``core``; ``admin_aws`` is the operator tool's own AWS adapter (the
operator's credentials and region, one-line errors that name a missing permission).
"""
