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
def test_approximate_indexes_agree_with_exact(method, opts):
    rng = np.random.default_rng(1)
    src, tgt = _correlated(rng, 5000, 64, 0.8)
    _, idx = knn(src, tgt, 1, method, opts)
    assert top1_agreement(src, tgt, idx[:, 0], sample=500) >= 0.97
    ex = xlr(src, tgt, ks=(10,))["xlr@10"]
    assert abs(xlr_approx(src, tgt, ks=(10,), method=method, options=opts)["xlr@10"] - ex) < 0.03


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
    assert x_shared == x_own
    shared = bkr_approx(src, tgt, si, ti, method="flat", tgt_text_index=index)
    own = bkr_approx(src, tgt, si, ti, method="flat")
    assert {k: v for k, v in shared.items() if k != "retrieved"} == {k: v for k, v in own.items() if k != "retrieved"}
    np.testing.assert_array_equal(shared["retrieved"], own["retrieved"])
    with pytest.raises(MetricInputError, match="holds 400 vectors of dimension 32, but the target text embeddings are 400 x 24"):
        bkr_approx(src[:, :24], ti, si, ti, method="flat", tgt_text_index=index)
    # step 2 from XLR's lists: the same BkR without a second text search
    reused = bkr_approx(src, tgt, si, ti, method="flat", retrieved=xlr_approx(src, tgt, method="flat")["retrieved"])
    assert {k: v for k, v in reused.items() if k != "retrieved"} == {k: v for k, v in own.items() if k != "retrieved"}
    with pytest.raises(MetricInputError, match=r"retrieved\[5\] = 400 is not a target row"):
        bkr_approx(src, tgt, si, ti, method="flat", retrieved=np.where(np.arange(400) == 5, 400, 0))


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
    before = calibrate(index, tgt, src, method, k=10, target=1.0, sample=400, max_value=1)
    assert before.agreement < 0.9  # the weak settings really are weak on this data
    checked = xlr_approx(src, tgt, ks=(1, 10), method=method, options=weak, target_agreement=0.99,
                         check_sample=400, both_directions=False)
    assert checked["text_agreement"] >= 0.99 and checked["text_recall@10"] >= 0.99
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
    x = xlr_approx(src, tgt, ks=(1, 5), method="hnsw", options=weak, check_sample=300)
    assert x["text_exact_fallback"] and x["t2s_exact_fallback"] and x["approximate"] is False
    ex = xlr(src, tgt, ks=(1, 5))
    for key in ("xlr@1", "xlr@5", "xlr_t2s@1", "xlr_t2s@5"):
        assert x[key] == pytest.approx(ex[key])
    b = bkr_approx(src, tgt, si, ti, ks=(1, 5), method="hnsw", options=weak, check_sample=300)
    assert b["image_exact_fallback"] and b["text_exact_fallback"]
    exb = bkr(src, tgt, si, ti, ks=(1, 5))
    for key in ("bkr@1", "bkr@5"):
        assert b[key] == pytest.approx(exb[key])
