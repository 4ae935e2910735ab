"""Blocked exact search on float32 inner products, with order-independent decisions.

Scores. For queries ``Q`` (n_q, d) and database ``D`` (n_d, d) the score of the pair (i, j) is

    s_ij = scale * <Q_i, D_j> - q_bias_i - d_bias_j

``scale=1`` and no biases give the inner product (the cosine for unit rows); CSLS
(Conneau et al. 2018) is ``scale=2``, ``q_bias = r_D(Q_i)``, ``d_bias = r_Q(D_j)`` where
``r_X(v)`` is the mean similarity of ``v`` to its k nearest neighbours in ``X``
(:func:`csls_penalty`).

Ties and reproducibility. Every decision (is item j scored at least as high as the true item?
which items attain the best score? which k are the nearest?) is made on the canonical score
defined in :mod:`.exact` (the one explanation; ARCHITECTURE.md, "Same numbers on every machine"),
so ranks, top-k lists and every metric built on them are bit-identical whatever the thread
count, block size, process, executor or machine. Ranks are *pessimistic*: the rank of item j for query i is the
number of database items whose canonical score is >= c_ij, itself included, so a tie never
helps. :func:`topk` orders equal canonical scores by ascending index; :func:`nearest_with_ties`
returns every item that attains a row's canonical maximum.

Speed. The scores are computed blockwise in float32 by BLAS (the fast pass). A bound ``tau`` on
``|fast - canonical|`` (:func:`.exact.score_error_bound`, about ``d * 2**-24`` for unit rows) says
which comparisons the fast pass already decides: only scores within ``tau`` of the threshold are
re-decided on canonical scores (:func:`.exact.pair_scores`), typically a handful per query. The
counting reads each score block once (:mod:`._fused`).

Memory. Work is done in blocks of at most ``block_bytes`` of float32 scores, or tiles where a
row block would be thin, run on threads where the work is large (:mod:`.blocks`); a row's counts
are the sums of its tiles', its maximum the largest of its tiles'.

Sparse rows (TF-IDF, bag of words; :func:`.exact.row_pattern`): the canonical re-decisions visit
only nonzero columns, and when both sides are sparse the fast pass is a sparse float32 product.
"""
from __future__ import annotations

import threading

import numpy as np

from . import _fused
from .blocks import block_rows, map_blocks, row_blocks
from .exact import U32, as_csr, max_row_norm, pair_scores, row_pattern, score_error_bound, unit_rows


def _gemm(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The fast pass's float32 product ``A @ B.T`` (BLAS; its bits may differ between runs, which
    no decision depends on)."""
    return A @ B.T


def _sparse_gemm(A, BT) -> np.ndarray:
    """The fast pass's float32 product of sparse rows: scipy CSR ``A`` times CSC ``BT`` (= B.T),
    as a dense C-contiguous float32 block (within the same error bound as :func:`_gemm`)."""
    return np.ascontiguousarray((A @ BT).toarray(), dtype=np.float32)


def _f32(x: np.ndarray | None) -> np.ndarray | None:
    return None if x is None else np.ascontiguousarray(x, dtype=np.float32)


class _Fast:
    """The fast float32 pass of one search: float32 copies of the biases, the error bound tau, and
    blocks of scores in the one order every kernel uses (times scale, minus the item bias per
    column, minus the query bias per row)."""

    def __init__(self, Q, D, scale, q_bias, d_bias):
        self.Q, self.D, self.scale = Q, D, float(scale)
        self.q_bias, self.d_bias = q_bias, d_bias
        self.qb32, self.db32 = _f32(q_bias), _f32(d_bias)
        self.norm_q, self.norm_d = max_row_norm(Q), max_row_norm(D)
        self.tau = score_error_bound(Q.shape[1], self.norm_q, self.norm_d, scale, q_bias, d_bias)
        # sparse rows (TF-IDF): the canonical dots visit only nonzeros, and when both sides are
        # sparse the fast pass is a sparse float32 product (tau holds for any order and number of
        # additions; at tfidf-char's density it beats the dense GEMM, BENCHMARKS.md)
        self.patterns = (row_pattern(Q), row_pattern(D))
        self._sparse = None
        if self.patterns[0] is not None and self.patterns[1] is not None:
            self._sparse = (as_csr(Q, self.patterns[0]), as_csr(D, self.patterns[1]).T.tocsc())

    def block(self, rows: slice, cols: slice = slice(None)) -> np.ndarray:
        if self._sparse is not None:
            s = _sparse_gemm(self._sparse[0][rows], self._sparse[1][:, cols])
        else:
            s = _gemm(self.Q[rows], self.D[cols])
        if self.scale != 1.0:
            s *= np.float32(self.scale)
        if self.db32 is not None:
            s -= self.db32[None, cols]
        if self.qb32 is not None:
            s -= self.qb32[rows, None]
        return s

    def canonical(self, qi: np.ndarray, dj: np.ndarray) -> np.ndarray:
        return pair_scores(self.Q, self.D, qi, dj, scale=self.scale, q_bias=self.q_bias, d_bias=self.d_bias,
                           patterns=self.patterns)


def _window(t: np.ndarray, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[lo, hi]`` containing ``[t - tau, t + tau]`` (rounded outwards)."""
    t = np.asarray(t, dtype=np.float64)
    lo = (t - tau).astype(np.float32)
    hi = (t + tau).astype(np.float32)
    lo = np.nextafter(lo, np.float32(-np.inf))
    hi = np.nextafter(hi, np.float32(np.inf))
    return lo, hi


