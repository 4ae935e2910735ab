"""BkR, Backretrieval (Fain, Twomey, Bollegala, SIGIR 2021, Section 2).

Given source texts with images and target texts with images (no cross-lingual links needed):

1. embed all texts with the model f under evaluation;
2. for each source text q, retrieve the most similar target text T*; its image is I*;
3. rank all source images by image similarity g(I*, I_s) (cosine of image features);
4. BkR@K = share of queries whose own image I_q ranks <= K.

Ties. Step 4 uses the pessimistic rank (the number of source images scoring >= I_q). In step
2 several target texts may tie for the best score (e.g. duplicate texts); then every tied target
is followed and the worst of their ranks is kept, so ties never help. Only the distinct
retrieved targets' image rows are computed in step 3.
"""
from __future__ import annotations

import numpy as np

from ..core import MetricInputError
from ..search import nearest_with_ties, ranks_against_rows, unit_rows
from ._inputs import check_ks, check_pair, similarity
from .values import source_summary


def _checked(src_text, tgt_text, src_img, tgt_img):
    src_text, tgt_text = check_pair(src_text, tgt_text, ("source text embeddings", "target text embeddings"))
    src_img, tgt_img = check_pair(src_img, tgt_img, ("source image features", "target image features"))
    for side, n_text, n_img in (("source", len(src_text), len(src_img)), ("target", len(tgt_text), len(tgt_img))):
        if n_text != n_img:
            raise MetricInputError(f"{side}: {n_text} text embeddings but {n_img} image features; rows must be aligned")
    return src_text, tgt_text, src_img, tgt_img


def bkr_ranks(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    *,
    sim: str = "cosine",
    csls_k: int = 10,
    block_bytes: int | None = None,
    return_ties: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-query pessimistic rank of the query's own image, and the retrieved target per query
    (the lowest-index one where several tie; the rank already accounts for all of them), or
    with ``return_ties`` every tied retrieved target.

    Args:
        src_text: (N, d) source text embeddings (the queries).
        tgt_text: (M, d) target text embeddings, a non-matching sample.
        src_img: (N, e) image features of the source items, row-aligned with ``src_text``.
        tgt_img: (M, e) image features of the target items, row-aligned with ``tgt_text``.
        sim: ``"cosine"``, ``"csls"`` (cross-domain similarity local scaling) or ``"dot"`` (the raw
            inner product of the rows: quantised codes as a vector store scores them).
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        block_bytes: memory bound of one block of scores (None: the default); images are
            always compared by cosine, whatever ``sim``.
        return_ties: also return every target that ties for a query's best canonical score
            (step 2's ties, all of which step 3 follows).

    Returns:
        ``(ranks, retrieved)``: int64 (N,) 1-based ranks of each query's own image among the
        source images, seen from the retrieved target's image; int64 (N,) retrieved target rows.
        With ``return_ties``: ``(ranks, offsets, targets)`` instead, the retrieved targets as
        CSR arrays: query ``i`` retrieved the target rows ``targets[offsets[i]:offsets[i+1]]``
        (ascending, at least one; int64, ``offsets`` of length N + 1).

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), mismatched dimensions, text and image rows of a side that do not
            align, ``csls_k`` outside [1, min(N, M)] (with ``sim="csls"``), or an unknown ``sim``.
    """
    src_text, tgt_text, src_img, tgt_img = _checked(src_text, tgt_text, src_img, tgt_img)
    sc = similarity(src_text, tgt_text, sim, csls_k, block_bytes)
    indptr, retrieved = nearest_with_ties(sc.Q, sc.D, block_bytes=block_bytes, **sc.kwargs())
    n = src_text.shape[0]
    query_of_pair = np.repeat(np.arange(n), np.diff(indptr))
    # step 3-4 over the distinct retrieved targets only
    distinct, row_of_pair = np.unique(retrieved, return_inverse=True)
    pair_ranks = ranks_against_rows(tgt_img, distinct, row_of_pair, unit_rows(src_img), query_of_pair, block_bytes=block_bytes)
    ranks = np.zeros(n, dtype=np.int64)
    np.maximum.at(ranks, query_of_pair, pair_ranks)
    if return_ties:
        return ranks, indptr, retrieved
    return ranks, retrieved[indptr[:-1]]


def bkr(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    ks: tuple[int, ...] | int = (1, 5, 10),
    *,
    sim: str = "cosine",
    csls_k: int = 10,
    block_bytes: int | None = None,
) -> dict[str, float]:
    """BkR@K for each K, MRR and median rank (keys ``bkr@K``, ``bkr_mrr``, ``bkr_median_rank``).

    For a model that retrieves at random, E[BkR@K] ~= K/N.

    Args:
        src_text, tgt_text, src_img, tgt_img: as :func:`bkr_ranks`.
        ks: cut-offs K (each in [1, N]).
        sim: ``"cosine"``, ``"csls"`` (cross-domain similarity local scaling) or ``"dot"`` (the raw
            inner product of the rows: quantised codes as a vector store scores them).
        csls_k: neighbours of the CSLS penalty (with ``sim="csls"``).
        block_bytes: memory bound of one block of scores (None: the default).

    Returns:
        ``bkr@K`` per K, ``bkr_mrr``, ``bkr_median_rank`` (floats): the exact metrics of the
        table (:mod:`backretrieval.metrics.table`) computed from these ranks.

    Raises:
        MetricInputError: a matrix that is not 2-D and non-empty, holds NaN/inf or an all-zero
            row (named), mismatched dimensions, text and image rows of a side that do not
            align, a K outside [1, N] (or ``csls_k`` outside [1, min(N, M)]), or an unknown ``sim``.

    >>> import numpy as np
    >>> t = np.eye(4, dtype=np.float32); img = np.eye(4, dtype=np.float32)
    >>> bkr(t, t, img, img, ks=(1,))["bkr@1"]
    1.0
    """
    src_text, tgt_text, src_img, tgt_img = _checked(src_text, tgt_text, src_img, tgt_img)
    ks = check_ks(ks, src_img.shape[0])
    ranks, _ = bkr_ranks(src_text, tgt_text, src_img, tgt_img, sim=sim, csls_k=csls_k, block_bytes=block_bytes)
    return source_summary(ranks, ks, "bkr")
