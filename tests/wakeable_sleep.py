"""A ``sleep`` for a shell recipe's wait for a new token: the recipe sleeps (up to 5 s a step)
between its reads of the secret, and the test knows when the rotator has run, so the recipe's
next read need not wait for the end of its step."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def wakeable_sleep(env: dict[str, str], directory: Path) -> tuple[dict[str, str], Path]:
    """``env`` with a ``sleep`` first on PATH that sleeps as the real one does (in steps of
    0.1 s, so a little longer) until the file it returns exists, then returns at once. The test
    creates that file once the rotator has run: the recipe's wait for the new token reads the
    secret then, instead of at the end of its step. A sleep before that (a debounce, before the
    request is sent) is whole. Whole seconds only, as the recipes sleep."""
    shims = directory / "wakeable"
    shims.mkdir()
    woken = directory / "rotator-ran"
    real = shutil.which("sleep")
    assert real is not None
    (shims / "sleep").write_text(
        "#!/bin/sh\n"
        "steps=$(( $1 * 10 ))\n"
        f'while [ "$steps" -gt 0 ] && [ ! -e "{woken}" ]; do\n'
        f'  "{real}" 0.1; steps=$(( steps - 1 ))\n'
        "done\n"
    )
    (shims / "sleep").chmod(0o755)
    return {**env, "PATH": f"{shims}{os.pathsep}{env['PATH']}"}, woken
