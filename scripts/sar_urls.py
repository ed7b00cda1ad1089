"""`make package`: what the Serverless Application Repository shows: its URLs and the README.

Where the application is published is a fact of the publisher, not of the code, so template.yaml
carries neither; ``sam publish`` reads them from the *packaged* template, and this script writes
them there (into ``Metadata: AWS::ServerlessRepo::Application``) after ``sam package``.

The values come from ``--source-url`` and ``--home-page-url``, by default from the environment
variables ``SOURCE_URL`` and ``HOME_PAGE_URL`` (which make sets from ``make package
SOURCE_URL=... HOME_PAGE_URL=...``). Without a source URL, the checkout's ``origin`` remote is
used when it is a GitHub/GitLab-style address (``git@host:owner/repo.git``,
``ssh://git@host/owner/repo.git`` or ``https://[user:pass@]host/owner/repo.git``), turned into
``https://host/owner/repo``. The home page defaults to the source URL. With neither, both fields
are left out and one line on stderr says what that means for sharing.

Commands:

``check``
    Validate the values (run before anything is uploaded). A bad value exits 2 with one line
    naming the variable.
``readme BUILD_TEMPLATE``
    Before ``sam package``: write the checkout's README (the one ``template.yaml`` names as
    ``ReadmeUrl``) next to BUILD_TEMPLATE with its relative links made absolute, and point the
    build template's ``ReadmeUrl`` at that copy, which ``sam package`` then uploads. The
    Serverless Application Repository shows the README on its own page, where ``docs/deploy.md``
    would resolve against its own address: each relative link becomes
    ``SOURCE/blob/COMMIT/PATH`` (``/tree/`` for a directory), COMMIT being the checkout's
    ``HEAD``. A checkout with uncommitted changes still links to ``HEAD`` (no other commit is
    closer to what is packaged, and the changes are in no repository a link could name) and one
    line on stderr says so: commit, push and package again before publishing. Without a source
    URL, or without a commit, the build template names the checkout's README, unchanged, and one
    line on stderr says its links stay relative on the repository's page.
``apply TEMPLATE``
    Validate again, then write the fields into the packaged TEMPLATE (in place). The template is
    read and written with the SAM CLI's own YAML helpers, as ``sam package`` wrote it, so the
    rest of it comes out unchanged and intrinsic functions survive. Both templates are replaced
    atomically.

Accepted URLs: ``https://`` with a host (and optionally a port and a path); no credentials,
whitespace, query or fragment.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[1]
METADATA = "AWS::ServerlessRepo::Application"
HOME_PAGE_URL = "HomePageUrl"
SOURCE_CODE_URL = "SourceCodeUrl"
USAGE_ERROR = 2

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
# RFC 3986 path characters: unreserved, sub-delims, ":", "@", "/" and percent-escapes.
_PATH = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
# scp-like git address: [user@]host:path (no "://").
_SCP = re.compile(r"(?:[^@/:\s]+@)?(?P<host>[^@/:\s]+):(?P<path>[^\s]+)")


class UrlError(ValueError):
    """A URL the Serverless Application Repository would not take; the message says why."""


def validate_url(value: str) -> str:
    """Return ``value`` if it is an ``https://`` URL with a host and nothing SAR would reject
    (credentials, whitespace or control characters, a query or a fragment); else raise
    ``UrlError`` saying what is wrong."""
    if not value.isascii() or not value.isprintable() or any(c.isspace() for c in value):
        raise UrlError("it has whitespace, control or non-ASCII characters")
    if not value.startswith("https://"):
        raise UrlError("it does not start with https://")
    if "?" in value or "#" in value:
        raise UrlError("it has a query or a fragment (? or #)")
    parts = urlsplit(value)
    if "@" in parts.netloc:
        raise UrlError("it carries credentials (user:password@)")
    host, colon, port = parts.netloc.partition(":")
    if not host:
        raise UrlError("it has no host")
    if not _HOST.fullmatch(host):
        raise UrlError(f"its host {host!r} is not a host name")
    if colon and not (port.isdigit() and 0 < int(port) < 65536):
        raise UrlError(f"its port {port!r} is not a port number")
    if not _PATH.fullmatch(parts.path):
        raise UrlError("its path has characters a URL cannot carry unescaped")
    return value


def https_url_from_remote(remote: str) -> str | None:
    """The https address of a GitHub/GitLab-style git remote, or None when there is none.

    ``git@host:owner/repo.git``, ``ssh://git@host[:port]/owner/repo.git`` and
    ``https://[user:pass@]host[:port]/owner/repo.git`` become ``https://host[:port]/owner/repo``
    (credentials, the ``.git`` suffix and the ssh port dropped). Other schemes (``http://``,
    ``git://``, ``file://``), local paths and addresses without an owner and a repository give
    None: guessing an https address for them could name a page that does not exist.
    """
    remote = remote.strip()
    if "://" in remote:
        parts = urlsplit(remote)
        if parts.query or parts.fragment or not parts.hostname:
            return None
        if parts.scheme == "https":
            host = parts.hostname
            try:
                if parts.port is not None:
                    host = f"{host}:{parts.port}"
            except ValueError:
                return None
        elif parts.scheme in {"ssh", "git+ssh", "ssh+git"}:
            host = parts.hostname  # the ssh port is not the web server's
        else:
            return None
        path = parts.path
    else:
        match = _SCP.fullmatch(remote)
        if match is None:
            return None
        host, path = match["host"], match["path"]
    path = path.strip("/").removesuffix(".git").strip("/")
    segments = path.split("/")
    if len(segments) < 2 or not all(segments):  # owner/repo, GitLab groups/subgroups/repo
        return None
    url = f"https://{host.lower()}/{path}"
    try:
        return validate_url(url)
    except UrlError:
        return None


def origin_remote(directory: Path = ROOT) -> str | None:
    """``git remote get-url origin`` in ``directory``; None without git, a repository or an
    origin remote."""
    return git(directory, "remote", "get-url", "origin") or None


@dataclass(frozen=True)
class Urls:
    """The resolved fields (None: leave it out) and, when SourceCodeUrl is missing, why."""

    source_code_url: str | None
    home_page_url: str | None
    missing_source: str | None = None


class UsageError(Exception):
    """A make variable with a value we refuse; the message is the one line to print."""


def resolve(source_url: str | None, home_page_url: str | None, remote: str | None) -> Urls:
    """Validate the given values and apply the defaults (the remote for the source URL, the
    source URL for the home page). Empty strings count as not given."""
    given: dict[str, str | None] = {"SOURCE_URL": source_url, "HOME_PAGE_URL": home_page_url}
    for variable, value in given.items():
        if value:
            try:
                validate_url(value)
            except UrlError as error:
                raise UsageError(
                    f"make package: {variable} must be an https:// URL with a host and no "
                    f"credentials, whitespace, query or fragment, like https://host/owner/repo: "
                    f"{error}"
                ) from None
    missing = None
    if not source_url:
        source_url = https_url_from_remote(remote) if remote else None
        if source_url is None:
            missing = (
                "no SOURCE_URL and no origin remote"
                if remote is None
                else "no SOURCE_URL, and the origin remote is not an https or git@host:owner/repo"
                " address"
            )
    return Urls(
        source_code_url=source_url,
        home_page_url=home_page_url or source_url,
        missing_source=missing,
    )


def inject(template: MutableMapping[str, Any], urls: Urls) -> MutableMapping[str, Any]:
    """Set HomePageUrl and SourceCodeUrl in the template's SAR metadata (in place: an existing
    field keeps its position, a new one is appended). A field whose URL is None is left as it
    is. Returns ``template``."""
    metadata = template.get("Metadata", {}).get(METADATA)
    if not isinstance(metadata, MutableMapping):
        raise UsageError(f"make package: the packaged template has no Metadata: {METADATA}")
    for field, value in (
        (HOME_PAGE_URL, urls.home_page_url),
        (SOURCE_CODE_URL, urls.source_code_url),
    ):
        if value is not None:
            metadata[field] = value
    return template


def missing_note(urls: Urls, metadata: Mapping[str, Any]) -> str | None:
    """The one line that says the template cannot be shared publicly as it is, or None."""
    if urls.missing_source is None or metadata.get(SOURCE_CODE_URL):
        return None
    license_id = metadata.get("SpdxLicenseId") or "an open source SpdxLicenseId"
    return (
        f"make package: {urls.missing_source}, so the packaged template has no SourceCodeUrl"
        f"{'' if urls.home_page_url else ' or HomePageUrl'}: you can publish and share it"
        " privately, but the Serverless Application Repository shares an application publicly"
        f" only with a SourceCodeUrl (and an open source license: it has {license_id}); pass"
        " SOURCE_URL=https://host/owner/repo (HOME_PAGE_URL= defaults to it)"
    )


def read_template(path: Path) -> MutableMapping[str, Any]:
    """A template as the SAM CLI reads it (short-form intrinsic functions and all)."""
    from samcli.yamlhelper import yaml_parse  # type: ignore[import-untyped]

    template = yaml_parse(path.read_text(encoding="utf-8"))
    if not isinstance(template, MutableMapping):
        raise UsageError(f"make package: {path} is not a template")
    return template


def write_template(path: Path, template: Mapping[str, Any]) -> None:
    """Replace the template at ``path`` with ``template``, written as the SAM CLI writes it."""
    from samcli.yamlhelper import yaml_dump, yaml_parse

    text = yaml_dump(template)
    if yaml_parse(text) != template:  # what sam reads next is what we meant to write
        raise UsageError(f"make package: the rewritten {path} does not read back the same")
    replace_file(path, text.encode("utf-8"), path.stat().st_mode)


def replace_file(path: Path, content: bytes, mode: int) -> None:
    """Write ``path`` atomically (a temporary file in its directory, renamed over it), with the
    permission bits of ``mode`` (as the file it replaces or copies had them, not 0600)."""
    with tempfile.NamedTemporaryFile(
        "wb", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as out:
        out.write(content)
    os.chmod(out.name, mode & 0o7777)
    Path(out.name).replace(path)


def apply(path: Path, urls: Urls) -> str | None:
    """Write the URLs into the packaged template at ``path`` (atomically); return the note to
    print, if any."""
    template = read_template(path)
    inject(template, urls)
    write_template(path, template)
    return missing_note(urls, template["Metadata"][METADATA])


def git(repository: Path, *arguments: str) -> str | None:
    """What ``git -C repository ARGUMENTS`` prints, stripped; None when it fails."""
    try:
        result = subprocess.run(  # noqa: S603 -- fixed arguments
            ["git", "-C", str(repository), *arguments],  # noqa: S607 -- git on PATH
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def checkout_readme(repository: Path) -> Path:
    """The README that the checkout's template.yaml names (``ReadmeUrl``, relative to it)."""
    source = repository / "template.yaml"
    named = read_template(source).get("Metadata", {}).get(METADATA, {}).get("ReadmeUrl")
    readme = (source.parent / named).resolve() if isinstance(named, str) else None
    if readme is None or not readme.is_file():
        raise UsageError(f"make package: {source}'s {METADATA} names no ReadmeUrl file")
    return readme


