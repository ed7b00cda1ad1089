"""scripts/sar_urls.py's README for the Serverless Application Repository's page (no sockets):
every relative link becomes a link into the source repository at the packaged commit, and
nothing else changes. What a link is, is what markdown-it (a CommonMark parser, independent of
the rewrite's own scan of a block's inline content) renders: the links of the rewritten text,
token by token, are the original's with each relative destination made absolute, and code,
HTML, absolute links and anchors come out as they went in. `make package` runs the `readme`
command before `sam package` (tests/integration/test_package.py reads what it uploads).

``SIMULATION_BOUNDS=verify`` (``make verify``) runs the generated documents' and texts'
properties at their full counts (500 and 2,000 examples); the default (``make test``) a quarter
of each (the search is derandomized in both)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token
from samcli.yamlhelper import yaml_parse  # type: ignore[import-untyped]

from sar_urls import (
    METADATA,
    Urls,
    absolute_links,
    absolute_target,
    main,
    readme,
    relative_links,
    resolve,
)
from support import DEEPER
from yaml_state import safe_loader_restored

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()

SOURCE = "https://git.example.test/acme/cmstoken"
REF = "0123456789abcdef0123456789abcdef01234567"
PROPERTIES = settings(
    derandomize=True, database=None, max_examples=500 if DEEPER else 125, deadline=None
)


@pytest.fixture(autouse=True)
def _safe_loader_restored() -> Iterator[None]:
    """The SAM CLI's YAML parsers change PyYAML's SafeLoader for the process (see yaml_state)."""
    with safe_loader_restored():
        yield


# --- the oracle: what a CommonMark renderer makes of a text -------------------------------------

MARKDOWN = MarkdownIt("commonmark").enable("table")
SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
LINK_ATTRIBUTES = {"href", "src"}
LINKS = {"link_open", "image"}


def expected_href(href: str, source: str, ref: str) -> str:
    """Where a rendered link should go after the rewrite: a relative one into the repository at
    ``ref`` (a directory, ending in ``/``, under ``/tree/``); any other as it was."""
    if not href or href.startswith(("#", "?", "//")) or SCHEME.match(href):
        return href
    path = re.split(r"[?#]", href, maxsplit=1)[0]
    kind = "tree" if path.endswith("/") else "blob"
    return f"{source.rstrip('/')}/{kind}/{ref}{'' if href.startswith('/') else '/'}{href}"


@lru_cache(maxsize=4)
def rendered(markdown: str) -> tuple[list[Token], dict[str, Any]]:
    """Every token markdown-it makes of ``markdown``, children included, and the link
    reference definitions it read (read, never changed, by the checks: the README's, which
    every example of its property compares with, is made once)."""
    env: dict[str, Any] = {}
    flat: list[Token] = []
    for token in MARKDOWN.parse(markdown, env):
        flat += [token, *(token.children or [])]
    return flat, env.get("references", {})


def same_link(original: str, rewritten: str, source: str, ref: str) -> bool:
    """A link's destination after the rewrite is the expected one (compared unquoted: the
    renderer percent-encodes what it takes as written)."""
    return unquote(rewritten) == unquote(expected_href(original, source, ref))


def assert_only_relative_links_changed(
    original: str, rewritten: str, source: str = SOURCE, ref: str = REF
) -> None:
    """markdown-it renders ``rewritten`` as ``original`` but for the relative links, which go
    into the repository: same tokens, same text, code and HTML; absolute links unchanged."""
    before, before_references = rendered(original)
    after, after_references = rendered(rewritten)
    assert [t.type for t in after] == [t.type for t in before]
    for old, new in zip(before, after, strict=True):
        where = f"{old.type} {old.map}"
        if old.type not in {"inline", "image"}:  # their content is source, destinations and all
            assert new.content == old.content, where
        assert (new.tag, new.markup, new.info) == (old.tag, old.markup, old.info), where
        assert set(new.attrs) == set(old.attrs), where
        for name, value in old.attrs.items():
            if name in LINK_ATTRIBUTES:
                assert same_link(str(value), str(new.attrs[name]), source, ref), where
            else:
                assert new.attrs[name] == value, where
    assert after_references.keys() == before_references.keys()
    for label, definition in before_references.items():
        assert same_link(definition["href"], after_references[label]["href"], source, ref)
        assert after_references[label]["title"] == definition["title"]


def assert_only_inserted(
    original: str, rewritten: str, source: str = SOURCE, ref: str = REF
) -> None:
    """``rewritten`` is ``original`` with prefixes ``SOURCE/blob/REF`` or ``SOURCE/tree/REF``
    inserted, each followed by a ``/`` of its own unless the destination starts with one."""
    prefix = re.escape(re.sub(r"([()&])", r"\\\1", source.rstrip("/")))
    first, *parts = re.split(rf"{prefix}/(?:blob|tree)/{ref}", rewritten)
    assert original.startswith(first)
    position = len(first)
    for part in parts:
        kept = part if original.startswith(part, position) else part.removeprefix("/")
        assert original.startswith(kept, position), part  # only the prefix and a "/" were added
        position += len(kept)
    assert position == len(original)


def test_the_oracle_sees_a_rewrite_that_touches_code_or_misses_a_link() -> None:
    """Controls: a regular expression's rewrite, which also rewrites a code span, and one
    that leaves a reference definition relative, both fail the check."""
    text = "[a](docs/a.md) `[b](docs/b.md)`\n\n[c]: docs/c.md\n\n[c]\n"
    naive = re.sub(r"\]\((?!https?:|#)", f"]({SOURCE}/blob/{REF}/", text)
    with pytest.raises(AssertionError):
        assert_only_relative_links_changed(text, naive)
    inline_only = text.replace("(docs/a.md)", f"({SOURCE}/blob/{REF}/docs/a.md)")
    with pytest.raises(AssertionError):
        assert_only_relative_links_changed(text, inline_only)
    assert_only_relative_links_changed(text, absolute_links(text, SOURCE, REF))


# --- generated Markdown --------------------------------------------------------------------------
#
# Two things are left out, where markdown-it departs from CommonMark and the rewrite follows
# CommonMark (see test_where_markdown_it_departs_from_commonmark): javascript:, vbscript:, file:
# and data: destinations, which markdown-it does not make links, and a link inside an image
# inside a link, which leaves the outer link a link in markdown-it only.

SEGMENTS = ["docs", "deploy.md", "operate.md", "CHANGELOG.md", "LICENSE", "..", ".", "a(b)"]
RELATIVE = st.builds(
    lambda lead, parts, slash, tail: lead + "/".join(parts) + slash + tail,
    st.sampled_from(["", "", "./", "/", "../"]),
    st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3),
    st.sampled_from(["", "", "/"]),
    st.sampled_from(["", "", "#bootstrap", "?plain=1", "?plain=1#L3", "#"]),
)
OTHER = st.sampled_from(
    [
        "https://example.org/acme/cmstoken",
        "http://example.org/x.md",
        "HTTPS://EXAMPLE.ORG/y",
        "mailto:someone@example.org",
        "ftp://example.org/file",
        "//cdn.example.org/z.png",
        "#operate-when-an-alarm-fires",
        "#",
        "\\#escaped-anchor",
        "&#35;entity-anchor",
        "&#104;ttps://example.org/entity",
        "?tab=readme",
    ]
)
DESTINATION = st.one_of(RELATIVE, RELATIVE, OTHER)
TITLE = st.sampled_from(["", ' "a title"', " 'its title'", " (title)", '\n  "next line"'])
WORD = st.sampled_from(
    ["alpha", "beta", "1.", "-", "*em*", "_", "#", "|", ">", "!", ":", "(", ")", "[", "]", "\\",
     "`", "<", "&amp;", "\\[", "\\]", "\\`", "x\\|y"]
)  # fmt: skip
LABEL = st.sampled_from(["ref", "Ref", "other", "undefined"])


@st.composite
def inline_link(draw: st.DrawFn, depth: int = 0) -> str:
    """An inline link or image, its destination raw or in <>, with or without a title; its text
    may hold a code span or (depth first) another link."""
    destination = draw(DESTINATION)
    written = destination if draw(st.booleans()) else f"<{destination}>"
    text = draw(st.sampled_from(["Deploy", "`code`", "a [b] c", "", "x *y*"]))
    if depth == 0 and draw(st.integers(0, 4)) == 0:
        text += " " + draw(inline_link(depth=1))
    bang = draw(st.sampled_from(["", "", "!"]))
    return f"{bang}[{text}]({draw(st.sampled_from(['', ' ']))}{written}{draw(TITLE)})"


PIECE = st.one_of(
    WORD,
    WORD,
    inline_link(),
    inline_link(),
    inline_link().map(lambda link: f"`{link}`"),
    inline_link().map(lambda link: f"`` {link} ` ``"),
    st.builds(lambda label: f"[{label}]", LABEL),
    st.builds(lambda text, label: f"[{text}][{label}]", st.sampled_from(["see", "`x`"]), LABEL),
    st.builds(lambda label: f"[{label}][]", LABEL),
    st.sampled_from(
        [
            "<https://example.org/a_[b](c)>",
            "<someone@example.org>",
            '<span title="[x](docs/x.md)">',
            "</span>",
            "<!-- [y](docs/y.md) -->",
            "[unclosed(docs/u.md)",
            "](docs/stray.md)",
            "[no link] (docs/space.md)",
        ]
    ),
)
LINE = st.lists(PIECE, min_size=1, max_size=6).map(" ".join)


@st.composite
def paragraph(draw: st.DrawFn) -> str:
    return "\n".join(draw(st.lists(LINE, min_size=1, max_size=3)))


@st.composite
def definition(draw: st.DrawFn) -> str:
    destination = draw(DESTINATION)
    written = destination if draw(st.booleans()) else f"<{destination}>"
    separator = draw(st.sampled_from([" ", "  ", "\n   "]))
    return f"[{draw(LABEL)}]:{separator}{written}{draw(TITLE)}"


BLOCK = st.one_of(
    paragraph(),
    paragraph(),
    st.builds(lambda line: f"# {line}", LINE),
    st.builds(lambda line: f"Title {line}\n===", LINE),
    st.builds(lambda body, fence: f"{fence}md\n{body}\n{fence}", paragraph(), st.just("```")),
    st.builds(lambda body: f"~~~\n{body}\n~~~", paragraph()),
    st.builds(lambda body: f"   ```sh\n   {body}\n   ```", LINE),
    st.builds(lambda line: f"    {line}", LINE),  # indented code
    st.builds(lambda line: f"- {line}", LINE),
    st.builds(lambda line, more: f"1. {line}\n   {more}", LINE, LINE),
    st.builds(lambda line, more: f"> {line}\n> {more}", LINE, LINE),
    st.builds(lambda a, b: f"| a | b |\n|---|---|\n| {a} | {b} |", LINE, LINE),
    st.builds(lambda body: f"<div>\n{body}\n</div>", paragraph()),
    st.builds(lambda body: f"<!--\n{body}\n-->", paragraph()),
    definition(),
)
DOCUMENT = st.lists(BLOCK, min_size=1, max_size=6).map("\n\n".join)


@PROPERTIES
@given(DOCUMENT)
def test_only_the_relative_links_change(document: str) -> None:
    rewritten = absolute_links(document, SOURCE, REF)
    assert_only_relative_links_changed(document, rewritten)
    assert_only_inserted(document, rewritten)
    assert absolute_links(rewritten, SOURCE, REF) == rewritten  # nothing relative is left
    assert relative_links(rewritten) == []


# Any text of Markdown's punctuation and a few of its constructs: what no one writes, to find
# where the scan and the parser part (none found in over 200,000 runs while writing this).
SOUP = st.lists(
    st.sampled_from(
        [*"[]()!<>`\\ \t\n#*-|:\"'ab/.&;=x", "[a](b)", "](d)", "![", "<a>", "<div>\n", "<!--",
         "-->", "\n\n", "\r\n", "    ", "> ", "- ", "1. ", "===\n", "```", "~~~", "`` ", "[l]: ",
         "[l]", "[l]: <a b>", "(t)", '"t"', "&#35;", "https:"]
    ),
    max_size=120,
).map("".join)  # fmt: skip


@settings(PROPERTIES, max_examples=2000 if DEEPER else 500)
@given(SOUP)
def test_only_the_relative_links_of_any_text_change(text: str) -> None:
    rewritten = absolute_links(text, SOURCE, REF)
    assert_only_relative_links_changed(text, rewritten)
    assert_only_inserted(text, rewritten)


SOURCES = st.builds(
    lambda host, path, slash: f"https://{host}/{path}{slash}",
    st.sampled_from(["github.com", "gitlab.example.test:8443", "src.example.test"]),
    st.sampled_from(["acme/cmstoken", "group/sub/cmstoken", "a(b)/c&d", "o/r_1.x~"]),
    st.sampled_from(["", "/"]),
)
COMMITS = st.text("0123456789abcdef", min_size=40, max_size=40)


@settings(PROPERTIES, max_examples=100)
@given(SOURCES, COMMITS)
def test_every_relative_link_of_the_readme_goes_into_the_repository(source: str, ref: str) -> None:
    rewritten = absolute_links(README, source, ref)
    assert_only_relative_links_changed(README, rewritten, source, ref)
    assert_only_inserted(README, rewritten, source, ref)
    tokens, _ = rendered(rewritten)
    hrefs = [str(t.attrs.get("href", t.attrs.get("src"))) for t in tokens if t.type in LINKS]
    assert hrefs
    assert all(SCHEME.match(href) or href.startswith("#") for href in hrefs)


def test_the_readme_has_relative_links_and_code_to_leave() -> None:
    """Controls for the property above: the README links to docs/ (with anchors), the
    changelog and the license, and has code that holds no link to rewrite."""
    links = relative_links(README)
    assert len(links) >= 20
    assert {"docs/deploy.md", "docs/operate.md#bootstrap", "CHANGELOG.md", "LICENSE"} <= set(links)
    assert "```" in README
    rewritten = absolute_links(README, SOURCE, REF)
    assert f"[Deploy]({SOURCE}/blob/{REF}/docs/deploy.md)" in rewritten
    assert f"[Bootstrap]({SOURCE}/blob/{REF}/docs/operate.md#bootstrap)" in rewritten
    assert f"[LICENSE]({SOURCE}/blob/{REF}/LICENSE)" in rewritten
    assert f"[CHANGELOG]({SOURCE}/blob/{REF}/CHANGELOG.md)" in rewritten
    blocks = re.findall(r"```.*?```", README, re.S)
    assert blocks
    assert all(block in rewritten for block in blocks)


# --- examples ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("destination", "target"),
    [
        ("docs/deploy.md", f"{SOURCE}/blob/{REF}/docs/deploy.md"),
        ("docs/operate.md#bootstrap", f"{SOURCE}/blob/{REF}/docs/operate.md#bootstrap"),
        ("./CHANGELOG.md", f"{SOURCE}/blob/{REF}/./CHANGELOG.md"),
        ("/LICENSE", f"{SOURCE}/blob/{REF}/LICENSE"),
        ("docs/", f"{SOURCE}/tree/{REF}/docs/"),
        ("docs/a.md?plain=1#L2", f"{SOURCE}/blob/{REF}/docs/a.md?plain=1#L2"),
        ("my%20file.md", f"{SOURCE}/blob/{REF}/my%20file.md"),
    ],
)
def test_a_relative_destination_goes_into_the_repository(destination: str, target: str) -> None:
    assert absolute_target(destination, SOURCE, REF) == target
    assert absolute_target(destination, f"{SOURCE}/", REF) == target


@pytest.mark.parametrize(
    "destination",
    [
        "https://example.org/a",
        "http://example.org/a",
        "mailto:someone@example.org",
        "HTTPS://EXAMPLE.ORG",
        "//cdn.example.org/x",
        "#bootstrap",
        "\\#bootstrap",
        "&#35;bootstrap",
        "?tab=readme",
        "",
    ],
)
def test_other_destinations_are_left(destination: str) -> None:
    assert absolute_target(destination, SOURCE, REF) is None


def test_a_directory_goes_to_its_tree() -> None:
    def is_directory(path: str) -> bool:
        return path in {"docs", "tests/unit"}

    assert absolute_target("docs", SOURCE, REF, is_directory) == f"{SOURCE}/tree/{REF}/docs"
    assert absolute_target("/tests/unit#x", SOURCE, REF, is_directory) == (
        f"{SOURCE}/tree/{REF}/tests/unit#x"
    )
    assert absolute_target("docs.md", SOURCE, REF, is_directory) == f"{SOURCE}/blob/{REF}/docs.md"


def test_parentheses_and_ampersands_of_the_source_are_escaped() -> None:
    source = "https://example.org/a(b)/c&amp"
    rewritten = absolute_links("[x](docs/x.md)\n", source, REF)
    assert rewritten == f"[x](https://example.org/a\\(b\\)/c\\&amp/blob/{REF}/docs/x.md)\n"
    tokens, _ = rendered(rewritten)
    (link,) = [t for t in tokens if t.type == "link_open"]
    assert unquote(str(link.attrs["href"])) == f"{source}/blob/{REF}/docs/x.md"


EXAMPLE = """\
# See [Deploy](docs/deploy.md) and [the site](https://example.org/acme)

