"""Ranks of the true candidate for queries against a candidate pool: the one retrieval-ranks
function of the training code's evaluations (Cr5 document and word retrieval, M3L/PATR
text-to-image retrieval).

Unlike :func:`~backretrieval.metrics.xlr_ranks` (N aligned pairs, both directions), the queries
and candidates here are different sets: ``truth[i]`` names the candidate row that query ``i``
should find. Scores are the canonical ones of :mod:`backretrieval.search` (the same bits on every
machine), and ranks are pessimistic (ties count against the query).
"""
from __future__ import annotations

import numpy as np

from ..core import MetricInputError
from ..search import csls_penalty, l2_normalize, rank_of_true

RANK_SIMILARITIES = ("cosine", "csls", "euclidean")


def _finite_rows(x: np.ndarray, what: str) -> None:
    finite = np.isfinite(x).all(axis=1)
    if not finite.all():
        raise MetricInputError(f"NaN or inf in {what} vector {int(np.argmin(finite))}")


def retrieval_ranks(
    queries: np.ndarray,
    candidates: np.ndarray,
    truth: np.ndarray,
    *,
    sim: str = "cosine",
    query_pool: np.ndarray | None = None,
    csls_k: int = 10,
) -> np.ndarray:
    """Pessimistic 1-based rank of ``candidates[truth[i]]`` for query ``i``.

    * ``cosine``: cosine similarity (rows made unit length by the canonical
      :func:`~backretrieval.search.l2_normalize`; an all-zero row stays zero and scores 0
      against everything, so its rank is the number of candidates).
    * ``csls``: ``2 cos(q, d) - r_D(q) - r_P(d)``, where ``r_D(q)`` is the mean cosine of ``q``
      to its ``csls_k`` nearest candidates and ``r_P(d)`` that of ``d`` to its ``csls_k``
      nearest items of ``query_pool`` (default: the queries); ``csls_k`` is clipped to the size
      of each side.
    * ``euclidean``: nearest first by squared distance on the vectors as given, computed as the
      score ``2 <q, d> - |d|^2`` (the query's own norm is the same for every candidate).

    Args:
        queries: (n, d) query vectors.
        candidates: (m, d) candidate vectors.
        truth: (n,) candidate row of each query's true item.
        sim: ``"cosine"``, ``"csls"`` or ``"euclidean"``.
        query_pool: (p, d) the query side's items for the CSLS penalty of the candidates
            (with ``sim="csls"``; default ``queries``).
        csls_k: neighbours of the CSLS penalties.

    Returns:
        int64 (n,) ranks, 1 = the true candidate scores strictly highest; every candidate
        that scores at least as high as the true one counts.

    Raises:
        MetricInputError: an unknown ``sim``; queries, candidates or pool not 2-D with the same
            dimension; NaN or inf in a vector (named by its row); ``truth`` of the wrong length
            or out of range; ``csls_k`` below 1.
    """
    if sim not in RANK_SIMILARITIES:
        raise MetricInputError(f"unknown retrieval similarity {sim!r}; choose one of {', '.join(RANK_SIMILARITIES)}")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    d = np.ascontiguousarray(candidates, dtype=np.float32)
    if q.ndim != 2 or d.ndim != 2 or q.shape[1] != d.shape[1]:
        raise MetricInputError(f"queries {q.shape} and candidates {d.shape} must be 2-D with the same dimension")
    _finite_rows(q, "query")
    _finite_rows(d, "candidate")
    truth = np.asarray(truth)
    if truth.shape != (q.shape[0],) or not np.issubdtype(truth.dtype, np.integer):
        raise MetricInputError(f"truth must be {q.shape[0]} integer candidate rows (one per query), got {truth.dtype} {truth.shape}")
    if truth.size and (truth.min() < 0 or truth.max() >= d.shape[0]):
        bad = int(np.flatnonzero((truth < 0) | (truth >= d.shape[0]))[0])
        raise MetricInputError(f"truth[{bad}] = {int(truth[bad])} is not a candidate row (there are {d.shape[0]})")
    truth = truth.astype(np.int64)
    if sim == "euclidean":
        return rank_of_true(q, d, truth, scale=2.0, d_bias=np.einsum("ij,ij->i", d, d).astype(np.float32))
    Q, D = l2_normalize(q), l2_normalize(d)
    if sim == "cosine":
        return rank_of_true(Q, D, truth)
    if csls_k < 1:
        raise MetricInputError(f"CSLS k={csls_k} must be at least 1")
    if query_pool is None:
        P = Q
    else:
        p = np.ascontiguousarray(query_pool, dtype=np.float32)
        if p.ndim != 2 or p.shape[1] != q.shape[1] or p.shape[0] == 0:
            raise MetricInputError(f"query_pool {p.shape} must be a non-empty 2-D array of the queries' dimension {q.shape[1]}")
        _finite_rows(p, "query pool")
        P = l2_normalize(p)
    q_bias = csls_penalty(Q, D, min(csls_k, D.shape[0]))
    d_bias = csls_penalty(D, P, min(csls_k, P.shape[0]))
    return rank_of_true(Q, D, truth, scale=2.0, q_bias=q_bias, d_bias=d_bias)
