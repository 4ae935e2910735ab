"""Counting kernels that read a block of float32 scores once (numba; compiled on first use and
cached on disk).

Each kernel compares every score of a block with a window ``[lo, hi]`` around a threshold (the
true item's canonical score, widened by the error bound of the fast pass). Per row (or column)
it counts the scores *certainly* above the window (``> hi``) and lists the positions of the
scores *inside* it, which the caller re-decides on canonical scores (:mod:`.exact`). The true
item's own position is never listed: it counts once, since an item is as good as itself.

The window kernels (``both_ways``, ``rows_against``) count in chunks of ``CHUNK`` columns by
loops that only count, with no data-dependent branch (LLVM vectorises them: int32 compare-and-add); a chunk is read again, while
still in cache, only when it has something in a window, to list those positions. Positions go to
caller-given buffers; a kernel returns how many it found, and when that exceeds a buffer's length
the caller enlarges it and calls again (the counts are rewritten, not accumulated, so a repeated
call is harmless). Counts are integers: the order in which blocks, threads or processes add them
up does not matter.
"""
from __future__ import annotations

import numpy as np
from numba import njit

_opts = dict(nogil=True, cache=True, boundscheck=False, fastmath=False, error_model="numpy")


BOTH_WAYS_TILE = 4096  # columns per tile: the tile's column counts and windows stay in L1/L2 while the block's rows pass
MAX_LANES = 16  # partial maxima per row in row_max_candidates (one AVX-512 / two AVX2 registers)
CHUNK = 64  # columns counted together: only a chunk with something in a window is read again (chosen from 32-256 by bench timings)


@njit(inline="always", **_opts)
def _count_row(row, lr, hr):  # pragma: no cover - compiled
    """(#{j: row[j] > hr}, #{j: row[j] >= lr}): the scores above a window and those at or above
    its lower end; their difference is the number inside it. Branch-free: LLVM vectorises it."""
    a = 0
    aw = 0
    for j in range(row.shape[0]):
        v = row[j]
        a += np.int32(v > hr)
        aw += np.int32(v >= lr)
    return a, aw


@njit(inline="always", **_opts)
def _count_row_and_columns(row, lr, hr, lo, hi, cc):  # pragma: no cover - compiled
    """:func:`_count_row` for the row's window; per column j the scores above column j's window
    added into ``cc[j]``; and how many of the row's scores lie inside their column's window."""
    a = 0
    aw = 0
    inside_c = 0
    for j in range(row.shape[0]):
        v = row[j]
        above = np.int32(v > hi[j])
        a += np.int32(v > hr)
        aw += np.int32(v >= lr)
        cc[j] += above
        inside_c += np.int32(v >= lo[j]) - above
    return a, aw, inside_c


