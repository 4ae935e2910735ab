"""The catalogues: ``backretrieval datasets``, ``models`` and ``metrics`` list what is registered
(the registries and the metric table; ``--markdown`` prints the docs' tables), and
``make-catalogue`` writes the tutorial's example product catalogue (docs/your-data.md) from the
emoji data (:mod:`backretrieval.data.shop`)."""
from __future__ import annotations

from pathlib import Path

import click

from .options import main, parse_list


@main.command("make-catalogue")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--langs", default="en,de,fr,ja", show_default=True, help="CLDR locales, comma-separated: one CSV each.")
@click.option("--categories", default="Food & Drink,Objects,Animals & Nature,Travel & Places", show_default=True,
              help="emoji.json categories whose emoji are the products, comma-separated.")
def make_catalogue(out: Path, langs: str, categories: str) -> None:
    """Write an example product catalogue made of real data into OUT: OUT/images/<id>.png and
    OUT/<lang>.csv (id, text, image), the emoji of shop-like categories with their CLDR names
    and keywords as titles (the tutorial in docs/your-data.md starts from it)."""
    from ..data.shop import write_catalogue

    counts = write_catalogue(out, parse_list(langs, "--langs", "language"), parse_list(categories, "--categories", "category"))
    n_img = len(list((out / "images").glob("*.png")))
    click.echo(f"wrote {n_img} images to {out / 'images'} and "
               + ", ".join(f"{out / (k + '.csv')} ({v} rows)" for k, v in counts.items()))


@main.command()
@click.option("--markdown", is_flag=True, help="Print the Markdown table of docs/datasets.md instead.")
def datasets(markdown: bool) -> None:
    """List the registered datasets."""
    from ..data import list_datasets

    if markdown:
        from ..report.catalogue import datasets_markdown

        click.echo(datasets_markdown(), nl=False)
        return
    for info in list_datasets():
        flags = ", ".join(f for f, on in (("images", info.has_images), ("cross-lingual links", info.has_concepts)) if on)
        click.echo(f"{info.name:<12} {info.description} [{flags or 'text only'}]\n{'':<12} source: {info.source}; licence: {info.license}")


@main.command()
@click.option("--markdown", is_flag=True, help="Print the Markdown tables of docs/models.md instead.")
def models(markdown: bool) -> None:
    """List the text and image models."""
    from ..encoders import list_image_encoders, list_text_encoders

    if markdown:
        from ..report.catalogue import models_markdown

        click.echo(models_markdown(), nl=False)
        return
    click.echo("text models:")
    for info in list_text_encoders():
        name = info.name + (":PATH" if info.takes_arg else "")
        click.echo(f"  {name:<22} {info.description}")
    click.echo("image models (g):")
    for info in list_image_encoders():
        click.echo(f"  {info.name:<22} {info.description}")


@main.command()
def metrics() -> None:
    """List the metrics a record can carry (the metric table); compare ranks by the rankable ones."""
    from ..metrics.table import describe

    for line in describe():
        click.echo(line)
