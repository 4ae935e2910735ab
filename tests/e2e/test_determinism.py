"""Same numbers everywhere: no decision depends on the bits BLAS produced.

1. The canonical arithmetic (``search.exact``) equals the slow reference of tests/reference.py.
2. Every kernel and metric gives the same result when the fast float32 pass is perturbed to the
   edge of its documented error bound -- every fast score almost the whole window away from the
   canonical one, what another BLAS, thread count or block shape could at worst do -- on data
   full of exact and sub-ulp near ties; and a window even 1% too narrow changes decisions.
3. The evaluation grid on real data with many ties (emoji-cldr keywords, character n-grams,
   colour-histogram images) gives identical records with 1 and 2 BLAS threads, tiny and default
   blocks, and the local and process executors (the Ray executor: tests/analysis/test_ray.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref
from edge_of_window import at_edge
from backretrieval.metrics import bkr_ranks, csls, hubness, xlr_ranks
from backretrieval.search import blocks, exact, nearest_with_ties, rank_of_true, ranks_both_ways, topk
from backretrieval.search.exact import pair_scores, scores_block, unit_rows_exact


def near_tied(rng, n, d, distinct):
    """Rows copied from ``distinct`` base vectors, a third of them nudged by one ulp in a few
    components: exact ties and ties closer than BLAS's rounding error."""
    base = rng.standard_normal((distinct, d)).astype(np.float32)
    x = base[rng.integers(0, distinct, n)].copy()
    for i in rng.choice(n, size=max(1, n // 3), replace=False):
        cols = rng.choice(d, size=min(d, 3), replace=False)
        x[i, cols] = np.nextafter(x[i, cols], np.where(rng.random(cols.size) < 0.5, np.inf, -np.inf).astype(np.float32))
    return x


def data(rng, kind, n, d):
    if kind == "random":
        return rng.standard_normal((n, d)).astype(np.float32)
    return near_tied(rng, n, d, max(1, n // 4))


# --------------------------------------------------------------------------- canonical arithmetic

@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), d=st.sampled_from([1, 3, 8, 33]), kind=st.sampled_from(["random", "tied"]),
       biased=st.booleans())
def test_canonical_scores_equal_the_slow_reference(seed, d, kind, biased):
    rng = np.random.default_rng(seed)
    Q, D = data(rng, kind, 9, d), data(rng, kind, 7, d)
    Q[0] *= 1000.0  # rows far from unit norm are fine too
    kw = {}
    if biased:
        kw = {"scale": 2.0, "q_bias": rng.uniform(0, 0.5, 9), "d_bias": rng.uniform(0, 0.5, 7).astype(np.float32)}
    want = ref.scores(Q, D, **kw)
    np.testing.assert_array_equal(scores_block(Q, D, **kw), want)
    qi, dj = np.repeat(np.arange(9), 7), np.tile(np.arange(7), 9)
    np.testing.assert_array_equal(pair_scores(Q, D, qi, dj, **kw), want.ravel())
    np.testing.assert_array_equal(unit_rows_exact(Q), ref.unit(Q, tol=0.0))
    np.testing.assert_array_equal(unit_rows_exact(Q, tol=1e-5), ref.unit(Q))


def test_scores_block_falls_back_to_the_canonical_route_when_float64_cannot_decide(monkeypatch):
    rng = np.random.default_rng(0)
    Q, D = near_tied(rng, 20, 16, 5), near_tied(rng, 15, 16, 5)
    monkeypatch.setattr(exact, "U64", 1e-3)  # pretend float64 were coarse: every element undecided
    np.testing.assert_array_equal(scores_block(Q, D), ref.scores(Q, D))


def test_unit_rows_keeps_unit_rows_without_copying():
    x = unit_rows_exact(np.random.default_rng(1).standard_normal((50, 16)).astype(np.float32))
    assert unit_rows_exact(x, tol=1e-5) is x
    y = x.copy()
    y[3] *= 2
    out = unit_rows_exact(y, tol=1e-5)
    assert out is not y and np.array_equal(out[:3], x[:3]) and np.array_equal(out[3], ref.unit(y[3:4])[0])


def test_unit_rows_in_place_gives_the_same_bits():
    y = np.random.default_rng(3).standard_normal((40, 24)).astype(np.float32)
    y[5] = 0.0
    want = unit_rows_exact(y)
    z = y.copy()
    assert unit_rows_exact(z, out=z) is z
    np.testing.assert_array_equal(z, want)
    with pytest.raises(ValueError, match="out must be"):
        unit_rows_exact(y, out=np.empty((40, 24), dtype=np.float64))


def test_fast_pass_error_stays_within_the_bound():
    rng = np.random.default_rng(2)
    for d in (8, 512, 1280):
        Q = unit_rows_exact(rng.standard_normal((300, d)).astype(np.float32))
        D = unit_rows_exact(rng.standard_normal((200, d)).astype(np.float32))
        tau = exact.score_error_bound(d, exact.max_row_norm(Q), exact.max_row_norm(D))
        diff = np.abs(Q @ D.T - scores_block(Q, D)).max()
        assert diff <= tau
        assert tau < 1e-4  # and the window stays narrow: ~ d * 2^-24


# --------------------------------------------------------------------------- perturbed fast pass

@pytest.fixture
def noisy_blas():
    """The fast pass at the edge of its window: every fast score ``(1 - 2**-8) tau`` above or
    below its canonical score (tests/edge_of_window.py) -- the largest error the bound allows."""
    with at_edge(12345):
        yield


def _all_results(src, tgt, si, ti, block):
    out = {}
    for sim in ("cosine", "csls"):
        out[f"xlr-{sim}"] = xlr_ranks(src, tgt, sim=sim, csls_k=3, block_bytes=block)
        out[f"bkr-{sim}"] = bkr_ranks(src, tgt, si, ti, sim=sim, csls_k=3, block_bytes=block)[0]
        out[f"hub-{sim}"] = hubness(src, tgt, 4, sim=sim, csls_k=3, block_bytes=block)
    out["csls"] = csls(src, tgt, 3)
    Q, D = ref.unit(src), ref.unit(tgt)
    out["topk"] = topk(Q, D, 5, block_bytes=block)
    out["nearest"] = nearest_with_ties(Q, D, block_bytes=block)
    eu = np.einsum("ij,ij->i", tgt, tgt).astype(np.float32)  # a Euclidean ranking, as M3L evaluates
    out["euclid"] = rank_of_true(src, tgt, np.arange(len(src)), scale=2.0, d_bias=eu, block_bytes=block)
    out["both"] = ranks_both_ways(Q, D, block_bytes=block)
    out["both-nearest"] = ranks_both_ways(Q, D, block_bytes=block, nearest=True)
    return out


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            assert x == y, key
        elif isinstance(x, tuple):
            for u, v in zip(x, y):
                np.testing.assert_array_equal(u, v, err_msg=key)
        else:
            np.testing.assert_array_equal(x, y, err_msg=key)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["random", "tied"]), d=st.sampled_from([6, 64]),
       block=st.sampled_from([200, 10**9]))
