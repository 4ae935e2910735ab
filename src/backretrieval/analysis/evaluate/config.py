"""What goes into the evaluation grid and what comes out of it: :class:`EvalConfig` (with
:func:`parse_pairs`), :class:`EvalResult`, and the helpers that label and summarise records."""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ...core import BackretrievalError, content_hash
from ...metrics.table import summary_columns
from ..models import image_model_name

MAX_SEEDS = 1000  # seeds in one grid: each is one sample per pair and one record per model
MAX_SEED = 2**32 - 1  # the largest seed value (numpy's legacy seed range)
MAX_RECORDS = 100_000  # models x pairs x seeds x image models in one run


def check_seeds(seeds: Sequence[Any]) -> list[int]:
    """The seeds of a grid, checked.

    Args:
        seeds: integers (Python or numpy; not bools).

    Returns:
        The seeds as a list of Python ints, in the order given.

    Raises:
        BackretrievalError: no seed, more than :data:`MAX_SEEDS`, a seed that is not an integer,
            is negative or above :data:`MAX_SEED`, or is given twice (each named).
    """
    out: list[int] = []
    seen: set[int] = set()
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise BackretrievalError(f"seed {seed!r} is not an integer")
        seed = int(seed)
        if seed < 0:
            raise BackretrievalError(f"seed {seed} is negative; seeds are integers >= 0")
        if seed > MAX_SEED:
            raise BackretrievalError(f"seed {seed} is too large; seeds are integers from 0 to {MAX_SEED} (2**32 - 1)")
        if seed in seen:
            raise BackretrievalError(f"seed {seed} is given twice")
        seen.add(seed)
        out.append(seed)
        if len(out) > MAX_SEEDS:
            raise BackretrievalError(f"more than {MAX_SEEDS:,} seeds; one grid takes at most {MAX_SEEDS:,}")
    if not out:
        raise BackretrievalError("no seed given")
    return out


def check_grid_size(n_models: int, n_pairs: int, n_seeds: int, n_image_models: int = 1) -> None:
    """A grid of at most :data:`MAX_RECORDS` records (one per model, pair, seed and image model).

    Args:
        n_models: text models.
        n_pairs: language pairs.
        n_seeds: seeds.
        n_image_models: image models (the main one and the extra ones).

    Raises:
        BackretrievalError: the grid is larger, with its size.
    """
    size = n_models * n_pairs * n_seeds * n_image_models

    def count(n: int, what: str) -> str:
        return f"{n:,} {what}{'s' * (n != 1)}"

    if size > MAX_RECORDS:
        raise BackretrievalError(
            f"the grid has {count(n_models, 'model')} x {count(n_pairs, 'pair')} x {count(n_seeds, 'seed')} x "
            f"{count(n_image_models, 'image model')} = {size:,} records; one run computes at most {MAX_RECORDS:,}: "
            "split it into several runs"
        )