def _as_f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _listed(call, rows: int, rate: list, n_lists: int):
    """Run a kernel that lists positions into ``n_lists`` pairs of int64 buffers, enlarging them and
    calling again while it found more than fit. The buffers start at ``rate[0] * rows + 256``;
    ``rate`` (one float per search, shared by its blocks and threads) learns the listed positions
    per row, so later blocks of a search whose windows are crowded do not run the kernel twice.
    Returns the buffers trimmed to what was found (which never depends on ``rate``)."""
    cap = int(rate[0] * rows) + 256
    while True:
        bufs = [np.empty(cap, dtype=np.int64) for _ in range(2 * n_lists)]
        found = call(*bufs)
        found = (found,) if np.ndim(found) == 0 else tuple(found)
        if max(found) <= cap:
            rate[0] = max(rate[0], 1.25 * max(found) / max(rows, 1))
            return [(bufs[2 * k][: found[k]], bufs[2 * k + 1][: found[k]]) for k in range(n_lists)]
        cap = int(max(found) * 1.25) + 16


def _recount(counts: np.ndarray, fast: "_Fast", qi: np.ndarray, dj: np.ndarray, t: np.ndarray, *, by_query: bool,
             offset: int = 0) -> None:
    """Add the listed pairs (query ``qi``, item ``dj``: fast scores inside a threshold's window)
    decided canonically: a pair counts for its query (``by_query``; threshold ``t[qi]``) or for its
    database item (threshold ``t[dj]``) when its canonical score reaches the threshold.
    ``counts[k]`` belongs to query (or item) ``offset + k``."""
    if not qi.size:
        return
    at = qi if by_query else dj
    np.add.at(counts, at - offset, (fast.canonical(qi, dj) >= t[at]).astype(np.int64))


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
    """The ``k`` best database items per query by canonical score: ``(scores, indices)``, both
    (n_q, k), best first, equal canonical scores in ascending index order. ``scores`` are the
    canonical float32 scores."""
    Q, D = _as_f32(Q), _as_f32(D)
    n_q, n_d = Q.shape[0], D.shape[0]
    if not 1 <= k <= n_d:
        raise ValueError(f"k={k} must be between 1 and the database size {n_d}")
    fast = _Fast(Q, D, scale, q_bias, d_bias)
    out_s = np.empty((n_q, k), dtype=np.float32)
    out_i = np.empty((n_q, k), dtype=np.int64)
    for rows in row_blocks(n_q, block_rows(n_d, block_bytes)):
        s = fast.block(rows)
        if k < n_d:
            part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        else:
            part = np.broadcast_to(np.arange(n_d), s.shape).copy()
        kth = np.take_along_axis(s, part, axis=1).min(axis=1)
        # the canonical top k lie among the items whose fast score is within 2 tau of the k-th
        lo, _ = _window(kth.astype(np.float64) - fast.tau, fast.tau)
        within = np.count_nonzero(s >= lo[:, None], axis=1)
        wide = np.flatnonzero(within > k)
        exact_rows = np.flatnonzero(within <= k)
        if exact_rows.size:  # the candidates are exactly the fast top k: order them canonically
            jj = part[exact_rows]
            c = fast.canonical(np.repeat(exact_rows + rows.start, k), jj.ravel()).reshape(-1, k)
            order = np.lexsort((jj, -c.astype(np.float64)), axis=1)
            out_i[rows.start + exact_rows] = np.take_along_axis(jj, order, axis=1)
            out_s[rows.start + exact_rows] = np.take_along_axis(c, order, axis=1)
        if wide.size:  # near-ties straddle the cut: rank all candidates of these rows canonically
            wi, j = np.nonzero(s[wide] >= lo[wide, None])
            c = fast.canonical(wide[wi] + rows.start, j)
            order = np.lexsort((j, -c.astype(np.float64), wi))  # by row, best first, ties by index
            first = np.searchsorted(wi[order], np.arange(wide.size))  # each row has more than k candidates
            sel = order[first[:, None] + np.arange(k)]
            out_i[rows.start + wide] = j[sel]
            out_s[rows.start + wide] = c[sel]
    return out_s, out_i


