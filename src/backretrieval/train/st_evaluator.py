"""BkR (and XLR where the data links languages) as a sentence-transformers evaluator, to watch
while fine-tuning.

:class:`BackretrievalEvaluator` is a ``sentence_transformers`` ``SentenceEvaluator``: give it to
``SentenceTransformerTrainer(evaluator=...)`` (or call it on a model) and at every evaluation it
embeds a fixed sample of a dataset's texts with the model being trained and computes BkR@K
(Backretrieval paper, Sec. 2: :func:`backretrieval.metrics.bkr` on the non-matching sample, with
the image features of an image model computed once) and, for pairs whose items share concepts,
XLR@K (:func:`backretrieval.metrics.xlr` on the matching sample). It needs no parallel data: a
team fine-tuning on its own monolingual data watches BkR move with the training loss.

The samples are drawn once, when the evaluator is built, exactly as the evaluation grid draws
them (:func:`backretrieval.data.non_matching` / :func:`~backretrieval.data.matching` with
``n`` and ``seed``), so every evaluation of a training run scores the same texts, and the
numbers equal :func:`backretrieval.metrics.bkr` on the same vectors. The metrics are named
``{src}-{tgt}_bkr@K`` (``_xlr@K``) per pair and ``bkr@K`` / ``xlr@K`` for their mean over the pairs,
each prefixed with ``name_`` when a name is given; ``primary_metric`` is ``bkr@{k}`` (greater is
better). With ``output_path`` (the trainer gives its ``output_dir/eval``) one CSV row per
evaluation is appended to ``backretrieval_evaluation[_NAME]_results.csv``: ``epoch``, ``steps``
and every metric, as sentence-transformers' own evaluators write theirs.
"""
from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
try:
    from sentence_transformers.sentence_transformer.evaluation import SentenceEvaluator
except ImportError:  # sentence-transformers before 6
    from sentence_transformers.evaluation import SentenceEvaluator

from ..core import BackretrievalError, DataError
from ..data import load_dataset, matching, non_matching
from ..encoders.cache import CachedImageEncoder
from ..encoders.image.precomputed_image import load_feature_rows
from ..encoders.registry import get_image_encoder
from ..metrics import bkr, xlr


def _pairs(pairs: Any) -> list[tuple[str, str]]:
    """``[("en", "de")]`` from ``"en-de,en-ja"`` (``en:zh-Hant`` for codes with hyphens),
    ``("en", "de")`` or a list of either."""
    if isinstance(pairs, str):
        pairs = [p.strip() for p in pairs.split(",") if p.strip()]
    elif isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(x, str) for x in pairs):
        pairs = [pairs]
    out = []
    for p in pairs:
        if isinstance(p, str):
            s, _, t = p.partition(":" if ":" in p else "-")
        else:
            s, t = p if isinstance(p, (tuple, list)) and len(p) == 2 else ("", "")
        if not isinstance(s, str) or not isinstance(t, str) or not s or not t or s == t:
            raise BackretrievalError(f"BackretrievalEvaluator: a pair is SRC-TGT with two different languages, got {p!r}")
        out.append((s, t))
    if not out:
        raise BackretrievalError("BackretrievalEvaluator: give at least one language pair, e.g. pairs='en-de'")
    return out


