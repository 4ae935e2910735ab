"""TripletXL's neighbour sets ``N_l(r)``: per language the K training titles nearest (cosine) to
an item's body, by exact blocked search (never an N x N matrix)."""
from __future__ import annotations

import numpy as np

from ...search import l2_normalize, topk


def _topk_torch(q: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest inner products per row, best first, in row blocks whose
    score matrix fits 64 MiB (torch's multi-threaded matmul and top-k)."""
    import torch

    from ...search import block_rows

    qt, pt = torch.from_numpy(q), torch.from_numpy(p)
    out = np.empty((q.shape[0], k), dtype=np.int64)
    step = block_rows(p.shape[0])
    with torch.no_grad():
        for s in range(0, q.shape[0], step):
            out[s : s + step] = torch.topk(qt[s : s + step] @ pt.T, k, dim=1, sorted=True).indices.numpy()
    return out


def find_neighbours(
    bodies: np.ndarray,
    pool_titles: np.ndarray,
    pool_lang: np.ndarray,
    query_self: np.ndarray,
    n_langs: int,
    k: int,
    *,
    backend: str = "torch",
) -> np.ndarray:
    """``(Q, L, K)`` pool indices of the K titles nearest (cosine) to each query body, per
    language; -1 where a language has too few items. A query's own pool row (``query_self``,
    -1 for none) is never its neighbour.

    ``backend="numpy"`` uses :func:`backretrieval.search.topk` (ties: lower pool index first);
    ``"torch"`` (the default, several times faster) breaks exact ties in torch's order. Exact
    ties between different titles mean equal title vectors (duplicate titles), which give the
    same loss and the same gradient whichever of them is chosen, so the choice cannot matter."""
    q = l2_normalize(bodies)
    p = l2_normalize(pool_titles)
    out = np.full((q.shape[0], n_langs, k), -1, dtype=np.int64)
    for lang in range(n_langs):
        pool_idx = np.flatnonzero(pool_lang == lang)
        if pool_idx.size == 0:
            continue
        kk = min(k + 1, pool_idx.size)
        pl = np.ascontiguousarray(p[pool_idx])
        top = topk(q, pl, kk)[1] if backend == "numpy" else _topk_torch(q, pl, kk)
        cand = pool_idx[top]  # (Q, kk)
        is_self = cand == query_self[:, None]
        take = np.argsort(is_self, axis=1, kind="stable")[:, :k]  # non-self first, in rank order
        chosen = np.take_along_axis(cand, take, axis=1)
        chosen[np.take_along_axis(is_self, take, axis=1)] = -1
        out[:, lang, : chosen.shape[1]] = chosen
    return out


