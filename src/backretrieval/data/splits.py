"""Content-hash splits: an item's split is a function of its key and a seed only.

The project's one hash split. ``h = int(blake2b(f"{seed}{sep}{key}", 8 bytes))`` is a 64-bit
integer per key (:func:`hash_ints`); ``u = h / 2^64`` a uniform number in [0, 1)
(:func:`hash_uniform`) whose consecutive bands of ``fracs`` assign it (:func:`hash_split`, M3L's
image splits by content key in ``train/m3l/data.py``). :func:`heldout_mask` holds out a concept
when ``h < frac * 2^64`` (compared exactly on the integer), the same decision in every language
(the Triplet / TripletXL case study). Because nothing but the key and the seed enters, an item
keeps its split whatever else is loaded (other languages, other items), so models trained on
different selections share their held-out items.

:func:`title_body_split` turns a loaded dataset into monolingual training rows (no concept, no
image, ids that are positions in a seeded per-language shuffle -- neither order nor ids say which
items of two languages correspond) and held-out rows (with the concept for XLR and, where the
dataset has images, an absolute image path for BkR).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..core import BackretrievalError, DataError, content_hash


def hash_ints(keys: Iterable[str], seed: int, *, sep: str = "\x00") -> list[int]:
    """The 64-bit content hash of ``f"{seed}{sep}{key}"`` per key (BLAKE2b, 8 bytes), as Python ints."""
    return [int(content_hash(f"{int(seed)}{sep}{k}", 8), 16) for k in keys]


def hash_uniform(keys: Iterable[str], seed: int, *, sep: str = "\x00") -> np.ndarray:
    """A seeded pseudo-uniform number in [0, 1) per key.

    Args:
        keys: item keys (strings).
        seed: the split seed (an integer; part of the hashed text).
        sep: separator between seed and key in the hashed text.

    Returns:
        float64 array: ``hash_ints(keys, seed, sep) / 2^64``.
    """
    return np.array([h / 2.0**64 for h in hash_ints(keys, seed, sep=sep)], dtype=np.float64)


def hash_split(keys: Sequence[str], seed: int, fracs: Sequence[float], *, sep: str = "\x00") -> np.ndarray:
    """Band index per key: ``i`` when ``u`` falls in the ``i``-th band of ``fracs``, else ``len(fracs)``.

    Band ``i`` is ``[sum(fracs[:i]), sum(fracs[:i+1]))`` with ``u`` from :func:`hash_uniform`;
    e.g. ``fracs=(test, val)`` gives 0 test, 1 val, 2 train.

    Args:
        keys: item keys.
        seed: the split seed.
        fracs: shares of the bands, each in [0, 1), summing to below 1.
        sep: see :func:`hash_uniform`.

    Returns:
        int8 array of band indices, one per key.

    Raises:
        BackretrievalError: a share outside [0, 1) or shares summing to 1 or more.
    """
    fr = [float(f) for f in fracs]
    for i, f in enumerate(fr):
        if not 0.0 <= f < 1.0:  # also refuses NaN
            raise BackretrievalError(f"split share {i} must be in [0, 1), got {fracs[i]!r}")
    edges = np.cumsum(np.array(fr, dtype=np.float64))
    if len(fr) and edges[-1] >= 1.0:
        raise BackretrievalError(f"split shares {list(fracs)} sum to {edges[-1]}: nothing left for the last band")
    u = hash_uniform(keys, seed, sep=sep)
    return np.searchsorted(edges, u, side="right").astype(np.int8)


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
    linked = [i for i, c in enumerate(concepts) if c is not None]
    limit = frac * 2.0**64
    for i, h in zip(linked, hash_ints((str(concepts[i]) for i in linked), seed, sep=":")):
        out[i] = h < limit  # int vs float: compared exactly
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
