"""XLR: ground-truth cross-lingual retrieval on aligned rows (Backretrieval paper, Section 3.1).

Source row i and target row i are translations of each other. For every source text all target
texts are ranked by similarity; ``xlr@K`` is the share of sources whose own translation is
ranked <= K (Recall@K, which the Cr5 paper calls P@K). Ranks are pessimistic: the rank of the
true target is the number of targets scoring >= it, so ties never help.
"""
from __future__ import annotations

import numpy as np

from ..search import ranks_both_ways
from ._inputs import check_ks, check_pair, similarity
from .values import source_summary


def xlr_ranks(
    src: np.ndarray,
    tgt: np.ndarray,
    *,
    sim: str = "cosine",
    csls_k: int = 10,
    block_bytes: int | None = None,
    return_nearest: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pessimistic 1-based ranks ``(source->target, target->source)`` of the true partners,
    and with ``return_nearest`` the targets each source retrieves.

    Args:
        src: (N, d) source embeddings; row i is the translation of ``tgt`` row i.
        tgt: (N, d) target embeddings.
        sim: ``"cosine"``, ``"csls"`` (cross-domain similarity local scaling) or ``"dot"`` (the raw
            inner product of the rows: quantised codes as a vector store scores them).
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        block_bytes: memory bound of one block of scores (None: the default).
        return_nearest: also return, for each source, every target attaining its best
            canonical score (the same tie rule as BkR's first step), found in the same pass
            over the scores as the ranks.

    Returns:
        Two int64 arrays of N ranks (1 = the partner is the nearest; ties count against it).
        With ``return_nearest``: ``(fwd, bwd, offsets, targets)``, the nearest targets as CSR
        arrays: source ``i`` retrieved the target rows ``targets[offsets[i]:offsets[i+1]]``
        (ascending, at least one; int64, ``offsets`` of length N + 1). ``fwd[i] == 1`` exactly
        when source ``i`` retrieved its partner alone.

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), mismatched dimensions or row counts, ``csls_k`` outside [1, N] (with
            ``sim="csls"``), or an unknown ``sim``.
    """
    src, tgt = check_pair(src, tgt, ("source embeddings", "target embeddings"), same_rows=True)
    sc = similarity(src, tgt, sim, csls_k, block_bytes)
    # cosine, CSLS and dot are symmetric: one pass over the N x N scores serves both directions
    # (with return_nearest, the same pass also finds each source's nearest targets)
    return ranks_both_ways(sc.Q, sc.D, block_bytes=block_bytes, nearest=return_nearest, **sc.kwargs())


def xlr(
    src: np.ndarray,
    tgt: np.ndarray,
    ks: tuple[int, ...] | int = (1, 5, 10),
    *,
    sim: str = "cosine",
    csls_k: int = 10,
    block_bytes: int | None = None,
) -> dict[str, float]:
    """Recall@K, MRR and median rank in both directions.

    Args:
        src: (N, d) source embeddings; row i is the translation of ``tgt`` row i.
        tgt: (N, d) target embeddings.
        ks: cut-offs K (each in [1, N]).
        sim: ``"cosine"``, ``"csls"`` (cross-domain similarity local scaling) or ``"dot"`` (the raw
            inner product of the rows: quantised codes as a vector store scores them).
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        block_bytes: memory bound of one block of scores (None: the default).

    Returns:
        ``xlr@K``, ``xlr_mrr``, ``xlr_median_rank`` (source->target) and the same with
        ``xlr_t2s`` (target->source), floats: the exact metrics of the table
        (:mod:`backretrieval.metrics.table`) computed from these ranks.

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), mismatched dimensions or row counts, a K (or, with ``sim="csls"``,
            ``csls_k``) outside [1, N], or an unknown ``sim``.

    >>> import numpy as np
    >>> x = np.eye(3, dtype=np.float32)
    >>> xlr(x, x, ks=(1,))["xlr@1"]
    1.0
    """
    ks = check_ks(ks, np.asarray(src).shape[0])
    fwd, bwd = xlr_ranks(src, tgt, sim=sim, csls_k=csls_k, block_bytes=block_bytes)
    return {**source_summary(fwd, ks, "xlr"), **source_summary(bwd, ks, "xlr_t2s")}
