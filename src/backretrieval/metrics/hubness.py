"""Hubness of retrieval (Radovanovic et al. 2010): skewness of the k-occurrence distribution.

N_k(y) is the number of queries that have target y among their k nearest targets. A strongly
right-skewed N_k means a few "hub" targets are retrieved for many queries. The Backretrieval
paper claims BkR is robust to hubness; these numbers let users check that on their data.
Boundary ties in the k nearest are resolved by ascending index (see ``search.topk``).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from ..search import topk
from ._inputs import check_ks, check_pair, similarity


def hubness(
    src: np.ndarray,
    tgt: np.ndarray,
    k: int = 10,
    *,
    sim: str = "cosine",
    csls_k: int = 10,
    block_bytes: int | None = None,
) -> dict[str, float]:
    """``hubness_skew@k`` (skewness of N_k), ``hub_max@k`` (largest N_k / k, i.e. how many queries'
    worth of neighbour lists the biggest hub appears in, relative to the fair share) and
    ``antihub_share@k`` (share of targets that are nobody's neighbour).

    Args:
        src: (N, d) query embeddings.
        tgt: (M, d) target embeddings; N_k(y) counts the queries with y among their k nearest.
        k: neighbours per query, in [1, M].
        sim: ``"cosine"``, ``"csls"`` (cross-domain similarity local scaling) or ``"dot"`` (the raw
            inner product of the rows: quantised codes as a vector store scores them).
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        block_bytes: memory bound of one block of scores (None: the default).

    Returns:
        The three values above (floats), keyed with ``@k``.

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), mismatched dimensions, ``k`` outside [1, M] (or ``csls_k`` outside
            [1, min(N, M)]), or an unknown ``sim``.
    """
    src, tgt = check_pair(src, tgt, ("source embeddings", "target embeddings"))
    (k,) = check_ks(k, tgt.shape[0], "hubness k")
    sc = similarity(src, tgt, sim, csls_k, block_bytes)
    _, idx = topk(sc.Q, sc.D, k, block_bytes=block_bytes, **sc.kwargs())
    occ = np.bincount(idx.ravel(), minlength=tgt.shape[0])
    skew = float(stats.skew(occ)) if occ.std() > 0 else 0.0
    return {
        f"hubness_skew@{k}": skew,
        f"hub_max@{k}": float(occ.max() / k),
        f"antihub_share@{k}": float(np.mean(occ == 0)),
    }
