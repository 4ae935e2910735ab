"""Counting kernels that read a block of float32 scores once (numba; compiled on first use and
cached on disk).

Each kernel compares every score of a block with a window ``[lo, hi]`` around a threshold (the
true item's canonical score, widened by the error bound of the fast pass). Per row (or column)
it counts the scores *certainly* above the window (``> hi``) and lists the positions of the
scores *inside* it, which the caller re-decides on canonical scores (:mod:`.exact`). The true
item's own position is never listed: it counts once, since an item is as good as itself.

A row is read twice only when it has something in a window: the first loop has no
data-dependent branches (LLVM vectorises it), the second, on the row still in cache, lists
positions. Positions go to caller-given buffers; a kernel returns how many it found, and when
that exceeds a buffer's length the caller enlarges it and calls again (the counts are rewritten,
not accumulated, so a repeated call is harmless). Counts are integers: the order in which blocks,
threads or processes add them up does not matter.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_opts = dict(nogil=True, cache=True, boundscheck=False, fastmath=False, error_model="numpy")


BOTH_WAYS_TILE = 4096  # columns per tile: the tile's column counts and windows stay in L1/L2 while the block's rows pass


@njit(**_opts)
def both_ways(S, r0, lo, hi, cnt_r, cnt_c, ri, rj, ci, cj):  # pragma: no cover - compiled
    """Rows ``r0 .. r0+len(S)-1`` of an aligned (square) score matrix. ``lo[g]``/``hi[g]`` is the
    window of item g, used as row g's threshold (forward ranks) and as column g's (backward).

    Writes ``cnt_r[i]`` (row r0+i: scores certainly above its window, its own diagonal counted
    once) and ``cnt_c[j]`` (the same for column j within this block). Lists (row, column) of the
    in-window scores of rows in ``ri``/``rj`` and of columns in ``ci``/``cj`` (in tile order; the
    callers add integers, so the order never matters). Returns the two numbers of listed positions.

    The columns are visited in tiles of ``BOTH_WAYS_TILE``, all rows of the block per tile, so a
    tile's ``cnt_c``, ``lo`` and ``hi`` stay in cache while the rows pass (one pass over all n
    columns per row would stream them from memory once per row when n is large)."""
    rb, n = S.shape
    tile = BOTH_WAYS_TILE
    mark = np.zeros(tile, dtype=np.uint8)  # per column of the current row's tile: 1 row window, 2 column window
    words = mark.view(np.uint64)
    nr = 0
    nc = 0
    for j in range(n):
        cnt_c[j] = 0
    for i in range(rb):
        cnt_r[i] = 0
    for c0 in range(0, n, tile):
        c1 = min(n, c0 + tile)
        w1 = (c1 - c0 + 7) // 8
        for j in range(c1 - c0, w1 * 8):
            mark[j] = 0
        for i in range(rb):
            g = r0 + i
            lr = lo[g]
            hr = hi[g]
            a = 0
            for j in range(c0, c1):
                v = S[i, j]
                a += 1 if v > hr else 0
                cnt_c[j] += 1 if v > hi[j] else 0
                mark[j - c0] = (1 if (v >= lr and v <= hr) else 0) | (2 if (v >= lo[j] and v <= hi[j]) else 0)
            if c0 <= g < c1:  # the diagonal: its row's and its column's own item counts exactly once
                above = 1 if S[i, g] > hr else 0
                a += 1 - above
                cnt_c[g] += 1 - above
                mark[g - c0] = 0
            cnt_r[i] += a
            for w in range(w1):
                if words[w] == 0:
                    continue
                for jj in range(w * 8, w * 8 + 8):
                    m = mark[jj]
                    if m & 1:
                        if nr < ri.shape[0]:
                            ri[nr] = g
                            rj[nr] = c0 + jj
                        nr += 1
                    if m & 2:
                        if nc < ci.shape[0]:
                            ci[nc] = g
                            cj[nc] = c0 + jj
                        nc += 1
    return nr, nc


@njit(**_opts)
def rows_against(S, row_of_p, true_of_p, lo, hi, cnt, pp, pj):  # pragma: no cover - compiled
    """Per pair p: row ``row_of_p[p]`` of ``S`` against the pair's window ``lo[p]``, ``hi[p]``,
    with its true item in column ``true_of_p[p]``. Writes ``cnt[p]`` (scores certainly above the
    window, the true item counted once) and lists (p, column) of the in-window scores."""
    n = S.shape[1]
    nw = (n + 7) // 8
    mark = np.zeros(nw * 8, dtype=np.uint8)
    words = mark.view(np.uint64)
    m = 0
    for p in range(row_of_p.shape[0]):
        r = row_of_p[p]
        t = true_of_p[p]
        lr = lo[p]
        hr = hi[p]
        a = 0
        for j in range(n):
            v = S[r, j]
            a += 1 if v > hr else 0
            mark[j] = 1 if (v >= lr and v <= hr) else 0
        a += 1 - (1 if S[r, t] > hr else 0)
        mark[t] = 0
        cnt[p] = a
        for w in range(nw):
            if words[w] == 0:
                continue
            for j in range(w * 8, w * 8 + 8):
                if mark[j]:
                    if m < pp.shape[0]:
                        pp[m] = p
                        pj[m] = j
                    m += 1
    return m


@njit(**_opts)
def row_max_candidates(S, width, arg, within, ci, cj):  # pragma: no cover - compiled
    """Per row i: the first position of its largest score (``arg[i]``) and how many scores are
    ``>= max - width`` (``within[i]``); for rows with more than one, lists (row, column) of them."""
    rb, n = S.shape
    m = 0
    for i in range(rb):
        best = S[i, 0]
        k = 0
        for j in range(1, n):
            v = S[i, j]
            if v > best:
                best = v
                k = j
        lo = best - width
        c = 0
        for j in range(n):
            c += 1 if S[i, j] >= lo else 0
        arg[i] = k
        within[i] = c
        if c > 1:
            for j in range(n):
                if S[i, j] >= lo:
                    if m < ci.shape[0]:
                        ci[m] = i
                        cj[m] = j
                    m += 1
    return m


@njit(**_opts)
def pack_f32_keys(x, keys):  # pragma: no cover - compiled
    """``keys[i]`` = (order-preserving 32-bit key of float32 ``x[i]``) << 32 | i; -0.0 as 0.0."""
    u = x.view(np.uint32)
    for i in range(x.shape[0]):
        b = u[i]
        if b == np.uint32(0x80000000):  # -0.0
            b = np.uint32(0)
        k = (~b) if (b >> 31) == 1 else (b | np.uint32(0x80000000))
        keys[i] = (np.uint64(k) << np.uint64(32)) | np.uint64(i)


@njit(**_opts)
def unpack_sorted_keys(keys, order, first):  # pragma: no cover - compiled
    """From sorted packed keys: ``order`` (the indices) and ``first[i]`` = position i starts a
    group of equal values. Returns the number of groups."""
    n = keys.shape[0]
    g = 0
    for i in range(n):
        order[i] = np.int64(keys[i] & np.uint64(0xFFFFFFFF))
        f = i == 0 or (keys[i] >> np.uint64(32)) != (keys[i - 1] >> np.uint64(32))
        first[i] = f
        g += 1 if f else 0
    return g


@njit(**_opts)
def average_ranks_sorted(order, starts, out):  # pragma: no cover - compiled
    """``out[order[p]]`` = the average 1-based position of p's group of equal values."""
    n = order.shape[0]
    m = starts.shape[0]
    for g in range(m):
        a = starts[g]
        b = starts[g + 1] if g + 1 < m else n
        r = (a + 1 + b) / 2.0
        for p in range(a, b):
            out[order[p]] = r


def warm_up() -> None:
    """Compile (or load from numba's on-disk cache) every kernel on a tiny input."""
    S = np.zeros((2, 3), dtype=np.float32)
    lo = np.zeros(3, dtype=np.float32)
    hi = np.zeros(3, dtype=np.float32)
    i64 = lambda n: np.zeros(n, dtype=np.int64)  # noqa: E731
    both_ways(S, 0, lo, hi, i64(2), i64(3), i64(4), i64(4), i64(4), i64(4))
    rows_against(S, i64(1), i64(1), lo[:1], hi[:1], i64(1), i64(4), i64(4))
    row_max_candidates(S, np.float32(0), i64(2), i64(2), i64(4), i64(4))
    keys = np.empty(3, dtype=np.uint64)
    pack_f32_keys(lo, keys)
    unpack_sorted_keys(keys, i64(3), np.empty(3, dtype=np.bool_))
    average_ranks_sorted(i64(3), i64(1), np.empty(3))
