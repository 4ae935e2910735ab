"""Every relative link of the README, the top-level pages and docs/ leads somewhere: the file (or
folder) exists, and an anchor (``page.md#a-heading``) names a heading of that page, as GitHub
makes anchors from headings. Links inside code blocks and to web addresses are not checked."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([*REPO.glob("*.md"), *(REPO / "docs").glob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The page without its code blocks and code spans."""
    return CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but ``-`` and ``_``
    removed, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[`*]|<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(FENCE.sub("", page.read_text(encoding="utf-8"))):
        s = slug(m.group(2))
        out.add(f"{s}-{seen[s]}" if s in seen else s)
        seen[s] = seen.get(s, 0) + 1
    return out


def links() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for m in LINK.finditer(prose(page.read_text(encoding="utf-8"))):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
                continue
            out.append((page.relative_to(REPO).as_posix(), target))
    return out


LINKS = links()


def test_the_pages_have_links():
    assert len(LINKS) > 50 and any(p == "README.md" for p, _ in LINKS)
    assert slug("2. One file for `backretrieval`") == "2-one-file-for-backretrieval"
    assert slug("Reading a gallery") == "reading-a-gallery"


@pytest.mark.parametrize("page, target", LINKS, ids=[f"{p}->{t}" for p, t in LINKS])
def test_a_relative_link_leads_somewhere(page, target):
    path, _, anchor = target.partition("#")
    dest = (REPO / page).parent / unquote(path) if path else REPO / page
    assert dest.exists(), f"{page}: {target}: {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest} does not exist"
    if anchor:
        assert dest.suffix == ".md", f"{page}: {target}: an anchor into a file that is not Markdown"
        found = anchors(dest)
        assert unquote(anchor) in found, f"{page}: {target}: no heading with anchor #{anchor}; the page has: {sorted(found)}"