def test_every_decision_survives_a_perturbed_fast_pass(seed, kind, d, block):
    rng = np.random.default_rng(seed)
    n = 30
    src, tgt = data(rng, kind, n, d), data(rng, kind, n, d)
    si, ti = data(rng, kind, n, 5), data(rng, kind, n, 5)
    clean = _all_results(src, tgt, si, ti, block)
    with at_edge(seed + 1):  # every fast score at the edge of its window, other blocks too
        noisy = _all_results(src, tgt, si, ti, 10**9 if block == 200 else 200)
    _assert_same(clean, noisy)
    # and both equal the slow reference
    fwd, bwd = ref.xlr_ranks(src, tgt)
    assert clean["xlr-cosine"][0].tolist() == fwd.tolist() and clean["xlr-cosine"][1].tolist() == bwd.tolist()
    assert clean["bkr-cosine"].tolist() == ref.bkr_ranks(src, tgt, si, ti).tolist()
    assert clean["bkr-csls"].tolist() == ref.bkr_ranks(src, tgt, si, ti, sim="csls", k=3).tolist()


RANK_KERNELS = {"xlr-cosine", "bkr-cosine", "hub-cosine", "xlr-csls", "bkr-csls", "hub-csls", "csls", "topk", "euclid",
                "both"}


