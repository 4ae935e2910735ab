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
import filecmp
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Sequence

from ..core import DataError
from ..core.errors import OutputError
from ..core.io import check_writable_dir
from . import emoji_cldr
from .registry import load_dataset

CATEGORIES = ("Food & Drink", "Objects", "Animals & Nature", "Travel & Places")


def categories_of_images() -> dict[str, str]:
    """Image stem -> emoji category, from emoji.json in the emoji-datasource tarball (base
    emoji only: skin-tone variants are not separate products)."""
    emoji_tgz = emoji_cldr.find_tarballs()[0]
    with emoji_cldr.reading_tarball(emoji_tgz), tarfile.open(emoji_tgz, "r:gz") as tf:
        try:
            member = tf.extractfile("package/emoji.json")
        except KeyError:
            raise DataError(f"{emoji_cldr.NAME}: {emoji_tgz} has no package/emoji.json") from None
        entries = json.load(member)
    return {Path(e["image"]).stem: e["category"] for e in entries if e.get("image") and e.get("category")}


def _table(rows: Sequence[tuple[str, str, str]]) -> bytes:
    """The CSV of one language: id, text, image (relative to the catalogue folder)."""
    buf = io.StringIO(newline="")
    w = csv.writer(buf)
    w.writerow(["id", "text", "image"])
    w.writerows((item, text, f"images/{item}.png") for item, text, _ in rows)
    return buf.getvalue().encode("utf-8")


def _check_not_taken(out: Path, tables: dict[str, bytes], images: dict[str, str]) -> None:
    """Nothing of a user's is written over: each CSV and image the catalogue writes is absent or
    already what it would write (a rerun), and no file stands where it writes a folder."""
    check_writable_dir(out, "make-catalogue:")
    if (out / "images").is_file():
        raise OutputError(f"{out}: {out / 'images'} is a file where make-catalogue writes a folder: move it away or "
                          "choose another folder")
    for lang, data in tables.items():
        dest = out / f"{lang}.csv"
        if dest.is_dir():
            raise OutputError(f"{out}: {dest} is a folder where make-catalogue writes a file: move it away or choose "
                              "another folder")
        if dest.exists() and dest.read_bytes() != data:
            raise OutputError(f"{dest} exists and is not the {lang} table make-catalogue writes for these categories: "
                              "it is never written over; move it away or choose another folder")
    for item, source in images.items():
        dest = out / "images" / f"{item}.png"
        if dest.exists() and (dest.is_dir() or not filecmp.cmp(source, dest, shallow=False)):
            raise OutputError(f"{dest} exists and is not the image make-catalogue writes for product {item}: it is "
                              "never written over; move it away or choose another folder")


def write_catalogue(out: str | Path, langs: Sequence[str] = ("en", "de", "fr", "ja"),
                    categories: Sequence[str] = CATEGORIES) -> dict[str, int]:
    """Write the images and one CSV per language into ``out`` (created). A file already there
    is never written over: a rerun with the same languages and categories finds its own files
    and changes nothing; any other file where the catalogue writes is refused before anything
    is written.

    Args:
        out: the folder to write.
        langs: CLDR locales, one CSV each.
        categories: emoji.json categories whose emoji are the products.

    Returns:
        The rows written per language.

    Raises:
        DataError: an unknown category (the known ones listed) or language, or emoji data that
            cannot be found, fetched or read (a damaged or truncated tarball is named).
        OutputError: ``out`` (or a folder above it) or ``out/images`` is a file, ``out`` is not
            writable, or a CSV or image the catalogue writes
            is already there with other contents (a user's own ``OUT/en.csv``).
    """
    out = Path(out)
    _check_not_taken(out, {}, {})
    cats = categories_of_images()
    known = set(cats.values())
    unknown = [c for c in categories if c not in known]
    if unknown:
        raise DataError(f"unknown categories {', '.join(map(repr, unknown))}; emoji.json has: {', '.join(sorted(known))}")
    ds = load_dataset("emoji-cldr", langs=list(langs), text="name+keywords")
    rows = {lang: [(i, t, p) for i, t, p in zip(ds[lang].ids, ds[lang].texts, ds[lang].image_paths) if cats.get(i) in categories]
            for lang in langs}
    tables = {lang: _table(r) for lang, r in rows.items()}
    images = {item: path for r in rows.values() for item, _, path in r}
    _check_not_taken(out, tables, images)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for item, path in images.items():
        dest = out / "images" / f"{item}.png"
        if not dest.exists():
            shutil.copyfile(path, dest)
    for lang, data in tables.items():
        tmp = out / f".{lang}.csv.tmp"
        tmp.write_bytes(data)
        tmp.replace(out / f"{lang}.csv")  # a CSV is complete or absent
    return {lang: len(r) for lang, r in rows.items()}
