"""The approximate metrics follow the exact metrics' tie rule on every route: the rank of the right
item is the number of candidates scoring canonically at least as high (ties never help), and BkR
follows every target tied for the best score and keeps the worst rank. Tested on data with ties
(every vector twice, constant vectors, one vector repeated thousands of times), per query, on the
exact route the cost model chooses, the flat index, and HNSW / IVF forced to search approximately."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import MetricInputError
from backretrieval.metrics import bkr_ranks, xlr_ranks
from backretrieval.metrics.approx import bkr_approx, xlr_approx

K = 10
ROUTES = {
    "exact (cost model)": {"method": "hnsw"},
    "flat": {"method": "flat"},
    "hnsw forced": {"method": "hnsw", "cost_check": False},
    "ivf forced": {"method": "ivf", "cost_check": False},
}


def _tied(kind: str):
    rng = np.random.default_rng(0)
    if kind == "every vector twice":
        n = 600
        src = np.repeat(rng.standard_normal((n // 2, 16)), 2, axis=0)
        tgt = src + 0.4 * np.repeat(rng.standard_normal((n // 2, 16)), 2, axis=0)
    elif kind == "constant vectors":
        n = 400
        src, tgt = np.ones((n, 16)), np.ones((n, 16))
    else:  # one target vector repeated 2,000 times
        n = 2500
        src = rng.standard_normal((n, 16))
        tgt = src + 0.3 * rng.standard_normal((n, 16))
        tgt[:2000] = tgt[0]
    src_img = rng.standard_normal((n, 12))
    tgt_img = src_img + 0.5 * rng.standard_normal((n, 12))
    return tuple(x.astype(np.float32) for x in (src, tgt, src_img, tgt_img))


@pytest.fixture(scope="module", params=["every vector twice", "constant vectors", "one vector repeated"])
def tied(request):
    """Data with ties and the exact metrics' outcomes within K (rank, or 0 beyond K)."""
    st, tt, si, ti = _tied(request.param)
    fwd, bwd = xlr_ranks(st, tt)
    ranks, _ = bkr_ranks(st, tt, si, ti)
    within = lambda r: np.where(r <= K, r, 0)  # noqa: E731
    return (st, tt, si, ti), {"xlr": within(fwd), "xlr_t2s": within(bwd), "bkr": within(ranks)}


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_gives_the_exact_outcome_of_every_query_on_data_with_ties(tied, route):
    (st, tt, si, ti), want = tied
    kw = {**ROUTES[route], "check_sample": 200, "found_at": True}
    x = xlr_approx(st, tt, (1, 5, K), **kw)
    np.testing.assert_array_equal(x["found_at"], want["xlr"])
    np.testing.assert_array_equal(x["t2s_found_at"], want["xlr_t2s"])
    for retrieved in (None, x["nearest"]):  # BkR's own text search, and XLR's nearest targets with their ties
        b = bkr_approx(st, tt, si, ti, (1, 5, K), retrieved=retrieved, **kw)
        np.testing.assert_array_equal(b["found_at"], want["bkr"])
    if route == "exact (cost model)":
        assert x["text_route"] == x["t2s_route"] == b["image_route"] == "exact" and x["approximate"] is False


@pytest.mark.parametrize("route", ROUTES)
def test_every_vector_twice_scores_zero_at_one_as_exact_search_does(route):
    """Each vector twice: the partner ties with its twin, so its pessimistic rank is 2 and xlr@1
    is 0.0, on every route (a route that lets the tie help gives 0.5)."""
    a = np.repeat(np.random.default_rng(1).standard_normal((150, 16)).astype(np.float32), 2, axis=0)
    x = xlr_approx(a, a, (1, 5), check_sample=100, **ROUTES[route])
    assert (x["xlr@1"], x["xlr_t2s@1"], x["xlr@5"], x["xlr_mrr@5"]) == (0.0, 0.0, 1.0, 0.5)
    b = bkr_approx(a, a, a, a, (1, 5), check_sample=100, **ROUTES[route])
    assert (b["bkr@1"], b["bkr@5"]) == (0.0, 1.0)


def test_nearest_holds_every_tied_target():
    st, tt, _, _ = _tied("every vector twice")
    x = xlr_approx(st, tt, (1, K), method="hnsw", cost_check=False, check_sample=200)
    offsets, rows = x["nearest"]
    assert np.array_equal(np.diff(offsets), np.full(len(st), 2))  # each target's twin ties with it
    assert np.array_equal(rows[offsets[:-1]], x["retrieved"])  # retrieved: the first of them
    assert (rows[::2] % 2 == 0).all() and np.array_equal(rows[1::2], rows[::2] + 1)  # the twins of one pair


@pytest.mark.parametrize("retrieved, message", [
    ((np.array([0, 1, 1]), np.array([0, 1])), r"offsets must start at 0, end at 2 .* at least one target"),
    ((np.array([0, 1]), np.array([0])), r"expected \(offsets, rows\), integer arrays of 3 offsets"),
    ((np.array([0, 1, 2]), np.array([0, 7])), r"retrieved\[1\] = 7 is not a target row \(0..1\)"),
])
def test_bad_tied_retrieved_rows_are_named(retrieved, message):
    a = np.eye(2, dtype=np.float32)
    with pytest.raises(MetricInputError, match=message):
        bkr_approx(a, a, a, a, (1,), method="flat", retrieved=retrieved)
