"""metrics.retrieval_ranks (the one retrieval-ranks function of Cr5 and M3L
evaluation) against a naive reference -- a loop over queries that sorts every candidate's score
and counts ties against the query -- on random data with exact ties and on real use-m
embeddings of emoji-cldr names, for every similarity; and equal to the M3L training code's formula."""
from __future__ import annotations

import numpy as np
import pytest

from backretrieval.core import MetricInputError
from backretrieval.metrics import RANK_SIMILARITIES, retrieval_ranks

SLACK = 1e-6  # the fast path decides on float32 canonical scores; the reference computes in float64


def _naive_scores(q, d, sim, pool, k):
    """float64 (n, m) scores written out from the definitions."""
    q, d = q.astype(np.float64), d.astype(np.float64)
    if sim == "euclidean":  # larger is nearer
        return -np.array([[np.sum((qi - dj) ** 2) for dj in d] for qi in q])

    def unit(a):
        n = np.sqrt((a * a).sum(axis=1, keepdims=True))
        return np.divide(a, n, out=np.zeros_like(a), where=n > 0)

    Q, D = unit(q), unit(d)
    s = np.array([[float(qi @ dj) for dj in D] for qi in Q])
    if sim == "cosine":
        return s
    P = Q if pool is None else unit(pool.astype(np.float64))
    kq, kd = min(k, len(D)), min(k, len(P))
    r_q = np.array([np.sort(row)[::-1][:kq].mean() for row in s])  # mean of each query's k nearest candidates
    r_d = np.array([np.sort([float(dj @ p) for p in P])[::-1][:kd].mean() for dj in D])
    return 2 * s - r_q[:, None] - r_d[None, :]


def naive_ranks(q, d, truth, sim, pool=None, k=10):
    """Per query: sort the candidates by score (descending; among equal scores the true one last,
    so ties never help) and read off the true candidate's 1-based position.

    Returns that rank and two slack-bounded counts; where the counts differ from the rank, a
    candidate lies within ``SLACK`` of the true score and the float32 fast path may decide it
    either way (the data are ambiguous)."""
    s = _naive_scores(q, d, sim, pool, k)
    exact, low, high = [], [], []
    for i, row in enumerate(s):
        t = int(truth[i])
        order = sorted(range(len(row)), key=lambda j: (-row[j], j == t))
        exact.append(order.index(t) + 1)
        eps = SLACK * max(1.0, abs(row[t]))
        low.append(int(np.sum(row > row[t] + eps) + np.sum(row == row[t])))
        high.append(int(np.sum(row >= row[t] - eps)))
    return np.array(exact), np.array(low), np.array(high)


def _assert_equal_to_naive(q, d, truth, sim, pool=None, k=10):
    exact, low, high = naive_ranks(q, d, truth, sim, pool, k)
    np.testing.assert_array_equal(low, exact, err_msg="a candidate scores just above the true one: ambiguous data")
    np.testing.assert_array_equal(high, exact, err_msg="a candidate scores just below the true one: ambiguous data")
    got = retrieval_ranks(q, d, truth, sim=sim, query_pool=pool, csls_k=k)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, exact)
    return got


