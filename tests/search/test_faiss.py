"""The FAISS backend: exact flat search equals the numpy kernels; the approximate metrics equal
the exact ones with the flat index and come close with HNSW / IVF."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backretrieval.core import MetricInputError
from backretrieval.metrics import bkr, xlr
from backretrieval.metrics.approx import bkr_approx, xlr_approx
from backretrieval.search import l2_normalize, topk
from backretrieval.search.faiss_backend import FaissOptions, knn, top1_agreement


@given(n_q=st.integers(1, 60), n_d=st.integers(1, 80), d=st.sampled_from([3, 16, 64]), seed=st.integers(0, 10**6), data=st.data())
@settings(max_examples=60, deadline=None)
def test_flat_equals_numpy_exact(n_q, n_d, d, seed, data):
    k = data.draw(st.integers(1, n_d))
    rng = np.random.default_rng(seed)
    Q, D = l2_normalize(rng.standard_normal((n_q, d))), l2_normalize(rng.standard_normal((n_d, d)))
    s_np, i_np = topk(Q, D, k)
    s_f, i_f = knn(Q, D, k, "flat")
    np.testing.assert_allclose(s_f, s_np, atol=1e-5)
    # continuous random data has no exact ties: the neighbours are the same, in the same order
    assert (i_f == i_np).mean() > 0.99
    np.testing.assert_allclose(np.take_along_axis(Q @ D.T, i_f, axis=1), s_np, atol=1e-5)


def _correlated(rng, n, d, noise):
    a = rng.standard_normal((n, d)).astype(np.float32)
    return a, a + noise * rng.standard_normal((n, d)).astype(np.float32)


def test_approx_metrics_equal_exact_with_flat_index():
    rng = np.random.default_rng(0)
    src, tgt = _correlated(rng, 600, 32, 1.2)
    si, ti = _correlated(rng, 600, 48, 1.5)
    ex, ap = xlr(src, tgt), xlr_approx(src, tgt, method="flat")
    for key in ("xlr@1", "xlr@5", "xlr@10", "xlr_t2s@10"):
        assert ap[key] == pytest.approx(ex[key])
    assert ap["approximate"] is False
    exb, apb = bkr(src, tgt, si, ti), bkr_approx(src, tgt, si, ti, method="flat")
    for key in ("bkr@1", "bkr@5", "bkr@10"):
        assert apb[key] == pytest.approx(exb[key])
    assert 0 <= apb["bkr_mrr@10"] <= exb["bkr_mrr"] + 1e-12  # truncated MRR never exceeds the full one


@pytest.mark.parametrize("method, opts", [("hnsw", FaissOptions(ef_search=64)), ("ivf", FaissOptions(nlist=64, nprobe=16))])
def test_approximate_indexes_keep_the_promised_agreement(method, opts):
    """The checked search promises top-1 agreement 0.99 with exact search: measured here on every
    query (not a sample), against exact search by the canonical kernels."""
    rng = np.random.default_rng(1)
    src, tgt = _correlated(rng, 5000, 64, 0.8)
    x = xlr_approx(src, tgt, ks=(1, 10), method=method, options=opts, both_directions=False, cost_check=False)
    assert x["text_route"] == "approximate"
    assert x["text_tuning_agreement"] >= 0.99 and x["text_tuning_recall@10"] >= 0.99  # the stopping rule
    assert _population_agreement(src, tgt, x["retrieved"]) >= 0.99  # the promise, on all 5,000 queries
    ex = xlr(src, tgt, ks=(10,))["xlr@10"]
    assert abs(x["xlr@10"] - ex) <= 0.01  # at most 1% of queries may change their top-10 outcome


def _population_agreement(Q, D, top1):
    """Share of all queries whose given first neighbour attains the exact best canonical score."""
    from backretrieval.search.exact import pair_scores

    q, d = l2_normalize(Q), l2_normalize(D)
    best, _ = topk(q, d, 1)
    got = pair_scores(q, d, np.arange(len(q)), np.asarray(top1))
    return float(np.mean(got >= best[:, 0]))


def test_approx_bad_input_is_named():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((50, 8)).astype(np.float32)
    b = a.copy()
    b[7] = 0
    with pytest.raises(MetricInputError, match="all-zero vector in row 7"):
        xlr_approx(a, b, method="flat")
    with pytest.raises(MetricInputError, match="dimension mismatch"):
        xlr_approx(a, a[:, :4], method="flat")
    with pytest.raises(MetricInputError, match="K=60 is larger"):
        bkr_approx(a, a, a, a, ks=(60,), method="flat")


def test_shared_text_index_gives_the_same_values_and_is_checked():
    from backretrieval.search.faiss_backend import build_index

    rng = np.random.default_rng(3)
    src, tgt = _correlated(rng, 400, 32, 1.0)
    si, ti = _correlated(rng, 400, 24, 1.5)
    index = build_index(tgt, "flat")
    x_shared, x_own = xlr_approx(src, tgt, method="flat", tgt_index=index), xlr_approx(src, tgt, method="flat")
    np.testing.assert_array_equal(x_shared.pop("retrieved"), x_own.pop("retrieved"))
    for a, b in zip(x_shared.pop("nearest"), x_own.pop("nearest")):  # (offsets, rows)
        np.testing.assert_array_equal(a, b)
    assert x_shared == x_own
    shared = bkr_approx(src, tgt, si, ti, method="flat", tgt_text_index=index)
    own = bkr_approx(src, tgt, si, ti, method="flat")
    assert _values(shared) == _values(own)
    np.testing.assert_array_equal(shared["retrieved"], own["retrieved"])
    with pytest.raises(MetricInputError, match="holds 400 vectors of dimension 32, but the target text embeddings are 400 x 24"):
        bkr_approx(src[:, :24], ti, si, ti, method="flat", tgt_text_index=index)
    # step 2 from XLR's lists: the same BkR without a second text search
    reused = bkr_approx(src, tgt, si, ti, method="flat", retrieved=xlr_approx(src, tgt, method="flat")["retrieved"])
    assert _values(reused) == _values(own)
    with pytest.raises(MetricInputError, match=r"retrieved\[5\] = 400 is not a target row"):
        bkr_approx(src, tgt, si, ti, method="flat", retrieved=np.where(np.arange(400) == 5, 400, 0))


def _values(result: dict) -> dict:
    """A result without its per-query arrays."""
    return {k: v for k, v in result.items() if k not in ("retrieved", "nearest")}


def _isotropic(n, d, seed, noise=1.0):
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((n, d)).astype(np.float32)
    return src, src + noise * rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("method, weak", [("hnsw", FaissOptions(m=16, ef_construction=40, ef_search=1)),
                                          ("ivf", FaissOptions(nlist=64, nprobe=1))])
def test_self_check_raises_effort_until_the_target_is_met(method, weak):
    from backretrieval.search.faiss_backend import build_index, calibrate

    src, tgt = _isotropic(4000, 48, 1)
    unchecked = xlr_approx(src, tgt, ks=(1, 10), method=method, options=weak, target_agreement=None,
                           both_directions=False)
    index = build_index(tgt, method, weak)
    before = calibrate(index, tgt, src, method, k=10, target=1.0, sample=400, max_value=1, options=weak,
                       cost_check=False)
    assert before.tuning_agreement < 0.9  # the weak settings really are weak on this data
    checked = xlr_approx(src, tgt, ks=(1, 10), method=method, options=weak, target_agreement=0.99,
                         check_sample=400, both_directions=False, cost_check=False)
    assert checked["text_tuning_agreement"] >= 0.99 and checked["text_tuning_recall@10"] >= 0.99
    param = "ef_search" if method == "hnsw" else "nprobe"
    assert checked[f"text_{param}"] > (weak.ef_search if method == "hnsw" else weak.nprobe)
    tried = checked["text_calibration_tried"]
    assert [v for v, _, _ in tried] == sorted(v for v, _, _ in tried) and tried[-1][1] >= 0.99
    exact = xlr(src, tgt, ks=(1, 10))
    assert abs(checked["xlr@10"] - exact["xlr@10"]) <= abs(unchecked["xlr@10"] - exact["xlr@10"]) + 1e-12
    assert abs(checked["xlr@10"] - exact["xlr@10"]) < 0.01


def test_self_check_falls_back_to_exact_search(monkeypatch):
    from backretrieval.search import faiss_backend

    src, tgt = _isotropic(2000, 32, 2)
    si, ti = _isotropic(2000, 16, 3, noise=0.5)
    real = faiss_backend.calibrate
    monkeypatch.setattr("backretrieval.metrics.approx.calibrate", lambda *a, **k: real(*a, **{**k, "max_value": 1}))
    weak = FaissOptions(m=4, ef_construction=8, ef_search=1)
    x = xlr_approx(src, tgt, ks=(1, 5), method="hnsw", options=weak, check_sample=300, cost_check=False)
    assert x["text_exact_fallback"] and x["t2s_exact_fallback"] and x["approximate"] is False
    assert x["text_route"] == "exact" and x["text_route_reason"].startswith("target: ef_search=1")
    ex = xlr(src, tgt, ks=(1, 5))
    for key in ("xlr@1", "xlr@5", "xlr_t2s@1", "xlr_t2s@5"):
        assert x[key] == pytest.approx(ex[key])
    b = bkr_approx(src, tgt, si, ti, ks=(1, 5), method="hnsw", options=weak, check_sample=300, cost_check=False)
    assert b["image_exact_fallback"] and b["text_exact_fallback"]
    exb = bkr(src, tgt, si, ti, ks=(1, 5))
    for key in ("bkr@1", "bkr@5"):
        assert b[key] == pytest.approx(exb[key])


# --------------------------------------------------------------------------- held-out check, cost model

def test_heldout_agreement_is_measured_on_other_queries_against_exact_search():
    """The reported agreement is measured on a held-out sample disjoint from the tuning sample,
    and equals the agreement recomputed here against exact search (canonical kernels) on those
    queries; its lower bound is the one-sided 95% Clopper-Pearson bound (= the lower end of the
    two-sided 90% exact interval)."""
    from scipy.stats import binomtest

    from backretrieval.search.faiss_backend import build_index, calibrate, check_rows

    src, tgt = _isotropic(3000, 32, 4)
    opts = FaissOptions(m=8, ef_construction=16, ef_search=2)
    index = build_index(tgt, "hnsw", opts)
    cal = calibrate(index, tgt, src, "hnsw", k=5, target=0.97, sample=500, seed=11, options=opts, cost_check=False)
    assert cal.route == "approximate" and cal.sample == 500 and cal.heldout == 500
    tune, held = check_rows(3000, 500, 11)
    assert tune.size == held.size == 500 and not np.intersect1d(tune, held).size
    assert cal.tuning_agreement >= 0.97 and cal.tried[-1][0] == cal.value
    _, idx = index.search(l2_normalize(src[held]), 5)  # the effort the calibration left set
    hits = round(_population_agreement(src[held], tgt, idx[:, 0]) * held.size)
    assert cal.agreement == hits / held.size
    assert cal.low == pytest.approx(binomtest(hits, held.size).proportion_ci(0.90, method="exact").low, rel=1e-9)
    exact_lists = topk(l2_normalize(src[held]), l2_normalize(tgt), 5)[1]
    recall = np.mean([np.intersect1d(a, b).size / 5 for a, b in zip(idx, exact_lists)])
    assert cal.recall == pytest.approx(recall, abs=1e-12)
    # the tuning statistic is not the reported one: it is measured on the tuning rows
    _, idx_t = index.search(l2_normalize(src[tune]), 5)
    assert cal.tuning_agreement == round(_population_agreement(src[tune], tgt, idx_t[:, 0]) * 500) / 500


def test_clopper_pearson_bound():
    from backretrieval.search.faiss_backend import clopper_pearson_low

    assert clopper_pearson_low(1000, 1000) == pytest.approx(0.05 ** (1 / 1000), rel=1e-12)  # all n: alpha^(1/n)
    assert clopper_pearson_low(0, 1000) == 0.0 and clopper_pearson_low(0, 0) == 0.0
    assert 0.985 < clopper_pearson_low(995, 1000) < 0.99 < 0.995  # 0.995 observed does not show 0.99


def test_cost_model_counts():
    from backretrieval.search.faiss_backend import (DISTANCE_WEIGHTS, build_cost, checked_cost, exact_cost, query_cost,
                                                    sample_sizes, weighted)

    opt = FaissOptions(m=32, ef_construction=80, ef_search=128, nlist=100, nprobe=8)
    assert exact_cost(100_000, 100_000) == 10**10
    assert build_cost("hnsw", 10_000, opt) == 10_000 * 80 * 64 and build_cost("flat", 10, opt) == 0
    assert query_cost("hnsw", 10**6, opt) == 128 * 64 and query_cost("hnsw", 1000, opt, 4096) == 1000  # <= N
    assert build_cost("ivf", 10_000, opt) == (25 * 10_000 + 10_000) * 100
    assert query_cost("ivf", 10_000, opt) == 100 + 8 * 100 and query_cost("ivf", 10_000, opt, 1000) == 100 + 10_000
    assert sample_sizes(10**6, 1000) == (1000, 1000) and sample_sizes(301, 1000) == (151, 150)
    wb, ws = DISTANCE_WEIGHTS["hnsw build"], DISTANCE_WEIGHTS["hnsw search"]
    assert weighted("hnsw", "search", 10) == int(np.ceil(10 * ws)) and weighted("flat", "search", 10) == 10
    assert checked_cost("hnsw", 5000, 40_000, opt, sample=100) == (
        int(np.ceil(40_000 * 80 * 64 * wb)) + 200 * 40_000 + 5200 * int(np.ceil(128 * 64 * ws)))
    assert checked_cost("hnsw", 5000, 4000, opt, sample=100) == (
        int(np.ceil(4000 * 80 * 64 * wb)) + 200 * 4000 + 5200 * int(np.ceil(4000 * ws)))


def test_each_kind_of_distance_weighs_what_it_costs():
    """The weights are measured constants (BENCHMARKS.md): a distance inside an HNSW graph walk or an
    IVF cell scan costs more than one inside exact search's blocked product (weight 1)."""
    from backretrieval.search.faiss_backend import DISTANCE_WEIGHTS

    assert set(DISTANCE_WEIGHTS) == {"hnsw build", "hnsw search", "ivf build", "ivf search"}
    assert all(w >= 1 for w in DISTANCE_WEIGHTS.values())
    assert DISTANCE_WEIGHTS["hnsw search"] > 1 and DISTANCE_WEIGHTS["hnsw build"] > 1