def csls_penalty(Q: np.ndarray, D: np.ndarray, k: int = 10, *, block_bytes: int | None = None) -> np.ndarray:
    """``r_D(Q_i)``: mean canonical inner product of each query with its ``k`` nearest database
    items (float64; the k values are added in ascending order, so the result is reproducible)."""
    n_d = D.shape[0]
    if not 1 <= k <= n_d:
        raise ValueError(f"CSLS k={k} must be between 1 and the database size {n_d}")
    vals, _ = topk(Q, D, k, block_bytes=block_bytes)
    acc = np.zeros(vals.shape[0], dtype=np.float64)
    for col in range(k - 1, -1, -1):  # ascending: a fixed order of float64 additions
        acc += vals[:, col].astype(np.float64)
    return acc / k


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
    """Pessimistic rank (1 = best) of database item ``true_idx[i]`` for query ``i``: the number
    of items whose canonical score is >= the true item's."""
    Q, D = _as_f32(Q), _as_f32(D)
    n_q, n_d = Q.shape[0], D.shape[0]
    true_idx = np.ascontiguousarray(true_idx, dtype=np.int64)
    if true_idx.shape != (n_q,) or (n_q and (true_idx.min() < 0 or true_idx.max() >= n_d)):
        raise ValueError(f"true_idx must hold {n_q} indices in [0, {n_d})")
    fast = _Fast(Q, D, scale, q_bias, d_bias)
    t = fast.canonical(np.arange(n_q), true_idx)
    lo, hi = _window(t, fast.tau)
    ranks = np.empty(n_q, dtype=np.int64)

    rate = [4.0]  # listed positions per row, learnt across blocks (see _listed)

    def block(rows):
        s = fast.block(rows)
        cnt = np.empty(s.shape[0], np.int64)
        ((p, j),) = _listed(
            lambda *b: _fused.rows_against(s, np.arange(s.shape[0]), true_idx[rows], lo[rows], hi[rows], cnt, *b),
            s.shape[0], rate, 1)
        _recount(cnt, fast, p + rows.start, j, t, by_query=True, offset=rows.start)  # in the block's thread
        return rows, cnt

    for rows, cnt in map_blocks(block, n_q, n_d, Q.shape[1], block_bytes):
        ranks[rows] = cnt
    return ranks


