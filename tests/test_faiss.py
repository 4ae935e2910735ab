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
