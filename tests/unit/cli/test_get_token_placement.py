"""``get-token --refresh-file``'s placement: missing folders created 0700 (never behind a
dangling symlink), and one line on standard error when git would add the file; silent without
git, outside a work tree, when the file is ignored, or when git fails or hangs."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cmstoken.cli.get_token import placement

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git_work_tree(folder: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    return folder


def warning(path: Path) -> str:
    stderr = io.StringIO()
    placement.prepare(str(path), stderr=stderr)
    return stderr.getvalue()


@needs_git
def test_a_file_git_would_add_is_warned_of_in_one_line(tmp_path: Path) -> None:
    path = git_work_tree(tmp_path) / "refresh-token.txt"
    path.write_text("v1.secret-token\n")
    said = warning(path)
    assert said == placement.NOT_IGNORED + "\n"
    assert "v1.secret-token" not in said
    assert str(tmp_path) not in said


@needs_git
def test_a_missing_file_in_a_work_tree_is_warned_of_too(tmp_path: Path) -> None:
    assert warning(git_work_tree(tmp_path) / "sub" / "refresh-token") == (
        placement.NOT_IGNORED + "\n"
    )


@needs_git
def test_an_ignored_file_is_not_warned_of(tmp_path: Path) -> None:
    folder = git_work_tree(tmp_path)
    (folder / ".gitignore").write_text("refresh-token.txt\n")
    assert warning(folder / "refresh-token.txt") == ""


@needs_git
def test_a_file_outside_any_work_tree_is_not_warned_of(tmp_path: Path) -> None:
    assert warning(tmp_path / "refresh-token") == ""


def test_without_git_it_is_silent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda _: None)
    assert warning(tmp_path / "refresh-token") == ""


def test_a_git_that_hangs_or_fails_is_silent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hangs(*_: object, **__: object) -> None:
        raise subprocess.TimeoutExpired("git", placement.GIT_TIMEOUT_SECONDS)

    monkeypatch.setattr("shutil.which", lambda _: "/usr/bin/git")
    monkeypatch.setattr("subprocess.run", hangs)
    assert warning(tmp_path / "refresh-token") == ""


def test_missing_folders_are_created_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "state" / "cmstoken" / "refresh-token"
        warning(path)
    finally:
        os.umask(old)
    for folder in (path.parent, path.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not path.exists()  # the login creates the file


def test_nothing_is_created_behind_a_dangling_symlink(tmp_path: Path) -> None:
    (tmp_path / "vault").symlink_to(tmp_path / "not-mounted")
    warning(tmp_path / "vault" / "cmstoken" / "refresh-token")
    assert not (tmp_path / "not-mounted").exists()