def readme(build_template: Path, urls: Urls, repository: Path = ROOT) -> list[str]:
    """Point the build template's ReadmeUrl at a copy of the checkout's README, next to it,
    whose relative links go to the source repository at the checkout's commit; without a source
    URL or a commit, at the checkout's README itself (and remove a copy an earlier run left).
    Returns the lines to print on stderr."""
    original = checkout_readme(repository)
    template = read_template(build_template)
    metadata = template.get("Metadata", {}).get(METADATA)
    if not isinstance(metadata, MutableMapping):
        raise UsageError(f"make package: {build_template} has no Metadata: {METADATA}")
    copy = build_template.parent / original.name
    source = urls.source_code_url
    commit = git(repository, "rev-parse", "--verify", "HEAD^{commit}") if source else None
    notes = []
    if source and commit:

        def is_directory(path: str) -> bool:
            return (original.parent / unquote(path)).is_dir()

        text = absolute_links(original.read_bytes().decode("utf-8"), source, commit, is_directory)
        replace_file(copy, text.encode("utf-8"), original.stat().st_mode)
        metadata["ReadmeUrl"] = copy.name
        if git(repository, "status", "--porcelain", "--untracked-files=no"):
            notes.append(
                f"make package: the checkout has uncommitted changes, which the README's links"
                f" (to {source.rstrip('/')}/blob/{commit[:12]}/...) do not show: commit, push and"
                " package again before publishing"
            )
    else:
        copy.unlink(missing_ok=True)
        metadata["ReadmeUrl"] = os.path.relpath(original, build_template.parent.resolve())
        why = urls.missing_source or f"{repository} has no commit (git rev-parse HEAD failed)"
        notes.append(
            f"make package: {why}, so the README's links (docs/...) stay relative: they do not"
            " resolve on the Serverless Application Repository's page; pass"
            " SOURCE_URL=https://host/owner/repo to make them links into the source repository at"
            " the packaged commit"
        )
    write_template(build_template, template)
    return notes