@pytest.mark.parametrize("n, options, route", [
    # latent-64 at 100k, FAISS defaults: checked HNSW took 280.8 s against 38.5 s of exact search
    (100_000, FaissOptions(), "exact"),
    # a million items with the graph of bench_million.py: the approximate route took 33 minutes, exact ~7 hours
    (1_000_000, FaissOptions(m=16, ef_construction=40, ef_search=64), "approximate"),
])
def test_the_cost_model_routes_the_measured_cases_as_their_times_say(n, options, route):
    from backretrieval.search.faiss_backend import checked_cost, exact_cost

    assert (checked_cost("hnsw", n, n, options, sample=1000) <= exact_cost(n, n)) == (route == "approximate")


@pytest.mark.parametrize("n, route", [(500, "exact"), (20_000, "approximate")])
def test_cost_model_decides_the_route(n, route):
    """Small N: exact search is cheaper than even the cheapest checked search (the samples' exact
    search alone is 2 x 100 x N, besides the weighted build): nothing is built, the search is exact
    and equals the exact metric. Larger N: the checked approximate search is cheaper and runs (to a
    target this weak graph reaches at its first effort)."""
    from backretrieval.search.faiss_backend import checked_cost, exact_cost

    opts = FaissOptions(m=8, ef_construction=16, ef_search=16)
    src, tgt = _isotropic(n, 16, 5, noise=0.3)
    assert (checked_cost("hnsw", n, n, opts, sample=100) <= exact_cost(n, n)) == (route == "approximate")
    x = xlr_approx(src, tgt, ks=(1, 5), method="hnsw", options=opts, check_sample=100, both_directions=False,
                   target_agreement=0.75)
    assert x["text_route"] == route and x["approximate"] is (route == "approximate")
    assert x["text_cost_exact"] == n * n
    if route == "exact":
        assert x["text_route_reason"].startswith("cost: checked hnsw search takes at least")
        assert "text_calibration_tried" not in x  # nothing was built or calibrated
        ex = xlr(src, tgt, ks=(1, 5))
        assert (x["xlr@1"], x["xlr@5"]) == (ex["xlr@1"], ex["xlr@5"])
    else:
        assert x["text_cost"] <= x["text_cost_exact"] and x["text_tuning_agreement"] >= 0.75


