"""One self-contained HTML report: Markdown sections rendered with ``markdown`` (tables
extension) and PNG figures embedded as base64 data URIs, so the file can be mailed or archived
on its own."""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Sequence

from ..core import atomic_write_text

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #bbb; }
table { border-collapse: collapse; margin: .8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead { background: #f0f0f0; }
img { max-width: 100%; border: 1px solid #ddd; margin: .5em 0; }
code { background: #f4f4f4; padding: 0 .25em; }
"""


def img_tag(png: Path, alt: str | None = None) -> str:
    """An ``<img>`` with the PNG file embedded as a base64 data URI."""
    data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt or Path(png).stem)}" src="data:image/png;base64,{data}">'


def page(title: str, body: str, css: str = "") -> str:
    """A complete HTML document: ``title``, the house style plus ``css`` inline, ``body`` (HTML)."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title><style>{_CSS}{css}</style></head>\n<body>\n"
        + body
        + "\n</body></html>\n"
    )


class Html(str):
    """A part of :func:`build_html` that is HTML already (written as is, not read as Markdown)."""


def _render(part: str | Path) -> str:
    """A :class:`~pathlib.Path` is a PNG to embed; an :class:`Html` is written as is; a str is Markdown."""
    if isinstance(part, Path):
        return f"<figure>{img_tag(part)}</figure>"
    if isinstance(part, Html):
        return str(part)
    import markdown

    return markdown.markdown(part, extensions=["tables", "fenced_code"])


def build_html(title: str, sections: Sequence[tuple[str, Sequence[str | Path]]], path: str | Path, css: str = "") -> Path:
    """Write ``path``: a title, then for each ``(heading, parts)`` the heading and its parts
    (Markdown text as ``str``, HTML as :class:`Html`, PNG figures as :class:`~pathlib.Path`);
    ``css`` is added to the house style."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for heading, parts in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        body.extend(_render(p) for p in parts)
    doc = page(title, "\n".join(body), css)
    path = Path(path)
    atomic_write_text(path, doc)
    return path
