"""Held-out splits of linked title/body data for the Triplet / TripletXL case study.

:func:`heldout_mask` decides per *concept* (the same decision in every language, so no held-out
item has a translation among the training items); :func:`title_body_split` turns a loaded
dataset into monolingual training rows (no concept, no image, ids that are positions in a
seeded per-language shuffle -- neither order nor ids say which items of two languages
correspond) and held-out rows (with the concept for XLR and, where the dataset has images, an
absolute image path for BkR).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core import DataError, content_hash


def heldout_mask(concepts: Sequence[str | None], frac: float, seed: int = 0) -> np.ndarray:
    """Which items are held out.

    Args:
        concepts: the concept (cross-lingual link) of every item; None = no link.
        frac: share of the hash range held out, in (0, 1).
        seed: salt of the hash.

    Returns:
        bool array: a concept is held out when the hash of ``seed:concept`` falls in the lowest
        ``frac`` of the hash range -- the same decision in every language. Items without a
        concept stay in training.
    """
    out = np.zeros(len(concepts), dtype=bool)
    for i, c in enumerate(concepts):
        if c is not None:
            out[i] = int(content_hash(f"{seed}:{c}", 8), 16) < frac * 2.0**64
    return out


def title_body_split(ds: Any, langs: Sequence[str], holdout: float, seed: int = 0) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """Split a linked title/body dataset by concept.

    Args:
        ds: a loaded dataset (``ds[lang]`` corpora with ``title`` / ``body`` extra columns and concepts).
        langs: the languages to split.
        holdout: share of concepts held out, in (0, 1).
        seed: seed of the concept hash and of the per-language shuffle of the training rows.

    Returns:
        ``(train_rows, heldout_rows, info)``: training rows ``{id, lang, text, title, body}``;
        held-out rows ``{id, lang, concept, text, title, body[, image]}``; ``info`` with the counts
        per language and the number of held-out concepts shared by every pair of languages.

    Raises:
        DataError: a language without title/body columns or without cross-lingual links.
    """
    train_rows: list[dict] = []
    test_rows: list[dict] = []
    counts: dict[str, dict[str, int]] = {}
    for lang in langs:
        c = ds[lang]
        if "title" not in c.extra or "body" not in c.extra:
            raise DataError(f"{c.dataset}/{lang} has no title/body columns")
        if not c.has_concepts:
            raise DataError(f"{c.dataset}/{lang} has no cross-lingual links: nothing to hold out for XLR")
        held = heldout_mask(c.concepts, holdout, seed)

        def title_body(i: int) -> tuple[str, str]:
            return str(c.extra["title"][i] or ""), str(c.extra["body"][i] or "")

        for i in np.flatnonzero(held):
            title, body = title_body(i)
            row = {"id": c.ids[i], "lang": lang, "concept": c.concepts[i], "text": c.texts[i], "title": title, "body": body}
            if c.image_paths is not None:
                row["image"] = str(Path(c.image_paths[i]).resolve())
            test_rows.append(row)
        train_idx = np.random.default_rng([seed, int(content_hash(lang, 4), 16)]).permutation(np.flatnonzero(~held))
        for j, i in enumerate(train_idx, start=1):
            title, body = title_body(i)
            train_rows.append({"id": f"{lang}-{j:06d}", "lang": lang, "text": c.texts[i], "title": title, "body": body})
        counts[lang] = {"train": int(train_idx.size), "heldout": int(held.sum())}
    held_sets = {lang: {r["concept"] for r in test_rows if r["lang"] == lang} for lang in langs}
    shared = {f"{a}-{b}": len(held_sets[a] & held_sets[b]) for a, b in itertools.combinations(langs, 2)}
    info = {"langs": list(langs), "holdout": holdout, "seed": seed, "counts": counts, "heldout_shared_concepts": shared}
    return train_rows, test_rows, info
