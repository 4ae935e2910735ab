"""What comes out of the evaluation grid: :class:`EvalResult`, and the helpers that label and
summarise records (:func:`slug`, :func:`pair_labels`, :func:`summarize`)."""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ...metrics.table import summary_columns
from .config import EvalConfig, parse_pairs


RunKey = tuple[str, str, str, int]  # (model, src_lang, tgt_lang, seed)


@dataclasses.dataclass
class EvalResult:
    """Records (one dict per model, pair and seed) and the per-query ranks behind them:
    ``ranks[(model, src, tgt, seed)]["bkr" | "xlr" | "xlr_t2s"]``. For a given seed and pair
    every model sees the same samples, so rank arrays of two models align query by query.

    These are the records of the main image model (``config.image_model``); the same grid with
    each extra image model is in ``others[image_model]``.

    Attributes:
        config: the configuration that produced the result.
        records: one dict per (model, pair, seed), in grid order (``results.jsonl``'s rows).
        ranks: (model, src, tgt, seed) -> per-query 1-based ranks by kind (``"bkr"``, ``"xlr"``,
            ``"xlr_t2s"``; ``"corr_boot"`` holds CORR's bootstrap replicates instead).
        others: extra image model -> the same grid's result with that image model.
        run: what ``OUT/run.json`` holds (:func:`~backretrieval.analysis.evaluate.records.run_info`).
        text_only: True when the dataset has no images: XLR only, records carry no image fields.
        notes: what a summary of the records must say (e.g. seeds that all draw the same sample).
        items: (src, tgt, seed) -> ``"non-matching"`` / ``"matching"`` -> the items of that
            sample (:class:`~.queries.SampleItems`), which :meth:`queries` names.
        largest_n: per pair label (``"en->de"``), the largest N the data allow for the
            matching sample (``"xlr"``) and the non-matching one (``"bkr"``); None where that
            sample is not drawn (:func:`~.power.sample_limits`). A verdict advises more queries
            only where there are more.
        power: per pair label whose languages have images, what N, K and the seeds let BkR@K
            detect, said before the run (:func:`~.power.power_facts`: chance, distinct queries,
            the detectable gap between the best model and each other model, the queries a gap
            of the margin needs, the data's limits); the note in :attr:`notes` says it in words.
    """

    config: EvalConfig
    records: list[dict[str, Any]]
    ranks: dict[RunKey, dict[str, np.ndarray]]
    others: dict[str, "EvalResult"] = dataclasses.field(default_factory=dict)
    run: dict[str, Any] = dataclasses.field(default_factory=dict)  # what OUT/run.json holds
    text_only: bool = False  # the dataset has no images: XLR only, records carry no image fields
    notes: list[str] = dataclasses.field(default_factory=list)  # what a summary of the records must say
    items: dict[tuple[str, str, int], dict[str, Any]] = dataclasses.field(default_factory=dict)
    largest_n: dict[str, dict[str, int | None]] = dataclasses.field(default_factory=dict)
    power: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def summary(self) -> pd.DataFrame:
        """The summary table of the records (``summary.md`` renders it): per pair and model, the
        mean and sd over seeds of the columns shown for this run's K (and, with approximate
        search, its depth).

        Returns:
            :func:`summarize` of :attr:`records` over
            :func:`~backretrieval.metrics.table.summary_columns` of the configuration's K.
        """
        return summarize(self.records, summary_columns(self.config.k, self.config.approx_depth))

    def queries(self, pair: Any = None, model: Any = None, seed: Any = None, sample: Any = None) -> pd.DataFrame:
        """What each query retrieved: one row per (record, sample, query).

        BkR's queries are the source side of the non-matching sample (``sample_kind ==
        "non-matching"``): the row names the targets BkR's first step retrieved (every target
        tied for the best canonical score, all of which BkR follows) and the round-trip rank
        of the query's own image. Where the dataset links languages, XLR's queries are the
        source side of the matching sample (``sample_kind == "matching"``): the row names the
        nearest targets by the same tie rule and the rank of the query's true translation.
        For a given pair and seed every model sees the same samples, so rows of two models
        align by ``(sample_kind, query_id)``.

        Columns, in this order:

        * ``pair`` (``"en->de"``), ``src_lang``, ``tgt_lang``, ``model``, ``seed``;
        * ``query_id``, ``query_text``: the source item;
        * ``retrieved_id``, ``retrieved_text``: the first (lowest sample position) of the
          tied top targets; ``retrieved_ids``: the ids of all of them (a list, at least one);
        * ``bkr_rank``: BkR's pessimistic round-trip rank (Int64; <NA> on matching rows);
        * ``xlr_rank``: the pessimistic rank of the true translation among the matching
          sample's targets (Int64; <NA> on non-matching rows and without links);
        * ``is_translation``: every tied top target has the query's concept (boolean; <NA>
          without links; always False on non-matching rows, whose samples hold no
          translation of any query by construction; on matching rows True exactly when
          ``xlr_rank == 1``);
        * ``query_image``, ``retrieved_image``: the path of the item's image file (of the
          first tied target), None where the dataset has no image files (no images, or only
          a precomputed feature file);
        * ``sample_kind``: ``"non-matching"`` or ``"matching"`` (not ``sample``, which is a
          ``DataFrame`` method).

        Args:
            pair: keep these pairs only: ``"en-de"``, ``"en-de,de-en"``, ``("en", "de")`` or
                a list of them (None: all).
            model: keep this model (name) or these models only (None: all).
            seed: keep this seed or these seeds only (None: all).
            sample: keep ``"non-matching"`` or ``"matching"`` rows only (None: both).

        Returns:
            The frame (columns above; records in grid order, per record the non-matching
            sample's queries, then the matching sample's). Rows are of this result's image
            model; ``others[g].queries()`` gives those of an extra image model ``g``.

        Raises:
            BackretrievalError: a filter that matches no record, an unknown sample, or a
                record without per-query results (approximate search, or a result assembled
                without its samples' items), named.
        """
        from .queries import query_table

        pairs = None
        if pair is not None:
            given = [pair] if isinstance(pair, (str, tuple)) else list(pair)
            pairs = [p for g in given for p in (parse_pairs(g) if isinstance(g, str) else [tuple(g)])]
        return query_table(self.records, self.ranks, self.items, pairs, model, seed, sample)


