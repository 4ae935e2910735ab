"""CORR, the baseline of the Backretrieval paper (Section 3.1).

Spearman correlation between the text cosine distances and the image cosine distances of all
source x target pairs of a (non-matching) sample. Ties get average ranks (as in
``scipy.stats.spearmanr``). Up to ``max_pairs`` pairs (default 4,000,000, i.e. N=2000 per side)
every pair is used; above that a uniform random subsample of ``max_pairs`` pairs (seeded) is
used and the result says so.

CORR is the Pearson product of two standardized rank vectors, one per side, so each half is
computed once and reused: :func:`image_side` across text models, :func:`text_side` across image
models, combined by :func:`corr_from_sides`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..core import MetricInputError
from ..search import average_ranks, l2_normalize
from ._inputs import check_pair

DEFAULT_MAX_PAIRS = 4_000_000


@dataclasses.dataclass(frozen=True)
class CorrSide:
    """Average ranks of one side's pair similarities, centred and scaled for a Pearson product."""

    z: np.ndarray  # (ranks - mean) / norm, float64
    pairs: tuple[np.ndarray, np.ndarray] | None  # sampled (i, j), or None for all pairs


def _pairs(n_s: int, n_t: int, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray] | None:
    if n_s * n_t <= max_pairs:
        return None
    flat = np.random.default_rng(seed).choice(n_s * n_t, size=max_pairs, replace=False)
    return np.divmod(flat, n_t)


def _sims(A: np.ndarray, B: np.ndarray, pairs, chunk: int = 1 << 20) -> np.ndarray:
    A, B = l2_normalize(A), l2_normalize(B)
    if pairs is None:
        return (A.astype(np.float64) @ B.T.astype(np.float64)).ravel()
    i, j = pairs
    out = np.empty(i.size, dtype=np.float64)
    for s in range(0, i.size, chunk):
        e = min(i.size, s + chunk)
        out[s:e] = np.einsum("ij,ij->i", A[i[s:e]], B[j[s:e]], dtype=np.float64)
    return out


def _standardized_ranks(values: np.ndarray) -> np.ndarray:
    r = average_ranks(values)  # ties get their average rank, as in scipy.stats.rankdata
    r -= r.mean()
    norm = np.sqrt(np.sum(r * r))  # numpy's pairwise sum: the same bits whatever the BLAS threads
    return r / norm if norm > 0 else r


def _side(A: np.ndarray, B: np.ndarray, names: tuple[str, str], max_pairs: int, seed: int) -> CorrSide:
    A, B = check_pair(A, B, names)
    pairs = _pairs(A.shape[0], B.shape[0], max_pairs, seed)
    return CorrSide(_standardized_ranks(_sims(A, B, pairs)), pairs)


def image_side(src_img: np.ndarray, tgt_img: np.ndarray, *, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0) -> CorrSide:
    """The image half of CORR for a sample: reusable across text models."""
    return _side(src_img, tgt_img, ("source image features", "target image features"), max_pairs, seed)


def text_side(src_text: np.ndarray, tgt_text: np.ndarray, *, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0) -> CorrSide:
    """The text half of CORR for a sample: reusable across image models."""
    return _side(src_text, tgt_text, ("source text embeddings", "target text embeddings"), max_pairs, seed)


def corr_from_sides(text: CorrSide, image: CorrSide) -> dict[str, float]:
    """``{"corr": rho, "corr_pairs": pairs used, "corr_subsampled": 0 or 1}`` from two halves
    computed on the same sample with the same ``max_pairs`` and ``seed``."""
    if text.z.size != image.z.size:
        raise MetricInputError(f"CORR: the text side has {text.z.size} pairs, the image side {image.z.size}: samples differ")
    # Spearman rho = Pearson correlation of the ranks; distances are 1 - similarity on both
    # sides, which leaves the rank correlation unchanged
    rho = float(np.sum(text.z * image.z)) if (text.z.any() and image.z.any()) else float("nan")
    return {"corr": rho, "corr_pairs": float(text.z.size), "corr_subsampled": float(image.pairs is not None)}


def corr_details(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray | None = None,
    tgt_img: np.ndarray | None = None,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
    image: CorrSide | None = None,
) -> dict[str, float]:
    """CORR with its bookkeeping (see :func:`corr_from_sides`). Pass either the image features
    or ``image=image_side(...)`` computed with the same ``max_pairs`` and ``seed``."""
    if image is None:
        image = image_side(src_img, tgt_img, max_pairs=max_pairs, seed=seed)
    return corr_from_sides(text_side(src_text, tgt_text, max_pairs=max_pairs, seed=seed), image)


def corr(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
) -> float:
    """Spearman rho between text and image cosine distances over source x target pairs."""
    return corr_details(src_text, tgt_text, src_img, tgt_img, max_pairs=max_pairs, seed=seed)["corr"]