@njit(**_opts)
def both_ways(S, r0, c0, lo, hi, cnt_r, cnt_c, ri, rj, ci, cj):  # pragma: no cover - compiled
    """The tile of rows ``r0 .. r0+len(S)-1`` and columns ``c0 .. c0+S.shape[1]-1`` of an aligned
    (square) score matrix. ``lo[g]``/``hi[g]`` is the window of item g, used as row g's threshold
    (forward ranks) and as column g's (backward).

    Writes ``cnt_r[i]`` (row r0+i: scores of this tile certainly above its window, its own
    diagonal counted once) and ``cnt_c[j]`` (the same for column c0+j within this tile). Lists
    (row, column) of the in-window scores of rows in ``ri``/``rj`` and of columns in
    ``ci``/``cj`` (global indices; the callers add integers, so the order never matters).
    Returns the two numbers of listed positions.

    The columns are visited in sub-tiles of ``BOTH_WAYS_TILE``, all rows of the tile per sub-tile,
    so a sub-tile's column counters and windows stay in cache while the rows pass. Each row of a
    sub-tile is counted in chunks of ``CHUNK`` columns by a loop with no data-dependent branch
    (vectorised): the scores above the row's window, at or above its lower end, above each
    column's window (into the column's int32 counter) and inside each column's window. A chunk is
    read again to list positions only when something besides the diagonal lies in a window:
    rare where the partners score in the tail, about 4 per row where they score in the bulk
    (random data)."""
    rb, n = S.shape
    tile = BOTH_WAYS_TILE
    cc = np.zeros(tile, dtype=np.int32)
    nr = 0
    nc = 0
    for i in range(rb):
        cnt_r[i] = 0
    for t0 in range(0, n, tile):
        t1 = min(n, t0 + tile)
        m = t1 - t0
        cc[:m] = 0
        for i in range(rb):
            g = r0 + i
            lr = lo[g]
            hr = hi[g]
            a = 0
            for k0 in range(t0, t1, CHUNK):
                k1 = min(t1, k0 + CHUNK)
                ak, awk, inside_c = _count_row_and_columns(
                    S[i, k0:k1], lr, hr, lo[c0 + k0:c0 + k1], hi[c0 + k0:c0 + k1], cc[k0 - t0:k1 - t0])
                inside = awk - ak + inside_c
                if c0 + k0 <= g < c0 + k1:  # the diagonal: its own item counts exactly once and is never listed
                    v = S[i, g - c0]
                    ak += 1 - (1 if v > hr else 0)
                    inside -= 2 * (1 if (v >= lr and v <= hr) else 0)  # in its row's and its column's window
                a += ak
                if inside > 0:
                    for j in range(k0, k1):
                        gj = c0 + j
                        if gj == g:
                            continue
                        v = S[i, j]
                        if v >= lr and v <= hr:
                            if nr < ri.shape[0]:
                                ri[nr] = g
                                rj[nr] = gj
                            nr += 1
                        if v >= lo[gj] and v <= hi[gj]:
                            if nc < ci.shape[0]:
                                ci[nc] = g
                                cj[nc] = gj
                            nc += 1
            cnt_r[i] += a
        for j in range(m):
            cnt_c[t0 + j] = cc[j]
        for g in range(max(r0, c0 + t0), min(r0 + rb, c0 + t1)):  # diagonal entries of this tile and sub-tile
            cnt_c[g - c0] += 1 - (1 if S[g - r0, g - c0] > hi[g] else 0)
    return nr, nc


@njit(**_opts)
def rows_against(S, row_of_p, true_of_p, lo, hi, cnt, pp, pj):  # pragma: no cover - compiled
    """Per pair p: row ``row_of_p[p]`` of ``S`` against the pair's window ``lo[p]``, ``hi[p]``,
    with its true item in column ``true_of_p[p]``. Writes ``cnt[p]`` (scores certainly above the
    window, the true item counted once) and lists (p, column) of the in-window scores. The row is
    counted in chunks of ``CHUNK`` columns (branch-free, vectorised); a chunk is read again only
    when something besides the true item lies in the window."""
    n = S.shape[1]
    m = 0
    for p in range(row_of_p.shape[0]):
        r = row_of_p[p]
        t = true_of_p[p]
        lr = lo[p]
        hr = hi[p]
        a = 0
        for k0 in range(0, n, CHUNK):
            k1 = min(n, k0 + CHUNK)
            ak, awk = _count_row(S[r, k0:k1], lr, hr)
            inside = awk - ak
            if k0 <= t < k1:
                v = S[r, t]
                inside -= 1 if (v >= lr and v <= hr) else 0
                ak += 1 - (1 if v > hr else 0)
            a += ak
            if inside > 0:
                for j in range(k0, k1):
                    v = S[r, j]
                    if v >= lr and v <= hr and j != t:
                        if m < pp.shape[0]:
                            pp[m] = p
                            pj[m] = j
                        m += 1
        cnt[p] = a
    return m


@njit(inline="always", **_opts)
def _row_max(row):  # pragma: no cover - compiled
    """The largest value of a non-empty row: ``MAX_LANES`` partial maxima (vectorised; the maximum
    is exact, so the order of comparisons cannot change it), then the remainder."""
    n = row.shape[0]
    part = np.empty(MAX_LANES, dtype=row.dtype)
    for lane in range(MAX_LANES):
        part[lane] = row[0]
    n_full = n - n % MAX_LANES
    for j in range(0, n_full, MAX_LANES):
        for lane in range(MAX_LANES):
            v = row[j + lane]
            part[lane] = v if v > part[lane] else part[lane]
    best = row[0]
    for lane in range(MAX_LANES):
        best = part[lane] if part[lane] > best else best
    for j in range(n_full, n):
        best = row[j] if row[j] > best else best
    return best


