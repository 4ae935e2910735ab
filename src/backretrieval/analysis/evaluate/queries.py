"""What each query retrieved: the items of every sample (:class:`SampleItems`, kept by
:func:`~.grid.run_grid` on the :class:`~.result.EvalResult`) and the one table built from them and
the records' stored per-query arrays (:func:`query_table`, behind ``EvalResult.queries`` and
``--save-queries``).

A record of exact search keeps, beside its ranks, the targets each query retrieved as CSR arrays
of positions in the sample's target side (see :func:`~.tasks.run_sample_task`): on the
non-matching sample the targets BkR's first step follows (every target tied for the best
canonical score), on the matching sample the nearest targets by the same rule. The table names
them by item id, with texts and image paths, one row per (record, sample, query).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ...core import BackretrievalError, atomic_write
from ...data import Corpus

# the table's columns, in order (docs/usage.md, "What each query retrieved")
QUERY_COLUMNS = (
    "pair", "src_lang", "tgt_lang", "model", "seed", "query_id", "query_text", "retrieved_id", "retrieved_ids",
    "retrieved_text", "bkr_rank", "xlr_rank", "is_translation", "query_image", "retrieved_image", "sample_kind",
)
NON_MATCHING, MATCHING = "non-matching", "matching"
SAMPLES = (NON_MATCHING, MATCHING)
# the stored arrays of each sample: (rank key, offsets key, flat key)
_ARRAYS = {NON_MATCHING: ("bkr", "bkr_retrieved_offsets", "bkr_retrieved_flat"),
           MATCHING: ("xlr", "xlr_retrieved_offsets", "xlr_retrieved_flat")}


@dataclasses.dataclass
class SideItems:
    """The items of one side of a sample, row i = the sample's row i.

    Attributes:
        ids: item ids.
        texts: item texts.
        images: each item's image file path; None where the dataset has no image files (no
            images, or only a precomputed feature file).
        concepts: each item's concept (None for an item without one); None where the corpus
            has no concepts.
    """

    ids: list[str]
    texts: list[str]
    images: list[str] | None
    concepts: list[str | None] | None

    @classmethod
    def of(cls, corpus: Corpus, rows: np.ndarray) -> "SideItems":
        """The items at ``rows`` of ``corpus``.

        Args:
            corpus: one language of the dataset.
            rows: the sample's rows of it.

        Returns:
            The side's items.
        """
        idx = [int(r) for r in rows]
        return cls(
            [corpus.ids[i] for i in idx],
            [corpus.texts[i] for i in idx],
            None if corpus.image_paths is None else [str(corpus.image_paths[i]) for i in idx],
            None if corpus.concepts is None else [corpus.concepts[i] for i in idx],
        )


@dataclasses.dataclass
class SampleItems:
    """The items of one sample of one (pair, seed).

    Attributes:
        src: the source side (the queries).
        tgt: the target side (what the queries retrieve).
    """

    src: SideItems
    tgt: SideItems


def sample_items(src: Corpus, tgt: Corpus, parts: dict[str, tuple[np.ndarray, np.ndarray] | None]) -> dict[str, SampleItems]:
    """The items of a (pair, seed)'s samples.

    Args:
        src, tgt: the pair's corpora.
        parts: ``"non-matching"`` / ``"matching"`` -> (source rows, target rows), or None where
            the pair has no such sample.

    Returns:
        Sample name -> its items, for the samples drawn.
    """
    return {name: SampleItems(SideItems.of(src, rows[0]), SideItems.of(tgt, rows[1]))
            for name, rows in parts.items() if rows is not None}


def _pick(value: Any, what: str) -> set | None:
    """A filter value (one or several) as a set; None: no filter."""
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)):
        return {value}
    if isinstance(value, Iterable):
        return set(value)
    raise BackretrievalError(f"{what} filter {value!r}: give one value or a list of them")


def _same_concept(a: str | None, b: str | None) -> bool | None:
    return None if a is None or b is None else a == b


def query_table(
    records: Sequence[dict[str, Any]],
    ranks: dict[tuple[str, str, str, int], dict[str, np.ndarray]],
    items: dict[tuple[str, str, int], dict[str, SampleItems]],
    pairs: list[tuple[str, str]] | None = None,
    models: Any = None,
    seeds: Any = None,
    samples: Any = None,
) -> pd.DataFrame:
    """One row per (record, sample, query): what the query retrieved and how it ranked.

    Args:
        records: the records (``EvalResult.records``).
        ranks: their per-query arrays (``EvalResult.ranks``).
        items: (src, tgt, seed) -> sample name -> the sample's items (``EvalResult.items``).
        pairs: keep these (source, target) pairs only (None: all).
        models: keep this model or these models only (None: all).
        seeds: keep this seed or these seeds only (None: all).
        samples: keep ``"non-matching"`` and/or ``"matching"`` rows only (None: both).

    Returns:
        The frame of :data:`QUERY_COLUMNS` (see ``EvalResult.queries``), records in grid order,
        per record the non-matching sample's queries, then the matching sample's, each in
        sample order.

    Raises:
        BackretrievalError: an unknown sample name, a filter that matches no record (naming
            what the records hold), or a kept record without per-query results (approximate
            search, or a result assembled without its samples' items), named.
    """
    want_pairs = None if pairs is None else set(pairs)
    want_models, want_seeds, want_samples = _pick(models, "model"), _pick(seeds, "seed"), _pick(samples, "sample")
    if want_samples is not None and not want_samples <= set(SAMPLES):
        raise BackretrievalError(f"unknown sample {sorted(want_samples - set(SAMPLES))[0]!r}: use {' or '.join(SAMPLES)}")
    kept = [r for r in records
            if (want_pairs is None or (r["src_lang"], r["tgt_lang"]) in want_pairs)
            and (want_models is None or r["model"] in want_models)
            and (want_seeds is None or r["seed"] in want_seeds)]
    if records and not kept:
        held = sorted({f"{r['model']} {r['src_lang']}->{r['tgt_lang']} seed {r['seed']}" for r in records})
        raise BackretrievalError(f"no record matches the filter; the result holds {', '.join(held[:6])}"
                                 + (f" and {len(held) - 6} more" if len(held) > 6 else ""))
    cols: dict[str, list] = {c: [] for c in QUERY_COLUMNS}
    for r in kept:
        s, t, seed, model = r["src_lang"], r["tgt_lang"], r["seed"], r["model"]
        arrays = ranks.get((model, s, t, seed), {})
        its = items.get((s, t, seed))
        name = f"record {model} {s}->{t} seed {seed}"
        if r.get("approximate") is not None or r.get("approx") is not None:
            raise BackretrievalError(f"{name} comes from approximate search, which keeps no per-query results; "
                                     "evaluate without approx for them")
        if its is None:
            raise BackretrievalError(f"{name}: the result holds no items of its samples (results of evaluate keep them)")
        for sample in SAMPLES:
            if sample not in its or (want_samples is not None and sample not in want_samples):
                continue
            rank_key, off_key, flat_key = _ARRAYS[sample]
            if rank_key not in arrays:  # this record has no such sample (e.g. no images: no BkR)
                continue
            if off_key not in arrays or flat_key not in arrays:
                raise BackretrievalError(f"{name} holds no retrieved targets of its {sample} sample")
            src, tgt = its[sample].src, its[sample].tgt
            offsets, flat, rank = arrays[off_key], arrays[flat_key], arrays[rank_key]
            n = len(src.ids)
            if len(offsets) != n + 1 or len(rank) != n:
                raise BackretrievalError(f"{name}: {len(rank)} stored ranks for the {n} queries of its {sample} sample")
            for i in range(n):
                got = [int(j) for j in flat[offsets[i]:offsets[i + 1]]]
                cols["pair"].append(f"{s}->{t}")
                cols["src_lang"].append(s)
                cols["tgt_lang"].append(t)
                cols["model"].append(model)
                cols["seed"].append(int(seed))
                cols["query_id"].append(src.ids[i])
                cols["query_text"].append(src.texts[i])
                cols["retrieved_id"].append(tgt.ids[got[0]])
                cols["retrieved_ids"].append([tgt.ids[j] for j in got])
                cols["retrieved_text"].append(tgt.texts[got[0]])
                cols["bkr_rank"].append(int(rank[i]) if sample == NON_MATCHING else None)
                cols["xlr_rank"].append(int(rank[i]) if sample == MATCHING else None)
                truth = None
                if src.concepts is not None and tgt.concepts is not None:
                    same = [_same_concept(src.concepts[i], tgt.concepts[j]) for j in got]
                    truth = None if None in same else all(same)
                cols["is_translation"].append(truth)
                cols["query_image"].append(None if src.images is None else src.images[i])
                cols["retrieved_image"].append(None if tgt.images is None else tgt.images[got[0]])
                cols["sample_kind"].append(sample)
    df = pd.DataFrame(cols, columns=list(QUERY_COLUMNS))
    df["seed"] = df["seed"].astype("int64")
    df["bkr_rank"] = df["bkr_rank"].astype("Int64")
    df["xlr_rank"] = df["xlr_rank"].astype("Int64")
    df["is_translation"] = df["is_translation"].astype("boolean")
    return df


def write_queries(table: pd.DataFrame, path: str | Any) -> None:
    """Write a table of :func:`query_table` to ``path`` as Parquet, atomically.

    ``retrieved_ids`` is a list of strings, ``bkr_rank`` / ``xlr_rank`` nullable int64 and
    ``is_translation`` a nullable boolean; ``pandas.read_parquet`` gives the frame back.

    Args:
        table: the table.
        path: the file (``OUT/queries.parquet``); missing folders are created.
    """
    with atomic_write(path, "wb") as fh:
        table.to_parquet(fh, index=False, engine="pyarrow")
