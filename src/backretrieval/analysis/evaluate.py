"""The evaluation grid: every (model, source language, target language, seed).

For each pair and seed two samples are drawn from the dataset (Backretrieval paper, Sec. 3.1):
a *matching* sample of N aligned translation pairs for XLR (only where the dataset links
languages by concept), and a *non-matching* sample of N source and N target items with
disjoint concepts for BkR, CORR and hubness (only where items have images). Texts and images
are encoded once per language through the cache, only for the rows some sample uses.

Each finished (model, pair, seed) record is written at once to ``OUT/.partial/`` (atomically);
a rerun with the same configuration skips finished records, so an interrupted run resumes.
``OUT/results.jsonl`` and ``OUT/results.csv`` are written at the end, atomically.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..core import BackretrievalError, DataError, atomic_save_npz, atomic_write_text, content_hash
from ..data import Dataset, load_dataset, matching, non_matching
from ..encoders.base import get_image_encoder, get_text_encoder
from ..encoders.cache import CachedImageEncoder, CachedTextEncoder
from ..encoders.precomputed_image import load_feature_rows
from ..metrics import bkr_ranks, corr_details, hubness, image_side, rank_summary, xlr_ranks

XLR_KS = (1, 5, 10)


@dataclasses.dataclass
class EvalConfig:
    dataset: str
    pairs: list[tuple[str, str]]
    models: list[str]
    image_model: str = "efficientnet-lite0"
    n: int = 1500
    seeds: list[int] = dataclasses.field(default_factory=lambda: [0])
    k: int = 10
    sim: str = "cosine"
    csls_k: int = 10
    dataset_options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def key(self) -> str:
        """Identifies the configuration for resuming (everything but the grid's extent)."""
        d = dataclasses.asdict(self)
        for grid in ("pairs", "models", "seeds"):
            d.pop(grid)
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
    every model sees the same samples, so rank arrays of two models align query by query."""

    config: EvalConfig
    records: list[dict[str, Any]]
    ranks: dict[RunKey, dict[str, np.ndarray]]


@dataclasses.dataclass
class _Samples:
    xlr: tuple[np.ndarray, np.ndarray] | None
    bkr: tuple[np.ndarray, np.ndarray] | None


def _draw(ds: Dataset, src: str, tgt: str, n: int, seed: int) -> _Samples:
    s, t = ds[src], ds[tgt]
    has_links = s.has_concepts and t.has_concepts
    has_images = s.has_images and t.has_images
    if not has_links and not has_images:
        raise DataError(
            f"{ds.name} {src}-{tgt}: nothing to evaluate: no cross-lingual links (for XLR) and no images (for BkR)"
        )
    return _Samples(
        matching(s, t, n, seed) if has_links else None,
        non_matching(s, t, n, seed) if has_images else None,
    )


class _Features:
    """Embeddings of the needed rows of each language, computed once through the cache."""

    def __init__(self, ds: Dataset, needed: dict[str, np.ndarray], image_model: str | None, progress: bool):
        self.ds, self.needed, self.progress = ds, needed, progress
        self.pos = {lang: {int(r): i for i, r in enumerate(rows)} for lang, rows in needed.items()}
        self.images: dict[str, np.ndarray] = {}
        if image_model:
            self._encode_images(image_model)

    def _encode_images(self, spec: str) -> None:
        enc = None if spec == "precomputed" else CachedImageEncoder(get_image_encoder(spec), progress=self.progress)
        for lang, rows in self.needed.items():
            c = self.ds[lang].subset(rows)
            if not c.has_images:
                continue
            if spec == "precomputed" or c.image_paths is None:
                if c.image_features is None:
                    raise DataError(f"{c.dataset}/{lang}: image model 'precomputed' needs an image feature file")
                self.images[lang] = load_feature_rows(c.image_features, c.image_rows, f"{c.dataset}/{lang} images")
            else:
                self.images[lang] = enc.encode_images(c.image_paths)

    def text(self, model: Any) -> dict[str, np.ndarray]:
        corpora = {lang: self.ds[lang].subset(rows) for lang, rows in self.needed.items()}
        if hasattr(model, "fit") and callable(model.fit):
            model.fit({lang: c.texts for lang, c in corpora.items()})
        return {lang: model.encode(c.texts, lang, ids=c.ids) for lang, c in corpora.items()}

    def rows(self, lang: str, idx: np.ndarray) -> np.ndarray:
        p = self.pos[lang]
        return np.fromiter((p[int(i)] for i in idx), dtype=np.int64, count=len(idx))


def _metrics(
    cfg: EvalConfig, text: dict[str, np.ndarray], feats: _Features, src: str, tgt: str, sm: _Samples, seed: int, image_corr: Any
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Scalar metrics of one (model, pair, seed) and the per-query ranks behind them."""
    out: dict[str, Any] = {}
    ranks: dict[str, np.ndarray] = {}
    opts = {"sim": cfg.sim, "csls_k": cfg.csls_k}
    if sm.xlr is not None:
        si, ti = feats.rows(src, sm.xlr[0]), feats.rows(tgt, sm.xlr[1])
        xks = tuple(k for k in XLR_KS if k <= cfg.n)
        ranks["xlr"], ranks["xlr_t2s"] = xlr_ranks(text[src][si], text[tgt][ti], **opts)
        out.update(rank_summary(ranks["xlr"], xks, "xlr"))
        out.update(rank_summary(ranks["xlr_t2s"], xks, "xlr_t2s"))
    if sm.bkr is not None:
        si, ti = feats.rows(src, sm.bkr[0]), feats.rows(tgt, sm.bkr[1])
        st, tt = text[src][si], text[tgt][ti]
        simg, timg = feats.images[src][si], feats.images[tgt][ti]
        ks = tuple(sorted({1, 5, cfg.k} & set(range(1, cfg.n + 1))))
        ranks["bkr"], _ = bkr_ranks(st, tt, simg, timg, **opts)
        out.update(rank_summary(ranks["bkr"], ks, "bkr"))
        out.update(corr_details(st, tt, seed=seed, image=image_corr))
        out.update(hubness(st, tt, cfg.k, **opts))
        out["bkr_chance"] = cfg.k / cfg.n
    return out, ranks


def _record_path(partial: Path, cfg_key: str, model: str, src: str, tgt: str, seed: int) -> Path:
    return partial / f"{content_hash(json.dumps([cfg_key, model, src, tgt, seed]), 10)}.json"


def evaluate(
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    log: Callable[[str], None] = lambda msg: None,
) -> EvalResult:
    """Run the grid; return one record per (model, src, tgt, seed) and write them to ``out_dir``."""
    if cfg.n < 1:
        raise BackretrievalError(f"n must be positive, got {cfg.n}")
    if cfg.k > cfg.n:
        raise BackretrievalError(f"K={cfg.k} is larger than N={cfg.n}")
    langs = list(dict.fromkeys(lang for pair in cfg.pairs for lang in pair))
    ds = load_dataset(cfg.dataset, langs=langs, **cfg.dataset_options)
    for lang in langs:
        ds[lang]  # unknown language -> clear error before any work
    samples = {(s, t, seed): _draw(ds, s, t, cfg.n, seed) for s, t in cfg.pairs for seed in cfg.seeds}
    if any(sm.bkr is None for sm in samples.values()):
        log(f"{ds.name} has no images: BkR and CORR need images; reporting XLR only")
    needed: dict[str, set[int]] = {lang: set() for lang in langs}
    for (s, t, _), sm in samples.items():
        for part in (sm.xlr, sm.bkr):
            if part is not None:
                needed[s].update(part[0].tolist())
                needed[t].update(part[1].tolist())
    needed_rows = {lang: np.array(sorted(rows), dtype=np.int64) for lang, rows in needed.items()}
    image_model = cfg.image_model if any(sm.bkr is not None for sm in samples.values()) else None
    feats = _Features(ds, needed_rows, image_model, progress)

    partial = Path(out_dir) / ".partial" if out_dir is not None else None
    cfg_key = cfg.key()
    records: list[dict[str, Any]] = []
    all_ranks: dict[RunKey, dict[str, np.ndarray]] = {}
    todo: dict[tuple[str, str, int], list[tuple[str, Path | None]]] = {}
    for spec in cfg.models:
        for s, t, seed in samples:
            path = _record_path(partial, cfg_key, spec, s, t, seed) if partial else None
            if path is not None and path.exists():  # finished in an earlier run
                records.append(json.loads(path.read_text(encoding="utf-8")))
                with np.load(path.with_suffix(".npz")) as z:
                    all_ranks[(spec, s, t, seed)] = {k: z[k] for k in z.files}
            else:
                todo.setdefault((s, t, seed), []).append((spec, path))
    if records:
        log(f"resuming: {len(records)} finished records found in {partial}")
    # encode every model that has work left (through the cache), then walk the samples, so the
    # model-independent image half of CORR is computed once per sample
    text: dict[str, dict[str, np.ndarray]] = {}
    encode_s: dict[str, float] = {}
    for spec in dict.fromkeys(spec for jobs in todo.values() for spec, _ in jobs):
        t0 = time.perf_counter()
        text[spec] = feats.text(CachedTextEncoder(get_text_encoder(spec), progress=progress))
        encode_s[spec] = round(time.perf_counter() - t0, 3)
    bar = tqdm(total=sum(len(j) for j in todo.values()), desc="metrics", unit="run", disable=not progress)
    for (s, t, seed), jobs in todo.items():
        sm = samples[(s, t, seed)]
        image_corr = None
        if sm.bkr is not None:
            image_corr = image_side(feats.images[s][feats.rows(s, sm.bkr[0])], feats.images[t][feats.rows(t, sm.bkr[1])], seed=seed)
        for spec, path in jobs:
            t1 = time.perf_counter()
            rec: dict[str, Any] = {
                "model": spec,
                "image_model": image_model,
                "dataset": ds.name,
                "src_lang": s,
                "tgt_lang": t,
                "seed": seed,
                "n": cfg.n,
                "k": cfg.k,
                "sim": cfg.sim,
            }
            values, ranks = _metrics(cfg, text[spec], feats, s, t, sm, seed, image_corr)
            rec.update(values)
            rec["seconds"] = round(time.perf_counter() - t1, 4)
            rec["encode_seconds"] = encode_s[spec]
            if path is not None:  # ranks first: the .json marks a finished record
                atomic_save_npz(path.with_suffix(".npz"), **ranks)
                atomic_write_text(path, json.dumps(rec))
            records.append(rec)
            all_ranks[(spec, s, t, seed)] = ranks
            bar.update(1)
    bar.close()
    order = {m: i for i, m in enumerate(cfg.models)}
    records.sort(key=lambda r: (order[r["model"]], r["src_lang"], r["tgt_lang"], r["seed"]))
    if out_dir is not None:
        write_results(records, Path(out_dir))
    return EvalResult(cfg, records, all_ranks)


def write_results(records: Sequence[dict[str, Any]], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "results.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_text(out_dir / "results.csv", pd.DataFrame(records).to_csv(index=False))


SUMMARY_METRICS = ("xlr@1", "xlr@10", "xlr_t2s@10", "bkr@10", "bkr_mrr", "corr", "hubness_skew@10")


def summarize(records: Sequence[dict[str, Any]], metrics: Sequence[str] = SUMMARY_METRICS) -> pd.DataFrame:
    """Mean and standard deviation over seeds for each (pair, model): columns ``M`` and ``M_sd``."""
    df = pd.DataFrame(records)
    if df.empty:
        return df
    df["pair"] = df["src_lang"] + "->" + df["tgt_lang"]
    present = [m for m in metrics if m in df.columns]
    g = df.groupby(["pair", "model"], sort=False)[present]
    mean, sd = g.mean(), g.std(ddof=1).fillna(0.0)
    out = mean.copy()
    for m in present:
        out[f"{m}_sd"] = sd[m]
    out["seeds"] = g.size()
    return out.reset_index()
