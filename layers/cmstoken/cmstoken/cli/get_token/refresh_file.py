"""``get-token --refresh-file``: the refresh token kept in a file, renewed in place, atomically,
one run at a time per directory; a file that does not exist yet (or is empty) is created by the
login instead, never replacing one that holds a token."""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from typing import TextIO

from cmstoken.cli.console import say
from cmstoken.cli.get_token.options import PROG

MAX_REFRESH_FILE_BYTES = 64 * 1024
REFRESH_FILE_MODE = 0o600


class RefreshFileError(Exception):
    """A ``--refresh-file`` that cannot be used, or a token that cannot be kept in one. The
    message names neither the path nor anything the file holds."""


@dataclass
class RefreshFile:
    """The refresh token kept in a file, renewed in place (``--refresh-file``).

    ``open`` follows a symlink to the file it points to (that file is replaced, the link is
    kept), takes the directory's lock (runs on files of one directory take turns, so that two
    never present the same token), reads the token, then creates the temporary file that
    ``save`` writes and renames over the file: a place where that file cannot be created fails
    before anything is sent. ``close`` removes the temporary file if unused and releases the
    lock.

    A path that does not exist yet, or an empty file, holds no token (``token`` is empty): the
    caller logs in, and ``save`` creates the file, or fills the empty one, with the first
    refresh token. It never replaces a file that holds something by then (``RefreshFileError``).
    """

    path: str = field(repr=False)
    token: str = field(default="", repr=False)
    existed: bool = True
    _temp: tuple[int, str] | None = field(default=None, repr=False)
    _directory_fd: int | None = field(default=None, repr=False)

    @classmethod
    def open(cls, given: str, *, stderr: TextIO) -> RefreshFile:
        """The file named ``given``, locked and checked; raises ``RefreshFileError``."""
        target = os.path.realpath(given)
        directory, existed = _replaceable_directory(given, target)
        store = cls(path=target, existed=existed)
        try:
            store._directory_fd = _lock_directory(directory, stderr)
            store.existed = os.path.lexists(target)  # as seen under the lock
            store.token = _read_token(target) if store.existed else ""
            store._temp = _temporary_beside(target)
        except BaseException:
            store.close()
            raise
        return store

    @property
    def login(self) -> bool:
        """Whether the file holds no token yet: the run logs in and ``save`` creates it."""
        return not self.token

    def save(self, token: str) -> None:
        """Replace the file's token with ``token``: written to the temporary file, flushed to
        disk, renamed over the file (mode 0600), then the directory flushed; the lock is then
        released. After a login (``login``) the file is created instead (linked into place,
        never over a file that appeared meanwhile), or an empty one replaced if it is still
        empty. Raises ``OSError`` or ``RefreshFileError``, the file then unchanged."""
        if self._temp is None:
            raise RefreshFileError("the refresh file was already written")
        (descriptor, temporary), self._temp = self._temp, None
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as out:
                if not _is_token_text(token):
                    raise RefreshFileError(
                        "the new refresh token is not one line of printable text"
                    )
                if hasattr(os, "fchmod"):
                    os.fchmod(out.fileno(), REFRESH_FILE_MODE)
                out.write(token + "\n")
                out.flush()
                os.fsync(out.fileno())
            self._put_in_place(temporary)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        if self._directory_fd is not None:
            # The rename is done and seen by every reader; a file system that cannot flush a
            # directory (some cannot) does not make it a failure.
            with contextlib.suppress(OSError):
                os.fsync(self._directory_fd)
        self.close()

    def _put_in_place(self, temporary: str) -> None:
        """The written temporary file becomes the file: renamed over it, or after a login
        linked in (no file there) or renamed over an empty one, never over a token."""
        if not self.login:
            os.replace(temporary, self.path)
            return
        if self.existed:
            if _holds_something(self.path):
                raise RefreshFileError(_APPEARED)
            os.replace(temporary, self.path)
            return
        try:
            os.link(temporary, self.path)  # fails if a file is there by now: nothing replaced
        except FileExistsError:
            raise RefreshFileError(_APPEARED) from None
        except OSError:
            # A file system without hard links: the directory's lock keeps other runs out.
            if os.path.lexists(self.path):
                raise RefreshFileError(_APPEARED) from None
            os.replace(temporary, self.path)
            return
        with contextlib.suppress(OSError):
            os.unlink(temporary)

    def close(self) -> None:
        """Remove the temporary file if it was not used, and release the lock."""
        if self._temp is not None:
            (descriptor, temporary), self._temp = self._temp, None
            with contextlib.suppress(OSError):
                os.close(descriptor)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        if self._directory_fd is not None:
            descriptor, self._directory_fd = self._directory_fd, None
            with contextlib.suppress(OSError):
                os.close(descriptor)


