"""The docs' tables of what is registered, written from the registries and the executor table.

``backretrieval models --markdown`` and ``backretrieval datasets --markdown`` print the model and
dataset tables; ``docs/models.md``, ``docs/datasets.md`` and ``docs/scale.md`` (the executors)
hold them verbatim between the markers ``<!-- generated: NAME -->`` and ``<!-- end generated -->``
(:data:`GENERATORS`, on the pages of :data:`PAGES`). Where a page names the executors in one row of
a larger table (``docs/usage.md``'s options, ``docs/bad-input.md``'s refusals), a marker cannot
stand inside the table, so that row is generated whole (:data:`ROWS`). A test checks that the docs
equal the generated text, so a new plugin or executor shows up in the docs as soon as they are
regenerated (``python -m backretrieval.report.catalogue --write``).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from ..analysis import executors
from ..core import BackretrievalError
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


def executors_markdown() -> str:
    """The executor table (:data:`~backretrieval.analysis.executors.EXECUTORS`) as one Markdown
    table: how ``--executor`` names each, and where it runs the tasks."""
    lines = ["| `--executor` | where the per-sample tasks run |", "|---|---|"]
    lines += [f"| `{e.usage}` | {_cell(e.description)} |" for e in executors.EXECUTORS]
    return "\n".join(lines) + "\n"


def executor_option_row() -> str:
    """``docs/usage.md``'s row of the ``--executor`` option: every executor of the table."""
    usages = "\\|".join(e.usage for e in executors.EXECUTORS)
    return (f"| `--executor {usages}` | where the per-sample tasks run ([scale.md](scale.md)); every executor gives "
            "identical records |")


UNKNOWN_EXECUTOR = "threads"  # the misspelled name docs/bad-input.md shows refused


def unknown_executor_row() -> str:
    """``docs/bad-input.md``'s row of an unknown executor: the refusal as the command prints it,
    taken from :func:`~backretrieval.analysis.executors.get_executor` (it lists the table's executors)."""
    try:
        executors.get_executor(UNKNOWN_EXECUTOR)
    except BackretrievalError as e:
        message = str(e)
    else:  # pragma: no cover - an executor of that name would make the example wrong
        raise ValueError(f"{UNKNOWN_EXECUTOR!r} is an executor: pick another unknown name")
    return (f"| `--executor {UNKNOWN_EXECUTOR}` (or `ray` without Ray installed) "
            f"| `error: Invalid value for '--executor': {message}` |")


GENERATORS = {"models": models_markdown, "datasets": datasets_markdown, "executors": executors_markdown}
PAGES = {"models": "models.md", "datasets": "datasets.md", "executors": "scale.md"}  # the page of each block
ROWS = {  # page -> (how its generated row starts, the row)
    "usage.md": ("| `--executor ", executor_option_row),
    "bad-input.md": (f"| `--executor {UNKNOWN_EXECUTOR}` ", unknown_executor_row),
}


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


def generated_row(doc: str, page: str) -> str | None:
    """The line of ``doc`` that :data:`ROWS` generates for ``page`` (None if absent).

    Raises:
        ValueError: several lines start as the generated row does.
    """
    start, _ = ROWS[page]
    found = [line for line in doc.splitlines() if line.startswith(start)]
    if len(found) > 1:
        raise ValueError(f"{page}: {len(found)} lines start with {start!r}; the generated row must be one")
    return found[0] if found else None


def regenerate_row(doc: str, page: str) -> str:
    """``doc`` with its generated row of ``page`` replaced by the current one.

    Raises:
        ValueError: the document has no such row, or several.
    """
    old = generated_row(doc, page)
    if old is None:
        raise ValueError(f"{page}: no line starts with {ROWS[page][0]!r}")
    return doc.replace(old + "\n", ROWS[page][1]() + "\n", 1)


def main(argv: list[str] | None = None) -> int:
    """``python -m backretrieval.report.catalogue --write [DOCS_DIR]``: rewrite the generated
    blocks (docs/models.md, docs/datasets.md, docs/scale.md) and rows (docs/usage.md,
    docs/bad-input.md) from the registries and the executor table."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "--write":
        print("usage: python -m backretrieval.report.catalogue --write [DOCS_DIR]", file=sys.stderr)
        return 2
    docs = Path(args[1]) if len(args) > 1 else Path("docs")
    from ..core.io import atomic_write_text

    for name, page in PAGES.items():
        path = docs / page
        atomic_write_text(path, regenerate(path.read_text(encoding="utf-8"), name))
        print(f"wrote {path}")
    for page in ROWS:
        path = docs / page
        atomic_write_text(path, regenerate_row(path.read_text(encoding="utf-8"), page))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