# --- the README's links ---------------------------------------------------------------------
#
# The block structure (which lines are paragraphs, headings and table cells, which are code,
# HTML or link reference definitions) is markdown-it's, the CommonMark parser the SAM CLI
# installs (through rich); the links inside a block are found by the scan below, which follows
# CommonMark's inline rules for what can hide or break a link: backslash escapes, code spans,
# autolinks and raw HTML, link text brackets (a link cannot contain a link), inline
# destinations (<...> or balanced parentheses), titles, and reference links (which count as
# links only when their label is defined). Only the destinations are replaced: everything else,
# byte for byte, stays.

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_NEWLINE = re.compile(r"\r\n?|\n")
_BACKTICKS = re.compile(r"`+")
_AUTOLINK = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{1,31}:[^<>\x00-\x20]*")
_EMAIL = re.compile(
    r"[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"
)
_SPACE = " \t\n\r"
Span = tuple[int, int]


def _never(path: str) -> bool:
    return False


def absolute_target(
    destination: str, source: str, ref: str, is_directory: Callable[[str], bool] = _never
) -> str | None:
    """The absolute form of a relative link destination as written in Markdown, or None to leave
    it: absolute URLs (any ``scheme:``, ``//host``), in-page anchors (``#...``), a bare query and
    an empty destination, each read as a renderer reads it (``\\#x`` and ``&#35;x`` are ``#x``).

    ``docs/deploy.md#bootstrap`` becomes ``SOURCE/blob/REF/docs/deploy.md#bootstrap``, a
    directory (a path ending in ``/``, or one ``is_directory`` names) ``SOURCE/tree/REF/...``;
    ``/docs/x.md`` is from the repository's root, as GitHub reads it. Only a prefix is added:
    the destination's own escapes, query and fragment stay, and ``./`` or ``..`` segments are
    the browser's to resolve. The prefix's ``(``, ``)`` and ``&`` are backslash-escaped, so that
    the destination still ends where it ended and no entity is read into it.
    """
    from markdown_it.common.utils import unescapeAll

    meant = unescapeAll(destination)  # what the link goes to: `\#x` and `&#35;x` are `#x`
    if not meant or meant.startswith(("#", "?", "//")) or _SCHEME.match(meant):
        return None
    path = re.split(r"[?#]", meant, maxsplit=1)[0].lstrip("/")
    kind = "tree" if not path or path.endswith("/") or is_directory(path) else "blob"
    prefix = re.sub(r"([()&])", r"\\\1", f"{source.rstrip('/')}/{kind}/{ref}")
    return f"{prefix}{'' if meant.startswith('/') else '/'}{destination}"


