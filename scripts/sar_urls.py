"""`make package`: the Serverless Application Repository's ``HomePageUrl`` and ``SourceCodeUrl``.

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
``apply TEMPLATE``
    Validate again, then write the fields into the packaged TEMPLATE (in place). The template is
    read and written with the SAM CLI's own YAML helpers, as ``sam package`` wrote it, so the
    rest of it comes out unchanged and intrinsic functions survive.

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
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
    try:
        result = subprocess.run(  # noqa: S603 -- fixed arguments
            ["git", "-C", str(directory), "remote", "get-url", "origin"],  # noqa: S607 -- git on PATH
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    remote = result.stdout.strip()
    return remote if result.returncode == 0 and remote else None


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


def apply(path: Path, urls: Urls) -> str | None:
    """Write the URLs into the packaged template at ``path`` (atomically); return the note to
    print, if any."""
    from samcli.yamlhelper import yaml_dump, yaml_parse  # type: ignore[import-untyped]

    template = yaml_parse(path.read_text(encoding="utf-8"))
    if not isinstance(template, MutableMapping):
        raise UsageError(f"make package: {path} is not a template")
    inject(template, urls)
    text = yaml_dump(template)
    if yaml_parse(text) != template:  # what sam publish will read is what we meant to write
        raise UsageError(f"make package: the rewritten {path} does not read back the same")
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as out:
        out.write(text)
    os.chmod(out.name, path.stat().st_mode & 0o7777)  # as sam package wrote it, not 0600
    Path(out.name).replace(path)
    return missing_note(urls, template["Metadata"][METADATA])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sar_urls.py",
        description=(
            "Validate SOURCE_URL and HOME_PAGE_URL (check) and write them as SourceCodeUrl and "
            "HomePageUrl into a packaged template's AWS::ServerlessRepo::Application metadata "
            "(apply). SOURCE_URL defaults to the origin remote's https address, HOME_PAGE_URL "
            "to SOURCE_URL."
        ),
    )
    parser.add_argument("command", choices=["check", "apply"])
    parser.add_argument("template", nargs="?", type=Path, help="the packaged template (apply)")
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
        help="the checkout whose origin remote is the default source URL (default: this one)",
    )
    args = parser.parse_args(argv)
    if args.command == "apply" and args.template is None:
        parser.error("apply needs the packaged template's path")
    try:
        # check validates what was given; only apply needs the remote's default.
        wanted = args.command == "apply" and not args.source_url
        remote = origin_remote(args.repository) if wanted else None
        urls = resolve(args.source_url, args.home_page_url, remote)
        if args.command == "apply":
            note = apply(args.template, urls)
            if note:
                print(note, file=sys.stderr)
    except UsageError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