_APPEARED = (
    "something else wrote the file during the login, and it was not replaced (a login never "
    "replaces a file that holds something)"
)


def reason(error: BaseException) -> str:
    """An error's reason without the file name an ``OSError`` carries."""
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    return str(error) if isinstance(error, RefreshFileError) else type(error).__name__


def _replaceable_directory(given: str, target: str) -> tuple[str, bool]:
    """The directory of ``target`` (``given`` with its symlinks followed), and whether
    ``target`` exists, once it is known to be a regular file that a rename in that directory
    may replace, or a file that a login may create there (not behind a dangling symlink,
    more likely a vault not mounted than a place for a new file)."""
    directory = os.path.dirname(target)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        if os.path.islink(given):
            raise RefreshFileError(
                "the file does not exist (it is a symlink to a missing file)"
            ) from None
        if not os.path.isdir(directory):
            raise RefreshFileError("its directory does not exist") from None
        return directory, False
    except OSError as exc:
        raise RefreshFileError(f"cannot read the file ({reason(exc)})") from None
    if not stat.S_ISREG(mode):
        raise RefreshFileError("not a regular file")
    if _owned_by_another_in_a_sticky_directory(target, directory):
        raise RefreshFileError(
            "the file cannot be replaced: it belongs to another user, in a directory "
            "where only a file's owner may replace it (like /tmp)"
        )
    return directory, True


def _owned_by_another_in_a_sticky_directory(path: str, directory: str) -> bool:
    """True when a rename over ``path`` would be refused by the directory's sticky bit."""
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        return False
    try:
        folder, owner = os.stat(directory), os.stat(path).st_uid
    except OSError:
        return False  # the checks that follow say what is wrong
    me = os.geteuid()
    return bool(folder.st_mode & stat.S_ISVTX) and me not in (owner, folder.st_uid)


def _lock_directory(directory: str, stderr: TextIO) -> int | None:
    """An open descriptor of ``directory`` holding its exclusive lock (waited for, saying so),
    or None where directories cannot be opened (not POSIX). A file system without locks is
    used unlocked."""
    if os.name != "posix":
        return None
    import fcntl

    try:
        descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise RefreshFileError(f"cannot open its directory ({reason(exc)})") from None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(
                stderr,
                f"{PROG}: another {PROG} is renewing a refresh file in that directory; "
                "waiting for it to finish...",
            )
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError:
            pass
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _holds_something(path: str) -> bool:
    """Whether the file at ``path`` holds anything but white space (a file that cannot be
    read counts as holding something: it is not replaced)."""
    try:
        with open(path, "rb") as source:
            return bool(source.read(MAX_REFRESH_FILE_BYTES).strip())
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _read_token(path: str) -> str:
    """The token the file holds; empty when it holds nothing but white space (a login then
    fills it)."""
    try:
        with open(path, "rb") as source:
            data = source.read(MAX_REFRESH_FILE_BYTES + 1)
    except OSError as exc:
        raise RefreshFileError(f"cannot read the file ({reason(exc)})") from None
    if len(data) > MAX_REFRESH_FILE_BYTES:
        raise RefreshFileError("the file is too large to hold a refresh token")
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RefreshFileError("the file is not text") from None
    if token and not _is_token_text(token):
        raise RefreshFileError("the file must hold only the refresh token, on one line")
    return token


def _temporary_beside(target: str) -> tuple[int, str]:
    """The temporary file ``save`` writes, in ``target``'s directory (open descriptor, path)."""
    import tempfile

    try:
        return tempfile.mkstemp(
            dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".tmp"
        )
    except OSError as exc:
        raise RefreshFileError(
            f"the file cannot be replaced: no file can be created in its directory ({reason(exc)})"
        ) from None


def _is_token_text(token: str) -> bool:
    return bool(token) and not any(char.isspace() or not char.isprintable() for char in token)