def _count(value: Any, name: str, low: int) -> int:
    """An integer setting of the evaluator, at least ``low`` (a float, a string or a bool is refused, not rounded)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise BackretrievalError(f"BackretrievalEvaluator: {name}={value!r} ({type(value).__name__}): {name} must be an integer")
    if value < low:
        raise BackretrievalError(f"BackretrievalEvaluator: {name}={value} is out of range: {name} must be >= {low}")
    return int(value)


def _csv_header(path: str) -> list[str] | None:
    """The first row of an existing CSV file (None: no such file, or an empty one)."""
    if not os.path.isfile(path):
        return None
    with open(path, newline="", encoding="utf-8") as f:
        return next(csv.reader(f), None)


class BackretrievalEvaluator(SentenceEvaluator):
    """BkR@K (and XLR@K) of the model being trained, on a fixed sample of a dataset (see the module docstring).

    Args:
        dataset: a dataset spec (``"emoji-cldr"``, a file, ``hf:FOLDER``) or a loaded ``Dataset``.
        pairs: the language pairs: ``"en-de,en-ja"`` or ``[("en", "de")]``.
        image_model: the image model whose features BkR compares (a spec; ``"precomputed"`` for
            a dataset with a feature file).
        n: items per side of each sample.
        seed: the sampling seed.
        k: the K of the primary metric ``bkr@K``.
        ks: every K reported (``k`` is added).
        sim: ``"cosine"`` or ``"csls"``.
        batch_size: texts per batch when the model embeds them.
        name: prefixes every metric and the CSV file (``name_bkr@10``).
        write_csv: append a row per evaluation to the CSV in ``output_path``.
        show_progress_bar: show the model's encoding bar.

    Raises:
        BackretrievalError: a pair that is not two different languages, ``n``, ``seed``, ``k``,
            a K of ``ks`` or ``batch_size`` that is not an integer (``30.7``, ``"30"``) or out of
            range, a K above ``n``. A K equal to ``n`` (every model scores 1.0 there) is a warning.
        DataError: a pair without images.
    """

    def __init__(self, dataset: Any, pairs: Any, *, image_model: str = "efficientnet-lite0", n: int = 300,
                 seed: int = 0, k: int = 10, ks: Sequence[int] = (1, 5, 10), sim: str = "cosine",
                 batch_size: int = 32, name: str = "", write_csv: bool = True, show_progress_bar: bool = False) -> None:
        super().__init__()
        self.pairs = _pairs(pairs)
        self.n, self.seed, self.k, self.sim = _count(n, "n", 1), _count(seed, "seed", 0), _count(k, "k", 1), sim
        self.ks = tuple(sorted({_count(x, "every K of ks", 1) for x in ks} | {self.k}))
        if self.ks[-1] > self.n:
            raise BackretrievalError(f"BackretrievalEvaluator: every K must be in [1, n={self.n}], got {self.ks}")
        trivial = [x for x in self.ks if x >= self.n]
        if trivial:
            warnings.warn(f"BackretrievalEvaluator: n={self.n}: {', '.join(f'bkr@{x}' for x in trivial)} (and XLR at that K) "
                          f"{'is' if len(trivial) == 1 else 'are'} 1.0 for every model (chance K/n = 1): choose n above "
                          f"{max(trivial)} (300 by default)", UserWarning, stacklevel=2)
        langs = list(dict.fromkeys(lang for p in self.pairs for lang in p))
        ds = dataset if hasattr(dataset, "corpora") and not isinstance(dataset, str) else load_dataset(dataset, langs=langs)
        self.dataset = ds.name
        self.batch_size, self.name, self.write_csv = _count(batch_size, "batch_size", 1), name, bool(write_csv)
        self.show_progress_bar = bool(show_progress_bar)
        self.greater_is_better = True
        self.primary_metric = f"bkr@{self.k}"
        image = get_image_encoder(image_model)
        cached = None if image_model.split("@")[0] == "precomputed" else CachedImageEncoder(image)
        # per pair: the BkR sample's texts and image features; the XLR sample's texts where linked
        self.samples: dict[tuple[str, str], dict[str, Any]] = {}
        for s, t in self.pairs:
            a, b = ds[s], ds[t]
            if not (a.has_images and b.has_images):
                raise DataError(f"BackretrievalEvaluator: {ds.name} {s}-{t} has no images: BkR needs them")
            sr, tr = non_matching(a, b, self.n, self.seed)
            sample: dict[str, Any] = {
                "bkr_texts": ([a.texts[i] for i in sr], [b.texts[i] for i in tr]),
                "images": (self._images(a.subset(sr), cached, image_model), self._images(b.subset(tr), cached, image_model)),
            }
            if a.has_concepts and b.has_concepts:
                ms, mt = matching(a, b, self.n, self.seed)
                sample["xlr_texts"] = ([a.texts[i] for i in ms], [b.texts[i] for i in mt])
            self.samples[(s, t)] = sample
        suffix = f"_{name}" if name else ""
        self.csv_file = f"backretrieval_evaluation{suffix}_results.csv"
        self.csv_headers = ["epoch", "steps", *self._metric_names()]

    @staticmethod
    def _images(c: Any, cached: Any, spec: str) -> np.ndarray:
        if cached is not None:
            if c.image_paths is None:
                raise DataError(f"BackretrievalEvaluator: {c.dataset}/{c.lang} has no image files for {spec!r}; "
                                "use image_model='precomputed'")
            return cached.encode_images(c.image_paths)
        return load_feature_rows(c.image_features, c.image_rows, f"{c.dataset}/{c.lang} images")

    def _metric_names(self) -> list[str]:
        names = []
        xlr_too = any("xlr_texts" in v for v in self.samples.values())
        for s, t in self.pairs:
            names += [f"{s}-{t}_bkr@{k}" for k in self.ks]
            if "xlr_texts" in self.samples[(s, t)]:
                names += [f"{s}-{t}_xlr@{k}" for k in self.ks]
        names += [f"bkr@{k}" for k in self.ks]
        if xlr_too:
            names += [f"xlr@{k}" for k in self.ks]
        return names

    def embed(self, model: Any, texts: list[str]) -> np.ndarray:
        """The model's float32 vectors of ``texts`` (as sentence-transformers encodes them).

        Args:
            model: a ``SentenceTransformer``.
            texts: the texts.

        Returns:
            float32 (len(texts), d).
        """
        x = model.encode(texts, batch_size=self.batch_size, show_progress_bar=self.show_progress_bar,
                         convert_to_numpy=True)
        return np.ascontiguousarray(x, dtype=np.float32)

    def compute(self, model: Any) -> dict[str, float]:
        """Every metric of the model on the samples, without prefix, CSV or model card.

        Args:
            model: a ``SentenceTransformer``.

        Returns:
            ``{"en-de_bkr@10": ..., "bkr@10": ..., ...}`` (see the module docstring).
        """
        out: dict[str, float] = {}
        means: dict[str, list[float]] = {}
        for (s, t), sample in self.samples.items():
            src, tgt = (self.embed(model, x) for x in sample["bkr_texts"])
            values = bkr(src, tgt, *sample["images"], ks=self.ks, sim=self.sim)
            for k in self.ks:
                out[f"{s}-{t}_bkr@{k}"] = float(values[f"bkr@{k}"])
                means.setdefault(f"bkr@{k}", []).append(float(values[f"bkr@{k}"]))
            if "xlr_texts" in sample:
                src, tgt = (self.embed(model, x) for x in sample["xlr_texts"])
                values = xlr(src, tgt, ks=self.ks, sim=self.sim)
                for k in self.ks:
                    out[f"{s}-{t}_xlr@{k}"] = float(values[f"xlr@{k}"])
                    means.setdefault(f"xlr@{k}", []).append(float(values[f"xlr@{k}"]))
        out.update((m, float(np.mean(v))) for m, v in means.items())
        return out

    def __call__(self, model: Any, output_path: str | None = None, epoch: int = -1, steps: int = -1) -> dict[str, float]:
        """Evaluate ``model``: the metrics, prefixed with the name, also appended to the CSV in ``output_path``.

        Args:
            model: a ``SentenceTransformer`` (the one being trained).
            output_path: the folder of the CSV (None: no CSV).
            epoch: the training epoch (-1 outside training).
            steps: the training step (-1 outside training).

        Returns:
            The metrics (see the module docstring).

        Raises:
            BackretrievalError: the CSV in ``output_path`` holds another evaluator's columns (two
                evaluators of one name); checked before anything is computed or written.
        """
        path = os.path.join(output_path, self.csv_file) if output_path is not None and self.write_csv else None
        header = _csv_header(path) if path is not None else None
        if header is not None and header != self.csv_headers:
            raise BackretrievalError(
                f"BackretrievalEvaluator: {path} holds the rows of another evaluator ({len(header)} columns; this one "
                f"writes {len(self.csv_headers)}: {', '.join(self.csv_headers[2:5])}, ...): give each evaluator its own "
                f"name (name=...; the file is backretrieval_evaluation_NAME_results.csv) or another output folder")
        metrics = self.compute(model)
        if path is not None:
            os.makedirs(output_path, exist_ok=True)
            new = header is None
            with open(path, "a" if not new else "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(self.csv_headers)
                w.writerow([epoch, steps, *(metrics[m] for m in self.csv_headers[2:])])
        metrics = self.prefix_name_to_metrics(metrics, self.name)
        self.store_metrics_in_model_card_data(model, metrics, epoch, steps)
        return metrics

    def get_config_dict(self) -> dict[str, Any]:
        """What the model card records of this evaluator: dataset, pairs, n, seed, K."""
        return {"dataset": self.dataset, "pairs": [f"{s}-{t}" for s, t in self.pairs], "n": self.n,
                "seed": self.seed, "k": self.k}
