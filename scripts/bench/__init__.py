"""``make bench``: cold starts of the built functions, get-token against the vendor's script, AWS
and upstream calls per run (the rotator's and the links function's), layer size. Run as
``python -m bench`` from scripts/.

A benchmark, not a test (it is not part of ``make test``). It prints a table
``| measure | value | budget | ok |`` and a one-line summary, and exits 1 when a budget is exceeded
or a measurement could not be made (naming which). Three parts:

1. Cold starts, measured on what ships, in Lambda's layout. ``sam build`` into a temporary
   directory; the runtime's boto3 emulated by a directory of its own (boto3 and its dependencies
   at the versions requirements-dev.txt pins, precompiled as the runtime ships them). Each run is
   a fresh CPython 3.13 with no site-packages (``-S``), ``PYTHONPATH`` = the built function's
   directory (Lambda's task root), the built layer's ``python/`` (/opt/python), then the runtime's
   boto3; bytecode writes disabled and the layer and function read-only, as in Lambda; the
   environment the template gives the functions, pointed at moto's server and the emulator, plus
   what the Lambda runtime sets. Timed on the wall clock from before the process is spawned to its
   first result line: the import and the first invocation, a handler's boto3 client included.
   - floor: ``import boto3, requests``, a Secrets Manager client, one ``GetSecretValue``;
   - rotator: a scheduled no-op (``{}`` against a fresh token: ``skipped``);
   - bootstrap: ``{"action": "status"}`` against the bootstrapped secrets;
   - links: a browser's ``GET`` of a link's page (the function URL's payload format 2.0 event,
     the link signed with the stack's key for its credential): the key, the bootstrap's
     ``status`` through the local Lambda API (the bootstrap warm in the bench's process: its
     share is reported beside the ratio), whether the link was used (DynamoDB).
   ``BENCH_RUNS`` (15, at least 7) interleaved runs each; medians. Budget: each handler's median
   <= ``COLD_START_BUDGETS`` x the floor's (1.10; the links function's three clients and calls,
   1.40). Also: every layer module a handler loads must come from the layer's bytecode (a ``-v``
   run), a handler's first invocation must load none of what it has no use for
   (``Subject.unneeded``), and ``get-token``'s import must load no boto3, botocore or Powertools
   module. A few ``-X importtime`` runs attribute each import to the packages that pull it in.
2. ``get-token -r -`` against the vendor's ``get-token.sh -r TOKEN``
   (``tests/data/vendor-get-token``: bash, curl, jq) renewing at the same emulator, interleaved,
   medians of ``GET_TOKEN_RUNS``; budget: their ratio <= ``GET_TOKEN_BUDGET_RATIO``. Then calls.
   The emulator and moto's server on 127.0.0.1, the stack's two secrets, the links function's
   key, table and topic and a local Lambda API (scripts/local_links.py), a bootstrap through
   the operator command's code (approved at the emulator), then the AWS calls (botocore
   ``before-call`` hook; the bootstrap's behind the links' ``Invoke`` counted apart) and upstream
   calls (``emulator.counts``) of a scheduled no-op check and of a due rotation after the clock
   moves 19 hours, and of the links function, as in a fresh container each: a reminder before
   the bootstrap (it sends), a link's page and a reminder (nothing needed) after it.
3. Size. The same build's SharedLayer directory, unzipped, against Lambda's 250 MB limit, and its
   deflated zip.

The modules:

- ``__main__``: ``main``, the order of the measures (one that fails is reported, the others run);
- ``runner``: paths (the project, its venv, the interpreters), a command timed to its exit, a
  command timed to a marker line under a watchdog, medians;
- ``report``: the rows, notes and failures, the printed table and summary, the exit status;
- ``build``: ``sam build``, the runtime's boto3 at the development pins, ``Layout``;
- ``environment``: a cold start's environment (template.yaml's, Lambda's, ``PYTHONPATH``);
- ``probe``: the probe script a cold start runs, the subjects (floor, handlers, get-token's
  import) and ``run_probe``, one timed cold start;
- ``links``: the links function's part of the local stack (through scripts/local_links.py) and
  a link's page as its function URL asks for it;
- ``cold_starts``: part 1's runs (interleaved, read-only) and the budget against the floor;
- ``loaded_modules``: part 1's checks of what was loaded from where (and what must not be), and
  the import-time notes;
- ``importtime``: parsing ``-X importtime`` output;
- ``get_token``: part 2's ``get-token -r`` against the vendor's script;
- ``calls``: part 2's AWS and upstream calls of a no-op check, a due rotation and the links
  function's page and reminders;
- ``layer_size``: part 3.
"""