@njit(**_opts)
def row_max_candidates(S, width, arg, within, ci, cj):  # pragma: no cover - compiled
    """Per row i: the first position of its largest score (``arg[i]``) and how many scores are
    ``>= max - width`` (``within[i]``); for rows with more than one, lists (row, column) of them."""
    rb, n = S.shape
    m = 0
    for i in range(rb):
        row = S[i]
        best = _row_max(row)
        k = 0
        while row[k] != best:
            k += 1
        lo = best - width
        c = 0
        for j in range(n):
            c += np.int32(row[j] >= lo)
        arg[i] = k
        within[i] = c
        if c > 1:
            for j in range(n):
                if row[j] >= lo:
                    if m < ci.shape[0]:
                        ci[m] = i
                        cj[m] = j
                    m += 1
    return m


RADIX_BITS = 11  # three passes over 32-bit keys; 2,048 counters stay in L1


@njit(**_opts)
def radix_order_f32(x, order, first):  # pragma: no cover - compiled
    """Stable ascending order of float32 ``x`` (no NaN; -0.0 and 0.0 are one value) by an LSD
    radix sort of order-preserving 32-bit keys: ``order`` gets the indices (ties by index, as a
    stable sort), ``first[p]`` whether sorted position p starts a group of equal values. Returns
    the number of groups.

    Hand-written because numpy has no radix sort for 32-bit keys that carries a permutation:
    ``np.sort`` of packed (key << 32 | index) 64-bit integers gives the same result several times
    slower at CORR's 1,500 x 1,500 pairs (BENCHMARKS.md). A
    pass whose digit is the same for every key is skipped."""
    n = x.shape[0]
    u = x.view(np.uint32)
    keys = np.empty(n, dtype=np.uint32)
    idx = np.empty(n, dtype=np.uint32)
    for i in range(n):
        b = u[i]
        if b == np.uint32(0x80000000):  # -0.0
            b = np.uint32(0)
        keys[i] = (~b) if (b >> np.uint32(31)) == np.uint32(1) else (b | np.uint32(0x80000000))
        idx[i] = np.uint32(i)
    k2 = np.empty(n, dtype=np.uint32)
    i2 = np.empty(n, dtype=np.uint32)
    nb = 1 << RADIX_BITS
    mask = np.uint32(nb - 1)
    count = np.empty(nb, dtype=np.int64)
    for shift in range(0, 32, RADIX_BITS):
        sh = np.uint32(shift)
        count[:] = 0
        for i in range(n):
            count[(keys[i] >> sh) & mask] += 1
        if n == 0 or count[(keys[0] >> sh) & mask] == n:
            continue  # one digit for all: the pass would not move anything
        total = 0
        for d in range(nb):
            c = count[d]
            count[d] = total
            total += c
        for i in range(n):
            kk = keys[i]
            d = (kk >> sh) & mask
            pos = count[d]
            count[d] = pos + 1
            k2[pos] = kk
            i2[pos] = idx[i]
        keys, k2 = k2, keys
        idx, i2 = i2, idx
    g = 0
    for i in range(n):
        order[i] = np.int64(idx[i])
        f = i == 0 or keys[i] != keys[i - 1]
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
    both_ways(S, 0, 0, lo, hi, i64(2), i64(3), i64(4), i64(4), i64(4), i64(4))
    rows_against(S, i64(1), i64(1), lo[:1], hi[:1], i64(1), i64(4), i64(4))
    row_max_candidates(S, np.float32(0), i64(2), i64(2), i64(4), i64(4))
    radix_order_f32(lo, i64(3), np.empty(3, dtype=np.bool_))
    average_ranks_sorted(i64(3), i64(1), np.empty(3))