def _differing(a, b):
    out = set()
    for key in a:
        try:
            _assert_same({key: a[key]}, {key: b[key]})
        except AssertionError:
            out.add(key)
    return out


@pytest.mark.parametrize("d", [6, 64])
def test_a_window_slightly_too_narrow_fails(d):
    """The perturbation above reaches the edge of the window: with a bound shrunk to 0.8x every
    ranking kernel decides differently, and even at 0.99x the check above fails."""
    rng = np.random.default_rng(0)
    src, tgt = data(rng, "tied", 30, d), data(rng, "tied", 30, d)
    si, ti = data(rng, "tied", 30, 5), data(rng, "tied", 30, 5)
    clean = _all_results(src, tgt, si, ti, 10**9)
    with at_edge(1):
        _assert_same(clean, _all_results(src, tgt, si, ti, 200))  # the true window: nothing changes
    with at_edge(1, shrink=0.8):
        wrong = _differing(clean, _all_results(src, tgt, si, ti, 200))
    assert RANK_KERNELS <= wrong, RANK_KERNELS - wrong
    if d == 64:
        assert "nearest" in wrong  # at d=6 its extra rounding term alone covers 20% of the window
    with at_edge(1, shrink=0.99), pytest.raises(AssertionError):
        _assert_same(clean, _all_results(src, tgt, si, ti, 200))


def test_near_ties_really_are_inside_the_window(noisy_blas):
    """The data above must exercise the re-decision: many comparisons within tau."""
    rng = np.random.default_rng(7)
    Q = ref.unit(near_tied(rng, 60, 64, 10))
    s = scores_block(Q, Q)
    tau = exact.score_error_bound(64, exact.max_row_norm(Q), exact.max_row_norm(Q))
    diag = np.diagonal(s)[:, None]
    close = (np.abs(s - diag) <= tau) & ~np.eye(60, dtype=bool)
    assert close.sum() > 200  # (near) ties that a fast pass alone would decide at random
    fwd, bwd = ranks_both_ways(Q, Q)
    assert fwd.tolist() == [ref.pessimistic_rank(s[i], i) for i in range(60)]


# --------------------------------------------------------------------------- the grid, real data

_GRID = textwrap.dedent(
    """
    import json, sys
    from backretrieval.analysis import EvalConfig, run_grid
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de"), ("de", "ja")],
                     models=["tfidf-char", "use-m", "use-m@noise=0.5"], image_model="color-hist",
                     n=200, seeds=[0, 1], dataset_options={"text": "keywords"})
    res = run_grid(cfg, sys.argv[1], progress=False, executor=sys.argv[2])
    drop = {"seconds", "encode_seconds"}
    json.dump([{k: v for k, v in r.items() if k not in drop} for r in res.records], sys.stdout)
    """
)


