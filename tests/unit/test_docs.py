"""The documentation holds together: the README stays a landing page, every relative link and
anchor in README.md and docs/*.md resolves, and docs/ has an index with a line per document."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from support import DOCUMENTS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file: lower case, punctuation
    dropped (letters, digits, `_`, `-` and spaces kept), spaces as `-`, repeats numbered."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path.read_text()):
        heading = HEADING.match(line)
        if heading is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(2))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        number = seen.get(slug, 0)
        seen[slug] = number + 1
        found.add(slug if number == 0 else f"{slug}-{number}")
    return found


def links(path: Path) -> Iterator[str]:
    """The targets of the links and images in a document's prose (inline code left out)."""
    for line in prose(path.read_text()):
        yield from LINK.findall(re.sub(r"`[^`]*`", "", line))


# --- the landing page and the index ---------------------------------------------------------


def test_the_readme_is_a_landing_page_of_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_names_the_two_set_up_commands() -> None:
    text = README.read_text()
    assert "## Two commands" in text
    assert "make demo" in text
    assert "make test" in text


def test_the_documents_are_the_readme_and_docs() -> None:
    assert DOCUMENTS[0] == README
    assert set(DOCUMENTS[1:]) == set(DOCS.glob("*.md"))


def test_every_relative_link_and_anchor_resolves() -> None:
    broken = []
    for document in DOCUMENTS:
        for target in links(document):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path, _, anchor = target.partition("#")
            file = (document.parent / path).resolve() if path else document
            if not file.exists():
                broken.append(f"{document.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{document.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A `title`: here\n\n## Same\n\n## Same\n\n"
        "[ok](#a-title-here) [ok](#same-1) [gone](missing.md) [bad](#nowhere)\n"
        "`[not a link](in-code.md)`\n\n```md\n[not a link](in-a-block.md)\n```\n"
    )
    assert anchors(page) == {"a-title-here", "same", "same-1"}
    assert list(links(page)) == ["#a-title-here", "#same-1", "missing.md", "#nowhere"]


def test_the_index_has_one_line_per_document() -> None:
    index = (DOCS / "README.md").read_text()
    documents = {path.name for path in DOCS.glob("*.md")} - {"README.md"}
    for name in documents:
        lines = [line for line in index.splitlines() if f"]({name})" in line]
        assert len(lines) == 1, name
    listed = set(re.findall(r"\]\(([\w-]+\.md)\)", index))
    assert listed == documents
