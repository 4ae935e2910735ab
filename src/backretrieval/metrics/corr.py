"""CORR, the baseline of the Backretrieval paper (Section 3.1).

Spearman correlation between the text cosine distances and the image cosine distances of all
source x target pairs of a (non-matching) sample. Ties get average ranks (as in
``scipy.stats.spearmanr``). Up to ``max_pairs`` pairs (default 4,000,000, i.e. N=2000 per side)
every pair is used; above that a uniform random subsample of ``max_pairs`` pairs (seeded) is
used and the result says so.

The image side does not depend on the text model: :func:`image_side` computes its ranks once,
and :func:`corr_details` accepts them so a grid of models pays for them once per sample.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats

from ..search import l2_normalize
from ._inputs import check_pair

DEFAULT_MAX_PAIRS = 4_000_000


@dataclasses.dataclass(frozen=True)
class _Side:
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
    r = stats.rankdata(values)  # average ranks for ties
    r -= r.mean()
    norm = np.sqrt(r @ r)
    return r / norm if norm > 0 else r


def image_side(src_img: np.ndarray, tgt_img: np.ndarray, *, max_pairs: int = DEFAULT_MAX_PAIRS, seed: int = 0) -> _Side:
    """Precompute the image half of CORR for a sample (reusable across text models)."""
    si, ti = check_pair(src_img, tgt_img, ("source image features", "target image features"))
    pairs = _pairs(si.shape[0], ti.shape[0], max_pairs, seed)
    return _Side(_standardized_ranks(_sims(si, ti, pairs)), pairs)


def corr_details(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray | None = None,
    tgt_img: np.ndarray | None = None,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
    image: _Side | None = None,
) -> dict[str, float]:
    """``{"corr": rho, "corr_pairs": pairs used, "corr_subsampled": 0 or 1}``. Pass either the
    image features or ``image=image_side(...)`` computed with the same ``max_pairs`` and ``seed``."""
    st, tt = check_pair(src_text, tgt_text, ("source text embeddings", "target text embeddings"))
    if image is None:
        image = image_side(src_img, tgt_img, max_pairs=max_pairs, seed=seed)
    expected = st.shape[0] * tt.shape[0] if image.pairs is None else image.pairs[0].size
    if image.z.size != expected:
        raise ValueError(f"image side has {image.z.size} pairs, the text side {expected}: samples differ")
    text = _standardized_ranks(_sims(st, tt, image.pairs))
    # Spearman rho = Pearson correlation of the ranks; distances are 1 - similarity on both
    # sides, which leaves the rank correlation unchanged
    rho = float(text @ image.z) if (text.any() and image.z.any()) else float("nan")
    used = expected
    return {"corr": rho, "corr_pairs": float(used), "corr_subsampled": float(image.pairs is not None)}


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
