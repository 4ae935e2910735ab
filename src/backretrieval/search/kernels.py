"""Blocked exact search on float32 inner products.

Scores. For queries ``Q`` (n_q, d) and database ``D`` (n_d, d) the score of the pair (i, j) is

    s_ij = scale * <Q_i, D_j> - q_bias_i - d_bias_j

``scale=1`` and no biases give the inner product (the cosine for unit rows); CSLS
(Conneau et al. 2018) is ``scale=2``, ``q_bias = r_D(Q_i)``, ``d_bias = r_Q(D_j)`` where
``r_X(v)`` is the mean similarity of ``v`` to its k nearest neighbours in ``X``
(:func:`csls_penalty`).

Ties. Ranks are *pessimistic*: the rank of item j for query i is the number of database items
whose score is >= s_ij, itself included, so a tie never helps (a model that gives every item
the same score ranks every true item last). :func:`topk` orders equal scores by ascending
index. :func:`nearest_with_ties` returns every item that attains a row's maximum. A tie is an
exact equality of scores as computed in float32; identical vectors get identical scores in
practice, though BLAS does not promise it for every shape (hypothesis found a 3-dimensional
matrix-vector case where it rounds one position differently).

Memory. Work is done in row blocks of the query matrix; a block holds at most
``block_bytes`` of float32 scores (default 64 MiB), so peak extra memory is independent of the
number of queries and linear in the database size.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

DEFAULT_BLOCK_BYTES = 64 * 2**20


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, as a new C-contiguous float32 array."""
    x = np.array(x, dtype=np.float32, order="C", copy=True)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    return x


def unit_rows(x: np.ndarray, tol: float = 1e-5) -> np.ndarray:
    """``x`` itself when it already is a C-contiguous float32 matrix of unit rows (as most
    encoders return), else :func:`l2_normalize` of it: saves a copy of large inputs. Callers must
    not modify the result in place."""
    if isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 2 and x.flags.c_contiguous:
        sq = np.einsum("ij,ij->i", x, x)
        if np.all(np.abs(sq - 1.0) <= tol):
            return x
    return l2_normalize(x)


