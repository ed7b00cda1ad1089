"""Where a ``--refresh-file`` lives: its missing folders created private (0700) for the first
login, and a one-line warning when it sits in a git work tree that does not ignore it (where
``git add -A`` would commit the token). Neither names the path nor reads the file."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TextIO

from cmstoken.cli.console import say
from cmstoken.cli.get_token.options import PROG

FOLDER_MODE = 0o700
GIT_TIMEOUT_SECONDS = 2.0
NOT_IGNORED = (
    f"{PROG}: warning: the refresh file is in a git work tree that does not ignore it "
    "(`git add -A` would commit the token): keep it outside the repository, or add its name "
    "to .gitignore"
)


def prepare(given: str, *, stderr: TextIO) -> None:
    """Create the missing folders of ``given`` (mode 0700), then warn if git would add the
    file. A missing place behind a symlink (a vault not mounted) is not created: it is left to
    ``RefreshFile.open`` to refuse."""
    if not os.path.lexists(given):
        _make_private_folders(os.path.dirname(os.path.abspath(given)))
    target = os.path.realpath(given)
    if os.path.isdir(os.path.dirname(target)):
        warn_if_not_ignored(target, stderr=stderr)


def _make_private_folders(directory: str) -> None:
    """``directory``'s missing folders, each 0700 whatever the umask, when the nearest one
    that exists is a folder (not a dangling symlink); a failure is left for
    ``RefreshFile.open`` to report."""
    missing: list[str] = []
    folder = directory
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
            os.chmod(folder, FOLDER_MODE)
        except OSError:
            return


def warn_if_not_ignored(target: str, *, stderr: TextIO) -> None:
    """One line on ``stderr`` when ``target`` is in a git work tree that does not ignore it;
    silent without git, outside a work tree, or when git fails or takes too long."""
    git = shutil.which("git")
    if git is None:
        return
    directory = os.path.dirname(target)
    inside = _git(git, directory, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0 or inside.stdout.strip() != "true":
        return
    ignored = _git(git, directory, "check-ignore", "-q", "--", os.path.basename(target))
    if ignored is not None and ignored.returncode == 1:  # 0: ignored; 128: git failed
        say(stderr, NOT_IGNORED)


def _git(git: str, directory: str, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(  # noqa: S603 -- git found on PATH, fixed arguments
            [git, "-C", directory, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