def absolute_links(
    markdown: str, source: str, ref: str, is_directory: Callable[[str], bool] = _never
) -> str:
    """``markdown`` with the destination of every relative link, image and link reference
    definition made absolute (see ``absolute_target``); code spans, fenced and indented code,
    HTML, autolinks, absolute links and in-page anchors untouched, and nothing else changed."""
    pieces: list[str] = []
    last = 0
    for start, end in link_destinations(markdown):
        target = absolute_target(markdown[start:end], source, ref, is_directory)
        if target is not None:
            pieces += [markdown[last:start], target]
            last = end
    return "".join(pieces) + markdown[last:]


def relative_links(markdown: str) -> list[str]:
    """The destinations, as written, of the links that ``absolute_links`` makes absolute."""
    written = [markdown[start:end] for start, end in link_destinations(markdown)]
    return [each for each in written if absolute_target(each, "https://h/o/r", "r") is not None]


def link_destinations(markdown: str) -> list[Span]:
    """Where the destinations of the links, images and link reference definitions are (their
    text, inside ``<...>`` when so written), in order."""
    from markdown_it import MarkdownIt

    env: dict[str, Any] = {}
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown, env)
    starts = [0, *(match.end() for match in _NEWLINE.finditer(markdown)), len(markdown)]

    def span(lines: Sequence[int]) -> Span:
        start, end = starts[lines[0]], starts[min(lines[1], len(starts) - 1)]
        return start, start + len(markdown[start:end].rstrip())

    references: dict[str, Any] = env.get("references", {})
    labels = set(references)
    found = [
        destination
        for definition in references.values()
        if (destination := _definition_destination(markdown, *span(definition["map"])))
    ]
    segments: set[Span] = set()
    for before, token in zip([None, *tokens], tokens, strict=False):
        if token.type == "inline" and token.map is not None:
            start, end = span(token.map)
            in_table = before is not None and before.type in {"th_open", "td_open"}
            segments.update(_cells(markdown, start, end) if in_table else [(start, end)])
    for start, end in segments:
        found += _inline_destinations(markdown, start, end, labels)
    return sorted(found)


