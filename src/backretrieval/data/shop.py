"""An example product catalogue made of real data: what ``backretrieval make-catalogue`` writes
for the tutorial docs/your-data.md.

A shop has a folder of product images and, per language, a CSV with each product's id, its
title in that language and its image. :func:`write_catalogue` writes exactly that from
emoji-cldr: the emoji of the "things you could sell" categories (food and drink, objects,
animals and plants, travel and places) are the products, their Noto images (64x64 PNG,
Apache-2.0) the product photos, and their human-written Unicode CLDR names and keywords (Unicode
License v3) the titles::

    OUT/images/<id>.png
    OUT/<lang>.csv          columns: id, text, image   (image: path relative to OUT)

The same product has the same id in every language. Skin-tone variants are left out. The emoji
data come from the npm packages the emoji-cldr loader uses (``$BACKRETRIEVAL_EMOJI_DIR``, the
cache, else ``npm pack``). This module registers no dataset.
"""
from __future__ import annotations

import csv
import json
import shutil
import tarfile
from pathlib import Path
from typing import Sequence

from ..core import DataError
from . import emoji_cldr
from .registry import load_dataset

CATEGORIES = ("Food & Drink", "Objects", "Animals & Nature", "Travel & Places")


def categories_of_images() -> dict[str, str]:
    """Image stem -> emoji category, from emoji.json in the emoji-datasource tarball (base
    emoji only: skin-tone variants are not separate products)."""
    emoji_tgz = emoji_cldr.find_tarballs()[0]
    with tarfile.open(emoji_tgz, "r:gz") as tf:
        entries = json.load(tf.extractfile("package/emoji.json"))
    return {Path(e["image"]).stem: e["category"] for e in entries if e.get("image") and e.get("category")}


def write_catalogue(out: str | Path, langs: Sequence[str] = ("en", "de", "fr", "ja"),
                    categories: Sequence[str] = CATEGORIES) -> dict[str, int]:
    """Write the images and one CSV per language into ``out`` (created).

    Args:
        out: the folder to write.
        langs: CLDR locales, one CSV each.
        categories: emoji.json categories whose emoji are the products.

    Returns:
        The rows written per language.

    Raises:
        DataError: an unknown category (the known ones listed) or language, or emoji data that
            cannot be found or fetched.
    """
    out = Path(out)
    cats = categories_of_images()
    known = set(cats.values())
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise DataError(f"unknown categories {', '.join(map(repr, unknown))}; emoji.json has: {', '.join(sorted(known))}")
    ds = load_dataset("emoji-cldr", langs=list(langs), text="name+keywords")
    (out / "images").mkdir(parents=True, exist_ok=True)
    counts = {}
    for lang in langs:
        c = ds[lang]
        rows = [(i, t, p) for i, t, p in zip(c.ids, c.texts, c.image_paths) if cats.get(i) in categories]
        tmp = out / f".{lang}.csv.tmp"
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "text", "image"])
            for item, text, path in rows:
                dest = out / "images" / f"{item}.png"
                if not dest.exists():
                    shutil.copyfile(path, dest)
                w.writerow([item, text, f"images/{item}.png"])
        tmp.replace(out / f"{lang}.csv")  # a CSV is complete or absent
        counts[lang] = len(rows)
    return counts