Read [Bootstrap](docs/operate.md#bootstrap "how"), [above](#see), ![logo](docs/logo.png),
[mail](mailto:a@example.org), [spaced](<docs/a b.md>), [ref] and [text][ref].
Not links: `[code](docs/code.md)`, \\[escaped](docs/escaped.md), <https://example.org/[x](y)>,
<span title="[html](docs/html.md)">, [outer [inner](docs/inner.md)](docs/outer.md),
[untitled](<docs/untitled.md>"no space before the title").

| alarm | runbook |
|---|---|
| `AlarmName` | [Operate](docs/operate.md#alarm) |

```sh
echo "[fenced](docs/fenced.md)"
```

    [indented](docs/indented.md)

<div>
[block html](docs/block.md)
</div>

> [quoted](
> docs/quoted.md)

[ref]: CHANGELOG.md
[unused]: <LICENSE> "license"
"""

EXAMPLE_REWRITTEN = EXAMPLE
for _written in [
    "docs/deploy.md",
    "docs/operate.md#bootstrap",
    "docs/logo.png",
    "docs/a b.md",
    "docs/inner.md",
    "docs/operate.md#alarm",
    "docs/quoted.md)",
    "CHANGELOG.md\n",
    "LICENSE>",
]:
    EXAMPLE_REWRITTEN = EXAMPLE_REWRITTEN.replace(_written, f"{SOURCE}/blob/{REF}/{_written}", 1)


def test_an_example_with_what_stays_and_what_changes() -> None:
    assert absolute_links(EXAMPLE, SOURCE, REF) == EXAMPLE_REWRITTEN
    assert_only_relative_links_changed(EXAMPLE, EXAMPLE_REWRITTEN)
    for kept in ["code", "escaped", "html", "outer", "untitled", "fenced", "indented", "block"]:
        assert f"docs/{kept}." in EXAMPLE_REWRITTEN
        assert f"{REF}/docs/{kept}." not in EXAMPLE_REWRITTEN


@pytest.mark.parametrize(
    ("text", "rewritten"),
    [
        # A link cannot contain a link, at any depth: [c](d) makes the outer bracket text.
        ("[a ![b [c](d)](e)](f)", f"[a ![b [c]({SOURCE}/blob/{REF}/d)]({SOURCE}/blob/{REF}/e)](f)"),
        # javascript: is a link's destination (not rewritten), so the outer bracket is text.
        ("[x [a](javascript:void)](docs/y.md)", "[x [a](javascript:void)](docs/y.md)"),
    ],
)
def test_where_markdown_it_departs_from_commonmark(text: str, rewritten: str) -> None:
    """CommonMark's reading (GitHub's too): the rewrite follows it where markdown-it does not."""
    assert absolute_links(text, SOURCE, REF) == rewritten
    with pytest.raises(AssertionError):
        assert_only_relative_links_changed(text, rewritten)  # markdown-it renders one more link


def test_line_endings_and_text_without_links_stay() -> None:
    assert absolute_links("", SOURCE, REF) == ""
    assert absolute_links("no links\r\n", SOURCE, REF) == "no links\r\n"
    crlf = "a\r\n[x](docs/x.md)\r\n\r\n```\r\n[y](y.md)\r\n```\r\n"
    assert absolute_links(crlf, SOURCE, REF) == crlf.replace(
        "docs/x.md", f"{SOURCE}/blob/{REF}/docs/x.md"
    )


# --- the readme command --------------------------------------------------------------------------

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Metadata:
  AWS::ServerlessRepo::Application:
    Name: cmstoken
    SpdxLicenseId: Apache-2.0
    LicenseUrl: {path}LICENSE
    ReadmeUrl: {path}README.md
    SemanticVersion: "0.1.0"
Resources:
  Topic:
    Type: AWS::SNS::Topic
    Properties:
      TopicName: !Sub "${{AWS::StackName}}-alarms"
"""
CHECKOUT_README = "# cmstoken\n\n[Deploy](docs/deploy.md), [docs](docs), `[x](y.md)`\n"


def git(repository: Path, *arguments: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
    return subprocess.run(
        ["git", *identity, "-C", str(repository), *arguments],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A committed checkout (template.yaml, README.md, docs/) and its sam build template."""
    for name in ("GIT_DIR", "GIT_WORK_TREE", "SOURCE_URL", "HOME_PAGE_URL"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "template.yaml").write_text(TEMPLATE.format(path=""))
    (tmp_path / "README.md").write_text(CHECKOUT_README)
    (tmp_path / "LICENSE").write_text("Apache-2.0\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "deploy.md").write_text("# Deploy\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "template.yaml", "README.md", "LICENSE", "docs")
    git(tmp_path, "commit", "-q", "-m", "initial")
    build = tmp_path / ".aws-sam" / "build"
    build.mkdir(parents=True)
    (build / "template.yaml").write_text(TEMPLATE.format(path="../../"))
    (build / "template.yaml").chmod(0o644)
    return tmp_path


def build_metadata(checkout: Path) -> dict[str, Any]:
    template = yaml_parse((checkout / ".aws-sam" / "build" / "template.yaml").read_text())
    return template["Metadata"][METADATA]  # type: ignore[no-any-return]


def test_readme_writes_the_rewritten_copy_the_build_template_names(checkout: Path) -> None:
    commit = git(checkout, "rev-parse", "HEAD")
    build = checkout / ".aws-sam" / "build"
    assert readme(build / "template.yaml", Urls(SOURCE, SOURCE), checkout) == []
    assert build_metadata(checkout)["ReadmeUrl"] == "README.md"
    assert build_metadata(checkout)["LicenseUrl"] == "../../LICENSE"
    assert (build / "README.md").read_text() == (
        f"# cmstoken\n\n[Deploy]({SOURCE}/blob/{commit}/docs/deploy.md), "
        f"[docs]({SOURCE}/tree/{commit}/docs), `[x](y.md)`\n"
    )
    assert (checkout / "README.md").read_text() == CHECKOUT_README
    assert git(checkout, "status", "--porcelain", "--untracked-files=no") == ""
    written = yaml_parse((build / "template.yaml").read_text())
    assert written["Resources"]["Topic"]["Properties"]["TopicName"] == {
        "Fn::Sub": "${AWS::StackName}-alarms"
    }
    assert (build / "template.yaml").stat().st_mode & 0o777 == 0o644
    assert sorted(path.name for path in build.iterdir()) == ["README.md", "template.yaml"]


def test_uncommitted_changes_are_said_in_one_line_and_head_is_linked(checkout: Path) -> None:
    commit = git(checkout, "rev-parse", "HEAD")
    (checkout / "docs" / "deploy.md").write_text("# Deploy, changed\n")
    build = checkout / ".aws-sam" / "build"
    notes = readme(build / "template.yaml", Urls(SOURCE, SOURCE), checkout)
    assert len(notes) == 1
    assert "\n" not in notes[0]
    assert notes[0].startswith("make package: the checkout has uncommitted changes")
    assert f"{SOURCE}/blob/{commit[:12]}/" in notes[0]
    assert "commit, push and package again" in notes[0]
    assert f"{SOURCE}/blob/{commit}/docs/deploy.md" in (build / "README.md").read_text()


def test_without_a_source_the_checkouts_readme_is_named_and_a_copy_removed(
    checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = checkout / ".aws-sam" / "build"
    readme(build / "template.yaml", Urls(SOURCE, SOURCE), checkout)  # an earlier run's copy
    assert (build / "README.md").exists()
    assert main(["readme", str(build / "template.yaml"), "--repository", str(checkout)]) == 0
    assert build_metadata(checkout)["ReadmeUrl"] == "../../README.md"
    assert not (build / "README.md").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("make package: no SOURCE_URL and no origin remote, so the README's")
    assert "stay relative" in err
    assert "Serverless Application Repository" in err
    assert "SOURCE_URL=https://" in err
    assert "SourceCodeUrl" not in err  # apply's note is the one about SourceCodeUrl


def test_the_default_source_is_the_origin_remote(checkout: Path) -> None:
    git(checkout, "remote", "add", "origin", "git@github.com:acme/cmstoken.git")
    build = checkout / ".aws-sam" / "build"
    assert main(["readme", str(build / "template.yaml"), "--repository", str(checkout)]) == 0
    commit = git(checkout, "rev-parse", "HEAD")
    expected = f"https://github.com/acme/cmstoken/blob/{commit}/docs/deploy.md"
    assert expected in (build / "README.md").read_text()


def test_a_source_without_a_commit_keeps_the_links_relative(tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text(TEMPLATE.format(path=""))
    (tmp_path / "README.md").write_text(CHECKOUT_README)
    build = tmp_path / "build"
    build.mkdir()
    (build / "template.yaml").write_text(TEMPLATE.format(path="../"))
    git(tmp_path, "init", "-q")
    (note,) = readme(build / "template.yaml", resolve(SOURCE, None, None), tmp_path)
    assert "has no commit" in note
    assert "stay relative" in note
    metadata = yaml_parse((build / "template.yaml").read_text())["Metadata"][METADATA]
    assert metadata["ReadmeUrl"] == "../README.md"
    assert not (build / "README.md").exists()


def test_readme_needs_the_build_template(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["readme"])
    assert exited.value.code == 2
    assert "readme needs the template's path" in capsys.readouterr().err