def _grid(tmp_path, name, threads, block, executor):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    if block:
        env["BACKRETRIEVAL_BLOCK_BYTES"] = str(block)
    out = subprocess.run([sys.executable, "-c", _GRID, str(tmp_path / name), executor], env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_grid_records_identical_across_threads_blocks_and_executors(tmp_path, shared_data):
    base = _grid(tmp_path, "t1", 1, None, "local")
    assert len(base) == 3 * 2 * 2
    assert any(r["bkr@1"] > 0 for r in base)  # a real grid, not empty numbers
    for name, threads, block, executor in (("t2-tiny", 2, 40_000, "local"), ("t2-proc", 2, None, "processes:2")):
        other = _grid(tmp_path, name, threads, block, executor)
        assert other == base, name


@pytest.mark.parametrize("threads", [2, 3])
def test_blocks_in_threads_equal_blocks_in_sequence(monkeypatch, threads):
    rng = np.random.default_rng(11)
    src, tgt = near_tied(rng, 120, 16, 30), near_tied(rng, 120, 16, 30)
    si, ti = near_tied(rng, 120, 5, 20), near_tied(rng, 120, 5, 20)
    monkeypatch.setattr(blocks, "blas_threads", lambda: 1)
    serial = _all_results(src, tgt, si, ti, 3000)
    monkeypatch.setattr(blocks, "blas_threads", lambda: threads)
    monkeypatch.setattr(blocks, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(blocks, "PARALLEL_BLOCK_BYTES", 2000)  # many small blocks per thread
    _assert_same(serial, _all_results(src, tgt, si, ti, 3000))


@pytest.fixture(scope="module")
def real_embeddings(shared_data):
    """Real emoji-cldr embeddings with real ties: 60 en/de items' keywords (many share words) through
    tfidf-char and use-m, and their colour histograms as images."""
    from backretrieval.data import load_dataset, non_matching
    from backretrieval.encoders.registry import get_image_encoder, get_text_encoder

    ds = load_dataset("emoji-cldr", langs=["en", "de"], text="keywords")
    s, t = ds["en"], ds["de"]
    si, ti = non_matching(s, t, 60, 3)
    texts_s, texts_t = [s.texts[i] for i in si], [t.texts[i] for i in ti]
    out = {}
    tf = get_text_encoder("tfidf-char")
    tf.fit({"en": texts_s, "de": texts_t})
    out["tfidf-char"] = (tf.encode(texts_s, "en"), tf.encode(texts_t, "de"))
    um = get_text_encoder("use-m")
    out["use-m"] = (um.encode(texts_s, "en"), um.encode(texts_t, "de"))
    g = get_image_encoder("color-hist")
    imgs = (g.encode_images([s.image_paths[i] for i in si]), g.encode_images([t.image_paths[i] for i in ti]))
    return out, imgs


@pytest.mark.parametrize("model", ["tfidf-char", "use-m"])
def test_metrics_equal_the_reference_on_real_embeddings(real_embeddings, model):
    from scipy import stats as _stats

    from backretrieval.metrics import corr

    texts, (si, ti) = real_embeddings
    st_, tt = texts[model]
    n = len(st_)
    fwd, bwd = xlr_ranks(st_, tt[:n])
    rf, rb = ref.xlr_ranks(st_, tt[:n])
    assert fwd.tolist() == rf.tolist() and bwd.tolist() == rb.tolist()
    assert bkr_ranks(st_, tt, si, ti)[0].tolist() == ref.bkr_ranks(st_, tt, si, ti).tolist()
    assert bkr_ranks(st_, tt, si, ti, sim="csls", csls_k=5)[0].tolist() == ref.bkr_ranks(st_, tt, si, ti, sim="csls", k=5).tolist()
    assert corr(st_, tt, si, ti) == pytest.approx(ref.corr(st_, tt, si, ti), abs=1e-12)
    occ = ref.k_occurrence(st_, tt, 5)
    assert hubness(st_, tt, 5)["hubness_skew@5"] == pytest.approx(_stats.skew(occ) if occ.std() > 0 else 0.0)
    # the real data do have ties: colour histograms of look-alike emoji, and shared keywords
    img = ref.sim_matrix(ti, si)
    assert (np.sort(img, axis=1)[:, 1:] == np.sort(img, axis=1)[:, :-1]).any()
