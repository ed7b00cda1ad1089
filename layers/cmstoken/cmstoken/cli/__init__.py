"""The command-line tools, one folder each, and what they share.

- ``get_token/``: ``get-token``, the vendor's token script in Python (the command line, the
  refresh file, the retries, the flows, the output);
- ``admin/``: ``cmstoken-admin``, the operator's command for a deployed stack (``bootstrap``, the
  ``status`` report and its lines, how functions are invoked, the session and the stack, every
  failure in one line);
- ``console`` (exit codes, printing) and ``countdown``: what both tools share.

Imports ``upstream`` and ``core``, ``consumer`` for ``cmstoken-admin check-consumer`` (which
checks a consumer account through the helper's own reading), and boto3 for ``cmstoken-admin``'s
own AWS calls (the operator's credentials and region, one-line errors that name a missing
permission): ``get-token`` imports neither boto3 nor Powertools, so that it starts quickly.
"""
