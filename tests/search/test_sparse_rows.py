"""Sparse rows (TF-IDF, bag of words): the canonical dot product that walks only the nonzero
columns of a row, and the sparse float64 product of ``scores_block``, give the bits of the full
loops (search/exact.py), and every search built on them gives the reference's ranks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref
from edge_of_window import at_edge
from backretrieval.metrics import hubness, xlr_ranks
from backretrieval.metrics.corr import text_side
from backretrieval.search import exact, kernels
from backretrieval.search.exact import dots, pair_scores, row_pattern, scores_block


def sparse_rows(rng, n, d, density, *, signed=True, tied=False):
    """float32 rows with about ``density`` nonzeros (some rows all zero), values whose products
    cancel exactly (+x and -x in the same row) and, with ``tied``, duplicated rows."""
    x = np.zeros((n, d), dtype=np.float32)
    mask = rng.random((n, d)) < density
    vals = rng.choice(np.float32([0.25, 0.5, 1.0, 3.0, 1e-3]), size=(n, d))
    if signed:
        vals = vals * rng.choice(np.float32([-1.0, 1.0]), size=(n, d))
    x[mask] = vals[mask]
    x[0] = 0.0  # an all-zero row: its pattern is empty
    if tied:
        x[n // 2 :] = x[: n - n // 2]
    return x


def test_row_pattern_is_for_sparse_matrices_only():
    rng = np.random.default_rng(0)
    assert row_pattern(rng.standard_normal((20, 512)).astype(np.float32)) is None  # dense
    assert row_pattern(sparse_rows(rng, 20, 32, 0.05)) is None  # narrow: the full loop is as cheap
    x = sparse_rows(rng, 20, 200, 0.05)
    p = row_pattern(x)
    for i in range(x.shape[0]):
        np.testing.assert_array_equal(p.indices[p.indptr[i] : p.indptr[i + 1]], np.flatnonzero(x[i]))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), density=st.sampled_from([0.0, 0.01, 0.05, 0.2]), signed=st.booleans(),
       which=st.sampled_from(["both", "query", "item"]))
def test_sparse_dots_have_the_bits_of_the_full_loop(seed, density, signed, which):
    rng = np.random.default_rng(seed)
    A = sparse_rows(rng, 12, 96, density, signed=signed)
    B = sparse_rows(rng, 10, 96, density, signed=signed)
    B[3] = -A[5]  # a pair whose products cancel to exactly zero
    B[4] = A[5]
    qi, dj = np.repeat(np.arange(12), 10), np.tile(np.arange(10), 12)
    pa = row_pattern(A) if which != "item" else None
    pb = row_pattern(B) if which != "query" else None
    want = np.array([ref.dot(A[i], B[j]) for i, j in zip(qi, dj)])
    for patterns in [(pa, pb), (exact.RowPattern(*_full(A)), pb), (None, None)]:
        got = dots(A, B, qi, dj, patterns)
        np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))  # the same bits, signs of zero too


def _full(x):
    """A pattern listing every column (valid: it includes the nonzeros)."""
    n, d = x.shape
    return np.arange(0, n * d + 1, d, dtype=np.int64), np.tile(np.arange(d, dtype=np.int32), n)


@pytest.mark.parametrize("biased", [False, True])
def test_sparse_scores_block_equals_the_reference(biased):
    rng = np.random.default_rng(3)
    Q, D = sparse_rows(rng, 15, 130, 0.05, tied=True), sparse_rows(rng, 11, 130, 0.05, tied=True)
    Q[0, 7] = 2.0  # no all-zero row: cosine needs a norm
    D[0, 9] = 1.0
    assert row_pattern(Q) is not None and row_pattern(D) is not None
    kw = {"scale": 2.0, "q_bias": rng.uniform(0, 0.5, 15), "d_bias": rng.uniform(0, 0.5, 11)} if biased else {}
    want = ref.scores(Q, D, **kw)
    np.testing.assert_array_equal(scores_block(Q, D, **kw), want)
    qi, dj = np.repeat(np.arange(15), 11), np.tile(np.arange(11), 15)
    got = pair_scores(Q, D, qi, dj, patterns=(row_pattern(Q), row_pattern(D)), **kw)
    np.testing.assert_array_equal(got, want.ravel())


def test_sparse_scores_block_falls_back_to_the_canonical_route(monkeypatch):
    rng = np.random.default_rng(4)
    Q, D = sparse_rows(rng, 12, 100, 0.1, tied=True), sparse_rows(rng, 9, 100, 0.1, tied=True)
    Q[0, 1] = D[0, 2] = 1.0
    monkeypatch.setattr(exact, "U64", 1e-3)  # every element undecided: all computed pair by pair
    np.testing.assert_array_equal(scores_block(Q, D), ref.scores(Q, D))


def tfidf_like(rng, n, d):
    """Unit rows shaped like tfidf-char: a few dozen positive n-gram weights, a constant bias
    column, and a block of identical rows (texts with no known n-gram)."""
    x = np.zeros((n, d), dtype=np.float32)
    for i in range(n):
        cols = rng.choice(d - 1, size=int(rng.integers(5, 30)), replace=False)
        x[i, cols] = rng.random(cols.size).astype(np.float32)
    x[: n // 5, :-1] = 0.0  # out-of-vocabulary texts: only the bias column
    x[:, -1] = 1e-3
    return exact.l2_normalize(x)


def test_searches_on_sparse_rows_equal_the_reference():
    """XLR's ranks, hubness and CORR's text half on TF-IDF-like rows (many exact ties) equal the
    slow reference: the sparse canonical route decides every near-tie like the full loop."""
    rng = np.random.default_rng(5)
    S, T = tfidf_like(rng, 60, 257), tfidf_like(rng, 60, 257)
    assert row_pattern(S) is not None
    fwd, bwd = xlr_ranks(S, T)
    s = ref.scores(S, T)
    np.testing.assert_array_equal(fwd, (s >= np.diag(s)[:, None]).sum(axis=1))
    np.testing.assert_array_equal(bwd, (s >= np.diag(s)[None, :]).sum(axis=0))
    h = hubness(S, T, 5)
    assert np.isfinite(list(h.values())).all()
    side = text_side(S, T)
    flat = ref.scores(exact.l2_normalize(S), exact.l2_normalize(T)).ravel()
    from scipy.stats import rankdata

    r = rankdata(flat)
    z = (r - r.mean()) / np.sqrt(np.sum((r - r.mean()) ** 2))
    np.testing.assert_allclose(side.z, z, rtol=0, atol=1e-12)


def test_sparse_decisions_survive_a_perturbed_fast_pass():
    """The sparse fast product at the edge of its window (every fast score almost tau away from
    the canonical one, tests/edge_of_window.py) changes no rank: every near-tie is re-decided on
    canonical scores. A window 0.8x too narrow changes them."""
    rng = np.random.default_rng(6)
    S, T = tfidf_like(rng, 80, 300), tfidf_like(rng, 80, 300)
    T[40:] = S[40:]  # exact ties across the sides too
    si, ti = rng.standard_normal((80, 5)).astype(np.float32), rng.standard_normal((80, 5)).astype(np.float32)
    from backretrieval.metrics import bkr_ranks

    def run():
        return xlr_ranks(S, T), bkr_ranks(S, T, si, ti)[0], hubness(S, T, 5), kernels.topk(S, T, 5)

    def same(a, b):
        return (all(np.array_equal(x, y) for x, y in zip(a[0] + (a[1],), b[0] + (b[1],))) and a[2] == b[2]
                and all(np.array_equal(x, y) for x, y in zip(a[3], b[3])))

    clean = run()
    calls = []
    with at_edge(7, calls=calls):
        noisy = run()
    assert sum(route == "sparse" for route, _ in calls) >= 4  # every text search above took the sparse route
    assert same(clean, noisy)
    with at_edge(7, shrink=0.8):
        narrow = run()
    assert not np.array_equal(clean[0][0], narrow[0][0]) and not np.array_equal(clean[0][1], narrow[0][1])
    assert not same(clean, narrow)
    s = ref.scores(S, T)
    np.testing.assert_array_equal(clean[0][0], (s >= np.diag(s)[:, None]).sum(axis=1))
