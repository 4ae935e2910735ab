"""The model and dataset tables of the docs, written from the registries.

``backretrieval models --markdown`` and ``backretrieval datasets --markdown`` print these tables;
``docs/models.md`` and ``docs/datasets.md`` hold them verbatim between the markers
``<!-- generated: models -->`` / ``<!-- generated: datasets -->`` and ``<!-- end generated -->``,
and a test checks that the docs equal the generated text, so a new plugin shows up in the docs
as soon as the docs are regenerated (``python -m backretrieval.report.catalogue --write``).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ..data import list_datasets
from ..encoders import list_image_encoders, list_text_encoders

END = "<!-- end generated -->"


def _cell(text: str) -> str:
    """One Markdown table cell: HTML characters and pipes escaped, no line breaks."""
    text = " ".join(str(text).split())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def models_markdown() -> str:
    """The registered text models (f) and image models (g) as two Markdown tables, each model's
    options (name, type, default) in a column; then the variants any text model takes (the
    serving forms among them) and the runtimes of the sentence-transformers models."""
    from ..encoders.text.st_onnx import CATALOGUE as RUNTIMES
    from ..encoders.variants import CATALOGUE as VARIANTS

    tables = []
    for title, infos in (("Text models (f):", list_text_encoders()), ("Image models (g):", list_image_encoders())):
        lines = [title, "", "| spec | what | options | needs |", "|---|---|---|---|"]
        for info in infos:
            spec = f"`{info.name}:PATH`" if info.takes_arg else f"`{info.name}`"
            options = _cell(info.options_text()) or "-"
            lines.append(f"| {spec} | {_cell(info.description)} | {options} | {_cell(info.requires) or '-'} |")
        tables.append("\n".join(lines))
    lines = ["Variants of any text model (`MODEL@VARIANT`, stacked left to right; a serving form last, "
             "e.g. `use-m@trunc=256@int8`; d = the model's dimension):", "",
             "| variant | what | bytes per item | scored by |", "|---|---|---|---|"]
    lines += [f"| `{v}` | {_cell(what)} | {size} | {_cell(how)} |" for v, what, size, how in VARIANTS]
    tables.append("\n".join(lines))
    lines = ["Runtimes of the sentence-transformers models (`st:`, `hf:`, `minilm-en`; e.g. "
             "`minilm-en?runtime=onnx-int8`, each its own model in the cache and the records):", "",
             "| option | what |", "|---|---|"]
    lines += [f"| `{opt}` | {_cell(what)} |" for opt, what in RUNTIMES]
    tables.append("\n".join(lines))
    return "\n\n".join(tables) + "\n"


def datasets_markdown() -> str:
    """The registered datasets as one Markdown table."""
    lines = ["| name | what | images | links | source | licence |", "|---|---|---|---|---|---|"]
    for info in list_datasets():
        lines.append(
            f"| `{info.name}` | {_cell(info.description)} | {'yes' if info.has_images else 'no'} "
            f"| {'yes' if info.has_concepts else 'no'} | {_cell(info.source)} | {_cell(info.license)} |"
        )
    return "\n".join(lines) + "\n"


GENERATORS = {"models": models_markdown, "datasets": datasets_markdown}


def generated_block(doc: str, name: str) -> str | None:
    """The text between ``<!-- generated: NAME -->`` and the end marker in ``doc`` (None if absent)."""
    m = re.search(rf"<!-- generated: {re.escape(name)} -->\n(.*?){re.escape(END)}", doc, re.S)
    return m.group(1) if m else None


def regenerate(doc: str, name: str) -> str:
    """``doc`` with its generated block ``name`` replaced by the registries' current table.

    Raises:
        ValueError: the document has no such block.
    """
    if generated_block(doc, name) is None:
        raise ValueError(f"no '<!-- generated: {name} -->' ... '{END}' block in the document")
    table = GENERATORS[name]()
    return re.sub(
        rf"(<!-- generated: {re.escape(name)} -->\n).*?({re.escape(END)})",
        lambda m: m.group(1) + table + m.group(2), doc, count=1, flags=re.S,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m backretrieval.report.catalogue --write [DOCS_DIR]``: rewrite docs/models.md and
    docs/datasets.md from the registries."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "--write":
        print("usage: python -m backretrieval.report.catalogue --write [DOCS_DIR]", file=sys.stderr)
        return 2
    docs = Path(args[1]) if len(args) > 1 else Path("docs")
    from ..core.io import atomic_write_text

    for name in GENERATORS:
        path = docs / f"{name}.md"
        atomic_write_text(path, regenerate(path.read_text(encoding="utf-8"), name))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
