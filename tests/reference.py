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


def dots_matrix(Q, D, rows_per_chunk=64):
    """``dot(Q_i, D_j)`` for every pair, vectorised: the float64 products accumulated with
    ``np.add.accumulate`` (a running sum, one addition after another in index order), so every
    element is the canonical :func:`dot`, not a BLAS product. For inputs too large for the loops."""
    Q = np.asarray(Q, np.float32).astype(np.float64)
    D = np.asarray(D, np.float32).astype(np.float64)
    out = np.empty((len(Q), len(D)), dtype=np.float64)
    if not Q.shape[1]:
        out[:] = 0.0
        return out
    for s in range(0, len(Q), rows_per_chunk):
        prods = Q[s : s + rows_per_chunk, None, :] * D[None, :, :]  # exact: float32 x float32 in float64
        out[s : s + rows_per_chunk] = np.add.accumulate(prods, axis=2)[:, :, -1]
    return out


def unit_vec(x, tol=UNIT_TOL):
    """:func:`unit`, vectorised (the same IEEE operations: a sequential float64 sum of squares,
    one correctly rounded sqrt and division per element)."""
    x = np.asarray(x, dtype=np.float32)
    x64 = x.astype(np.float64)
    ssq = np.add.accumulate(x64 * x64, axis=1)[:, -1] if x.shape[1] else np.zeros(len(x))
    keep = np.abs(ssq - 1.0) <= tol
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (x64 / np.sqrt(ssq)[:, None]).astype(np.float32)
    out[keep] = x[keep]
    out[ssq == 0.0] = 0.0
    return out


def scores_vec(Q, D, scale=1.0, q_bias=None, d_bias=None):
    """:func:`scores`, vectorised (:func:`dots_matrix`): the canonical score matrix of rows as given."""
    w = dots_matrix(Q, D)
    if scale != 1.0:
        w = w * float(scale)
    if q_bias is not None or d_bias is not None:
        b = np.zeros(w.shape)
        if q_bias is not None:
            b = b + np.asarray(q_bias, np.float64)[:, None]
        if d_bias is not None:
            b = b + np.asarray(d_bias, np.float64)[None, :]
        w = w - b
    return w.astype(np.float32)


def knn_mean_vec(a, b, k):
    """:func:`knn_mean`, vectorised: the k largest canonical cosines added in ascending order."""
    top = np.sort(scores_vec(a, b), axis=1)[:, -k:].astype(np.float64)  # ascending
    acc = np.zeros(len(top))
    for col in range(top.shape[1]):
        acc = acc + top[:, col]
    return acc / k


def rank_of_true_vec(q, d, truth, sim="cosine", k=10, q_pool=None, tol=0.0):
    """Pessimistic ranks of ``d[truth[i]]`` for query ``q[i]`` on canonical scores (rows made unit
    by :func:`unit_vec` with ``tol``; CSLS penalties over ``d`` and over ``q_pool``, default ``q``)."""
    Q, D = unit_vec(q, tol), unit_vec(d, tol)
    if sim == "cosine":
        s = scores_vec(Q, D)
    else:
        P = Q if q_pool is None else unit_vec(q_pool, tol)
        s = scores_vec(Q, D, 2.0, knn_mean_vec(Q, D, min(k, len(D))), knn_mean_vec(D, P, min(k, len(P))))
    t = s[np.arange(len(Q)), np.asarray(truth)]
    return (s >= t[:, None]).sum(1)


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


def nearest_with_ties(src, tgt, sim="cosine", k=10):
    """For each source row, every target attaining its best canonical score (ascending): the
    targets BkR's first step follows and XLR's top-1 list."""
    s = sim_matrix(src, tgt, sim, k)
    out = []
    for q in range(len(src)):
        best = max(float(v) for v in s[q])
        out.append([t for t in range(len(tgt)) if float(s[q, t]) == best])
    return out


def bkr_ranks_vec(src_text, tgt_text, src_img, tgt_img, sim="cosine", k=10):
    """:func:`bkr_ranks`, vectorised (:func:`scores_vec`): the same rules, for inputs too large for
    the loops. Also returns each query's retrieved target (the lowest-index maximiser)."""
    Q, D = unit_vec(src_text), unit_vec(tgt_text)
    if sim == "cosine":
        s = scores_vec(Q, D)
    else:
        s = scores_vec(Q, D, 2.0, knn_mean_vec(Q, D, k), knn_mean_vec(D, Q, k))
    g = scores_vec(unit_vec(tgt_img), unit_vec(src_img))  # g[t, s]: target image t vs source image s
    ranks = np.empty(len(Q), dtype=np.int64)
    retrieved = np.empty(len(Q), dtype=np.int64)
    for q in range(len(Q)):
        tied = np.flatnonzero(s[q] == s[q].max())
        ranks[q] = (g[tied] >= g[tied, q][:, None]).sum(axis=1).max()
        retrieved[q] = tied[0]
    return ranks, retrieved


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


# --------------------------------------------------------------------------- serving forms
# Quantised codes scored as a vector store scores them: int8 codes by their exact integer dot
# product, sign bits by their Hamming distance (fewer differing bits = more similar). Scores are
# exact integers (numpy int64 arithmetic), so no rounding and no summation order is involved.

def code_scores(a, b):
    """Exact integer dot products of integer-valued codes (int8 codes, or ±1 sign codes)."""
    A, B = np.asarray(a), np.asarray(b)
    assert np.array_equal(A, np.round(A)) and np.array_equal(B, np.round(B)), "codes must be integers"
    return A.astype(np.int64) @ B.astype(np.int64).T


def hamming_scores(a, b):
    """Minus the Hamming distance between the sign bits (x > 0) of the rows, bit by bit."""
    A, B = np.asarray(a) > 0, np.asarray(b) > 0
    return -(A[:, None, :] != B[None, :, :]).sum(axis=2).astype(np.int64)


def ranks_from_scores(s):
    """Pessimistic ranks of the diagonal both ways of a square score matrix (XLR)."""
    s = np.asarray(s)
    fwd = [pessimistic_rank(s[i], i) for i in range(len(s))]
    bwd = [pessimistic_rank(s[:, i], i) for i in range(len(s))]
    return np.array(fwd), np.array(bwd)


def bkr_from_scores(s, src_img, tgt_img):
    """BkR's ranks and retrieved targets from a text score matrix ``s`` (queries x targets): every
    target tied for a query's best score followed, the worst rank of the query's image kept."""
    s = np.asarray(s)
    g = scores(unit(tgt_img), unit(src_img))
    ranks, tied_lists = [], []
    for q in range(len(s)):
        tied = [t for t in range(s.shape[1]) if s[q, t] == s[q].max()]
        tied_lists.append(tied)
        ranks.append(max(pessimistic_rank(g[t], q) for t in tied))
    return np.array(ranks), tied_lists
