"""Naive, obviously-correct reference implementations of every metric.

Plain loops over a full similarity matrix, written straight from the papers' definitions, with
the project's documented tie rules. The fast, blocked implementations must agree with these.
"""
from __future__ import annotations

import numpy as np
from scipy import stats


def unit(x):
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def knn_mean(a, b, k):
    """For each row of a: mean of its k largest cosine similarities to rows of b."""
    s = unit(a) @ unit(b).T
    return np.array([np.mean(sorted(row, reverse=True)[:k]) for row in s], dtype=np.float32)


def sim_matrix(a, b, sim="cosine", k=10):
    s = unit(a) @ unit(b).T
    if sim == "cosine":
        return s
    r_t = knn_mean(a, b, k)  # each source's neighbourhood among targets
    r_s = knn_mean(b, a, k)  # each target's neighbourhood among sources
    return 2.0 * s - r_s[None, :] - r_t[:, None]


def pessimistic_rank(scores, j):
    """Number of items scoring >= item j (itself included)."""
    return sum(1 for v in scores if v >= scores[j])


def xlr_ranks(src, tgt, sim="cosine", k=10):
    s = sim_matrix(src, tgt, sim, k)
    t = sim_matrix(tgt, src, sim, k)
    fwd = [pessimistic_rank(s[i], i) for i in range(len(src))]
    bwd = [pessimistic_rank(t[i], i) for i in range(len(tgt))]
    return np.array(fwd), np.array(bwd)


def bkr_ranks(src_text, tgt_text, src_img, tgt_img, sim="cosine", k=10):
    s = sim_matrix(src_text, tgt_text, sim, k)
    g = unit(tgt_img) @ unit(src_img).T  # g[t, s]: target image t vs source image s
    ranks = []
    for q in range(len(src_text)):
        best = max(s[q])
        tied = [t for t in range(len(tgt_text)) if s[q, t] == best]
        ranks.append(max(pessimistic_rank(g[t], q) for t in tied))
    return np.array(ranks)


def recall(ranks, k):
    return float(np.mean([r <= k for r in ranks]))


def corr(src_text, tgt_text, src_img, tgt_img):
    st, tt, si, ti = (unit(x).astype(np.float64) for x in (src_text, tgt_text, src_img, tgt_img))
    text_d, img_d = [], []
    for i in range(len(st)):
        for j in range(len(tt)):
            text_d.append(1.0 - float(st[i] @ tt[j]))
            img_d.append(1.0 - float(si[i] @ ti[j]))
    return stats.spearmanr(text_d, img_d).statistic


def k_occurrence(src, tgt, k, sim="cosine", csls_k=10):
    s = sim_matrix(src, tgt, sim, csls_k)
    occ = np.zeros(len(tgt), dtype=int)
    for row in s:
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))
        for j in order[:k]:
            occ[j] += 1
    return occ
