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

@dataclasses.dataclass
class EvalConfig:
    dataset: str
    pairs: list[tuple[str, str]]
    models: list[str] | dict[str, Any]  # spec strings, or name -> spec string or Python object (see .models)
    image_model: str = "efficientnet-lite0"
    n: int = 1500
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    k: int = 10
    sim: str = "cosine"
    csls_k: int = 10
    dataset_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra_image_models: list[str] = dataclasses.field(default_factory=list)  # e.g. weaker g's
    corr_boot: int = 0  # bootstrap resamples of CORR per record (over source queries); 0 = none
    approx: str | None = None  # "hnsw" / "ivf": XLR@K and BkR@K from self-calibrated FAISS top-K lists
    approx_target: float = 0.99  # the top-1 agreement (and top-K recall) with exact search to reach

    @property
    def image_models(self) -> list[str]:
        """The main image model first, then the extra ones (duplicates dropped)."""
        return list(dict.fromkeys([self.image_model, *self.extra_image_models]))

    def key(self) -> str:
        """Identifies the configuration for resuming (everything but the grid's extent: models,
        pairs, seeds and image models are part of each record's own key)."""
        grid = ("pairs", "models", "seeds", "image_model", "extra_image_models")
        # the fields one by one, not dataclasses.asdict: that would deep-copy the models' objects
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in grid}
        if d["approx"] is None:  # exact runs keep the keys they had before --approx existed
            d.pop("approx")
            d.pop("approx_target")
        return content_hash(json.dumps(d, sort_keys=True, default=str), 8)


def parse_pairs(spec: str | Iterable[str]) -> list[tuple[str, str]]:
    """``"en-de,de-en"`` -> ``[("en", "de"), ("de", "en")]``. Language codes may contain
    underscores (zh_CN); use ``src:tgt`` when a code itself contains a hyphen (``en:zh-Hant``)."""
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
    each extra image model is in ``others[image_model]``."""

    config: EvalConfig
    records: list[dict[str, Any]]
    ranks: dict[RunKey, dict[str, np.ndarray]]
    others: dict[str, "EvalResult"] = dataclasses.field(default_factory=dict)
    run: dict[str, Any] = dataclasses.field(default_factory=dict)  # what OUT/run.json holds
    text_only: bool = False  # the dataset has no images: XLR only, records carry no image fields
    notes: list[str] = dataclasses.field(default_factory=list)  # what a summary of the records must say



def slug(s: str) -> str:
    """A file-name-safe form of a model spec."""
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


SUMMARY_METRICS = ("xlr@1", "xlr@10", "xlr_t2s@10", "bkr@10", "bkr_mrr", "corr", "hubness_skew@10")


def summarize(records: Sequence[dict[str, Any]], metrics: Sequence[str] = SUMMARY_METRICS) -> pd.DataFrame:
    """Mean and standard deviation over seeds for each (pair, model): columns ``M`` and ``M_sd``."""
    df = pd.DataFrame(records)
    if df.empty:
        return df
    df["pair"] = pair_labels(df)
    present = [m for m in metrics if m in df.columns]
    g = df.groupby(["pair", "model"], sort=False)[present]
    mean, sd = g.mean(), g.std(ddof=1).fillna(0.0)
    out = mean.copy()
    for m in present:
        out[f"{m}_sd"] = sd[m]
    out["seeds"] = g.size()
    return out.reset_index()
