"""Every relative link of README.md and docs/*.md points to a file of the repository and, with a `#fragment`, to a
heading of that file, by GitHub's anchor rule; what sits in code (fenced blocks, inline spans) and comments is not a
link."""

import re
from pathlib import Path

import pytest

from tests.harness import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1[^\n]*$", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)\)")
HEADING = re.compile(r"^ {0,3}#{1,6} +(.+?)(?: +#+)? *$", re.MULTILINE)


def prose(text: str) -> str:
    """The page without its code blocks, comments and code spans."""
    return CODE.sub("", COMMENT.sub("", FENCED.sub("", text)))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces to hyphens, repeats
    numbered."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCED.sub("", page.read_text(encoding="utf-8"))):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text(encoding="utf-8"))) if not re.match(r"[a-z][a-z+.-]*:", t)]


def test_the_anchor_rule_is_githubs():
    page = ROOT / "docs" / "speed.md"
    assert "speed-orsgens-adapter-against-trls-openrewardspec" in anchors(page)  # the README's old anchor


def test_the_pages_have_links_to_check():
    assert len(links(ROOT / "README.md")) >= 10 and all(links(page) for page in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_relative_to(ROOT) or not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading #{fragment} in {file.relative_to(ROOT)}")
    assert not broken, broken
