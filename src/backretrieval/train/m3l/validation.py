"""What the training loop's validation measures: the Recall@K summary (:func:`recall_summary`) of
the rank of each caption's true image (:func:`backretrieval.metrics.retrieval_ranks`, by
``euclidean`` distance or ``cosine``: :data:`RETRIEVAL_SIMS`). Evaluating a saved model directory
on a dataset is :mod:`backretrieval.analysis.trained.image_retrieval`."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...metrics import rank_summary

VAL_KS = (1, 5, 10)
RETRIEVAL_SIMS = ("euclidean", "cosine")
METRIC = "t2i"  # text->image recall: keys t2i@K, t2i_mrr, t2i_median_rank


def recall_summary(ranks: np.ndarray, ks: Sequence[int] = VAL_KS) -> dict[str, float]:
    """Text->image Recall@K, MRR and median rank of 1-based ranks, named like every metric of
    the project (``name@K``): ``t2i@K`` for each K, ``t2i_mrr``, ``t2i_median_rank`` (NaN for
    no ranks). Legacy models and results name them ``r@K`` / ``r_*``."""
    if len(ranks) == 0:
        return {**{f"{METRIC}@{k}": float("nan") for k in ks}, f"{METRIC}_mrr": float("nan"),
                f"{METRIC}_median_rank": float("nan")}
    return rank_summary(np.asarray(ranks), tuple(ks), METRIC)
