"""A small real product catalogue for the tests of what a catalogue's size allows: the first
emoji of emoji-cldr that have a name in every language asked for, as a shop would bring them
(one CSV with ``id``, ``lang``, ``text``, ``image``, ``concept``; the images copied beside it)."""
from __future__ import annotations

import csv
import shutil
from pathlib import Path


def write_catalogue(out: Path, products: int = 60, langs: tuple[str, ...] = ("en", "de", "es")) -> Path:
    """Write ``out/catalogue.csv`` and ``out/images/`` with ``products`` products in ``langs``;
    return the CSV's path. Needs the real emoji data (the ``shared_data`` fixture)."""
    from backretrieval.data import load_dataset

    ds = load_dataset("emoji-cldr", langs=list(langs))
    common = set.intersection(*(set(ds[lang].ids) for lang in langs))
    first = [i for i in ds[langs[0]].ids if i in common][:products]
    (out / "images").mkdir(parents=True, exist_ok=True)
    path = out / "catalogue.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "lang", "text", "image", "concept"])
        for lang in langs:
            c = ds[lang]
            row = {item: r for r, item in enumerate(c.ids)}
            for item in first:
                dest = out / "images" / f"{item}.png"
                if not dest.exists():
                    shutil.copyfile(c.image_paths[row[item]], dest)
                w.writerow([f"{lang}-{item}", lang, c.texts[row[item]], f"images/{item}.png", item])
    return path
