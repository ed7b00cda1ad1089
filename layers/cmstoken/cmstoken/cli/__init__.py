"""The command-line tools: ``get-token`` (the vendor's script, in Python: ``get_token``) and
``cmstoken-admin`` (``admin``; what it asks AWS in ``admin_aws``; ``status`` in
``admin_status``).

Imports ``upstream`` and ``core``; ``admin_aws`` is the operator tool's own AWS adapter (the
operator's credentials and region, one-line errors that name a missing permission).
"""
