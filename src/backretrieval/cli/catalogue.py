"""``backretrieval make-catalogue``: the tutorial's example product catalogue (docs/your-data.md),
written from the emoji data by :mod:`backretrieval.data.shop`."""
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