def test_calibration_stops_before_it_costs_more_than_exact_search():
    """A target the index reaches only at a high effort: the calibration stops where going on would
    cost more than exact search, and the search is exact; all in all at most twice exact search."""
    from backretrieval.search.faiss_backend import build_index, calibrate, exact_cost

    src, tgt = _isotropic(20_000, 48, 6)
    opts = FaissOptions(m=8, ef_construction=16, ef_search=4)
    index = build_index(tgt, "hnsw", opts)
    cal = calibrate(index, tgt, src, "hnsw", k=10, target=1.0, sample=100, options=opts)
    assert cal.route == "exact" and cal.reason.startswith("cost: ef_search=")
    assert cal.tried and cal.tried[-1][0] < 4096  # stopped before the largest effort
    assert cal.cost_exact == exact_cost(20_000, 20_000) and cal.cost <= 2 * cal.cost_exact
    unchecked = calibrate(index, tgt, src, "hnsw", k=10, target=1.0, sample=100, options=opts, cost_check=False)
    assert unchecked.tried[-1][0] > cal.tried[-1][0]  # without the cost check it goes on


# --------------------------------------------------------------------------- small N, duplicates, listed scores

@pytest.mark.parametrize("n", [2, 5, 10, 20, 50, 100, 400])
def test_ivf_at_small_n_has_at_most_the_cells_its_rows_train_and_prints_nothing(n, capfd):
    """FAISS fails to train more cells than rows and prints a warning below 39 rows per cell: the
    cells are clamped (one cell below 78 rows) and the search works, silently."""
    from backretrieval.search.faiss_backend import MIN_POINTS_PER_CELL, build_index, ivf_nlist, search

    src, tgt = _isotropic(n, 8, 7, noise=0.2)
    index = build_index(tgt, "ivf")
    assert index.nlist == ivf_nlist(n) == max(1, min(int(4 * np.sqrt(n)), n // MIN_POINTS_PER_CELL))
    _, idx = search(index, src, min(n, 3))
    assert (idx >= 0).all()
    x = xlr_approx(src, tgt, ks=(1,), method="ivf", cost_check=False, check_sample=max(1, n // 2))
    assert x["text_route"] in ("approximate", "exact")
    assert xlr_approx(src, tgt, ks=(1,), method="ivf", target_agreement=None)["xlr@1"] >= 0
    out, err = capfd.readouterr()
    assert "WARNING" not in out + err and "clustering" not in out + err, out + err


def test_duplicate_rows_are_grouped_bit_for_bit():
    from backretrieval.search.faiss_backend import duplicate_rows

    rng = np.random.default_rng(8)
    a = rng.standard_normal((30, 6)).astype(np.float32)
    assert duplicate_rows(a) is None
    b = np.concatenate([a, a[[4, 4, 9]], 2 * a[[5]], a[[6]] + np.float32(1e-3)])  # 2 x a row: the same unit row
    dups = duplicate_rows(b)
    assert dups.group[[30, 31, 32, 33, 34]].tolist() == [4, 4, 9, 5, 34]
    assert dups.size[4] == 3 and dups.size[9] == 2 and dups.size[34] == 1
    rows, counts = dups.members(np.array([4, 9, 0]))
    assert rows.tolist() == [4, 30, 31, 9, 32, 0] and counts.tolist() == [3, 2, 1]


def test_listed_scores_are_the_canonical_scores_of_the_exact_kernels():
    from backretrieval.search import unit_rows
    from backretrieval.search.exact import pair_scores
    from backretrieval.search.faiss_backend import listed_scores

    src, tgt = _isotropic(300, 20, 9)
    lists = np.random.default_rng(3).integers(-1, 300, size=(300, 7))
    got = listed_scores(src, tgt, lists)
    qi, slot = np.nonzero(lists >= 0)
    want = pair_scores(unit_rows(src), unit_rows(tgt), qi, lists[qi, slot])
    np.testing.assert_array_equal(got[qi, slot], want)
    assert np.isneginf(got[lists < 0]).all()
    rows = np.array([5, 5, 0])
    np.testing.assert_array_equal(listed_scores(src, tgt, lists[rows], rows=rows), got[rows])  # query p: src[rows[p]]
