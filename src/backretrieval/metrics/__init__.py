"""Metrics: pure functions, numpy arrays in, numbers out. Names as in the papers.

* :func:`xlr` -- ground-truth cross-lingual retrieval (Recall@K / P@K, MRR), both directions
* :func:`bkr` -- Backretrieval, the image-pivoted metric
* :func:`corr` -- the CORR baseline (Spearman of text vs image distances)
* :func:`hubness` -- k-occurrence skewness
* :func:`retrieval_ranks` -- ranks of the true candidate for queries against a candidate pool
  (cosine, CSLS with a query pool, Euclidean): the training code's evaluations
* :data:`METRICS` -- the metric table (:class:`MetricSpec`: one entry per metric a record carries)
  and :func:`parse_metric`, the one parser of metric names (``"xlr@10"`` -> (entry, 10))
* :func:`csls` -- cross-domain similarity local scaling scores (small inputs; the metrics take
  ``sim="csls"`` and compute it blockwise)
"""
import numpy as np

from ._inputs import SIMILARITIES, rank_summary
from .bkr import bkr, bkr_ranks
from .corr import CorrSide, bootstrap_row_weights, corr, corr_bootstrap, corr_details, corr_from_sides, image_side, text_side
from .hubness import hubness
from .retrieval import RANK_SIMILARITIES, retrieval_ranks
from .table import METRICS, MetricSpec, hits, parse_metric, reciprocal
from .xlr import xlr, xlr_ranks


def csls(src: np.ndarray, tgt: np.ndarray, k: int = 10) -> np.ndarray:
    """The full CSLS matrix ``2 cos(x_i, y_j) - r_S(y_j) - r_T(x_i)`` (n_s, n_t), as the canonical
    float32 scores every metric decides on (``backretrieval.search.exact``).

    Holds the whole matrix: meant for inspection and small inputs.

    Args:
        src: (n_s, d) source embeddings.
        tgt: (n_t, d) target embeddings.
        k: neighbours of the penalties ``r_S``, ``r_T``.

    Returns:
        float32 (n_s, n_t) CSLS scores.

    Raises:
        MetricInputError: bad matrices (named), mismatched dimensions, or ``k`` out of range.
    """
    from ..search.exact import scores_block
    from ._inputs import check_pair, similarity

    src, tgt = check_pair(src, tgt, ("source embeddings", "target embeddings"))
    sc = similarity(src, tgt, "csls", k, None)
    return scores_block(sc.Q, sc.D, **sc.kwargs())


__all__ = [
    "SIMILARITIES", "CorrSide", "bootstrap_row_weights", "corr_bootstrap", "rank_summary", "bkr", "bkr_ranks", "corr", "corr_details", "corr_from_sides",
    "csls", "image_side", "text_side", "hubness", "xlr", "xlr_ranks", "RANK_SIMILARITIES", "retrieval_ranks",
    "METRICS", "MetricSpec", "hits", "parse_metric", "reciprocal",
]
