"""What the training loop's validation measures: the rank of each caption's true image
(:func:`retrieval_ranks`) and their Recall@K summary (:func:`recall_summary`). Evaluating a saved
model directory on a dataset is :mod:`backretrieval.analysis.trained.image_retrieval`."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...core import BackretrievalError
from ...metrics import rank_summary
from ...metrics import retrieval_ranks as _ranks  # the one retrieval-ranks function

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
