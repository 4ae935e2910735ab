"""The docs hold exactly the tables the registries and the executor table generate: the blocks of
docs/models.md, docs/datasets.md and docs/scale.md, and the executor rows of docs/usage.md and
docs/bad-input.md."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.report import catalogue

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", sorted(catalogue.GENERATORS))
def test_docs_equal_the_generated_tables(name):
    page = catalogue.PAGES[name]
    doc = (DOCS / page).read_text(encoding="utf-8")
    block = catalogue.generated_block(doc, name)
    assert block is not None, f"docs/{page} lost its generated block {name}"
    assert block == catalogue.GENERATORS[name](), (
        f"docs/{page} is out of date: run `python -m backretrieval.report.catalogue --write docs`"
    )


@pytest.mark.parametrize("page", sorted(catalogue.ROWS))
def test_docs_equal_the_generated_rows(page):
    row = catalogue.generated_row((DOCS / page).read_text(encoding="utf-8"), page)
    assert row is not None, f"docs/{page} lost its generated row"
    assert row == catalogue.ROWS[page][1](), (
        f"docs/{page} is out of date: run `python -m backretrieval.report.catalogue --write docs`"
    )


def test_the_executor_docs_name_every_row_of_the_table():
    from backretrieval.analysis.executors import EXECUTORS

    table, option, refusal = catalogue.executors_markdown(), catalogue.executor_option_row(), catalogue.unknown_executor_row()
    for e in EXECUTORS:
        assert f"| `{e.usage}` | {e.description} |" in table and e.usage in option and e.usage in refusal
    doc = "| a | b |\n| `--executor old` | x |\n| c | d |\n"
    assert catalogue.regenerate_row(doc, "usage.md") == f"| a | b |\n{option}\n| c | d |\n"
    with pytest.raises(ValueError, match="no line starts with"):
        catalogue.regenerate_row("| a | b |\n", "usage.md")


def test_every_registered_model_and_dataset_is_in_the_tables():
    from backretrieval.data import list_datasets
    from backretrieval.encoders import list_image_encoders, list_text_encoders

    models = catalogue.models_markdown()
    for info in [*list_text_encoders(), *list_image_encoders()]:
        assert f"`{info.name}" in models
    datasets = catalogue.datasets_markdown()
    for info in list_datasets():
        assert f"| `{info.name}` |" in datasets


@pytest.mark.parametrize("command,name", [("models", "models"), ("datasets", "datasets")])
def test_cli_markdown_prints_the_table(command, name):
    res = CliRunner().invoke(main, [command, "--markdown"])
    assert res.exit_code == 0, res.output
    assert res.output == catalogue.GENERATORS[name]()


def test_regenerate_replaces_only_the_block_and_refuses_a_page_without_one():
    doc = "intro\n<!-- generated: models -->\nold table\n<!-- end generated -->\noutro\n"
    new = catalogue.regenerate(doc, "models")
    assert new.startswith("intro\n<!-- generated: models -->\nText models (f):\n")
    assert new.endswith("<!-- end generated -->\noutro\n") and "old table" not in new
    assert catalogue.generated_block(new, "models") == catalogue.models_markdown()
    with pytest.raises(ValueError, match="generated: datasets"):
        catalogue.regenerate(doc, "datasets")


def test_cells_escape_pipes_and_html():
    assert catalogue._cell("a|b <lang>\n c") == "a\\|b &lt;lang&gt; c"