def _random_with_ties(seed=0):
    """Candidates with duplicated rows (exact ties, also for the true candidate), queries near their
    truth, a duplicated query, an all-zero query, and an extra query pool."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((120, 12)).astype(np.float32)
    d[60:80] = d[:20]  # 20 duplicated candidates
    truth = rng.choice(120, size=50, replace=True)
    truth[:5] = np.arange(5)  # true candidates that have a duplicate: a tie that counts against the query
    q = (d[truth] + 0.7 * rng.standard_normal((50, 12))).astype(np.float32)
    q[10] = q[11]
    truth[10] = truth[11]
    q[12] = 0.0  # no known token (Cr5): scores 0 everywhere
    pool = np.concatenate([q, rng.standard_normal((30, 12)).astype(np.float32)])
    return q, d, truth, pool


@pytest.mark.parametrize("sim", RANK_SIMILARITIES)
def test_equals_naive_on_random_data_with_ties(sim):
    q, d, truth, pool = _random_with_ties()
    if sim == "euclidean":
        q = np.delete(q, 12, axis=0)
        truth = np.delete(truth, 12)
    got = _assert_equal_to_naive(q, d, truth, sim, pool if sim == "csls" else None, k=7)
    assert np.all(got[:5] >= 2)  # the duplicate of the true candidate always counts against it
    if sim == "cosine":
        assert got[12] == len(d)  # the zero query ties with every candidate
    if sim == "csls":  # without a pool the queries themselves are the pool; k is clipped to small sides
        _assert_equal_to_naive(q, d, truth, sim, None, k=10)
        _assert_equal_to_naive(q[:5], d[:8], truth[:5] % 8, sim, None, k=10)


@pytest.fixture(scope="module")
def emoji_names(shared_data):
    """use-m vectors (the project's cached encoder) of the CLDR names of 150 emoji in English and
    German (query -> candidate by concept), plus 100 more English names as the CSLS query pool."""
    from backretrieval.data import load_dataset
    from backretrieval.encoders.registry import get_text_encoder

    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    en, de = ds["en"], ds["de"]
    row_de = {c: i for i, c in enumerate(de.concepts)}
    both = [i for i, c in enumerate(en.concepts) if c in row_de]
    rng = np.random.default_rng(3)
    pick = rng.choice(len(both), size=250, replace=False)
    qi = [both[j] for j in pick[:150]]
    extra = [both[j] for j in pick[150:]]
    di = [row_de[en.concepts[i]] for i in qi]
    enc = get_text_encoder("use-m")
    q = enc.encode([en.texts[i] for i in qi], "en")
    d = enc.encode([de.texts[i] for i in di], "de")
    pool = np.concatenate([q, enc.encode([en.texts[i] for i in extra], "en")])
    order = rng.permutation(150)  # candidates not in query order
    return q, d[order], np.argsort(order), pool


@pytest.mark.parametrize("sim", RANK_SIMILARITIES)
def test_equals_naive_on_real_use_m_embeddings(emoji_names, sim):
    q, d, truth, pool = emoji_names
    got = _assert_equal_to_naive(q, d, truth, sim, pool if sim == "csls" else None)
    assert np.mean(got == 1) > 0.3  # use-m aligns emoji names across languages far above chance (1/150)


def _old_m3l(q, g, t, sim):
    """A self-contained per-query M3L ranking (the regression reference for the shared function)."""
    from backretrieval.search import l2_normalize, rank_of_true

    q, g = np.ascontiguousarray(q, np.float32), np.ascontiguousarray(g, np.float32)
    if sim == "cosine":
        return rank_of_true(l2_normalize(q), l2_normalize(g), t)
    return rank_of_true(q, g, t, scale=2.0, d_bias=np.einsum("ij,ij->i", g, g).astype(np.float32))


@pytest.mark.parametrize("sim", ["euclidean", "cosine"])
def test_m3l_ranks_are_the_metric(emoji_names, sim):
    """M3L's validation and image retrieval rank with this function: the same ranks as the
    training code's own formula."""
    q, d, truth, _ = emoji_names
    q_, d_, t_, _ = _random_with_ties(1)
    for a, b, t in ((q, d, truth), (np.delete(q_, 12, 0), d_, np.delete(t_, 12))):
        np.testing.assert_array_equal(retrieval_ranks(a, b, t, sim=sim), _old_m3l(a, b, t, sim))


def test_bad_input_is_named():
    q, d, truth, pool = _random_with_ties()
    cases = [
        (dict(sim="dot"), "unknown retrieval similarity 'dot'; choose one of cosine, csls, euclidean"),
        (dict(queries=q[:, :5]), r"queries \(50, 5\) and candidates \(120, 12\) must be 2-D with the same dimension"),
        (dict(truth=truth[:3]), "truth must be 50 integer candidate rows"),
        (dict(truth=truth.astype(float)), "truth must be 50 integer candidate rows"),
        (dict(truth=np.where(np.arange(50) == 7, 120, truth)), r"truth\[7\] = 120 is not a candidate row \(there are 120\)"),
        (dict(sim="csls", query_pool=pool[:, :3]), "query_pool"),
        (dict(sim="csls", csls_k=0), "CSLS k=0"),
    ]
    for kw, msg in cases:
        args = dict(queries=q, candidates=d, truth=truth) | kw
        with pytest.raises(MetricInputError, match=msg):
            retrieval_ranks(args.pop("queries"), args.pop("candidates"), args.pop("truth"), **args)
    bad = q.copy()
    bad[4, 2] = np.nan
    with pytest.raises(MetricInputError, match="NaN or inf in query vector 4"):
        retrieval_ranks(bad, d, truth)
    badd = d.copy()
    badd[9, 0] = np.inf
    with pytest.raises(MetricInputError, match="NaN or inf in candidate vector 9"):
        retrieval_ranks(q, badd, truth)
