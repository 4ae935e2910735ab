"""Fast metrics against the naive references in tests/reference.py, on random data, data with
exact ties, and small blocks (so the blocked code paths are exercised)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import reference as ref
from backretrieval.core import MetricInputError
from backretrieval.metrics import (
    bkr, bkr_ranks, bootstrap_row_weights, corr, corr_bootstrap, corr_details, csls, hubness, image_side,
    text_side, xlr, xlr_ranks,
)
from backretrieval.search import average_ranks, nearest_with_ties, rank_of_true, ranks_both_ways, sort_order, topk, weighted_average_ranks


def rand(rng, n, d):
    return rng.standard_normal((n, d)).astype(np.float32)


def tied(rng, n, d, distinct):
    """Rows drawn from ``distinct`` sign patterns in {-1, 1}^d: many exact duplicates, and every
    dot product exact in float32 (d a power of 4, so unit rows have entries +-2^-k)."""
    base = rng.choice([-1.0, 1.0], size=(distinct, d)).astype(np.float32)
    return base[rng.integers(0, distinct, size=n)]


# --------------------------------------------------------------------------- search kernels

@settings(max_examples=40, deadline=None)
@given(n_q=st.integers(1, 40), n_d=st.integers(1, 40), d=st.sampled_from([4, 16]), seed=st.integers(0, 10**6),
       block=st.sampled_from([4, 64, 10**9]), ties=st.booleans())
def test_topk_matches_sorted_reference(n_q, n_d, d, seed, block, ties):
    rng = np.random.default_rng(seed)
    Q = tied(rng, n_q, d, 3) if ties else rand(rng, n_q, d)
    D = tied(rng, n_d, d, 3) if ties else rand(rng, n_d, d)
    k = int(rng.integers(1, n_d + 1))
    s_fast, i_fast = topk(Q, D, k, block_bytes=block)
    full = ref.scores(Q, D)
    for r in range(n_q):
        want = sorted(range(n_d), key=lambda j: (-full[r, j], j))[:k]
        assert list(i_fast[r]) == want
        np.testing.assert_array_equal(s_fast[r], full[r, want])  # the canonical scores, bit for bit


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), d=st.sampled_from([4, 16]), seed=st.integers(0, 10**6), block=st.sampled_from([4, 64, 10**9]))
def test_nearest_with_ties_returns_every_maximiser(n, d, seed, block):
    rng = np.random.default_rng(seed)
    Q, D = tied(rng, n, d, 2), tied(rng, n + 3, d, 2)
    indptr, idx = nearest_with_ties(Q, D, block_bytes=block)
    full = ref.scores(Q, D)
    for r in range(n):
        assert list(idx[indptr[r]:indptr[r + 1]]) == list(np.flatnonzero(full[r] == full[r].max()))


def test_rank_of_true_is_pessimistic():
    Q = np.ones((1, 4), np.float32)
    D = np.ones((5, 4), np.float32)  # all five candidates tie
    assert rank_of_true(Q, D, np.array([2]))[0] == 5


# --------------------------------------------------------------------------- XLR

@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 30), d=st.sampled_from([4, 16]), seed=st.integers(0, 10**6),
       block=st.sampled_from([16, 256, 10**9]), ties=st.booleans())
def test_xlr_ranks_match_reference(n, d, seed, block, ties):
    rng = np.random.default_rng(seed)
    src = tied(rng, n, d, 4) if ties else rand(rng, n, d)
    tgt = tied(rng, n, d, 4) if ties else src + 0.8 * rand(rng, n, d)
    fwd, bwd = xlr_ranks(src, tgt, block_bytes=block)
    rf, rb = ref.xlr_ranks(src, tgt)
    assert fwd.tolist() == rf.tolist()
    assert bwd.tolist() == rb.tolist()


def csr_lists(offsets, targets):
    """CSR arrays as one list of target rows per query."""
    assert offsets[0] == 0 and offsets[-1] == len(targets) and (np.diff(offsets) >= 1).all()
    return [targets[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 30), d=st.sampled_from([4, 16]), seed=st.integers(0, 10**6),
       block=st.sampled_from([16, 256, 10**9]), ties=st.booleans(), sim=st.sampled_from(["cosine", "csls"]))
def test_xlr_nearest_targets_match_reference(n, d, seed, block, ties, sim):
    rng = np.random.default_rng(seed)
    src = tied(rng, n, d, 3) if ties else rand(rng, n, d)
    tgt = tied(rng, n, d, 3) if ties else src + 0.8 * rand(rng, n, d)
    k = min(3, n)
    fwd, bwd, offsets, targets = xlr_ranks(src, tgt, sim=sim, csls_k=k, block_bytes=block, return_nearest=True)
    assert csr_lists(offsets, targets) == ref.nearest_with_ties(src, tgt, sim, k)
    # the ranks are the default call's, and rank 1 means the partner is the one nearest target
    f0, b0 = xlr_ranks(src, tgt, sim=sim, csls_k=k, block_bytes=block)
    assert fwd.tolist() == f0.tolist() and bwd.tolist() == b0.tolist()
    assert [r == 1 for r in fwd.tolist()] == [lst == [i] for i, lst in enumerate(csr_lists(offsets, targets))]


def test_xlr_nearest_keeps_every_forced_tie():
    src = np.array([[1, 0], [0, 1]], np.float32)
    tgt = np.array([[1, 0], [1, 0], [0, 1]], np.float32)[[0, 2]]  # no tie: each source its own target
    _, _, off, tg = xlr_ranks(src, tgt, return_nearest=True)
    assert csr_lists(off, tg) == [[0], [1]]
    tgt = np.array([[2, 0], [1, 0]], np.float32)  # same direction, so equal cosines: both tie for source 0
    fwd, _, off, tg = xlr_ranks(src, tgt, return_nearest=True)
    assert csr_lists(off, tg)[0] == [0, 1] and fwd[0] == 2


@pytest.mark.parametrize("seed", range(5))
def test_xlr_csls_matches_reference(seed):
    rng = np.random.default_rng(seed)
    src = rand(rng, 60, 8)
    tgt = src + rand(rng, 60, 8)
    fwd, bwd = xlr_ranks(src, tgt, sim="csls", csls_k=5, block_bytes=512)
    rf, rb = ref.xlr_ranks(src, tgt, sim="csls", k=5)
    assert fwd.tolist() == rf.tolist()
    assert bwd.tolist() == rb.tolist()
    np.testing.assert_array_equal(csls(src, tgt, 5), ref.sim_matrix(src, tgt, "csls", 5))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), d=st.sampled_from([4, 16]), seed=st.integers(0, 10**6), ties=st.booleans(),
       block=st.sampled_from([4, 64, 10**9]), biased=st.booleans())
def test_ranks_both_ways_equal_two_one_way_passes(n, d, seed, ties, block, biased):
    rng = np.random.default_rng(seed)
    Q = ref.unit(tied(rng, n, d, 3) if ties else rand(rng, n, d))
    D = ref.unit(tied(rng, n, d, 3) if ties else rand(rng, n, d))
    kw = {}
    if biased:  # CSLS-shaped scores: 2 <q, d> - r(q) - r(d)
        kw = {"scale": 2.0, "q_bias": rng.uniform(0, 0.5, n).astype(np.float32), "d_bias": rng.uniform(0, 0.5, n).astype(np.float32)}
    fwd, bwd = ranks_both_ways(Q, D, block_bytes=block, **kw)
    s = ref.scores(Q, D, **kw)
    assert fwd.tolist() == [ref.pessimistic_rank(s[i], i) for i in range(n)]
    assert bwd.tolist() == [ref.pessimistic_rank(s[:, j], j) for j in range(n)]
    rt = rank_of_true(Q, D, np.arange(n), block_bytes=block, **kw)
    assert rt.tolist() == fwd.tolist()


def test_xlr_values_and_keys():
    rng = np.random.default_rng(0)
    src = rand(rng, 50, 16)
    out = xlr(src, src + 0.5 * rand(rng, 50, 16), ks=(1, 5, 10))
    assert set(out) >= {"xlr@1", "xlr@5", "xlr@10", "xlr_mrr", "xlr_median_rank", "xlr_t2s@1", "xlr_t2s_mrr"}
    assert 0 <= out["xlr@1"] <= out["xlr@5"] <= out["xlr@10"] <= 1
    assert xlr(src, src)["xlr@1"] == 1.0


def test_xlr_constant_embeddings_never_rewarded():
    x = np.ones((20, 8), np.float32)
    out = xlr(x, x, ks=(1, 10))
    assert out["xlr@1"] == 0.0 and out["xlr@10"] == 0.0 and out["xlr_median_rank"] == 20


# --------------------------------------------------------------------------- BkR

@settings(max_examples=30, deadline=None)
@given(n_s=st.integers(2, 25), n_t=st.integers(2, 25), seed=st.integers(0, 10**6),
       block=st.sampled_from([16, 256, 10**9]), ties=st.booleans())
def test_bkr_ranks_match_reference(n_s, n_t, seed, block, ties):
    rng = np.random.default_rng(seed)
    if ties:
        st_, tt = tied(rng, n_s, 16, 3), tied(rng, n_t, 16, 3)
        si, ti = tied(rng, n_s, 4, 3), tied(rng, n_t, 4, 3)
    else:
        st_, tt, si, ti = rand(rng, n_s, 8), rand(rng, n_t, 8), rand(rng, n_s, 6), rand(rng, n_t, 6)
    fast, _ = bkr_ranks(st_, tt, si, ti, block_bytes=block)
    assert fast.tolist() == ref.bkr_ranks(st_, tt, si, ti).tolist()


@settings(max_examples=30, deadline=None)
@given(n_s=st.integers(2, 25), n_t=st.integers(2, 25), seed=st.integers(0, 10**6),
       block=st.sampled_from([16, 256, 10**9]), ties=st.booleans(), sim=st.sampled_from(["cosine", "csls"]))
def test_bkr_retrieved_ties_match_reference(n_s, n_t, seed, block, ties, sim):
    rng = np.random.default_rng(seed)
    if ties:  # few distinct rows: many queries retrieve several tied targets
        st_, tt = tied(rng, n_s, 16, 3), tied(rng, n_t, 16, 3)
        si, ti = tied(rng, n_s, 4, 3), tied(rng, n_t, 4, 3)
    else:
        st_, tt, si, ti = rand(rng, n_s, 8), rand(rng, n_t, 8), rand(rng, n_s, 6), rand(rng, n_t, 6)
    k = min(3, n_s, n_t)
    ranks, offsets, targets = bkr_ranks(st_, tt, si, ti, sim=sim, csls_k=k, block_bytes=block, return_ties=True)
    expected = ref.nearest_with_ties(st_, tt, sim, k)
    assert csr_lists(offsets, targets) == expected
    assert ranks.tolist() == ref.bkr_ranks(st_, tt, si, ti, sim=sim, k=k).tolist()
    # the default return: the same ranks and the first (lowest-index) tied target
    r0, first = bkr_ranks(st_, tt, si, ti, sim=sim, csls_k=k, block_bytes=block)
    assert r0.tolist() == ranks.tolist() and first.tolist() == [lst[0] for lst in expected]


@pytest.mark.parametrize("seed", range(4))
def test_bkr_csls_matches_reference(seed):
    rng = np.random.default_rng(seed)
    st_, tt, si, ti = rand(rng, 40, 8), rand(rng, 35, 8), rand(rng, 40, 5), rand(rng, 35, 5)
    fast, _ = bkr_ranks(st_, tt, si, ti, sim="csls", csls_k=3, block_bytes=300)
    assert fast.tolist() == ref.bkr_ranks(st_, tt, si, ti, sim="csls", k=3).tolist()


def test_bkr_perfect_and_summary():
    rng = np.random.default_rng(1)
    concepts_img = rand(rng, 30, 12)
    text = rand(rng, 30, 16)
    # source and target describe the same 30 concepts in shuffled order: a perfect text model
    perm = rng.permutation(30)
    out = bkr(text, text[perm], concepts_img, concepts_img[perm], ks=(1, 10))
    assert out["bkr@1"] == 1.0 and out["bkr_mrr"] == 1.0 and out["bkr_median_rank"] == 1.0


def test_bkr_tie_in_retrieval_takes_worst_target():
    # query 0's text ties between targets 0 and 1; target 0's image is the query's, target 1's is not
    src_text = np.array([[1, 0]], np.float32).repeat(3, 0) + np.array([[0, 0], [0, 5], [0, -5]], np.float32)
    tgt_text = np.array([[1, 0], [1, 0], [0, 1]], np.float32)
    src_img = np.eye(3, dtype=np.float32)
    tgt_img = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float32)
    ranks, retrieved = bkr_ranks(src_text, tgt_text, src_img, tgt_img)
    # target 1's image equals source image 1: query 0 ranks behind it, the tie ranks 0 and 2 last
    assert ranks[0] == ref.bkr_ranks(src_text, tgt_text, src_img, tgt_img)[0] == 3
    assert retrieved[0] == 0
    _, offsets, targets = bkr_ranks(src_text, tgt_text, src_img, tgt_img, return_ties=True)
    assert targets[offsets[0]:offsets[1]].tolist() == [0, 1]  # both tied targets, as step 3 follows them


def tile_border_data(rng, n_s=1300, n_t=1200, d=16, e=8):
    """BkR inputs whose searches need more than one tile both ways at ``TILED_BLOCK`` bytes: more
    than 1,024 queries (two row tiles of the text step) and more than 1,024 distinct retrieved
    targets (two row tiles of the image step; targets are noisy copies of sources, so most are
    retrieved), with exact ties straddling the borders of tiles: duplicate targets at columns
    299/300 and 599/600 (column borders of every thread count's tiles, multiples of 75) that are
    copies of queries 1,023 and 1,024 (the two sides of the row border), a duplicate pair at
    targets 1,023/1,024 (the image step's row border), and duplicate source images at
    299/300, 599/600 and 1,199/1,200."""
    st_, si = rand(rng, n_s, d), rand(rng, n_s, e)
    pick = rng.permutation(n_s)[:n_t]
    tt = st_[pick] + 0.05 * rand(rng, n_t, d)
    ti = si[pick] + 0.5 * rand(rng, n_t, e)
    tt[299] = tt[300] = st_[1023]
    tt[599] = tt[600] = st_[1024]
    tt[1024] = tt[1023]
    for a in (299, 599, 1199):
        si[a + 1] = si[a]
    return st_, tt, si, ti


TILED_BLOCK = 4 * 1024 * 300  # 1,024-row tiles of at most 300 columns (fewer per thread)


@pytest.mark.parametrize("seed", range(3))
def test_vectorised_bkr_reference_equals_the_loops(seed):
    rng = np.random.default_rng(seed)
    st_, tt, si, ti = tied(rng, 25, 16, 4), tied(rng, 20, 16, 4), tied(rng, 25, 4, 3), tied(rng, 20, 4, 3)
    for sim in ("cosine", "csls"):
        assert ref.bkr_ranks_vec(st_, tt, si, ti, sim, 3)[0].tolist() == ref.bkr_ranks(st_, tt, si, ti, sim, 3).tolist()


@pytest.mark.parametrize("sim", ["cosine", "csls"])
def test_bkr_in_tiles_matches_reference_with_ties_on_tile_borders(sim):
    """BkR's text step (row maxima) and image step in tiles of rows x columns: the ranks and the
    retrieved targets equal the reference's, ties across tile borders included; the fast pass at
    the edge of its window changes nothing."""
    from edge_of_window import at_edge

    rng = np.random.default_rng(11)
    st_, tt, si, ti = tile_border_data(rng)
    want, want_retrieved = ref.bkr_ranks_vec(st_, tt, si, ti, sim, 5)
    # the ties are really there: both copies are maximisers, and ranks count tied images
    for q, pair in ((1023, (299, 300)), (1024, (599, 600))):
        s = ref.scores_vec(ref.unit_vec(st_[q : q + 1]), ref.unit_vec(tt))[0]
        assert set(np.flatnonzero(s == s.max())) >= set(pair)
    assert want[[299, 300, 599, 600, 1199, 1200]].min() >= 2  # each of these images has an exact twin
    calls: list = []
    with at_edge(3, calls=calls):
        edge, edge_retrieved = bkr_ranks(st_, tt, si, ti, sim=sim, csls_k=5, block_bytes=TILED_BLOCK)
    ranks, retrieved = bkr_ranks(st_, tt, si, ti, sim=sim, csls_k=5, block_bytes=TILED_BLOCK)
    assert np.unique(retrieved).size > 1024
    assert ranks.tolist() == want.tolist() == edge.tolist()
    assert retrieved.tolist() == want_retrieved.tolist() == edge_retrieved.tolist()
    # more than one tile both ways, in both steps (CSLS's penalties add whole-row top-k blocks)
    text = [shape for route, shape in calls if route == "dense" and shape[1] < len(tt)]
    image = [shape for route, shape in calls if route == "gemm"]
    for tiles, n_cols in ((text, len(tt)), (image, len(si))):
        assert {r for r, _ in tiles} >= {1024} and any(r < 1024 for r, _ in tiles)
        assert max(c for _, c in tiles) <= 300 and sum(c for r, c in tiles if r == 1024) == n_cols


@pytest.mark.parametrize("sim", ["cosine", "csls"])
def test_xlr_in_tiles_finds_nearest_in_the_ranks_pass(sim):
    """XLR's ranks and nearest targets from one pass in tiles of rows x columns (1,300 aligned
    rows at ``TILED_BLOCK``): equal to the reference, with exact ties straddling row and column
    tile borders, and to ``nearest_with_ties``' own pass; the fast pass at the edge of its
    window changes nothing."""
    from edge_of_window import at_edge

    rng = np.random.default_rng(12)
    n, d = 1300, 16
    src = rand(rng, n, d)
    tgt = src + 0.3 * rand(rng, n, d)
    tgt[299] = tgt[300] = src[1023]  # query 1,023 (last row of the first row tile) ties across columns 299/300
    tgt[599] = tgt[600] = src[1024]  # query 1,024 (first row of the second) across 599/600
    Q, D = ref.unit_vec(src), ref.unit_vec(tgt)
    if sim == "cosine":
        s = ref.scores_vec(Q, D)
    else:
        s = ref.scores_vec(Q, D, 2.0, ref.knn_mean_vec(Q, D, 5), ref.knn_mean_vec(D, Q, 5))
    want_near = [np.flatnonzero(row == row.max()).tolist() for row in s]
    assert want_near[1023] == [299, 300] and want_near[1024] == [599, 600]
    want_fwd = (s >= np.diag(s)[:, None]).sum(1)
    want_bwd = (s >= np.diag(s)[None, :]).sum(0)
    calls: list = []
    with at_edge(5, calls=calls):
        edge = xlr_ranks(src, tgt, sim=sim, csls_k=5, block_bytes=TILED_BLOCK, return_nearest=True)
    fwd, bwd, off, tg = xlr_ranks(src, tgt, sim=sim, csls_k=5, block_bytes=TILED_BLOCK, return_nearest=True)
    assert fwd.tolist() == want_fwd.tolist() == edge[0].tolist()
    assert bwd.tolist() == want_bwd.tolist() == edge[1].tolist()
    assert csr_lists(off, tg) == want_near == csr_lists(edge[2], edge[3])
    if sim == "cosine":
        indptr, idx = nearest_with_ties(Q, D, block_bytes=TILED_BLOCK)
        assert csr_lists(indptr, idx) == want_near
    tiles = [shape for route, shape in calls if route == "dense" and shape[1] < n]
    assert {r for r, _ in tiles} >= {1024} and any(r < 1024 for r, _ in tiles)
    assert max(c for _, c in tiles) <= 300


def test_bkr_random_model_near_k_over_n():
    rng = np.random.default_rng(0)
    n, k = 2000, 10
    img = rand(rng, 2 * n, 32)
    vals = [bkr(rand(rng, n, 64), rand(rng, n, 64), img[:n], img[n:], ks=(k,))["bkr@10"] for _ in range(3)]
    assert abs(np.mean(vals) - k / n) < 3 * k / n


# --------------------------------------------------------------------------- CORR, hubness

_SPECIAL = [0.0, -0.0, 1.0, -1.0, 1 + 2**-52, 1 - 2**-53, 5e-324, -5e-324, 1e-300, 1e300, np.inf, -np.inf]


@given(
    values=st.lists(st.one_of(st.floats(allow_nan=False, width=64), st.sampled_from(_SPECIAL)), min_size=0, max_size=200)
)
@settings(max_examples=300, deadline=None)
def test_average_ranks_equal_scipy_rankdata(values):
    x = np.array(values, dtype=np.float64)
    np.testing.assert_array_equal(average_ranks(x), stats.rankdata(x) if x.size else np.empty(0))


@pytest.mark.parametrize("n, decimals", [(300_000, None), (300_000, 3)])
def test_average_ranks_on_many_values_with_near_ties(n, decimals):
    """Enough values that many differ only in their lowest mantissa bits (the bits the packed
    sort drops), with and without exact ties."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n)
    x[: n // 10] = x[n // 10 : n // 5] * (1 + 2**-50)  # neighbours 1 ulp-ish apart
    if decimals is not None:
        x = np.round(x, decimals)
    np.testing.assert_array_equal(average_ranks(x), stats.rankdata(x))


@pytest.mark.parametrize("seed", range(3))
def test_corr_matches_reference(seed):
    rng = np.random.default_rng(seed)
    st_, tt, si, ti = rand(rng, 25, 6), rand(rng, 20, 6), rand(rng, 25, 4), rand(rng, 20, 4)
    assert corr(st_, tt, si, ti) == pytest.approx(ref.corr(st_, tt, si, ti), abs=1e-9)


def test_corr_with_ties_matches_reference():
    rng = np.random.default_rng(3)
    st_, tt, si, ti = tied(rng, 15, 4, 3), tied(rng, 12, 4, 3), tied(rng, 15, 4, 2), tied(rng, 12, 4, 2)
    assert corr(st_, tt, si, ti) == pytest.approx(ref.corr(st_, tt, si, ti), abs=1e-9)


def test_corr_subsample_is_seeded_and_close():
    rng = np.random.default_rng(0)
    base = rand(rng, 300, 8)
    st_, tt = base[:150], base[150:]
    si, ti = st_ + 0.3 * rand(rng, 150, 8), tt + 0.3 * rand(rng, 150, 8)
    full = corr_details(st_, tt, si, ti)
    a = corr_details(st_, tt, si, ti, max_pairs=5000, seed=1)
    b = corr_details(st_, tt, si, ti, max_pairs=5000, seed=1)
    assert full["corr_subsampled"] == 0 and a["corr_subsampled"] == 1 and a["corr_pairs"] == 5000
    assert a == b
    assert abs(a["corr"] - full["corr"]) < 0.05


@pytest.mark.parametrize("ties", [False, True])
def test_hubness_matches_reference(ties):
    rng = np.random.default_rng(5)
    src = tied(rng, 40, 16, 5) if ties else rand(rng, 40, 8)
    tgt = tied(rng, 30, 16, 5) if ties else rand(rng, 30, 8)
    occ = ref.k_occurrence(src, tgt, 5)
    out = hubness(src, tgt, 5, block_bytes=400)
    assert out["hubness_skew@5"] == pytest.approx(stats.skew(occ) if occ.std() > 0 else 0.0)
    assert out["hub_max@5"] == occ.max() / 5
    assert out["antihub_share@5"] == np.mean(occ == 0)


# --------------------------------------------------------------------------- bad input

def test_bad_inputs_are_named():
    rng = np.random.default_rng(0)
    a, b = rand(rng, 10, 4), rand(rng, 10, 4)
    with pytest.raises(MetricInputError, match="dimension mismatch"):
        xlr(a, rand(rng, 10, 5))
    nan = a.copy(); nan[3, 1] = np.nan
    with pytest.raises(MetricInputError, match="row 3"):
        xlr(nan, b)
    zero = a.copy(); zero[7] = 0
    with pytest.raises(MetricInputError, match="all-zero vector in row 7"):
        bkr(a, b, zero, b)
    with pytest.raises(MetricInputError, match="K=11 is larger than the number of candidates N=10"):
        xlr(a, b, ks=(1, 11))
    with pytest.raises(MetricInputError, match="K=11"):
        bkr(a, b, a, b, ks=(11,))
    with pytest.raises(MetricInputError, match="aligned"):
        xlr(a, b[:9])
    with pytest.raises(MetricInputError, match="unknown similarity"):
        xlr(a, b, sim="euclidean")
    with pytest.raises(MetricInputError, match="rows must be aligned"):
        bkr(a, b, a[:9], b)


def test_weighted_average_ranks_equal_ranks_of_the_expanded_multiset():
    rng = np.random.default_rng(4)
    for ties in (False, True):
        x = rng.standard_normal(300)
        if ties:
            x = np.round(x, 1)
        w = rng.integers(0, 4, x.size).astype(np.float64)
        order, starts = sort_order(x)
        got = weighted_average_ranks(order, starts, w[order])
        expanded = np.repeat(x, w.astype(int))
        ranks = stats.rankdata(expanded)
        first = np.concatenate(([0], np.cumsum(w.astype(int))[:-1]))
        keep = w > 0
        np.testing.assert_allclose(got[keep], ranks[first[keep]])


def test_corr_bootstrap_equals_spearman_of_resampled_rows():
    """Each replicate equals scipy's Spearman on the explicitly resampled pairs (rows repeated)."""
    rng = np.random.default_rng(6)
    n_s, n_t = 25, 18
    st_, tt = rand(rng, n_s, 6), rand(rng, n_t, 6)
    si, ti = st_[:, :4] + 0.5 * rand(rng, n_s, 4), tt[:, :4] + 0.5 * rand(rng, n_t, 4)
    st_[3] = st_[4]  # a tie on the text side
    text = text_side(st_, tt, keep_order=True)
    img = image_side(si, ti, keep_order=True)
    weights = bootstrap_row_weights(n_s, 5, seed=1)
    boot = corr_bootstrap({"m": text}, img, n_s, n_t, weights)["m"]
    for b, w in enumerate(weights):
        rows = np.repeat(np.arange(n_s), w.astype(int))
        expected = ref.corr(st_[rows], tt, si[rows], ti)
        assert boot[b] == pytest.approx(expected, abs=1e-9)
    # the same seed gives the same resamples (paired across models)
    np.testing.assert_array_equal(weights, bootstrap_row_weights(n_s, 5, seed=1))


@given(values=st.lists(st.one_of(st.floats(allow_nan=False, width=32), st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, np.inf, -np.inf])),
                       min_size=0, max_size=200))
@settings(max_examples=300, deadline=None)
def test_float32_sort_order_is_exact_and_stable(values):
    x = np.array(values, dtype=np.float32)
    order, starts = sort_order(x)
    assert order.tolist() == np.argsort(x.astype(np.float64), kind="stable").tolist()
    np.testing.assert_array_equal(average_ranks(x), stats.rankdata(x) if x.size else np.empty(0))