def ranks_both_ways(
    Q: np.ndarray,
    D: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    block_bytes: int | None = None,
    nearest: bool = False,
) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pessimistic ranks of the aligned partner (row i of ``Q`` <-> row i of ``D``) in both
    directions from ONE pass over the score matrix: ``fwd[i]`` = #{j: c_ij >= c_ii},
    ``bwd[j]`` = #{i: c_ij >= c_jj}, on canonical scores. Valid for symmetric similarities
    (cosine and CSLS: the canonical score of a pair does not depend on which side is the query).

    The canonical diagonal is computed first (n pair scores); each block of fast scores is then
    read once (:func:`._fused.both_ways`), counting per row and per column the scores certainly
    above the threshold's window; only scores inside a window are re-decided canonically.

    With ``nearest``, the same pass also finds each row's nearest items (ties included) as
    :func:`nearest_with_ties` does, returned as ``(fwd, bwd, indptr, indices)``: each block of
    scores is read once more right after it is counted, instead of being computed again (at
    N = 30,000 this costs 0.15 bare products, where a second search would cost one;
    BENCHMARKS.md)."""
    Q, D = _as_f32(Q), _as_f32(D)
    n = Q.shape[0]
    if D.shape[0] != n:
        raise ValueError(f"aligned rows needed: {n} queries, {D.shape[0]} database items")
    fast = _Fast(Q, D, scale, q_bias, d_bias)
    near = _Nearest(fast, n) if nearest else None
    diag = np.arange(n)
    t = fast.canonical(diag, diag)
    lo, hi = _window(t, fast.tau)
    fwd = np.zeros(n, dtype=np.int64)
    bwd = np.zeros(n, dtype=np.int64)

    rate = [4.0]  # listed positions per row, learnt across blocks (see _listed)

    def block(rows, cols):
        s = fast.block(rows, cols)
        cnt_r = np.empty(s.shape[0], np.int64)
        cnt_c = np.empty(s.shape[1], np.int64)
        (ri, rj), (ci, cj) = _listed(
            lambda *b: _fused.both_ways(s, rows.start, cols.start, lo, hi, cnt_r, cnt_c, *b), s.shape[0], rate, 2)
        # the in-window pairs decided canonically here, in the block's thread (numba releases the GIL)
        _recount(cnt_r, fast, ri, rj, t, by_query=True, offset=rows.start)
        _recount(cnt_c, fast, ci, cj, t, by_query=False, offset=cols.start)
        return rows, cols, cnt_r, cnt_c, (near.tile(s, cols) if near is not None else None)

    for rows, cols, cnt_r, cnt_c, cand in map_blocks(block, n, n, Q.shape[1], block_bytes, split_cols=True):
        fwd[rows] += cnt_r
        bwd[cols] += cnt_c
        if near is not None:
            near.add(rows, cand)
    if near is not None:
        return (fwd, bwd, *near.result())
    return fwd, bwd


class _Nearest:
    """Finds, tile by tile, the items attaining each query's best canonical score (the work of
    :func:`nearest_with_ties`, also done by :func:`ranks_both_ways` on its own blocks of scores).

    :meth:`tile` reads one block (or tile, :func:`.blocks.tiles`) of fast scores once: each row's maximum
    there and the items within ``width`` (``2 tau`` plus a rounding margin) of it
    (:func:`._fused.row_max_candidates`). :meth:`add` merges the tiles of a row block as they
    come (in block order): the row's fast maximum is the largest of its tiles' maxima, and its
    candidates are the tiles' items within ``width`` of it (a tile lists every item within
    ``width`` of its own maximum, which is no larger). A row with one candidate has it as its
    unique canonical maximiser (any canonical maximiser scores at least ``max - 2 tau`` in the
    fast pass); only rows with several compare them canonically."""

    def __init__(self, fast: _Fast, n_q: int) -> None:
        self.fast = fast
        # 2 tau, plus the float32 rounding of ``max - width`` itself
        mag = abs(fast.scale) * fast.norm_q * fast.norm_d + sum(
            float(np.max(np.abs(b))) for b in (fast.q_bias, fast.d_bias) if b is not None and np.size(b))
        self.width = np.float32(2.0 * fast.tau + 4.0 * U32 * (mag + 1.0))
        self.counts = np.empty(n_q, dtype=np.int64)
        self.chunks: list[np.ndarray] = []
        self.rate = [2.0]  # listed positions per row, learnt across blocks (see _listed)
        self._pending: tuple[slice, list] | None = None

    def tile(self, s: np.ndarray, cols: slice) -> tuple:
        """The candidates of one tile of fast scores ``s`` (its rows' maxima, then (row, global
        column, fast score) of each row's maximum where it is the only one within ``width``,
        else of every listed position); safe to call from the block's thread."""
        nb = s.shape[0]
        arg = np.empty(nb, np.int64)
        within = np.empty(nb, np.int64)
        ((ci, cj),) = _listed(lambda *b: _fused.row_max_candidates(s, self.width, arg, within, *b), nb, self.rate, 1)
        one = np.flatnonzero(within == 1)
        best = s[np.arange(nb), arg]
        i = np.concatenate([one, ci])
        j = np.concatenate([arg[one], cj]) + cols.start
        return best, i, j, np.concatenate([best[one], s[ci, cj]])

    def add(self, rows: slice, cand: tuple) -> None:
        """One tile's candidates (from :meth:`tile`), in block order; a row block is decided once
        a tile of the next one (or :meth:`result`) arrives."""
        if self._pending is not None and self._pending[0] != rows:
            self._finish(*self._pending)
            self._pending = None
        if self._pending is None:
            self._pending = (rows, [])
        self._pending[1].append(cand)

    def _finish(self, rows: slice, tiles: list) -> None:
        """The candidates of one row block from its tiles (in column order), decided."""
        nb = rows.stop - rows.start
        top = tiles[0][0]
        for t in tiles[1:]:
            top = np.maximum(top, t[0])
        i = np.concatenate([t[1] for t in tiles])
        j = np.concatenate([t[2] for t in tiles])
        v = np.concatenate([t[3] for t in tiles])
        keep = v >= top[i] - self.width  # the rule of row_max_candidates, against the row's maximum
        i, j = i[keep], j[keep]
        o = np.lexsort((j, i))  # by row, columns ascending
        i, j = i[o], j[o]
        cb = np.bincount(i, minlength=nb).astype(np.int64)
        out = j.copy()
        several = cb > 1
        if several.any():  # rows with several candidates: compare them canonically
            sel = several[i]
            si, sj = i[sel], j[sel]
            c = self.fast.canonical(si + rows.start, sj)
            bounds = np.flatnonzero(np.r_[True, si[1:] != si[:-1], True])
            is_max = np.ones(c.size, dtype=bool)
            for a, b in zip(bounds[:-1], bounds[1:]):
                cc = c[a:b]
                is_max[a:b] = cc == cc.max()
            drop = np.flatnonzero(sel)[~is_max]
            cb -= np.bincount(i[drop], minlength=nb)
            out = np.delete(out, drop)
        self.counts[rows] = cb
        self.chunks.append(out)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr, indices)`` once every tile has been added."""
        if self._pending is not None:
            self._finish(*self._pending)
            self._pending = None
        indptr = np.zeros(self.counts.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.counts, out=indptr[1:])
        return indptr, (np.concatenate(self.chunks) if self.chunks else np.empty(0, dtype=np.int64))


def nearest_with_ties(
    Q: np.ndarray,
    D: np.ndarray,
    *,
    scale: float = 1.0,
    q_bias: np.ndarray | None = None,
    d_bias: np.ndarray | None = None,
    block_bytes: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """All database items attaining each query's best canonical score, as CSR arrays
    ``(indptr, indices)``: the items of query ``i`` are ``indices[indptr[i]:indptr[i+1]]``
    (ascending).

    One read of each block (or tile, :func:`.blocks.tiles`) of fast scores finds each row's candidates;
    only rows with several candidates compare them on canonical scores (:class:`_Nearest`)."""
    Q, D = _as_f32(Q), _as_f32(D)
    near = _Nearest(_Fast(Q, D, scale, q_bias, d_bias), Q.shape[0])

    def block(rows, cols):
        return rows, near.tile(near.fast.block(rows, cols), cols)

    for rows, cand in map_blocks(block, Q.shape[0], D.shape[0], Q.shape[1], block_bytes, split_cols=True):
        near.add(rows, cand)
    return near.result()


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

    The retrieved items are ``R = unit_rows(T[rows_of_T])`` (gathered and normalised one block
    at a time, never as a whole). For pair p the retrieved item's vector is
    ``R[row_of_query[p]]``; all rows of ``X`` (unit rows) are ranked by canonical inner product
    with it and the pessimistic rank of ``X[query_idx[p]]`` is returned. Only the distinct
    retrieved rows are multiplied: ``len(rows_of_T)`` x ``len(X)`` scores in all, in blocks (or
    tiles of rows x columns, :func:`.blocks.tiles`) of at most ``block_bytes``, each read once; a pair's
    count is the sum of its row's tiles' counts. Every row of ``R`` must be used by at least one pair.
    """
    rows_of_T = np.asarray(rows_of_T, dtype=np.int64)
    row_of_query = np.asarray(row_of_query, dtype=np.int64)
    query_idx = np.asarray(query_idx, dtype=np.int64)
    X = _as_f32(X)
    n_x = X.shape[0]
    norm_x = max_row_norm(X)
    ranks = np.zeros(row_of_query.shape[0], dtype=np.int64)
    order = np.argsort(row_of_query, kind="stable")
    sorted_rows = row_of_query[order]
    rate = [4.0]  # listed positions per row, learnt across blocks (see _listed)
    prepared: dict[int, tuple | None] = {}  # per row block, shared by its tiles
    lock = threading.Lock()

    def prepare(rows: slice) -> tuple | None:
        """A row block's retrieved vectors, pairs and their thresholds' windows (once per row block,
        whichever of its tiles comes first)."""
        with lock:
            if rows.start not in prepared:
                lo_p, hi_p = np.searchsorted(sorted_rows, [rows.start, rows.stop])
                prep = None
                if lo_p < hi_p:
                    R = _as_f32(unit_rows(np.asarray(T[rows_of_T[rows]], dtype=np.float32)))
                    p = order[lo_p:hi_p]
                    local = np.ascontiguousarray(sorted_rows[lo_p:hi_p] - rows.start)
                    q = np.ascontiguousarray(query_idx[p])
                    t = pair_scores(R, X, local, q)
                    lo, hi = _window(t, score_error_bound(X.shape[1], max_row_norm(R), norm_x))
                    prep = (R, p, local, q, t, lo, hi)
                prepared[rows.start] = prep
            return prepared[rows.start]

    def block(rows, cols):
        prep = prepare(rows)
        if prep is None:
            return None
        R, p, local, q, t, lo, hi = prep
        g = _gemm(R, X[cols])  # (block, tile columns): each retrieved item vs these X rows
        cnt = np.empty(p.size, np.int64)
        # the true item's column within the tile (outside it when negative or past its end)
        true_col = q - cols.start
        ((pp, j),) = _listed(lambda *b: _fused.rows_against(g, local, true_col, lo, hi, cnt, *b), p.size, rate, 1)
        if pp.size:  # in-window: decide on canonical scores
            np.add.at(cnt, pp, (pair_scores(R, X, local[pp], j + cols.start) >= t[pp]).astype(np.int64))
        return rows, p, cnt

    done = -1  # the row block whose tiles are being added (its predecessors are complete)
    for res in map_blocks(block, rows_of_T.shape[0], n_x, X.shape[1], block_bytes, split_cols=True):
        if res is None:
            continue
        rows, p, cnt = res
        if rows.start != done:  # tiles come in order: every earlier row block is complete
            with lock:
                for start in [k for k in prepared if k < rows.start]:
                    del prepared[start]
            done = rows.start
        ranks[p] += cnt
    return ranks