@dataclasses.dataclass
class EvalConfig:
    """One evaluation grid: every model on every language pair and seed of one dataset.

    Attributes:
        dataset: the dataset name or path given to :func:`backretrieval.data.load_dataset`.
        pairs: (source, target) language codes (:func:`parse_pairs` reads ``"en-de,de-en"``).
        models: model spec strings, or a dict from the name records carry to a spec string or a
            Python object (see :mod:`backretrieval.analysis.models`).
        image_model: the image model whose features BkR and CORR use (``g`` in the paper): a
            spec string (``"precomputed"`` for a dataset's feature file), or a Python object: a
            ``PythonImageModel``, a torch module, an object with ``encode(images)`` or a function
            ``f(images)``, given a list of RGB ``PIL.Image.Image`` (see
            :mod:`backretrieval.analysis.models` and :mod:`backretrieval.encoders.image.python_model`).
        n: the sample size N per pair and seed: N aligned pairs for XLR, N source and N target
            items with disjoint concepts for BkR. Must be >= 1 and no more than the data holds
            (:func:`evaluate` raises a ``DataError`` naming the pair otherwise).
        seeds: one sample (and one record per model) per seed: distinct integers from 0 to
            :data:`MAX_SEED`, at most :data:`MAX_SEEDS` of them.
        k: the K of BkR@K (``bkr_chance`` = K / N) and of hubness; must be <= ``n``.
        sim: ``"cosine"`` or ``"csls"``.
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        dataset_options: keyword arguments for the dataset loader.
        extra_image_models: more image models (e.g. weaker ``g``), spec strings or objects as for
            ``image_model``; their records are in ``EvalResult.others``.
        corr_boot: bootstrap resamples of CORR per record (over source queries); 0: none.
        approx: None (exact search), ``"hnsw"`` or ``"ivf"``: XLR@K and BkR@K from
            self-calibrating FAISS top-K lists (:func:`~backretrieval.analysis.evaluate.tasks.check_approx`).
        approx_target: with ``approx``, the top-1 agreement (and top-K recall) with exact search
            the calibration must reach, in (0, 1].
        reuse_stale: reuse stored records and cached vectors computed under other versions (of
            the metrics, the libraries that compute the vectors, FAISS, ...) instead of
            recomputing them, with a warning naming the difference. Not part of :meth:`key`.
        approx_cost_check: with ``approx``, search exactly where the cost model says exact
            search is cheaper (:mod:`backretrieval.metrics.approx`); False: approximately anyway.

    Raises:
        BackretrievalError: when the configuration is made: bad seeds (:func:`check_seeds`) or a
            grid of more than :data:`MAX_RECORDS` records (:func:`check_grid_size`).
    """

    dataset: str
    pairs: list[tuple[str, str]]
    models: list[str] | dict[str, Any]  # spec strings, or name -> spec string or Python object (see .models)
    image_model: Any = "efficientnet-lite0"  # a spec string or a Python object (see .models)
    n: int = 1500
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    k: int = 10
    sim: str = "cosine"
    csls_k: int = 10
    dataset_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra_image_models: list[Any] = dataclasses.field(default_factory=list)  # e.g. weaker g's
    corr_boot: int = 0  # bootstrap resamples of CORR per record (over source queries); 0 = none
    approx: str | None = None  # "hnsw" / "ivf": XLR@K and BkR@K from self-calibrated FAISS top-K lists
    approx_target: float = 0.99  # the top-1 agreement (and top-K recall) with exact search to reach
    reuse_stale: bool = False  # reuse records / vectors of other versions, with a warning
    approx_cost_check: bool = True  # with approx: exact search where the cost model says it is cheaper

    def __post_init__(self) -> None:
        self.seeds = check_seeds(self.seeds)
        check_grid_size(len(self.models), len(self.pairs), len(self.seeds), len(self.image_models))

    @property
    def image_models(self) -> list[str]:
        """The names the records give the image models (``image_model``): the main one first,
        then the extra ones (duplicates dropped). A spec string is its own name; an object is
        named as :func:`~backretrieval.analysis.models.image_model_name` says."""
        return list(dict.fromkeys(image_model_name(g) for g in [self.image_model, *self.extra_image_models]))

    @property
    def image_model_name(self) -> str:
        """The name the records give the main image model (the spec string, or the object's name)."""
        return image_model_name(self.image_model)

    def key(self) -> str:
        """Identifies the configuration for resuming (everything but the grid's extent: models,
        pairs, seeds and image models are part of each record's own key).

        ``approx`` and ``approx_target`` enter the key only when ``approx`` is set, so exact runs
        keep the keys they had before approximate search existed; ``approx_cost_check`` only
        when it is False. ``reuse_stale`` says how to treat stored records, not what they are:
        it never enters the key. The versions records are computed under are part of each
        record's own key (see :mod:`.records`).

        Returns:
            8 hex characters: a content hash of the remaining fields as sorted JSON (values
            that are not JSON, such as Python objects in ``dataset_options``, by ``str``).
        """
        grid = ("pairs", "models", "seeds", "image_model", "extra_image_models", "reuse_stale")
        # the fields one by one, not dataclasses.asdict: that would deep-copy the models' objects
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in grid}
        if d["approx"] is None:  # exact runs keep the keys they had before --approx existed
            d.pop("approx")
            d.pop("approx_target")
        if self.approx is None or self.approx_cost_check:  # the default keeps the keys it had before the option
            d.pop("approx_cost_check")
        return content_hash(json.dumps(d, sort_keys=True, default=str), 8)


def parse_pairs(spec: str | Iterable[str]) -> list[tuple[str, str]]:
    """``"en-de,de-en"`` -> ``[("en", "de"), ("de", "en")]``. Language codes may contain
    underscores (zh_CN); use ``src:tgt`` when a code itself contains a hyphen (``en:zh-Hant``).

    Args:
        spec: comma-separated pairs, or an iterable of single pairs; blank items are skipped
            and whitespace around an item is dropped.

    Returns:
        (source, target) tuples in the order given (duplicates kept).

    Raises:
        BackretrievalError: naming the item that has no source or target, or the same language
            on both sides; or no pair at all.
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    pairs = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        sep = ":" if ":" in item else "-"
        src, _, tgt = item.partition(sep)
        if not src or not tgt:
            raise BackretrievalError(f"bad language pair {item!r}: expected SRC-TGT, e.g. en-de")
        if src == tgt:
            raise BackretrievalError(f"bad language pair {item!r}: source and target are the same language")
        pairs.append((src, tgt))
    if not pairs:
        raise BackretrievalError("no language pair given")
    return pairs


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
            sample is not drawn (:func:`~.features.largest_n`). A verdict advises more queries
            only where there are more.
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

    def summary(self) -> pd.DataFrame:
        """The summary table of the records (``summary.md`` renders it): per pair and model, the
        mean and sd over seeds of the columns shown for this run's K (and, with approximate
        search, its depth).

        Returns:
            :func:`summarize` of :attr:`records` over
            :func:`~backretrieval.metrics.table.summary_columns` of the configuration's K.
        """
        from ...metrics.table import approx_ks

        depth = max(approx_ks(self.config.n, self.config.k)) if self.config.approx else None
        return summarize(self.records, summary_columns(self.config.k, depth))

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
