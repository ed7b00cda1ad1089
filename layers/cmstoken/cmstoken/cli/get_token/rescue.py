"""Where a new refresh token goes when the refresh file cannot take it once the provider has
answered, or standard output (without it) is closed before the token is printed: a new file of
mode 0600, never standard error (with ``--refresh-file`` the file is the token's one place,
SPEC section 3). Tried in turn: beside the refresh file, the user's state folder, the temporary
folder; each file new, its name random."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable

PREFIX = "cmstoken-rescued-refresh-token-"


def state_folder() -> str:
    """The user's folder for state that outlives a run (XDG Base Directory)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "cmstoken")


def rescue(token: str, refresh_file: str | None) -> str | None:
    """Write ``token`` to a new file of mode 0600 in the first place that takes it (beside
    ``refresh_file`` first, when there is one); its path, or ``None`` when none did."""
    beside = () if refresh_file is None else (os.path.dirname(refresh_file) or ".",)
    folders = (*beside, state_folder(), tempfile.gettempdir())
    return _first_written(token, _unique(folders), PREFIX)


def _unique(folders: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for folder in folders:
        if os.path.realpath(folder) not in map(os.path.realpath, seen):
            seen.append(folder)
    return seen


def _first_written(token: str, folders: list[str], prefix: str) -> str | None:
    text = (token if token.isprintable() else json.dumps(token)) + "\n"
    for folder in folders:
        path = None
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            descriptor, path = tempfile.mkstemp(prefix=prefix, dir=folder)  # mode 0600
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
        except OSError:
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            continue
        return path
    return None
