"""The command-line tools ``get-token`` and ``cmstoken-admin``.

- ``get_token``: the vendor's script, in Python; its parts are the ``get_token_*`` modules (the
  command line, the refresh file, the retries, the flows, the output).
- ``admin``: the operator's command; its parts are the ``admin_*`` modules (``bootstrap``, the
  ``status`` report and its lines, how functions are invoked, the session and the stack, every
  failure in one line).
- ``console`` (exit codes, printing) and ``countdown``: what both tools share.

Imports ``upstream`` and ``core``, and boto3 for ``cmstoken-admin``'s own AWS calls (the
operator's credentials and region, one-line errors that name a missing permission):
``get-token`` imports neither boto3 nor Powertools, so that it starts quickly.
"""
