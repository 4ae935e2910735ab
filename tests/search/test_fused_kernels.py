"""The counting kernels of search/_fused.py against naive loops, with windows hit on purpose,
the diagonal on a tile boundary and more columns than one tile."""
import numpy as np
import pytest

from backretrieval.search import _fused


def _windows(rng, n):
    t = (rng.standard_normal(n) * 0.1).astype(np.float32)
    tau = np.float32(1e-4)
    return t, (t - tau).astype(np.float32), (t + tau).astype(np.float32)


def _buffers(k=50_000):
    return [np.empty(k, np.int64) for _ in range(4)]


def _pairs(a, b, m):
    return sorted(zip(a[:m].tolist(), b[:m].tolist()))


@pytest.mark.parametrize("r0, rb", [(0, 40), (_fused.BOTH_WAYS_TILE - 20, 50), (300, 1)])
def test_both_ways_matches_naive(r0, rb):
    rng = np.random.default_rng(r0 + rb)
    n = _fused.BOTH_WAYS_TILE + 700
    t, lo, hi = _windows(rng, n)
    S = (rng.standard_normal((rb, n)) * 0.1).astype(np.float32)
    for i in range(rb):  # the diagonal sits at its own threshold, sometimes just off it
        S[i, r0 + i] = t[r0 + i] if i % 3 else np.nextafter(hi[r0 + i], np.float32(9))
    for _ in range(300):  # scores inside row and column windows, at the window's edges too
        i, j = int(rng.integers(rb)), int(rng.integers(n))
        S[i, j] = rng.choice([t[j], lo[j], hi[j], t[r0 + i], lo[r0 + i], hi[r0 + i]])
    cnt_r, cnt_c = np.empty(rb, np.int64), np.empty(n, np.int64)
    ri, rj, ci, cj = _buffers()
    nr, nc = _fused.both_ways(S, r0, 0, lo, hi, cnt_r, cnt_c, ri, rj, ci, cj)

    want_r, want_c = np.zeros(rb, np.int64), np.zeros(n, np.int64)
    rows_l, cols_l = [], []
    for i in range(rb):
        g = r0 + i
        for j in range(n):
            v = S[i, j]
            if j == g:
                want_r[i] += 1
                want_c[j] += 1
                continue
            want_r[i] += v > hi[g]
            want_c[j] += v > hi[j]
            if lo[g] <= v <= hi[g]:
                rows_l.append((g, j))
            if lo[j] <= v <= hi[j]:
                cols_l.append((g, j))
    assert np.array_equal(cnt_r, want_r) and np.array_equal(cnt_c, want_c)
    assert (nr, nc) == (len(rows_l), len(cols_l)) and nr > 50 and nc > 50
    assert _pairs(ri, rj, nr) == sorted(rows_l) and _pairs(ci, cj, nc) == sorted(cols_l)


@pytest.mark.parametrize("r0, rb, cuts", [
    (0, 40, [0, 17, 40, 41, _fused.BOTH_WAYS_TILE + 3]),  # the diagonal crosses tile edges
    (_fused.BOTH_WAYS_TILE - 20, 50, [0, _fused.BOTH_WAYS_TILE - 5, _fused.BOTH_WAYS_TILE + 100]),
    (300, 1, [0, 300, 301]),  # a one-column tile holding the diagonal
])
def test_both_ways_in_column_tiles_adds_up_to_whole_rows(r0, rb, cuts):
    """Tiles of columns (``c0`` > 0) give the counts and lists of whole rows once added up."""
    rng = np.random.default_rng(r0 + rb + 1)
    n = _fused.BOTH_WAYS_TILE + 700
    t, lo, hi = _windows(rng, n)
    S = (rng.standard_normal((rb, n)) * 0.1).astype(np.float32)
    for i in range(rb):
        S[i, r0 + i] = t[r0 + i] if i % 3 else np.nextafter(hi[r0 + i], np.float32(9))
    for _ in range(300):
        i, j = int(rng.integers(rb)), int(rng.integers(n))
        S[i, j] = rng.choice([t[j], lo[j], hi[j], t[r0 + i], lo[r0 + i], hi[r0 + i]])
    whole_r, whole_c = np.empty(rb, np.int64), np.empty(n, np.int64)
    b = _buffers()
    nr, nc = _fused.both_ways(S, r0, 0, lo, hi, whole_r, whole_c, *b)
    want_rows, want_cols = _pairs(b[0], b[1], nr), _pairs(b[2], b[3], nc)

    got_r, got_c = np.zeros(rb, np.int64), np.zeros(n, np.int64)
    rows_l, cols_l = [], []
    for c0, c1 in zip(cuts, cuts[1:] + [n]):
        tile = np.ascontiguousarray(S[:, c0:c1])
        cnt_r, cnt_c = np.empty(rb, np.int64), np.empty(c1 - c0, np.int64)
        tb = _buffers()
        tr, tc = _fused.both_ways(tile, r0, c0, lo, hi, cnt_r, cnt_c, *tb)
        got_r += cnt_r
        got_c[c0:c1] += cnt_c
        rows_l += _pairs(tb[0], tb[1], tr)
        cols_l += _pairs(tb[2], tb[3], tc)
    assert np.array_equal(got_r, whole_r) and np.array_equal(got_c, whole_c)
    assert sorted(rows_l) == want_rows and sorted(cols_l) == want_cols and len(want_rows) > 50