def slug(s: str) -> str:
    """A file-name-safe form of a model spec.

    Args:
        s: a model spec, e.g. ``"hf:org/model@pool=mean"``.

    Returns:
        ``s`` with every run of characters other than ASCII letters, digits, ``.``, ``_``,
        ``=`` and ``-`` replaced by one ``_`` (``"hf_org_model_pool=mean"``). Not injective:
        two specs can share a slug.
    """
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", s)


def pair_labels(df: pd.DataFrame) -> pd.Series:
    """The pair of each record (row of ``df``): its ``pair`` field where it has one (records
    merged from several datasets that share a pair: ``"en->de [shop-a.jsonl]"``), else ``"SRC->TGT"``.

    Args:
        df: records as a frame (``src_lang``, ``tgt_lang``, optionally ``pair``).

    Returns:
        One label per row.
    """
    plain = df["src_lang"] + "->" + df["tgt_lang"]
    if "pair" not in df.columns:
        return plain
    return df["pair"].where(df["pair"].notna(), plain)


def summarize(records: Sequence[dict[str, Any]], metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Mean and standard deviation over seeds for each (pair, model): columns ``M`` and ``M_sd``.

    Args:
        records: the grid's records (``EvalResult.records``, or read back from ``results.jsonl``).
        metrics: the record fields to summarise; those no record has are left out (None: the
            summary columns of the metric table at K = 10,
            :func:`~backretrieval.metrics.table.summary_columns`).

    Returns:
        One row per (pair, model), in the order they first occur: ``pair`` (:func:`pair_labels`),
        ``model``, ``M`` (the mean over seeds, NaN values skipped) and ``M_sd`` (the sample
        standard deviation, ``ddof=1``; 0.0 where there is one seed) per metric, and ``seeds``
        (the number of records). An empty frame for no records.
    """
    df = pd.DataFrame(records)
    if df.empty:
        return df
    df["pair"] = pair_labels(df)
    present = [m for m in (summary_columns() if metrics is None else metrics) if m in df.columns]
    g = df.groupby(["pair", "model"], sort=False)[present]
    mean, sd = g.mean(), g.std(ddof=1).fillna(0.0)
    out = mean.copy()
    for m in present:
        out[f"{m}_sd"] = sd[m]
    out["seeds"] = g.size()
    return out.reset_index()