def _cells(text: str, start: int, end: int) -> list[Span]:
    """A table row's cells: split at each ``|`` not right after a backslash (as markdown-it
    splits them, code spans or not)."""
    bounds = [start - 1]
    bounds += [i for i in range(start, end) if text[i] == "|" and text[i - 1 : i] != "\\"]
    return [(a + 1, b) for a, b in zip(bounds, [*bounds[1:], end], strict=True)]


def _definition_destination(text: str, start: int, end: int) -> Span | None:
    """The destination of the link reference definition ``[label]: destination "title"`` that
    markdown-it found at ``text[start:end]`` (after any container prefix)."""
    opening = text.find("[", start, end)
    close = _label_end(text, opening, end) if opening >= 0 else None
    if close is None or text[close + 1 : close + 2] != ":":
        return None
    found = _destination(text, _skip_space(text, close + 2, end), end)
    return None if found is None else found[0]


@dataclass
class _Opener:
    """An unclosed ``[`` or ``![`` (CommonMark's bracket delimiter)."""

    text_start: int
    image: bool
    active: bool = True


def _inline_destinations(text: str, start: int, end: int, labels: set[str]) -> list[Span]:
    """The destinations of the inline links and images in ``text[start:end]``, one block's
    inline content (CommonMark's delimiter stack for brackets, scanned left to right)."""
    found: list[Span] = []
    openers: list[_Opener] = []
    i = start
    while i < end:
        char = text[i]
        if char == "\\":
            i += 2
        elif char == "`":
            i = _after_code_span(text, i, end)
        elif char == "<":
            i = _after_angle(text, i, end)
        elif char == "[" or text.startswith("![", i):
            i += 1 if char == "[" else 2
            openers.append(_Opener(i, image=char == "!"))
        elif char == "]" and openers:
            opener = openers.pop()
            label = text[opener.text_start : i]
            destination, after = (
                _link_end(text, i + 1, end, label, labels) if opener.active else (None, None)
            )
            if destination is not None:
                found.append(destination)
            if after is not None and not opener.image:  # a link cannot contain a link
                for earlier in openers:
                    earlier.active = earlier.active and earlier.image
            i = i + 1 if after is None else after
        else:
            i += 1
    return found


def _after_code_span(text: str, i: int, end: int) -> int:
    """After the code span whose opening backticks start at ``i``, or after those backticks
    when no run of the same length closes them (they are text)."""
    run = _BACKTICKS.match(text, i, end)
    assert run is not None
    for closing in _BACKTICKS.finditer(text, run.end(), end):
        if len(closing.group()) == len(run.group()):
            return closing.end()
    return run.end()


def _after_angle(text: str, i: int, end: int) -> int:
    """After the autolink or raw HTML (tag, comment, ...) at ``i``, or after the ``<``."""
    from markdown_it.common.html_re import HTML_TAG_RE

    close = text.find(">", i, end)
    inner = text[i + 1 : close] if close > i else "<"
    if "<" not in inner and (_AUTOLINK.fullmatch(inner) or _EMAIL.fullmatch(inner)):
        return close + 1
    tag = HTML_TAG_RE.match(text, i, end)
    return tag.end() if tag else i + 1


def _skip_space(text: str, i: int, end: int) -> int:
    """Past spaces, tabs and line ends, and past the ``>`` of a block quote after a line end."""
    newline = False
    while i < end and (text[i] in _SPACE or (newline and text[i] == ">")):
        newline = newline or text[i] in "\r\n"
        i += 1
    return i


def _link_end(
    text: str, i: int, end: int, label: str, labels: set[str]
) -> tuple[Span | None, int | None]:
    """For link text ``label`` closed just before ``i``: the inline link's destination (None for
    a reference link) and the index after the link; (None, None) when there is no link.
    (A link whose destination is not rewritten still counts: it deactivates the brackets
    around it.)"""
    link = _inline_link(text, i, end)
    if link is not None:
        return link
    return None, _reference_end(text, i, end, label, labels)


def _inline_link(text: str, i: int, end: int) -> tuple[Span, int] | None:
    """For link text closed just before ``i``: the destination of ``(destination "title")`` at
    ``i`` and the index after the ``)``; None when no inline link is there."""
    if not text.startswith("(", i):
        return None
    i = _skip_space(text, i + 1, end)
    found = _destination(text, i, end)
    destination, after = found if found is not None else ((i, i), i)
    i = _skip_space(text, after, end)
    if i > after and (title_end := _title_end(text, i, end)) is not None:
        i = _skip_space(text, title_end, end)
    return (destination, i + 1) if text.startswith(")", i) else None