def test_rows_against_matches_naive():
    rng = np.random.default_rng(7)
    n, rb = 3000, 30
    S = (rng.standard_normal((rb, n)) * 0.1).astype(np.float32)
    row_of_p = rng.integers(0, rb, 80)
    true_of_p = rng.integers(0, n, 80)
    t = S[row_of_p, true_of_p]
    lo, hi = (t - np.float32(1e-4)).astype(np.float32), (t + np.float32(1e-4)).astype(np.float32)
    for p in range(0, 80, 2):  # plant in-window scores for half the pairs
        S[row_of_p[p], rng.integers(n)] = t[p]
    t = S[row_of_p, true_of_p]
    cnt = np.empty(80, np.int64)
    pp, pj, _, _ = _buffers()
    m = _fused.rows_against(S, row_of_p, true_of_p, lo, hi, cnt, pp, pj)
    want, listed = np.zeros(80, np.int64), []
    for p in range(80):
        for j in range(n):
            v = S[row_of_p[p], j]
            if j == true_of_p[p]:
                want[p] += 1
            elif v > hi[p]:
                want[p] += 1
            elif v >= lo[p]:
                listed.append((p, j))
    assert np.array_equal(cnt, want)
    assert m == len(listed) > 10 and _pairs(pp, pj, m) == sorted(listed)


def test_row_max_candidates_matches_naive():
    rng = np.random.default_rng(3)
    rb, n = 25, 1000 + 7  # not a multiple of the lanes
    S = rng.standard_normal((rb, n)).astype(np.float32)
    S[0, [3, 500, 1006]] = 9.0  # exact ties, one in the remainder
    S[1, 1006] = 9.0  # the maximum in the remainder only
    S[2, [10, 11]] = [9.0, np.nextafter(np.float32(9.0), np.float32(0))]  # within the width
    S[3, :] = -1.0  # all equal
    width = np.float32(1e-5)
    arg, within = np.empty(rb, np.int64), np.empty(rb, np.int64)
    ci, cj, _, _ = _buffers()
    m = _fused.row_max_candidates(S, width, arg, within, ci, cj)
    listed = []
    for i in range(rb):
        best = S[i].max()
        assert arg[i] == int(np.argmax(S[i]))  # the first position of the maximum
        close = np.flatnonzero(S[i] >= best - width)
        assert within[i] == close.size
        if close.size > 1:
            listed += [(i, int(j)) for j in close]
    assert arg[1] == 1006 and within[0] == 3 and within[2] == 2 and within[3] == n
    assert _pairs(ci, cj, m) == sorted(listed)


@pytest.mark.parametrize("case", ["random", "ties", "specials", "empty", "constant", "subnormal"])
def test_radix_order_is_a_stable_sort(case):
    rng = np.random.default_rng(11)
    x = {
        "random": rng.standard_normal(50_000),
        "ties": np.round(rng.standard_normal(50_000), 2),
        "specials": [0.0, -0.0, 1.0, -1.0, 0.0, np.inf, -np.inf, -0.0, 3.4e38, -3.4e38, 1e-45, -1e-45],
        "empty": [],
        "constant": np.full(1000, 3.0),
        "subnormal": rng.integers(-5, 5, 5000) * 1e-45,
    }[case]
    x = np.asarray(x, dtype=np.float32)
    order, first = np.empty(x.size, np.int64), np.empty(x.size, np.bool_)
    groups = _fused.radix_order_f32(x, order, first)
    want = np.argsort(x + np.float32(0.0), kind="stable")  # + 0.0 makes -0.0 equal to 0.0
    assert np.array_equal(order, want)
    sv = x[want] + np.float32(0.0)
    want_first = np.concatenate(([True], sv[1:] != sv[:-1]))[: x.size]
    assert np.array_equal(first, want_first) and groups == int(want_first.sum())
