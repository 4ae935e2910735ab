"""Naive, obviously-correct reference implementations of every metric.

Plain Python loops over a full score matrix, written straight from the papers' definitions and
the project's documented rules, with no BLAS anywhere: every score is the canonical score
(explained in the module docstring of ``backretrieval.search.exact``) computed the slow way, one
IEEE operation at a time. The fast, blocked implementations must agree with these exactly.

Rules implemented here:
* unit rows: a row whose exact squared norm is within 1e-5 of 1 is kept; others are divided by
  the square root of their exact squared norm (float64), then rounded to float32;
* canonical score: float32(float64(scale * dot) - float64(q_bias + d_bias)), dot = the float64 sum
  of the products in index order;
* CSLS penalty: mean of the k largest canonical cosines, summed in ascending order in float64;
* ranks are pessimistic (ties never help); ties in top-k are broken by ascending index.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

UNIT_TOL = 1e-5


def dot(x, y) -> float:
    """The canonical dot product of two float32 vectors: float64, products added in index order."""
    acc = 0.0
    for a, b in zip(np.asarray(x, np.float32).tolist(), np.asarray(y, np.float32).tolist()):
        acc += a * b
    return acc


def unit(x, tol=UNIT_TOL):
    x = np.asarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.float32)
    for i, row in enumerate(x):
        ssq = dot(row, row)
        if abs(ssq - 1.0) <= tol:
            out[i] = row
        elif ssq == 0.0:
            out[i] = 0.0
        else:
            norm = math.sqrt(ssq)
            out[i] = [np.float32(float(v) / norm) for v in row]
    return out


def score(x, y, scale=1.0, q_bias=None, d_bias=None) -> np.float32:
    w = float(scale) * dot(x, y)
    if q_bias is not None or d_bias is not None:
        w = w - ((0.0 if q_bias is None else float(q_bias)) + (0.0 if d_bias is None else float(d_bias)))
    return np.float32(w)


def scores(Q, D, scale=1.0, q_bias=None, d_bias=None):
    """The canonical score matrix of rows as given (no normalisation)."""
    out = np.empty((len(Q), len(D)), dtype=np.float32)
    for i in range(len(Q)):
        for j in range(len(D)):
            out[i, j] = score(Q[i], D[j], scale, None if q_bias is None else q_bias[i], None if d_bias is None else d_bias[j])
    return out


def knn_mean(a, b, k):
    """For each (unit) row of a: mean of its k largest canonical cosines to the rows of b."""
    s = scores(a, b)
    out = []
    for row in s:
        acc = 0.0
        for v in sorted(row.tolist(), reverse=True)[:k][::-1]:  # ascending order of addition
            acc += float(v)
        out.append(acc / k)
    return np.array(out, dtype=np.float64)


def sim_matrix(a, b, sim="cosine", k=10):
    ua, ub = unit(a), unit(b)
    if sim == "cosine":
        return scores(ua, ub)
    r_t = knn_mean(ua, ub, k)  # each source's neighbourhood among targets
    r_s = knn_mean(ub, ua, k)  # each target's neighbourhood among sources
    return scores(ua, ub, 2.0, r_t, r_s)


def pessimistic_rank(scores_row, j):
    """Number of items scoring >= item j (itself included)."""
    return sum(1 for v in scores_row if v >= scores_row[j])


def xlr_ranks(src, tgt, sim="cosine", k=10):
    s = sim_matrix(src, tgt, sim, k)
    t = sim_matrix(tgt, src, sim, k)
    fwd = [pessimistic_rank(s[i], i) for i in range(len(src))]
    bwd = [pessimistic_rank(t[i], i) for i in range(len(tgt))]
    return np.array(fwd), np.array(bwd)


def bkr_ranks(src_text, tgt_text, src_img, tgt_img, sim="cosine", k=10):
    s = sim_matrix(src_text, tgt_text, sim, k)
    g = scores(unit(tgt_img), unit(src_img))  # g[t, s]: target image t vs source image s
    ranks = []
    for q in range(len(src_text)):
        best = max(s[q])
        tied = [t for t in range(len(tgt_text)) if s[q, t] == best]
        ranks.append(max(pessimistic_rank(g[t], q) for t in tied))
    return np.array(ranks)


def recall(ranks, k):
    return float(np.mean([r <= k for r in ranks]))


def corr(src_text, tgt_text, src_img, tgt_img):
    """Spearman correlation of the canonical text and image similarities of all pairs (the same
    rank correlation as of the distances 1 - similarity)."""
    text = sim_matrix(src_text, tgt_text).ravel().astype(np.float64)
    image = sim_matrix(src_img, tgt_img).ravel().astype(np.float64)
    return stats.spearmanr(text, image).statistic


def k_occurrence(src, tgt, k, sim="cosine", csls_k=10):
    s = sim_matrix(src, tgt, sim, csls_k)
    occ = np.zeros(len(tgt), dtype=int)
    for row in s:
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))
        for j in order[:k]:
            occ[j] += 1
    return occ
