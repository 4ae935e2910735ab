"""The evaluation grid: every (model, source language, target language, seed).

For each pair and seed two samples are drawn from the dataset (Backretrieval paper, Sec. 3.1):
a *matching* sample of N aligned translation pairs for XLR (only where the dataset links
languages by concept), and a *non-matching* sample of N source and N target items with
disjoint concepts for BkR, CORR and hubness (only where items have images). Texts and images
are encoded once per language through the cache, only for the rows some sample uses.

Each finished (model, image model, pair, seed) record is written at once to ``OUT/.partial/``
(atomically), under a key made of the configuration, the model's fingerprint (its ``version``,
which hashes its files, plus for models fitted on the evaluated texts a fingerprint of those
texts), the image model's version and the fingerprints of exactly the rows the sample uses
(ids, texts, concepts, extra columns, image bytes or feature vectors). A rerun skips the records
whose key is unchanged, so an interrupted run resumes, and recomputes those whose inputs
changed; ``OUT/.partial/manifest/inputs.json`` keeps the inputs of the last run, so the log says which
input changed ("data for de changed since the records in OUT were computed: recomputing 12
records"). A damaged record file is recomputed with a warning naming it.

Models are spec strings or Python objects under the user's name (``models={"ours": obj,
"use-m": "use-m"}``, see :mod:`.models`); every record carries ``model`` (the name) and
``model_identity`` (the model fingerprint its key holds). A run-only object (no torch weights,
no version) is never resumed from ``OUT/.partial`` nor stored there; the run says so once.

``OUT/results.jsonl`` and ``OUT/results.csv`` are written at the end, atomically, with
``OUT/run.json``: the configuration, the input fingerprints and the software environment
(:func:`backretrieval.core.env.environment`).

What the output says is what was computed: every record's ``image_model`` is the model that
produced its image features (a model that encodes image files is refused on a dataset that has
only a feature file, and ``precomputed`` on one that has only image files, before anything is
encoded); records of data without images carry no image fields; a caller's prerequisites
(``needs``: links for XLR, images for BkR) are checked right after sampling; seeds that all draw
the same sample are said (``EvalResult.notes``). With ``EvalConfig.approx`` the per-sample task
computes XLR@K and BkR@K from self-calibrating FAISS lists instead (records say
``approximate`` and carry each search's calibration, ``approx_*``).
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
import warnings
import zipfile
import zlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..core import BackretrievalError, DataError, UnsupportedLanguageError, atomic_save_npz, atomic_write_text, content_hash
from ..core.env import environment
from ..core.io import check_writable_dir
from ..data import Dataset, load_dataset, matching, non_matching
from ..data.corpus import fingerprint
from ..encoders._text import TruncationWarning
from ..encoders.base import get_image_encoder
from ..encoders.cache import CachedImageEncoder, CachedTextEncoder
from ..encoders.precomputed_image import load_feature_rows, uses_precomputed_features, weaken_features
from ..metrics import (
    bkr_ranks, bootstrap_row_weights, corr_bootstrap, corr_from_sides, hubness, image_side, rank_summary, text_side,
    xlr_ranks,
)
from .models import describe_models, grid_models, run_only_note

XLR_KS = (1, 5, 10)


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


def check_image_model(spec: str, corpora: Iterable[Any], dataset: str | None = None) -> None:
    """Whether image model ``spec`` can give the image features of ``corpora``: a model that
    encodes image files needs image files, ``precomputed`` (and its variants) a feature file.

    Args:
        spec: the image model, e.g. ``"efficientnet-lite0"``, ``"precomputed@noise=4"``.
        corpora: the corpora (one per language) whose images are needed.
        dataset: how the error names the dataset (default: the corpora's dataset name).

    Raises:
        DataError: naming the model, the dataset and the language that do not fit together.
    """
    precomputed = uses_precomputed_features(spec)
    for c in corpora:
        if not c.has_images:
            continue
        name = dataset or c.dataset
        if precomputed and c.image_features is None:
            raise DataError(
                f"image model {spec!r} reads a precomputed image-feature file, but dataset {name} ({c.lang}) "
                "has image files and no feature file: choose an image model that encodes images, e.g. efficientnet-lite0"
            )
        if not precomputed and c.image_paths is None:
            raise DataError(
                f"image model {spec!r} needs image files, but dataset {name} ({c.lang}) has only precomputed "
                f"image features ({c.image_features}): use image model 'precomputed' (or 'precomputed@noise=S' for a "
                "weaker g)"
            )


class _Features:
    """Embeddings of the needed rows of each language, computed once through the cache."""

    def __init__(
        self, ds: Dataset, needed: dict[str, np.ndarray], image_models: Sequence[str], progress: bool,
        log: Callable[[str], None] = lambda msg: None, dataset_label: str | None = None,
    ):
        self.ds, self.needed, self.progress, self.log = ds, needed, progress, log
        self.pos = {lang: {int(r): i for i, r in enumerate(rows)} for lang, rows in needed.items()}
        self.corpora = {lang: ds[lang].subset(rows) for lang, rows in needed.items()}
        for g in image_models:  # every image model fits the data before anything is encoded
            check_image_model(g, self.corpora.values(), dataset_label)
        self.unsupported: dict[str, dict[str, str]] = {}  # model -> language -> why it cannot embed it
        # per needed row: digests of its content and of its image (for the records' keys)
        self.row_digests = {lang: c.row_digests() for lang, c in self.corpora.items()}
        self.image_digests = {lang: c.image_digests() for lang, c in self.corpora.items()}
        self.image_versions: dict[str, str] = {}  # image model -> its version (cache namespace)
        self.images: dict[str, dict[str, np.ndarray]] = {g: self._encode_images(g) for g in image_models}

    def _encode_images(self, spec: str) -> dict[str, np.ndarray]:
        """The image features of model ``spec`` for every language with images: encoded from the
        image files through the cache, or (``precomputed[@noise=S]``) read from the dataset's
        feature file and weakened as the spec says."""
        enc = get_image_encoder(spec)
        self.image_versions[spec] = str(enc.version)
        precomputed = uses_precomputed_features(spec)
        if not precomputed:
            enc = CachedImageEncoder(enc, progress=self.progress)
        out = {}
        for lang, c in self.corpora.items():
            if not c.has_images:
                continue
            if precomputed:
                x = load_feature_rows(c.image_features, c.image_rows, f"{c.dataset}/{lang} images")
                out[lang] = weaken_features(enc, x, self.image_digests[lang])
            else:
                out[lang] = enc.encode_images(c.image_paths)
        return out

    def text(self, model: Any) -> dict[str, np.ndarray]:
        """Every needed text of every language, embedded with ``model`` (fitted first if it has a
        ``fit``). A model that declares ``wants_extra = ("title", "body")`` also gets those
        columns of the corpus as ``extra={name: [...]}``."""
        corpora = self.corpora
        if hasattr(model, "fit") and callable(model.fit):
            model.fit({lang: c.texts for lang, c in corpora.items()})
        wanted = tuple(getattr(model, "wants_extra", ()) or ())
        out = {}
        for lang, c in corpora.items():
            kw: dict[str, Any] = {}
            if wanted:
                missing = [w for w in wanted if w not in c.extra]
                if missing:
                    raise DataError(
                        f"{c.dataset}/{lang}: text model {getattr(model, 'name', model)!r} needs the column(s) "
                        f"{', '.join(missing)}, which this dataset does not have"
                    )
                kw["extra"] = {w: c.extra[w] for w in wanted}
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", TruncationWarning)
                    out[lang] = model.encode(c.texts, lang, ids=c.ids, **kw)
            except UnsupportedLanguageError as e:  # the grid skips the model's pairs with this language
                self.unsupported.setdefault(getattr(model, "name", str(model)), {})[lang] = str(e)
            for w in caught:  # truncation notes go to the log; other warnings stay warnings
                if issubclass(w.category, TruncationWarning):
                    self.log(str(w.message))
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return out

    def fit_fingerprint(self) -> str:
        """Fingerprint of what a model with a ``fit`` hook is fitted on: every needed row."""
        return fingerprint(d for lang in self.corpora for d in (lang.encode(), *self.row_digests[lang]))

    def sample_fingerprint(self, lang: str, parts: Sequence[np.ndarray | None], images: bool) -> str:
        """Fingerprint of the rows of ``lang`` a sample uses (its XLR part, then its BkR part): of
        their content, or (``images=True``) of their images."""
        table = self.image_digests[lang] if images else self.row_digests[lang]
        out: list[bytes] = []
        for tag, part in zip((b"xlr", b"bkr"), parts):
            if part is not None:
                out.append(tag)
                out.extend(table[i] for i in self.rows(lang, part))
        return fingerprint(out)

    def rows(self, lang: str, idx: np.ndarray) -> np.ndarray:
        p = self.pos[lang]
        return np.fromiter((p[int(i)] for i in idx), dtype=np.int64, count=len(idx))


@dataclasses.dataclass
class SampleTask:
    """Everything one (pair, seed) sample needs, as plain arrays: the unit of work an executor
    runs (in this process, a worker process or a Ray task). ``xlr[model]`` = aligned source and
    target rows of the matching sample; ``bkr[model]`` = source and target rows of the
    non-matching sample; ``images[g]`` = the non-matching sample's image features per image model."""

    src: str
    tgt: str
    seed: int
    n: int
    k: int
    sim: str
    csls_k: int
    models: list[str]
    xlr: dict[str, tuple[np.ndarray, np.ndarray]] | None
    bkr: dict[str, tuple[np.ndarray, np.ndarray]] | None
    images: dict[str, tuple[np.ndarray, np.ndarray]]
    corr_boot: int = 0
    approx: str | None = None  # "hnsw" / "ivf": XLR@K and BkR@K from calibrated FAISS top-K lists
    approx_target: float = 0.99


Run = tuple[str, str | None, dict[str, Any], dict[str, np.ndarray]]  # (model, g, values, ranks)
TaskResult = tuple[tuple[str, str, int], list[Run]]  # ((src, tgt, seed), runs)


def run_sample_task(task: SampleTask) -> TaskResult:
    """Metrics of every model of one sample, for every image model. Image-independent parts
    (XLR, hubness, the text half of CORR) are computed once per model; the image half of CORR
    once per image model. A pure function of its input."""
    if task.approx is not None:
        return _run_approx_task(task)
    opts = {"sim": task.sim, "csls_k": task.csls_k}
    xks = tuple(k for k in XLR_KS if k <= task.n)
    bks = tuple(sorted({1, 5, task.k} & set(range(1, task.n + 1))))
    boot = task.corr_boot if task.bkr is not None else 0
    image_sides = (
        {g: image_side(si, ti, seed=task.seed, keep_order=boot > 0) for g, (si, ti) in task.images.items()}
        if task.bkr is not None
        else {}
    )
    # the CORR bootstrap resamples every model with the same weights, so all text halves are needed at once
    text_sides = {m: text_side(*task.bkr[m], seed=task.seed, keep_order=True) for m in task.models} if boot else {}
    out: list[Run] = []
    for model in task.models:
        t0 = time.perf_counter()
        shared: dict[str, Any] = {}
        shared_ranks: dict[str, np.ndarray] = {}
        if task.xlr is not None:
            fwd, bwd = xlr_ranks(*task.xlr[model], **opts)
            shared_ranks["xlr"], shared_ranks["xlr_t2s"] = fwd, bwd
            shared.update(rank_summary(fwd, xks, "xlr"))
            shared.update(rank_summary(bwd, xks, "xlr_t2s"))
        if task.bkr is None:
            shared["seconds"] = round(time.perf_counter() - t0, 4)
            out.append((model, None, shared, shared_ranks))
            continue
        st, tt = task.bkr[model]
        shared.update(hubness(st, tt, task.k, **opts))
        text_corr = text_sides[model] if boot else text_side(st, tt, seed=task.seed)
        for g, (si, ti) in task.images.items():
            values, ranks = dict(shared), dict(shared_ranks)
            ranks["bkr"], _ = bkr_ranks(st, tt, si, ti, **opts)
            values.update(rank_summary(ranks["bkr"], bks, "bkr"))
            values.update(corr_from_sides(text_corr, image_sides[g]))
            values["bkr_chance"] = task.k / task.n
            out.append((model, g, values, ranks))
        seconds = round(time.perf_counter() - t0, 4)  # the model's whole share of the task
        for _, _, values, _ in out[len(out) - len(task.images):]:
            values["seconds"] = seconds
    if boot:
        weights = bootstrap_row_weights(task.n, boot, task.seed)
        n_src, n_tgt = len(task.bkr[task.models[0]][0]), len(task.bkr[task.models[0]][1])
        reps = {g: corr_bootstrap(text_sides, image_sides[g], n_src, n_tgt, weights) for g in task.images}
        for model, g, _, ranks in out:
            ranks["corr_boot"] = reps[g][model]
    return (task.src, task.tgt, task.seed), out


APPROX_METHODS = ("hnsw", "ivf")
# what the approximate route does not compute (exact search only), for summaries
APPROX_NOT_COMPUTED = ("hubness", "bkr_median_rank", "xlr_median_rank", "the untruncated MRR")


def check_approx(cfg: EvalConfig) -> None:
    """``cfg.approx`` is a known method, its target in (0, 1], the similarity cosine, and FAISS installed.

    Raises:
        BackretrievalError: naming the value that is wrong.
    """
    if cfg.approx not in APPROX_METHODS:
        raise BackretrievalError(f"approximate search {cfg.approx!r}: use one of {', '.join(APPROX_METHODS)}")
    if not (isinstance(cfg.approx_target, (int, float)) and 0 < cfg.approx_target <= 1):
        raise BackretrievalError(f"approximate search target agreement {cfg.approx_target!r} must be in (0, 1]")
    if cfg.sim != "cosine":
        raise BackretrievalError(f"approximate search ranks by cosine only; similarity {cfg.sim!r} needs exact search")
    import importlib.util

    if importlib.util.find_spec("faiss") is None:
        raise BackretrievalError("approximate search needs FAISS: pip install faiss-cpu (or 'backretrieval[search]')")


def approx_ks(n: int, k: int) -> tuple[int, ...]:
    """The K of every Recall@K the approximate route reports (it searches the top max(K) only)."""
    return tuple(sorted({*XLR_KS, k} & set(range(1, n + 1))))


def _found_ranks(found_at: np.ndarray) -> np.ndarray:
    """Per-query ranks from positions within the top K found (0: not found -> rank inf), so that
    ``hits(ranks, K')`` is exact for every K' <= K and ``1 / rank`` is the MRR truncated at K."""
    r = np.asarray(found_at, dtype=np.float64)
    r[r == 0] = np.inf
    return r


def _calibration_fields(result: dict[str, Any], renames: dict[str, str]) -> dict[str, Any]:
    """The self-check fields of an approximate result, their search prefixes renamed for a record."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        if key.endswith("found_at"):
            continue
        for old, new in renames.items():
            if key.startswith(old):
                v = [list(t) for t in value] if key.endswith("calibration_tried") else value
                out[new + key[len(old):]] = v
    return out


def _run_approx_task(task: SampleTask) -> TaskResult:
    """:func:`run_sample_task` with ``--approx``: XLR@K and BkR@K (and MRR truncated at K) from
    self-calibrated FAISS top-K lists (:mod:`backretrieval.metrics.approx`), CORR exact (all pairs
    up to its 4M-pair subsample); no hubness, no median ranks. FAISS runs single-threaded (a
    parallel HNSW build depends on thread timing), so the records do not depend on the thread
    count; FAISS's thread count is restored afterwards."""
    import faiss

    before = faiss.omp_get_max_threads()
    try:
        return _approx_runs(task)
    finally:
        faiss.omp_set_num_threads(before)


def _approx_runs(task: SampleTask) -> TaskResult:
    from ..metrics.approx import bkr_approx, xlr_approx
    from ..search.faiss_backend import FaissOptions

    ks = approx_ks(task.n, task.k)
    common = {"method": task.approx, "target_agreement": task.approx_target, "seed": task.seed,
              "options": FaissOptions(seed=task.seed, threads=1), "found_at": True}
    image_sides = {g: image_side(si, ti, seed=task.seed) for g, (si, ti) in task.images.items()} if task.bkr else {}
    out: list[Run] = []
    for model in task.models:
        t0 = time.perf_counter()
        shared: dict[str, Any] = {"approx": task.approx, "approx_target": task.approx_target}
        shared_ranks: dict[str, np.ndarray] = {}
        flags = []
        if task.xlr is not None:
            x = xlr_approx(*task.xlr[model], ks, both_directions=True, **common)
            shared.update({key: v for key, v in x.items() if key.startswith(("xlr@", "xlr_mrr@", "xlr_t2s@", "xlr_t2s_mrr@"))})
            shared.update(_calibration_fields(x, {"text_": "approx_xlr_", "t2s_": "approx_xlr_t2s_"}))
            shared_ranks["xlr"], shared_ranks["xlr_t2s"] = _found_ranks(x["found_at"]), _found_ranks(x["t2s_found_at"])
            flags.append(bool(x["approximate"]))
        if task.bkr is None:
            shared["approximate"] = any(flags)
            shared["seconds"] = round(time.perf_counter() - t0, 4)
            out.append((model, None, shared, shared_ranks))
            continue
        st, tt = task.bkr[model]
        text_corr = text_side(st, tt, seed=task.seed)
        for g, (si, ti) in task.images.items():
            values, ranks = dict(shared), dict(shared_ranks)
            b = bkr_approx(st, tt, si, ti, ks, **common)
            values.update({key: v for key, v in b.items() if key.startswith(("bkr@", "bkr_mrr@"))})
            values.update(_calibration_fields(b, {"text_": "approx_bkr_text_", "image_": "approx_bkr_image_"}))
            values["approximate"] = any(flags) or bool(b["approximate"])
            ranks["bkr"] = _found_ranks(b["found_at"])
            values.update(corr_from_sides(text_corr, image_sides[g]))
            values["bkr_chance"] = task.k / task.n
            out.append((model, g, values, ranks))
        seconds = round(time.perf_counter() - t0, 4)
        for _, _, values, _ in out[len(out) - len(task.images):]:
            values["seconds"] = seconds
    return (task.src, task.tgt, task.seed), out


RecordSlot = tuple[str, str | None, str, str, int]  # (model, image model, src, tgt, seed)
MANIFEST = "manifest/inputs.json"  # in a folder of its own: .partial/*.json are the records
_DAMAGED = (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile, zlib.error)


@dataclasses.dataclass
class _Inputs:
    """The fingerprints every stored record is keyed by (see the module docstring)."""

    cfg_key: str
    models: dict[str, str]  # model spec -> fingerprint (version, + fitted-on texts)
    image_models: dict[str | None, str | None]  # image model -> version
    samples: dict[tuple[str, str, int], dict[str, str]]  # (src, tgt, seed) -> "data:LANG"/"images:LANG" -> fp

    def parts(self, slot: RecordSlot) -> dict[str, str | None]:
        spec, g, s, t, seed = slot
        sample = self.samples[(s, t, seed)]
        parts: dict[str, str | None] = {"model": self.models[spec], "image model": self.image_models[g]}
        parts.update({k: v for k, v in sample.items() if g is not None or not k.startswith("images:")})
        return parts

    def key(self, slot: RecordSlot) -> str:
        """The file name (without suffix) of the record of ``slot`` computed from these inputs."""
        spec, g, s, t, seed = slot
        return content_hash(json.dumps([self.cfg_key, spec, g, s, t, seed, self.parts(slot)], sort_keys=True), 16)

    def slot_id(self, slot: RecordSlot) -> str:
        return content_hash(json.dumps([self.cfg_key, *slot]), 16)


def _fingerprint_inputs(
    cfg: EvalConfig, samples: dict[tuple[str, str, int], _Samples], feats: _Features, encoders: dict[str, Any],
    image_models: Sequence[str | None],
) -> _Inputs:
    fit_fp = None
    models = {}
    for spec, enc in encoders.items():
        fp = str(enc.version)
        if callable(getattr(enc, "fit", None)) and getattr(enc, "fitted_on_texts", True):
            # fitted on the evaluated texts (tfidf-char, PCA variants): they are part of the model
            fit_fp = fit_fp or feats.fit_fingerprint()
            fp += f"+fit:{fit_fp}"
        models[spec] = fp
    per_sample = {}
    for (s, t, seed), sm in samples.items():
        fps = {}
        for side, lang in enumerate((s, t)):  # the sample's rows of each language: XLR part, BkR part
            parts = (None if sm.xlr is None else sm.xlr[side], None if sm.bkr is None else sm.bkr[side])
            fps[f"data:{lang}"] = feats.sample_fingerprint(lang, parts, False)
            if sm.bkr is not None:
                fps[f"images:{lang}"] = feats.sample_fingerprint(lang, (None, sm.bkr[side]), True)
        per_sample[(s, t, seed)] = fps
    versions: dict[str | None, str | None] = {g: (feats.image_versions[g] if g else None) for g in image_models}
    return _Inputs(cfg.key(), models, versions, per_sample)


def _read_manifest(partial: Path, log: Callable[[str], None]) -> dict[str, Any]:
    path = partial / MANIFEST
    if not path.exists():
        return {}
    try:
        slots = json.loads(path.read_text(encoding="utf-8"))["slots"]
        if not isinstance(slots, dict):
            raise ValueError("'slots' is not an object")
        return slots
    except (OSError, ValueError, KeyError, TypeError) as e:
        log(f"damaged manifest {path} ({type(e).__name__}: {e}): cannot say which inputs changed; rewriting it")
        return {}


def _label(part: str, slot: RecordSlot) -> str:
    kind, _, lang = part.partition(":")
    if kind == "data":
        return f"data for {lang}"
    if kind == "images":
        return f"images for {lang}"
    if kind == "model":
        return f"model {slot[0]}"
    return f"image model {slot[1]}"


class _DamagedRecord(Exception):
    def __init__(self, path: Path, error: BaseException):
        super().__init__(f"{path} ({type(error).__name__}: {error})")
        self.path = path


def _load_record(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A stored record (``path``, .json) and its ranks (.npz beside it); :class:`_DamagedRecord`
    naming the file if either cannot be read whole."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rec, dict) or "model" not in rec:
            raise ValueError("not a record")
    except _DAMAGED as e:
        raise _DamagedRecord(path, e) from None
    npz = path.with_suffix(".npz")
    try:
        with np.load(npz, allow_pickle=False) as z:
            ranks = {k: z[k] for k in z.files}
    except _DAMAGED as e:
        raise _DamagedRecord(npz, e) from None
    return rec, ranks


def config_json(cfg: EvalConfig) -> dict[str, Any]:
    """``cfg`` as JSON data; Python-object models appear as ``"python:<module.Class>"`` (their
    fingerprints are in ``run.json``'s ``inputs.models``)."""
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    d["models"] = describe_models(cfg.models)
    return json.loads(json.dumps(d, default=str))


def run_info(cfg: EvalConfig, ds: Dataset, feats: "_Features", inputs: _Inputs, executor: str) -> dict[str, Any]:
    """What produced a set of results: the configuration, fingerprints of every input (the rows the
    run used per language, their images, each model and image model) and the software environment.

    Args:
        cfg: the configuration.
        ds: the dataset.
        feats: the rows the run used and their digests.
        inputs: the fingerprints of the models and image models.
        executor: the executor's name.

    Returns:
        A JSON-serialisable dict (``OUT/run.json``).
    """
    return {
        "format": 1,
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": config_json(cfg),
        "config_key": inputs.cfg_key,
        "executor": executor,
        "inputs": {
            "dataset": ds.name,
            "rows": {lang: len(rows) for lang, rows in feats.needed.items()},
            "data": {lang: fingerprint(d) for lang, d in feats.row_digests.items()},
            "images": {lang: fingerprint(d) for lang, d in feats.image_digests.items() if d},
            "models": dict(inputs.models),
            "image_models": {g: v for g, v in inputs.image_models.items() if g is not None},
        },
        "environment": environment(),
    }


NEEDS = {
    "xlr": "cross-lingual links (rows of two languages sharing a concept) for the ground truth XLR",
    "bkr": "images (image files or an image-feature file) for BkR and CORR",
}


def _check_needs(dataset: str, samples: dict[tuple[str, str, int], _Samples], needs: Sequence[str], purpose: str) -> None:
    """Right after sampling, before any encoding: every pair has what ``purpose`` needs."""
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise BackretrievalError(f"unknown requirement(s) {', '.join(sorted(unknown))}: use {', '.join(NEEDS)}")
    for (s, t, _), sm in samples.items():
        for need in needs:
            if getattr(sm, need) is None:
                raise DataError(f"{purpose} needs {NEEDS[need]}, but dataset {dataset} ({s}-{t}) has none")


def _same_sample_note(samples: dict[tuple[str, str, int], _Samples], cfg: EvalConfig) -> str | None:
    """One sentence when every seed draws the same sample of a pair (N is all there is)."""
    if len(cfg.seeds) < 2:
        return None

    def rows(part):
        return None if part is None else (frozenset(part[0].tolist()), frozenset(part[1].tolist()))

    found = []
    for s, t in cfg.pairs:
        sms = [samples[(s, t, seed)] for seed in cfg.seeds]
        same = []
        for name, what in (("xlr", f"all the concepts {s} and {t} share (XLR)"),
                           ("bkr", f"all the {s} and {t} items a non-matching sample can hold (BkR)")):
            first = rows(getattr(sms[0], name))
            if first is not None and all(rows(getattr(sm, name)) == first for sm in sms[1:]):
                same.append(what)
        if same:
            found.append(f"{s}->{t} ({' and '.join(same)})")
    if not found:
        return None
    return (
        f"every seed draws the same sample: N={cfg.n} is all the data has for {'; '.join(found)}, so the "
        f"{len(cfg.seeds)} seeds differ only in the order of the items and their spread (sd 0) measures nothing; "
        "give a smaller N for a spread over samples"
    )


def evaluate(
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    log: Callable[[str], None] = lambda msg: None,
    executor: Any = None,
    needs: Sequence[str] = (),
    purpose: str = "this evaluation",
) -> EvalResult:
    """Run the grid; return one record per (model, src, tgt, seed) and write them to ``out_dir``.

    ``executor`` (see :mod:`.executors`; default: in this process) runs the per-sample tasks.
    ``log`` receives one line per notable event: resumed records, inputs that changed since the
    records in ``out_dir`` were computed, damaged record files, truncated texts, skipped models,
    seeds that all draw the same sample.

    Args:
        cfg: the grid.
        out_dir: where the records go (checked writable before anything is done); None: nowhere.
        progress: show progress bars.
        log: receives the notable events.
        executor: where the per-sample tasks run.
        needs: what the caller needs of every pair: ``"xlr"`` (cross-lingual links) and/or
            ``"bkr"`` (images); checked right after sampling, before any encoding.
        purpose: how the error for a missing need names the caller, e.g. ``"compare --metric xlr@10"``.

    Returns:
        The :class:`EvalResult`.

    Raises:
        BackretrievalError: bad configuration or data (named), an output folder that cannot be written.
    """
    from .executors import get_executor

    if out_dir is not None:
        check_writable_dir(out_dir, "output folder")
    if cfg.n < 1:
        raise BackretrievalError(f"n must be positive, got {cfg.n}")
    if cfg.k > cfg.n:
        raise BackretrievalError(f"K={cfg.k} is larger than N={cfg.n}")
    if cfg.approx is not None:
        check_approx(cfg)
    # build and check every model before loading anything
    models = grid_models(cfg.models)
    names = list(models)
    encoders = {name: m.encoder for name, m in models.items()}
    run_only = [name for name, m in models.items() if m.run_only]
    if run_only:
        log(run_only_note(run_only))
    langs = list(dict.fromkeys(lang for pair in cfg.pairs for lang in pair))
    ds = load_dataset(cfg.dataset, langs=langs, **cfg.dataset_options)
    for lang in langs:
        ds[lang]  # unknown language -> clear error before any work
    samples = {(s, t, seed): _draw(ds, s, t, cfg.n, seed) for s, t in cfg.pairs for seed in cfg.seeds}
    _check_needs(cfg.dataset, samples, needs, purpose)
    has_bkr = any(sm.bkr is not None for sm in samples.values())
    notes: list[str] = []
    if not has_bkr:
        log(f"{ds.name} has no images: BkR and CORR need images; reporting XLR only")
    same = _same_sample_note(samples, cfg)
    if same:
        log(same)
        notes.append(same)
    needed: dict[str, set[int]] = {lang: set() for lang in langs}
    for (s, t, _), sm in samples.items():
        for part in (sm.xlr, sm.bkr):
            if part is not None:
                needed[s].update(part[0].tolist())
                needed[t].update(part[1].tolist())
    needed_rows = {lang: np.array(sorted(rows), dtype=np.int64) for lang, rows in needed.items()}
    image_models: list[str | None] = list(cfg.image_models) if has_bkr else [None]
    feats = _Features(ds, needed_rows, [g for g in image_models if g], progress, log, cfg.dataset)
    inputs = _fingerprint_inputs(cfg, samples, feats, encoders, image_models)

    partial = Path(out_dir) / ".partial" if out_dir is not None else None
    manifest = _read_manifest(partial, log) if partial is not None else {}
    found: dict[RecordSlot, tuple[dict, dict]] = {}
    todo: dict[tuple[str, str, int], list[str]] = {}
    changed: dict[str, int] = {}
    for spec in names:
        for s, t, seed in samples:
            done = 0
            for g in image_models:
                slot = (spec, g, s, t, seed)
                if partial is None or spec in run_only:
                    continue
                path = partial / f"{inputs.key(slot)}.json"
                if path.exists():  # finished in an earlier run
                    try:
                        found[slot] = _load_record(path)
                        done += 1
                        continue
                    except _DamagedRecord as e:
                        log(f"damaged record file {e}: recomputing the record")
                old = manifest.get(inputs.slot_id(slot))
                if isinstance(old, dict) and old.get("record") != inputs.key(slot):
                    before = old.get("inputs") if isinstance(old.get("inputs"), dict) else {}
                    for part, value in inputs.parts(slot).items():
                        if before.get(part) != value:
                            label = _label(part, slot)
                            changed[label] = changed.get(label, 0) + 1
            if done < len(image_models):
                todo.setdefault((s, t, seed), []).append(spec)
    if found:
        log(f"resuming: {len(found)} finished records found in {partial}")
    for label, count in changed.items():
        log(f"{label} changed since the records in {out_dir} were computed: recomputing {count} record{'s' * (count != 1)}")
    if partial is not None:  # the inputs of this run, for the next one to compare with
        slots = dict(manifest)
        for spec in (name for name in names if name not in run_only):
            for s, t, seed in samples:
                for g in image_models:
                    slot = (spec, g, s, t, seed)
                    slots[inputs.slot_id(slot)] = {"record": inputs.key(slot), "inputs": inputs.parts(slot)}
        atomic_write_text(partial / MANIFEST, json.dumps({"format": 1, "slots": slots}))
    # encode every model that has work left (through the cache), then run one task per sample
    ex = get_executor(executor)
    text: dict[str, dict[str, np.ndarray]] = {}
    encode_s: dict[str, float] = {}
    for spec in dict.fromkeys(spec for specs in todo.values() for spec in specs):
        t0 = time.perf_counter()
        m = models[spec]  # a Python object encodes here, with every executor (it is never pickled)
        enc = m.encoder if m.spec is None else ex.text_encoder(m.spec)
        text[spec] = feats.text(CachedTextEncoder(enc, chunk=ex.encode_chunk, progress=progress))
        encode_s[spec] = round(time.perf_counter() - t0, 3)

    for spec, langs_missing in feats.unsupported.items():
        for lang, why in langs_missing.items():
            log(f"skipping {spec} for the pairs with {lang!r}: {why}")
    todo = {key: [m for m in specs if key[0] in text[m] and key[1] in text[m]] for key, specs in todo.items()}
    todo = {key: specs for key, specs in todo.items() if specs}

    def tasks():
        for (s, t, seed), specs in todo.items():
            sm = samples[(s, t, seed)]

            def rows(part, model):
                return text[model][s][feats.rows(s, part[0])], text[model][t][feats.rows(t, part[1])]

            images = {}
            if sm.bkr is not None:
                si, ti = feats.rows(s, sm.bkr[0]), feats.rows(t, sm.bkr[1])
                images = {g: (feats.images[g][s][si], feats.images[g][t][ti]) for g in image_models}
            yield SampleTask(
                s, t, seed, cfg.n, cfg.k, cfg.sim, cfg.csls_k, specs,
                None if sm.xlr is None else {m: rows(sm.xlr, m) for m in specs},
                None if sm.bkr is None else {m: rows(sm.bkr, m) for m in specs},
                images,
                cfg.corr_boot,
                cfg.approx,
                cfg.approx_target,
            )

    n_runs = sum(len(specs) for specs in todo.values()) * len(image_models)
    bar = tqdm(total=n_runs, desc="metrics", unit="run", disable=not progress)
    for (s, t, seed), runs in ex.imap(run_sample_task, tasks()):
        for spec, g, values, ranks in runs:
            slot = (spec, g, s, t, seed)
            if slot in found:
                continue
            rec: dict[str, Any] = {
                "model": spec, "model_identity": inputs.models[spec], "image_model": g, "dataset": ds.name, "src_lang": s, "tgt_lang": t, "seed": seed,
                "n": cfg.n, "k": cfg.k, "sim": cfg.sim, **values, "encode_seconds": encode_s[spec],
            }
            if g is None:  # no images: no image fields
                del rec["image_model"]
            if partial is not None and spec not in run_only:  # ranks first: the .json marks a finished record
                path = partial / f"{inputs.key(slot)}.json"
                atomic_save_npz(path.with_suffix(".npz"), **ranks)
                atomic_write_text(path, json.dumps(rec))
            found[slot] = (rec, ranks)
            bar.update(1)
    bar.close()
    info = run_info(cfg, ds, feats, inputs, ex.name)
    order = {m: i for i, m in enumerate(names)}
    results = {}
    for g in image_models:
        keys_g = sorted((k for k in found if k[1] == g), key=lambda k: (order[k[0]], k[2], k[3], k[4]))
        results[g] = EvalResult(
            cfg,
            [_with_identity(found[k][0], inputs.models[k[0]]) for k in keys_g],
            {(k[0], k[2], k[3], k[4]): found[k][1] for k in keys_g},
            run=info,
            text_only=not has_bkr,
            notes=list(notes),
        )
    main, *rest = image_models
    result = results[main]
    result.others = {g: results[g] for g in rest}
    if out_dir is not None:
        write_results(result.records, Path(out_dir), info)
        for g, res in result.others.items():
            write_results(res.records, Path(out_dir) / "image-models" / slug(g), info)
    return result


def _with_identity(rec: dict[str, Any], identity: str) -> dict[str, Any]:
    """A record as the results give it: ``model_identity`` after ``model`` (records stored before
    the field existed get it from their key, which includes it), no empty ``image_model``."""
    out = {"model": rec["model"], "model_identity": identity}
    out.update((f, v) for f, v in rec.items() if f not in out and not (f == "image_model" and v is None))
    return out


def slug(s: str) -> str:
    """A file-name-safe form of a model spec."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", s)


def write_results(records: Sequence[dict[str, Any]], out_dir: Path, run: dict[str, Any] | None = None) -> None:
    """Write ``results.jsonl``, ``results.csv`` and (given ``run``) ``run.json`` into ``out_dir``, each atomically.

    Args:
        records: one dict per record.
        out_dir: the folder (created).
        run: what produced the records (:func:`run_info`); ``run.json`` is written first, so
            a ``results.jsonl`` never lacks it.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if run is not None:
        atomic_write_text(out_dir / "run.json", json.dumps(run, indent=1, default=str) + "\n")
    atomic_write_text(out_dir / "results.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_text(out_dir / "results.csv", pd.DataFrame(records).to_csv(index=False))


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