def block_rows(n_cols: int, block_bytes: int | None = None) -> int:
    """How many rows of an (rows, n_cols) float32 score block fit in ``block_bytes``."""
    budget = DEFAULT_BLOCK_BYTES if block_bytes is None else int(block_bytes)
    return max(1, budget // (4 * max(1, n_cols)))


def _blocks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _scores(
    Q: np.ndarray,
    D: np.ndarray,
    rows: slice,
    scale: float,
    q_bias: np.ndarray | None,
    d_bias: np.ndarray | None,
) -> np.ndarray:
    return _finish(Q[rows] @ D.T, scale, None if q_bias is None else q_bias[rows], d_bias)


def _finish(s: np.ndarray, scale: float, q_bias: np.ndarray | None, d_bias: np.ndarray | None) -> np.ndarray:
    """Scale and biases of a block of products, in place, in the one order every kernel uses
    (the same bits wherever a score is computed): times scale, minus d_bias per column, minus
    q_bias per row (both already sliced to the block)."""
    if scale != 1.0:
        s *= np.float32(scale)
    if d_bias is not None:
        s -= d_bias[None, :]
    if q_bias is not None:
        s -= q_bias[:, None]
    return s


def topk(
    Q: np.ndarray,
    D: np.ndarray,
    k: int,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    block_bytes: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best database items per query: ``(scores, indices)``, both (n_q, k), best first;
    equal scores in ascending index order."""
    n_q, n_d = Q.shape[0], D.shape[0]
    if not 1 <= k <= n_d:
        raise ValueError(f"k={k} must be between 1 and the database size {n_d}")
    out_s = np.empty((n_q, k), dtype=np.float32)
    out_i = np.empty((n_q, k), dtype=np.int64)
    for rows in _blocks(n_q, block_rows(n_d, block_bytes)):
        s = _scores(Q, D, rows, scale, q_bias, d_bias)
        if k < n_d:
            # the k-th largest value of each row; take every index scoring above it, then fill
            # with the lowest-index items equal to it, so ties are resolved by index
            part = np.ascontiguousarray(np.argpartition(-s, k - 1, axis=1)[:, :k])
        else:
            part = np.broadcast_to(np.arange(n_d), s.shape).copy()
        cand_s = np.take_along_axis(s, part, axis=1)
        kth = cand_s.min(axis=1)
        n_above = np.count_nonzero(s > kth[:, None], axis=1)
        n_equal = np.count_nonzero(s == kth[:, None], axis=1)
        # rows where items equal to the k-th score straddle the cut: argpartition chose an
        # arbitrary subset of them; re-select the lowest indices (rare, so a loop is fine)
        for r in np.flatnonzero(n_above + n_equal > k):
            above = np.flatnonzero(s[r] > kth[r])
            equal = np.flatnonzero(s[r] == kth[r])[: k - above.size]
            part[r] = np.concatenate([above, equal])
            cand_s[r] = s[r, part[r]]
        order = np.lexsort((part, -cand_s), axis=1)
        out_i[rows] = np.take_along_axis(part, order, axis=1)
        out_s[rows] = np.take_along_axis(cand_s, order, axis=1)
    return out_s, out_i


def csls_penalty(Q: np.ndarray, D: np.ndarray, k: int = 10, *, block_bytes: int | None = None) -> np.ndarray:
    """``r_D(Q_i)``: mean inner product of each query with its ``k`` nearest database items."""
    n_d = D.shape[0]
    if not 1 <= k <= n_d:
        raise ValueError(f"CSLS k={k} must be between 1 and the database size {n_d}")
    out = np.empty(Q.shape[0], dtype=np.float32)
    for rows in _blocks(Q.shape[0], block_rows(n_d, block_bytes)):
        s = Q[rows] @ D.T
        if k < n_d:
            s = np.partition(s, n_d - k, axis=1)[:, n_d - k :]
        out[rows] = s.mean(axis=1, dtype=np.float64)
    return out


def rank_of_true(
    Q: np.ndarray,
    D: np.ndarray,
    true_idx: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    block_bytes: int | None = None,
) -> np.ndarray:
    """Pessimistic rank (1 = best) of database item ``true_idx[i]`` for query ``i``."""
    n_q, n_d = Q.shape[0], D.shape[0]
    true_idx = np.asarray(true_idx, dtype=np.int64)
    ranks = np.empty(n_q, dtype=np.int64)
    for rows in _blocks(n_q, block_rows(n_d, block_bytes)):
        s = _scores(Q, D, rows, scale, q_bias, d_bias)
        t = s[np.arange(s.shape[0]), true_idx[rows]]
        ranks[rows] = np.count_nonzero(s >= t[:, None], axis=1)
    return ranks


def ranks_both_ways(
    Q: np.ndarray,
    D: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    block_bytes: int | None = None,
    max_block_rows: int = 128,
) -> tuple[np.ndarray, np.ndarray]:
    """Pessimistic ranks of the aligned partner (row i of ``Q`` <-> row i of ``D``) in both
    directions from ONE pass over the score matrix: ``fwd[i]`` = #{j: s_ij >= s_ii},
    ``bwd[j]`` = #{i: s_ij >= s_jj}. Valid for symmetric similarities (cosine and CSLS, whose
    score of a pair does not depend on which side is the query).

    The column thresholds s_jj are needed before the pass, so the diagonal is computed first from
    the diagonal blocks of ``max_block_rows`` rows (cost: max_block_rows / N of the product); the
    pass itself uses row blocks of the memory budget. BLAS usually gives an element the same bits
    in both products, but not always (its kernels for the edges of a tile may sum in another
    order), so this is checked: the backward ranks of the few columns whose diagonal value differs
    from the one seen in the pass are recomputed from their own scores (``rank_of_true`` on those
    targets only; exact either way, and the cost is that share of one product; 11 of 10,000
    columns in the benchmark)."""
    n = Q.shape[0]
    if D.shape[0] != n:
        raise ValueError(f"aligned rows needed: {n} queries, {D.shape[0]} database items")
    step = block_rows(n, block_bytes)
    diag = _diagonal(Q, D, max(1, min(step, max_block_rows)), scale, q_bias, d_bias)
    fwd = np.empty(n, dtype=np.int64)
    bwd = np.zeros(n, dtype=np.int64)
    seen = np.empty(n, dtype=np.float32)
    for rows in _blocks(n, step):
        s = _scores(Q, D, rows, scale, q_bias, d_bias)
        t = s[np.arange(s.shape[0]), np.arange(rows.start, rows.stop)]
        seen[rows] = t
        fwd[rows] = np.count_nonzero(s >= t[:, None], axis=1)
        bwd += np.count_nonzero(s >= diag[None, :], axis=0)
    bad = np.flatnonzero(seen != diag)  # BLAS rounded these diagonal elements differently
    if bad.size:
        bwd[bad] = rank_of_true(D[bad], Q, bad, scale=scale, q_bias=None if d_bias is None else d_bias[bad],
                                d_bias=q_bias, block_bytes=block_bytes)
    return fwd, bwd


def _diagonal(
    Q: np.ndarray,
    D: np.ndarray,
    step: int,
    scale: float,
    q_bias: np.ndarray | None,
    d_bias: np.ndarray | None,
) -> np.ndarray:
    """Scores s_ii of the aligned pairs, from diagonal blocks of ``step`` rows."""
    n = Q.shape[0]
    diag = np.empty(n, dtype=np.float32)
    for rows in _blocks(n, step):
        sub = _finish(Q[rows] @ D[rows].T, scale, None if q_bias is None else q_bias[rows],
                      None if d_bias is None else d_bias[rows])
        diag[rows] = np.diagonal(sub)
    return diag


def nearest_with_ties(
    Q: np.ndarray,
    D: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    block_bytes: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """All database items attaining each query's best score, as CSR arrays ``(indptr, indices)``:
    the items of query ``i`` are ``indices[indptr[i]:indptr[i+1]]`` (ascending).

    Per block: one ``argmax`` pass and one pass counting the items equal to the maximum; only the
    rows that do have ties are searched for all their maximisers."""
    n_q = Q.shape[0]
    counts = np.empty(n_q, dtype=np.int64)
    chunks: list[np.ndarray] = []
    for rows in _blocks(n_q, block_rows(D.shape[0], block_bytes)):
        s = _scores(Q, D, rows, scale, q_bias, d_bias)
        arg = s.argmax(axis=1)  # the first (lowest-index) maximiser
        best = s[np.arange(s.shape[0]), arg]
        ties = np.count_nonzero(s == best[:, None], axis=1)
        counts[rows] = ties
        multi = np.flatnonzero(ties > 1)
        if multi.size == 0:
            chunks.append(arg.astype(np.int64))
            continue
        starts = np.cumsum(ties) - ties
        out = np.empty(int(ties.sum()), dtype=np.int64)
        out[starts] = arg  # single maximisers, and the first of each tied row
        _, c = np.nonzero(s[multi] == best[multi, None])  # grouped by row, ascending columns
        k = ties[multi]
        within = np.arange(c.size) - np.repeat(np.cumsum(k) - k, k)
        out[np.repeat(starts[multi], k) + within] = c
        chunks.append(out)
    indptr = np.zeros(n_q + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, (np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int64))


def ranks_against_rows(
    T: np.ndarray,
    rows_of_T: np.ndarray,
    row_of_query: np.ndarray,
    X: np.ndarray,
    query_idx: np.ndarray,
    *,
    block_bytes: int | None = None,
) -> np.ndarray:
    """Backretrieval's step 4 for many (query, retrieved) pairs at once.

    The retrieved items are ``R = T[rows_of_T]`` (gathered and unit-normalised one block at a
    time, never as a whole). For pair p the retrieved item's vector is ``R[row_of_query[p]]``;
    all rows of ``X`` (unit rows) are ranked by inner product with it and the pessimistic rank of
    ``X[query_idx[p]]`` is returned. Only the distinct retrieved rows are multiplied:
    ``len(rows_of_T)`` x ``len(X)`` scores in all, in blocks of at most ``block_bytes``. Every
    row of ``R`` must be used by at least one pair.

    Counting is done in layers: layer j holds the j-th pair of every row that has one. Layer 0
    covers every row of the block in order, so it is counted on the score block in place; only
    rows retrieved by several queries are gathered for the later (smaller) layers.
    """
    rows_of_T = np.asarray(rows_of_T, dtype=np.int64)
    row_of_query = np.asarray(row_of_query, dtype=np.int64)
    query_idx = np.asarray(query_idx, dtype=np.int64)
    n_x = X.shape[0]
    ranks = np.empty(row_of_query.shape[0], dtype=np.int64)
    order = np.argsort(row_of_query, kind="stable")
    sorted_rows = row_of_query[order]
    for rows in _blocks(rows_of_T.shape[0], block_rows(n_x, block_bytes)):
        lo, hi = np.searchsorted(sorted_rows, [rows.start, rows.stop])
        if lo == hi:
            continue
        g = l2_normalize(T[rows_of_T[rows]]) @ X.T  # (block, n_x): each retrieved item vs every X row
        p = order[lo:hi]
        local = sorted_rows[lo:hi] - rows.start
        t = g[local, query_idx[p]]
        first = np.flatnonzero(np.r_[True, local[1:] != local[:-1]])
        layer = np.arange(p.size) - np.repeat(first, np.diff(np.r_[first, p.size]))
        for j in range(int(layer.max()) + 1):
            sel = np.flatnonzero(layer == j)
            block = g if (j == 0 and sel.size == g.shape[0]) else g[local[sel]]
            ranks[p[sel]] = np.count_nonzero(block >= t[sel, None], axis=1)
    return ranks


def sort_order(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, starts)``: the ascending order of ``values`` (float64 view) and the first sorted
    position of each group of equal values.

    The sort is one ``np.sort`` of 64-bit keys: each float64 is mapped to an order-preserving
    integer, its lowest bits are replaced by the element's index, so sorting the keys sorts the
    values and carries the permutation along (about twice as fast as ``argsort``). Elements whose
    remaining top bits agree (values within ~1e-9 relative) are then put in exact order by a small
    ``lexsort``, so the order is exact. Inputs must not contain NaN.
    """
    x = np.ascontiguousarray(values, dtype=np.float64).ravel()
    n = x.size
    if n == 0:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp)
    shift = max(1, int(n - 1).bit_length())
    if shift > 32:  # more than 4G values: keep enough value bits, use a plain stable argsort
        order = np.argsort(x, kind="stable")
    else:
        u = x.view(np.uint64)
        key = np.where(u >> np.uint64(63) == 1, ~u, u | np.uint64(1 << 63))  # order-preserving bits
        key >>= np.uint64(shift)
        key <<= np.uint64(shift)
        key |= np.arange(n, dtype=np.uint64)
        key.sort()
        order = (key & np.uint64((1 << shift) - 1)).astype(np.intp)
        top = key >> np.uint64(shift)
        same = top[1:] == top[:-1]
        if same.any():  # neighbours told apart only by the dropped bits: order them by value
            member = np.zeros(n, dtype=bool)
            member[1:] |= same
            member[:-1] |= same
            pos = np.flatnonzero(member)
            sub = order[pos]
            order[pos] = sub[np.lexsort((x[sub], top[pos]))]
    sv = x[order]
    starts = np.flatnonzero(np.concatenate(([True], sv[1:] != sv[:-1])))
    return order, starts