def _destination(text: str, i: int, end: int) -> tuple[Span, int] | None:
    """A link destination at ``i``, ``<...>`` or raw: (its text, the index after it)."""
    if text.startswith("<", i):
        j = i + 1
        while j < end and text[j] not in "<>\r\n":
            j += 2 if text[j] == "\\" and j + 1 < end else 1
        return ((i + 1, j), j + 1) if j < end and text[j] == ">" else None
    j, level = i, 0
    while j < end and text[j] != " " and " " <= text[j] != "\x7f":
        if text[j] == "\\" and j + 1 < end:
            if text[j + 1] == " ":
                break
            j += 1
        elif text[j] == "(":
            level += 1
            if level > 32:
                return None
        elif text[j] == ")":
            if level == 0:
                break
            level -= 1
        j += 1
    return ((i, j), j) if j > i and level == 0 else None


def _title_end(text: str, i: int, end: int) -> int | None:
    """After the link title (``"..."``, ``'...'`` or ``(...)``) at ``i``, or None."""
    if i >= end or text[i] not in "\"'(":
        return None
    close = ")" if text[i] == "(" else text[i]
    j = i + 1
    while j < end:
        if text[j] == close:
            return j + 1
        if text[j] == "(" and close == ")":
            return None
        j += 2 if text[j] == "\\" else 1
    return None


def _label_end(text: str, i: int, end: int) -> int | None:
    """The index of the ``]`` that closes the bracket at ``i`` (nested brackets counted,
    escapes, code spans, autolinks and HTML skipped), or None."""
    level, j = 0, i
    while j < end:
        char = text[j]
        if char in "[]":
            level += 1 if char == "[" else -1
            if level == 0:
                return j
        if char == "`":
            j = _after_code_span(text, j, end)
        elif char == "<":
            j = _after_angle(text, j, end)
        else:
            j += 2 if char == "\\" else 1
    return None


def _reference_end(text: str, i: int, end: int, label: str, labels: set[str]) -> int | None:
    """For link text ``label`` closed just before ``i``: the index after the reference link
    (``[text][label]``, ``[text][]`` or ``[text]``) when its label is defined, else None."""
    from markdown_it.common.utils import normalizeReference

    after = i
    if text.startswith("[", i) and (close := _label_end(text, i, end)) is not None:
        label, after = text[i + 1 : close] or label, close + 1
    return after if normalizeReference(label) in labels else None


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sar_urls.py",
        description=(
            "Validate SOURCE_URL and HOME_PAGE_URL (check), make the README's relative links "
            "absolute links into SOURCE_URL at the checkout's commit for the build template "
            "(readme), and write them as SourceCodeUrl and HomePageUrl into a packaged "
            "template's AWS::ServerlessRepo::Application metadata (apply). SOURCE_URL defaults "
            "to the origin remote's https address, HOME_PAGE_URL to SOURCE_URL."
        ),
    )
    parser.add_argument("command", choices=["check", "readme", "apply"])
    parser.add_argument(
        "template",
        nargs="?",
        type=Path,
        help="the build template (readme) or the packaged template (apply)",
    )
    parser.add_argument(
        "--source-url",
        default=os.environ.get("SOURCE_URL"),
        help="https address of the source code (default: $SOURCE_URL, else the origin remote)",
    )
    parser.add_argument(
        "--home-page-url",
        default=os.environ.get("HOME_PAGE_URL"),
        help="https address of the home page (default: $HOME_PAGE_URL, else the source URL)",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=ROOT,
        help="the checkout whose origin remote is the default source URL, and whose commit and "
        "README (template.yaml's ReadmeUrl) the readme command reads (default: this one)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = argument_parser()
    args = arguments.parse_args(argv)
    if args.command != "check" and args.template is None:
        arguments.error(f"{args.command} needs the template's path")
    try:
        # check validates what was given; only readme and apply need the remote's default.
        wanted = args.command != "check" and not args.source_url
        remote = origin_remote(args.repository) if wanted else None
        urls = resolve(args.source_url, args.home_page_url, remote)
        notes: list[str | None] = []
        if args.command == "readme":
            notes = [*readme(args.template, urls, args.repository)]
        elif args.command == "apply":
            notes = [apply(args.template, urls)]
        for note in notes:
            if note:
                print(note, file=sys.stderr)
    except UsageError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
