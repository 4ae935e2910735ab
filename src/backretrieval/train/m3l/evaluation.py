"""Text-to-image retrieval: ranks of the true image, Recall@K summaries, and the evaluation of
saved M3L/PATR model directories on a dataset's held-out images."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...core import BackretrievalError, DataError
from ...data import Dataset
from ...encoders.trained.modeldir import ModelDir
from ...encoders.trained.m3l import load_model
from ...metrics import rank_summary
from ...metrics import retrieval_ranks as _ranks  # the one retrieval-ranks function
from .data import ImageTextData, collect_images

VAL_KS = (1, 5, 10)
RETRIEVAL_SIMS = ("euclidean", "cosine")
METRIC = "t2i"  # text->image recall: keys t2i@K, t2i_mrr, t2i_median_rank (before: r@K, r_mrr, ...)


def retrieval_ranks(
    queries: np.ndarray, gallery: np.ndarray, true_image: np.ndarray, *, sim: str = "euclidean"
) -> np.ndarray:
    """Pessimistic 1-based rank of ``gallery[true_image[i]]`` for query ``i``.

    ``euclidean``: nearest first by squared distance, computed blockwise as the score
    ``2 <q, x> - |x|^2`` (the query's own norm is the same for every image). ``cosine``: by
    cosine similarity. A thin call of :func:`backretrieval.metrics.retrieval_ranks` restricted
    to these two similarities.

    Args:
        queries: (n, d) mapped captions.
        gallery: (m, d) image features.
        true_image: (n,) gallery row of each query's image.
        sim: ``"euclidean"`` or ``"cosine"``.

    Returns:
        int64 (n,) 1-based ranks (ties count against the query).

    Raises:
        BackretrievalError: an unknown ``sim``; :class:`~backretrieval.core.MetricInputError`
            (a BackretrievalError): mismatched shapes, or NaN/inf in a query or image (named).
    """
    if sim not in RETRIEVAL_SIMS:
        raise BackretrievalError(f"unknown retrieval similarity {sim!r}; choose one of {', '.join(RETRIEVAL_SIMS)}")
    return _ranks(queries, gallery, true_image, sim=sim)


def recall_summary(ranks: np.ndarray, ks: Sequence[int] = VAL_KS) -> dict[str, float]:
    """Text->image Recall@K, MRR and median rank of 1-based ranks, named like every metric of
    the project (``name@K``): ``t2i@K`` for each K, ``t2i_mrr``, ``t2i_median_rank`` (NaN for
    no ranks). Legacy models and results name them ``r@K`` / ``r_*``."""
    if len(ranks) == 0:
        return {**{f"{METRIC}@{k}": float("nan") for k in ks}, f"{METRIC}_mrr": float("nan"),
                f"{METRIC}_median_rank": float("nan")}
    return rank_summary(np.asarray(ranks), tuple(ks), METRIC)


@dataclasses.dataclass
class RetrievalResult:
    """Text-to-image retrieval of one saved model on one split, per language."""

    model_dir: str
    model: ModelDir
    split: str
    sim: str
    n_images: int
    per_lang: dict[str, dict[str, float]]
    ranks: dict[str, np.ndarray]
    query_ids: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON-ready dict: the model's directory, label and settings, the split and
        similarity, and Recall@K per language."""
        hp = self.model.hyper_parameters
        return {
            "model_dir": self.model_dir,
            "label": m3l_model_label(self.model),
            "loss": hp["loss"],
            "base": hp["base"],
            "image_model": hp["image_model"],
            "train_langs": list(hp["train_langs"]),
            "seed": hp["seed"],
            "best_epoch": self.model.info["best_epoch"],
            "split": self.split,
            "sim": self.sim,
            "n_images": self.n_images,
            "per_lang": self.per_lang,
        }


def m3l_model_label(model: ModelDir) -> str:
    """``base LOSS`` of a saved model, e.g. ``use-m PATR``."""
    return f"{model.hyper_parameters['base']} {model.hyper_parameters['loss'].upper()}"


def evaluate_image_retrieval(
    model_dir: str | Path,
    dataset: Dataset,
    langs: Sequence[str],
    *,
    split: str = "test",
    ks: Sequence[int] = VAL_KS,
    sim: str = "euclidean",
    data: ImageTextData | None = None,
    base_encoder: Any = None,
    progress: bool = False,
) -> RetrievalResult:
    """Text->image Recall@K per language of a saved model on ``split`` of ``dataset``.

    The gallery is every distinct image of ``split`` (``"test"``, ``"val"``, or ``"all"``)
    among the loaded languages, split by the model's own split rule, minus any image the model
    was trained on (none, when the dataset is the training dataset); the queries of a language
    are its captions of gallery images. ``data`` may be passed to reuse encoded images across
    models that share an image model and split, and ``base_encoder`` (a cached text encoder of
    the model's base) to load the base model once for several models.

    Args:
        model_dir: a saved M3L/PATR model directory.
        dataset: the dataset, with ``langs`` loaded; langs: the query languages.
        split: ``"test"``, ``"val"`` or ``"all"``; ks: recall cut-offs; sim: see
            :func:`retrieval_ranks`.
        data, base_encoder: reuse across models (see above); progress: bars.

    Returns:
        A :class:`RetrievalResult` (per language ``n_queries`` and :func:`recall_summary`).

    Raises:
        BackretrievalError: a bad ``split``, or a model whose image model or dimension does not
            fit the data.
        DataError: no gallery images left in ``split``.
    """
    from ...encoders.trained.m3l import M3LTextEncoder

    if split not in ("test", "val", "all"):
        raise BackretrievalError(f"split must be test, val or all, got {split!r}")
    model, _ = load_model(model_dir)
    hp, image_dim = model.hyper_parameters, model.info["image_dim"]
    if data is None:
        data = collect_images(
            dataset, langs, hp["image_model"],
            split_seed=hp["split_seed"], test_frac=hp["test_frac"], val_frac=hp["val_frac"], progress=progress,
        )
    elif data.image_model != hp["image_model"]:
        raise BackretrievalError(f"{model_dir}: trained for image model {hp['image_model']!r}, data encoded with {data.image_model!r}")
    if data.features.shape[1] != image_dim:
        raise BackretrievalError(
            f"{model_dir}: maps into {image_dim}-d image features, the dataset's images are {data.features.shape[1]}-d"
        )
    with open(Path(model_dir) / "split.json", encoding="utf-8") as fh:
        trained_on = set(json.load(fh)["train"])
    gal = data.images(None if split == "all" else split)
    gal = np.array([g for g in gal if data.keys[g] not in trained_on], dtype=np.int64)
    if len(gal) == 0:
        raise DataError(f"{dataset.name}: no {split} images left to retrieve from")
    pos = np.full(len(data.keys), -1, dtype=np.int64)
    pos[gal] = np.arange(len(gal))
    enc = M3LTextEncoder(model_dir, progress=progress, base_encoder=base_encoder)
    gallery = data.features[gal]
    per_lang, ranks, qids = {}, {}, {}
    for lang in langs:
        img = data.image_of[lang]
        rows = np.flatnonzero(pos[img] >= 0)
        c = data.corpora[lang].subset(rows)
        if len(rows) == 0:
            per_lang[lang] = {"n_queries": 0, **recall_summary(np.zeros(0), ks)}
            ranks[lang], qids[lang] = np.zeros(0, np.int64), []
            continue
        q = enc.map(c.texts, lang, ids=c.ids)
        r = retrieval_ranks(q, gallery, pos[img[rows]], sim=sim)
        per_lang[lang] = {"n_queries": int(len(rows)), **recall_summary(r, ks)}
        ranks[lang], qids[lang] = r, list(c.ids)
    return RetrievalResult(str(model_dir), model, split, sim, int(len(gal)), per_lang, ranks, qids)