def average_ranks(values: np.ndarray, structure: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """1-based ranks of ``values`` with ties given their average rank: the same numbers as
    ``scipy.stats.rankdata(values)`` (method "average"), about twice as fast on millions of values
    (see :func:`sort_order`, whose result may be passed as ``structure``)."""
    order, starts = sort_order(values) if structure is None else structure
    n = order.size
    ranks = np.empty(n, dtype=np.float64)
    if starts.size == n:  # no ties
        ranks[order] = np.arange(1, n + 1, dtype=np.float64)
        return ranks
    counts = np.diff(np.append(starts, n))
    ranks[order] = np.repeat(starts + (counts + 1) / 2.0, counts)
    return ranks


def weighted_average_ranks(order: np.ndarray, starts: np.ndarray, weights_sorted: np.ndarray) -> np.ndarray:
    """Average ranks in the multiset where sorted element i occurs ``weights_sorted[i]`` times
    (a bootstrap resample): a value's copies share the average of the positions its group of
    equal values occupies. Returned in the original (unsorted) order; weight-0 elements get the
    rank they would have, which does not matter to weighted statistics."""
    n = order.size
    cw = np.cumsum(weights_sorted, dtype=np.float64)
    ranks = np.empty(n, dtype=np.float64)
    if starts.size == n:  # no ties: each element's copies sit right after everything below it
        ranks[order] = cw - (weights_sorted - 1) / 2.0
        return ranks
    ends = np.append(starts[1:], n) - 1
    below = np.where(starts > 0, cw[starts - 1], 0.0)
    total = cw[ends] - below
    ranks[order] = np.repeat(below + (total + 1) / 2.0, np.diff(np.append(starts, n)))
    return ranks
