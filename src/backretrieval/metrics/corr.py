"""CORR, the baseline of the Backretrieval paper (Section 3.1).

Spearman correlation between the text cosine distances and the image cosine distances of all
source x target pairs of a (non-matching) sample. Ties get average ranks (as in
``scipy.stats.spearmanr``). Up to ``max_pairs`` pairs (default 4,000,000, i.e. N=2000 per side)
every pair is used; above that a uniform random subsample of ``max_pairs`` pairs (seeded) is
used and the result says so.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from ..search import l2_normalize
from ._inputs import check_pair

DEFAULT_MAX_PAIRS = 4_000_000


def _pair_sims(A: np.ndarray, B: np.ndarray, i: np.ndarray, j: np.ndarray, chunk: int = 1 << 20) -> np.ndarray:
    out = np.empty(i.size, dtype=np.float64)
    for s in range(0, i.size, chunk):
        e = min(i.size, s + chunk)
        out[s:e] = np.einsum("ij,ij->i", A[i[s:e]], B[j[s:e]], dtype=np.float64)
    return out


def corr_details(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    seed: int = 0,
) -> dict[str, float]:
    """``{"corr": rho, "corr_pairs": number of pairs used, "corr_subsampled": 0 or 1}``."""
    st, tt = check_pair(src_text, tgt_text, ("source text embeddings", "target text embeddings"))
    si, ti = check_pair(src_img, tgt_img, ("source image features", "target image features"))
    st, tt, si, ti = (l2_normalize(x) for x in (st, tt, si, ti))
    n_s, n_t = st.shape[0], tt.shape[0]
    total = n_s * n_t
    if total <= max_pairs:
        text = (st.astype(np.float64) @ tt.T.astype(np.float64)).ravel()
        image = (si.astype(np.float64) @ ti.T.astype(np.float64)).ravel()
        used, sub = total, 0
    else:
        rng = np.random.default_rng(seed)
        flat = rng.choice(total, size=max_pairs, replace=False)
        i, j = np.divmod(flat, n_t)
        text, image = _pair_sims(st, tt, i, j), _pair_sims(si, ti, i, j)
        used, sub = max_pairs, 1
    # distances are 1 - similarity on both sides: the rank correlation is the same
    rho = stats.spearmanr(text, image).statistic
    return {"corr": float(rho), "corr_pairs": float(used), "corr_subsampled": float(sub)}


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
