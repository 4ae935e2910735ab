"""Cr5: tokenisation and TF-IDF, the iterative solver against the dense closed form (Eq. 10),
Woodbury against the direct solve, splits and regimes, retrieval metrics against naive
references, the model directory, the ``cr5:DIR`` encoder and the CLI on real DDTP data."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp

import reference as ref

from backretrieval.core import BackretrievalError, DataError, EncoderError
from backretrieval.data import Corpus, load_dataset
from backretrieval.encoders.trained.bow import TfidfBow, fit_tfidf, tokenize
from backretrieval.encoders.trained.cr5 import BIAS, Cr5Model
from backretrieval.train.base import HyperParameterError, NotFittedError
from backretrieval.train.cr5 import (
    Cr5,
    Cr5Problem,
    SolverSettings,
    candidate_rows,
    evaluate_retrieval,
    make_split,
    retrieval_precision,
    select_lambda,
    single_token_dictionary,
    solve,
    training_corpora,
    word_retrieval,
)

TIGHT = dict(cg_tol=1e-12, cg_maxiter=5000, eig_tol=1e-12, eig_maxiter=5000)


# ----------------------------------------------------------------------------- synthetic problem
def synthetic(seed: int = 0, K: int = 40, p: tuple[int, ...] = (30, 45, 25), density: float = 0.2):
    """Three languages; each holds 80% of K concepts; a document is its concept's prototype plus
    noise, rows L2-normalised (like TF-IDF)."""
    rng = np.random.default_rng(seed)
    blocks, labels = [], []
    for pl in p:
        proto = sp.random(K, pl, density=density, random_state=rng).toarray()
        cpts = np.sort(rng.choice(K, size=int(0.8 * K), replace=False))
        rows = proto[cpts] + 0.3 * sp.random(len(cpts), pl, density=density, random_state=rng).toarray()
        rows[rows.sum(1) == 0, 0] = 1.0
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        blocks.append(sp.csr_matrix(rows))
        labels.append(cpts)
    return blocks, labels, K


def dense_system(blocks, labels, K, lam):
    X = sp.block_diag(blocks).toarray()
    y = np.concatenate(labels)
    Y = np.zeros((X.shape[0], K))
    Y[np.arange(X.shape[0]), y] = 1.0
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    return Xc, Yc, Xc.T @ Xc + lam * np.eye(X.shape[1])


def closed_form(blocks, labels, K, lam, r):
    """Eq. 10 with a dense Cholesky factor and SVD: W (K x p), its top singular values and
    right singular vectors (the reference Phi), and the top eigenvalues of M (= S^2)."""
    Xc, Yc, A = dense_system(blocks, labels, K, lam)
    L = np.linalg.cholesky(A)
    C = sla.solve_triangular(L, (Yc.T @ Xc).T, lower=True).T  # Yc^T Xc L^-T
    U, S, Vt = np.linalg.svd(C, full_matrices=False)
    Z = (U[:, :r] * S[:r]) @ Vt[:r]
    W = sla.solve_triangular(L, Z.T, lower=True, trans="T").T  # Z L^-1
    _, S2, Vt2 = np.linalg.svd(W, full_matrices=False)
    return W, S2[:r], Vt2[:r], S[:r] ** 2


@pytest.mark.parametrize("woodbury", [True, False])
@pytest.mark.parametrize("lam,rank", [(0.5, 5), (3.0, 12)])
def test_iterative_solution_equals_closed_form(woodbury, lam, rank):
    blocks, labels, K = synthetic()
    W, S, phi_ref, eig = closed_form(blocks, labels, K, lam, rank)
    sol = solve(blocks, labels, K, SolverSettings(rank=rank, lam=lam, woodbury=woodbury, **TIGHT))
    phi = np.concatenate(sol.phi, axis=1)
    np.testing.assert_allclose(sol.eigenvalues, eig, rtol=1e-8)
    np.testing.assert_allclose(sol.singular_values, S, rtol=1e-8)
    np.testing.assert_allclose(sol.H @ phi, W, atol=1e-9 * np.abs(W).max())
    np.testing.assert_allclose(phi @ phi.T, np.eye(rank), atol=1e-10)  # Eq. 15: orthonormal rows
    np.testing.assert_allclose(np.abs(np.sum(phi * phi_ref, axis=1)), 1.0, atol=1e-8)  # same rows up to sign
    assert sol.stats.cg_not_converged == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_default_tolerances_are_near_optimal(seed):
    """Sec. 4.1's loose tolerances (CG 0.01, eigsh 0.1): a rank-r W whose Eq. 9 objective is
    within 10% of the optimum (and, being feasible, never below it)."""
    blocks, labels, K = synthetic(seed=seed)
    lam, r = 1.0, 5
    W, _, _, _ = closed_form(blocks, labels, K, lam, r)
    Xc, Yc, A = dense_system(blocks, labels, K, lam)
    f = lambda W: 0.5 * np.trace(W @ A @ W.T) - np.trace(Yc.T @ Xc @ W.T)  # noqa: E731
    sol = solve(blocks, labels, K, SolverSettings(rank=r, lam=lam))
    Wi = sol.H @ np.concatenate(sol.phi, axis=1)
    assert np.linalg.matrix_rank(Wi) == r
    gap = (f(Wi) - f(W)) / abs(f(W))
    assert -1e-9 < gap < 0.1


def test_woodbury_solves_equal_direct_and_dense():
    blocks, labels, K = synthetic(seed=2)
    lam = 0.7
    Xc, Yc, A = dense_system(blocks, labels, K, lam)
    rng = np.random.default_rng(0)
    b = rng.standard_normal(A.shape[0])
    ref = np.linalg.solve(A, b)
    wood = Cr5Problem(blocks, labels, K, lam, cg_tol=1e-13, cg_maxiter=5000, woodbury=True)
    direct = Cr5Problem(blocks, labels, K, lam, cg_tol=1e-13, cg_maxiter=5000, woodbury=False)
    parts = wood._split(b)
    x_w = np.concatenate(wood.solve_A(parts))
    x_d = np.concatenate(direct.solve_A(parts))
    np.testing.assert_allclose(x_w, ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(x_d, ref, rtol=1e-9, atol=1e-10)
    # several right-hand sides at once (the Eq. 14 path)
    Bm = rng.standard_normal((A.shape[0], 4))
    xm = np.concatenate(wood.solve_A_multi(wood._split(Bm)), axis=0)
    np.testing.assert_allclose(xm, np.linalg.solve(A, Bm), rtol=1e-8, atol=1e-10)
    # the operator of Eq. 12 against the dense M (Y-hat and Y give the same M)
    M = Yc.T @ Xc @ np.linalg.solve(A, Xc.T @ Yc)
    u = rng.standard_normal(K)
    np.testing.assert_allclose(wood.matvec_M(u), M @ u, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(direct.matvec_M(u), M @ u, rtol=1e-8, atol=1e-10)
    # X-hat products against the dense centred matrix
    v = rng.standard_normal(Xc.shape[0])
    np.testing.assert_allclose(np.concatenate(wood.xhat_t(v)), Xc.T @ v, atol=1e-12)
    np.testing.assert_allclose(wood.xhat(wood._split(b)), Xc @ b, atol=1e-12)


def test_solver_is_deterministic_and_checks_rank():
    blocks, labels, K = synthetic(seed=3)
    a = solve(blocks, labels, K, SolverSettings(rank=4, lam=1.0, seed=5))
    b = solve(blocks, labels, K, SolverSettings(rank=4, lam=1.0, seed=5))
    threaded = solve(blocks, labels, K, SolverSettings(rank=4, lam=1.0, seed=5, n_jobs=2))  # per-language solves in threads
    for x, y, z in zip(a.phi, b.phi, threaded.phi):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    assert threaded.stats.cg_iterations == a.stats.cg_iterations
    with pytest.raises(DataError, match="rank"):
        solve(blocks, labels, K, SolverSettings(rank=K, lam=1.0))
    with pytest.raises(DataError, match="lam"):
        solve(blocks, labels, K, SolverSettings(rank=3, lam=0.0))


_BLAS_CHILD = """
import json, sys
import numpy as np, scipy.sparse as sp
from threadpoolctl import threadpool_info
import backretrieval.train.cr5.solver as solver
before = sorted(i["filepath"] for i in threadpool_info())
rng = np.random.default_rng(0)
blocks = [sp.random(40, 30, density=0.3, random_state=rng, format="csr") for _ in range(2)]
labels = [np.arange(40) % 25, (np.arange(40) + 3) % 25]
solver.solve(blocks, labels, 25, solver.SolverSettings(rank=3, lam=1.0))
solver.solve(blocks, labels, 25, solver.SolverSettings(rank=3, lam=1.0, woodbury=False, eig_tol=1e-9))
print(json.dumps({"before": before, "after": sorted(i["filepath"] for i in threadpool_info())}))
"""


def test_solver_loads_every_blas_before_limiting_threads():
    """solve() holds BLAS to one thread with threadpoolctl, which only reaches libraries already
    loaded: in a fresh interpreter, importing the solver must load every BLAS/OpenMP library the
    solve then uses (else a process's first fit depends on the thread count)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _BLAS_CHILD], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] and got["after"] == got["before"]


# ----------------------------------------------------------------------------- preprocessing
def test_tokenize_latin_cjk_and_normalisation():
    assert tokenize("The Straße, a TEST-case!") == ["the", "straße", "test", "case"]
    assert tokenize("ＡＢＣ ｄｅｆ１２") == ["abc", "def12"]  # NFKC: full width -> ASCII
    assert tokenize("2048 难题是基于数学的") == ["2048", "难题", "题是", "是基", "基于", "于数", "数学", "学的"]
    assert tokenize("本パッケージには、GNOMEの") == ["本パ", "パッ", "ッケ", "ケー", "ージ", "ジに", "には", "gnome", "の"]
    assert tokenize("Привет мир") == ["привет", "мир"]
    assert tokenize("a ? ! 猫") == ["猫"]  # one-letter Latin words are dropped, a lone ideograph kept


def test_tfidf_matches_sklearn():
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = [
        "the cat sat on the mat", "the dog sat", "a cat and a dog", "the cat", "dogs and cats",
        "mat mat mat cat", "猫が好き 猫", "好きな犬", "the the the",
    ]
    vocab, idf = fit_tfidf(texts, min_df=2, max_features=None)
    ref = TfidfVectorizer(analyzer=tokenize, min_df=2, dtype=np.float64).fit(texts)
    assert vocab == sorted(ref.vocabulary_)
    np.testing.assert_allclose(idf, ref.idf_[[ref.vocabulary_[t] for t in vocab]])
    x = TfidfBow(vocab, idf).transform(texts + ["nothing known here"])
    xr = ref.transform(texts).toarray()[:, [ref.vocabulary_[t] for t in vocab]]
    np.testing.assert_allclose(x.toarray()[:-1], xr, atol=1e-12)
    assert x[-1].nnz == 0  # no known token: an all-zero row
    # max_features keeps the most frequent tokens
    top, _ = fit_tfidf(texts, min_df=1, max_features=2)
    assert top == ["cat", "the"]
    with pytest.raises(DataError, match="empty vocabulary"):
        fit_tfidf(["one two", "three"], min_df=3)


# ----------------------------------------------------------------------------- retrieval metrics
def _naive_ranks(q, d, truth, sim, k_csls, q_pool, slack):
    """Ranks from float64 BLAS scores: the items scoring at least the true one's minus ``slack``
    (a positive slack counts near-ties against the query, a negative one leaves them out; exact
    ties -- identical vectors, e.g. words seen in the same documents only -- always count)."""
    unit = lambda a: a.astype(np.float64) / np.linalg.norm(a.astype(np.float64), axis=1, keepdims=True)  # noqa: E731
    Q, D, QP = unit(q), unit(d), unit(q_pool)
    s = Q @ D.T
    if sim == "csls":
        rq = np.sort(Q @ D.T, axis=1)[:, -k_csls:].mean(1)
        rd = np.sort(D @ QP.T, axis=1)[:, -k_csls:].mean(1)
        s = 2 * s - rq[:, None] - rd[None, :]
    t = s[np.arange(len(Q)), truth]
    return (s >= t[:, None] - slack).sum(1) + ((s == t[:, None]) & (s < t[:, None] - slack)).sum(1)


def _assert_xlr_at_k_exact(got, q, d, truth, sim, k_csls, q_pool, ks):
    """The fast P@k equals the one of the canonical reference exactly (tests/reference.py: ranks
    on canonical scores, computed without BLAS), whatever near-ties the vectors hold. The
    reference is itself checked against a float64 naive computation: each query's canonical rank
    lies between the naive ranks with and without a 1e-6 slack, and at most a few queries are
    that close to a tie (the rest are decided by the naive scores alone)."""
    canon = ref.rank_of_true_vec(q, d, truth, sim, k_csls, q_pool)
    loose = _naive_ranks(q, d, truth, sim, k_csls, q_pool, slack=1e-6)
    strict = _naive_ranks(q, d, truth, sim, k_csls, q_pool, slack=-1e-6)
    assert np.all((strict <= canon) & (canon <= loose)), "the canonical reference disagrees with the naive scores"
    assert np.count_nonzero(strict != loose) <= max(2, len(canon) // 20), "too many queries within the slack"
    for k in ks:
        assert got[f"xlr@{k}"] == float(np.mean(canon <= k)), (k, got[f"xlr@{k}"], float(np.mean(canon <= k)))


@pytest.mark.parametrize("sim", ["cosine", "csls"])
def test_retrieval_precision_matches_naive(sim):
    rng = np.random.default_rng(0)
    d = rng.standard_normal((300, 16)).astype(np.float32)
    truth = rng.choice(300, size=60, replace=False)
    q = d[truth] + 0.8 * rng.standard_normal((60, 16)).astype(np.float32)
    pool = np.concatenate([q, rng.standard_normal((40, 16)).astype(np.float32)])
    got = retrieval_precision(q, d, truth, q_pool=pool, sim=sim, ks=(1, 5, 10))
    _assert_xlr_at_k_exact(got, q, d, truth, sim, 10, pool, (1, 5, 10))
    # a zero query vector (no known token) scores 0 everywhere: pessimistic rank = all candidates
    z = retrieval_precision(np.zeros((1, 16), np.float32), d, np.array([0]), sim="cosine")
    assert z["xlr@10"] == 0.0 and z["xlr_mrr"] == pytest.approx(1 / 300) and z["xlr_median_rank"] == 300


# ----------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def ddtp(shared_data):
    ds = load_dataset("ddtp", langs=["en", "de", "ja"], source_dir=str(shared_data / "ddtp"), max_docs=4000)
    return ds


@pytest.fixture(scope="module")
def split(ddtp):
    return make_split(ddtp, [("en", "de"), ("de", "ja")], test_size=150, val_size=100, seed=0)


def test_split_and_regimes_hold_out_queries(ddtp, split):
    again = make_split(ddtp, [("en", "de"), ("de", "ja")], test_size=150, val_size=100, seed=0)
    assert again.to_json() == split.to_json()  # same seed, same split
    held = split.heldout
    tests, vals = set().union(*split.test.values()), set().union(*split.val.values())
    assert not (tests & vals)  # one role (test or validation) per held-out concept
    assert not (set(split.distractors) & (tests | vals))
    assert len(split.test["en-de"]) == 150 and len(split.val["de-ja"]) == 100
    for key, qs in split.test.items():  # the queries of a pair are concepts of both languages
        a, b = key.split("-")
        assert set(qs) <= set(ddtp[a].concepts) & set(ddtp[b].concepts)
    joint = training_corpora(ddtp, split, "joint")
    pair = training_corpora(ddtp, split, "pairwise", pair=("de", "ja"))
    trans = training_corpora(ddtp, split, "transitive", pair=("de", "ja"), pivot="en")
    for corpora in (joint, pair, trans):
        for c in corpora.values():
            assert not (set(c.concepts) & held)
    concepts = {reg: {l: set(c.concepts) for l, c in cs.items()} for reg, cs in (("j", joint), ("p", pair), ("t", trans))}
    # joint: every training concept is in at least two languages
    for lang, cs in concepts["j"].items():
        others = set().union(*(v for k, v in concepts["j"].items() if k != lang))
        assert cs <= others
    assert concepts["p"]["de"] == concepts["p"]["ja"]
    assert not (concepts["t"]["de"] & concepts["t"]["ja"])  # transitive: no shared concept
    assert concepts["t"]["de"] and concepts["t"]["ja"]
    assert concepts["t"]["de"] | concepts["t"]["ja"] == concepts["t"]["en"]
    # candidate pools: every test query has its target; no training concept is a candidate
    for lang in ("en", "de", "ja"):
        rows = candidate_rows(ddtp, split, lang, "test")
        pool = {ddtp[lang].concepts[i] for i in rows}
        assert not (pool & set(concepts["j"][lang]))
        assert not (pool & set().union(*split.val.values()))
    with pytest.raises(DataError, match="pivot"):
        training_corpora(ddtp, split, "transitive", pair=("de", "ja"), pivot="de")


@pytest.fixture(scope="module")
def fitted(ddtp, split):
    train = training_corpora(ddtp, split, "joint")
    return Cr5(rank=40, lam=10.0).fit(train)


def test_fit_attributes_and_retrieval_well_above_chance(fitted, ddtp, split):
    m = fitted
    assert m.languages_ == ["de", "en", "ja"]
    phi = np.concatenate([m.components_[l] for l in m.languages_], axis=1).astype(np.float64)
    np.testing.assert_allclose(phi @ phi.T, np.eye(40), atol=1e-4)
    assert np.all(np.diff(m.singular_values_) <= 1e-9)
    assert m.stats_["matvecs"] > 0 and m.stats_["cg_not_converged"] == 0
    for lang in m.languages_:
        assert m.components_[lang].shape == (40, len(m.vocabulary_[lang]))
        assert len(m.vocabulary_[lang]) == len(m.idf_[lang])
    recs = evaluate_retrieval(m.transform, ddtp, split)
    assert {(r["src"], r["tgt"], r["sim"]) for r in recs} == {
        (s, t, sim) for s, t in (("en", "de"), ("de", "en"), ("de", "ja"), ("ja", "de")) for sim in ("cosine", "csls")
    }
    for r in recs:
        chance = 10 / r["n_candidates"]
        assert r["xlr@10"] > max(0.4, 20 * chance), r  # DDTP translations are close: far above chance
        assert r["xlr@1"] <= r["xlr@5"] <= r["xlr@10"]


def test_save_load_and_encoder(fitted, ddtp, tmp_path):
    from backretrieval.encoders.registry import get_text_encoder

    d = fitted.save(tmp_path / "m", info={"note": "test"})
    meta = json.loads((d / "model.json").read_text())
    assert meta["format"] == "backretrieval.model" and meta["kind"] == "cr5" and meta["rank"] == 40 and meta["note"] == "test"
    with np.load(d / "weights.npz", allow_pickle=False) as z:  # no pickled objects anywhere
        assert set(z.files) >= {"phi__en", "idf__en", "singular_values"}
    texts = ddtp["de"].texts[:50]
    again = Cr5.load(d)
    np.testing.assert_array_equal(again.transform(texts, "de"), fitted.transform(texts, "de"))
    assert again.rank == 40 and again.lam == 10.0 and again.get_params() == fitted.get_params()
    enc = get_text_encoder(f"cr5:{d}")
    assert enc.dim == 41 and enc.languages == frozenset({"de", "en", "ja"})
    v = enc.encode(texts + ["qqqxxyyzz zzzqqqxx"], "de")
    assert v.shape == (51, 41)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    raw = fitted.transform(texts, "de")
    raw = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    cos_raw = raw @ raw.T
    cos_enc = v[:50] @ v[:50].T
    np.testing.assert_allclose(cos_enc, (cos_raw + BIAS**2) / (1 + BIAS**2), atol=1e-5)  # monotone map
    np.testing.assert_allclose(v[50], np.eye(41)[40], atol=1e-6)  # no known token: the bias vector
    # word vectors are the columns of Phi
    words, wv = again.word_vectors("en")
    np.testing.assert_array_equal(wv, fitted.components_["en"].T)
    assert words == fitted.vocabulary_["en"]
    with pytest.raises(EncoderError, match="no language 'fr'"):
        enc.encode(["bonjour"], "fr")
    (d / "model.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(EncoderError, match="format version"):
        Cr5Model.load(d)
    with pytest.raises(EncoderError, match="not a trained cr5 model directory"):
        get_text_encoder(f"cr5:{tmp_path}")


def test_word_retrieval_matches_naive(fitted):
    words_en, _ = fitted.word_vectors("en")
    words_de, _ = fitted.word_vectors("de")
    dictionary = [(w, w) for w in words_en if w in set(words_de)][:80] + [("zzznotaword", "x")]
    recs = word_retrieval(fitted, dictionary, "en", "de", sims=("cosine",))
    r = recs[0]
    assert r["n_skipped"] == 1 and r["n_queries"] == 80
    _, sx = fitted.word_vectors("en")
    _, tx = fitted.word_vectors("de")
    si = {w: i for i, w in enumerate(words_en)}
    ti = {w: i for i, w in enumerate(words_de)}
    qs = sorted(si[a] for a, _ in dictionary[:80])
    inv = {si[a]: ti[b] for a, b in dictionary[:80]}
    _assert_xlr_at_k_exact(r, sx[qs], tx, np.array([inv[q] for q in qs]), "cosine", 10, sx, (1, 5, 10))


def test_select_lambda_keeps_the_best_validation_score(ddtp, split):
    train = training_corpora(ddtp, split, "pairwise", pair=("en", "de"))
    model, lam, table = select_lambda(lambda l: Cr5(rank=10, lam=l), train, ddtp, split, [1.0, 100.0], pairs=[("en", "de")])
    assert [r["lam"] for r in table] == [1.0, 100.0]
    best = max(table, key=lambda r: r["val_xlr@1"])
    assert lam == best["lam"] and model.lam == lam
    assert all(0 <= r["val_xlr@1"] <= 1 for r in table)


def test_fit_rejects_bad_input(ddtp):
    with pytest.raises(DataError, match="at least two languages"):
        Cr5(rank=5).fit({"en": ddtp["en"]})
    c = ddtp["en"]
    nocpt = Corpus(dataset="x", lang="de", ids=c.ids[:10], texts=c.texts[:10], concepts=None)
    with pytest.raises(DataError, match="no concepts"):
        Cr5(rank=5).fit({"en": c, "de": nocpt})
    with pytest.raises(HyperParameterError, match="'lam'"):  # a bad hyper-parameter, before any data is read
        Cr5(rank=5, lam=-1).fit(ddtp)
    for kind in (NotFittedError, BackretrievalError):
        with pytest.raises(kind, match="Cr5 is not fitted yet"):
            Cr5().transform(["x"], "en")


HYPER = {"rank", "lam", "max_vocab", "min_df", "min_words", "max_words", "min_languages", "cg_tol", "cg_maxiter",
         "eig_tol", "eig_maxiter", "woodbury", "seed", "n_jobs", "progress"}


def test_estimator_shape_params_clone_and_bad_hyper_parameters():
    """Cr5 on train.base.Estimator: parameters from the __init__ signature, clone, set_params, and a
    HyperParameterError naming each bad hyper-parameter (checked before the data are looked at)."""
    from sklearn.base import clone

    m = Cr5(rank=7, lam=0.5, max_words=None, seed=3)
    p = m.get_params()
    assert set(p) == HYPER and p["rank"] == 7 and p["lam"] == 0.5 and p["max_words"] is None and p["seed"] == 3
    c = clone(m)
    assert c is not m and c.get_params() == p
    assert m.set_params(rank=9) is m and m.rank == 9
    assert repr(Cr5(rank=12)) == "Cr5(rank=12)"
    bad = [
        ({"rank": 0}, ["'rank'", "Got 0"]), ({"rank": 2.0}, ["'rank'"]), ({"rank": True}, ["'rank'", "True"]),
        ({"lam": 0.0}, ["'lam'"]), ({"lam": float("inf")}, ["'lam'", "inf"]), ({"lam": float("nan")}, ["'lam'"]),
        ({"lam": True}, ["'lam'", "True"]), ({"cg_tol": -1e-3}, ["'cg_tol'"]), ({"eig_tol": "0.1"}, ["'eig_tol'"]),
        ({"max_vocab": 0}, ["'max_vocab'"]), ({"min_words": -1}, ["'min_words'"]), ({"max_words": 2.5}, ["'max_words'"]),
        ({"min_languages": 0}, ["'min_languages'"]), ({"woodbury": "yes"}, ["'woodbury'"]), ({"n_jobs": 0}, ["'n_jobs'"]),
        ({"seed": -1}, ["'seed'"]), ({"progress": 1}, ["'progress'"]),
        ({"min_words": 10, "max_words": 5}, ["max_words=5", "min_words=10"]),
    ]
    for kw, words in bad:
        with pytest.raises(HyperParameterError) as err:
            Cr5(**kw).fit({})  # {} would be a DataError: the hyper-parameters are checked first
        assert isinstance(err.value, BackretrievalError)
        for w in words:
            assert w in str(err.value), (kw, str(err.value))
    Cr5(min_words=0, max_words=None, max_vocab=None, seed=np.int64(2)).check_params()  # the edges are fine


def test_precision_table_and_eval_md(tmp_path):
    """The report layer's Markdown: one row per directed pair, xlr@K in percent, '-' for a missing
    similarity; eval.md titles the run."""
    from types import SimpleNamespace

    from backretrieval.report.cr5_tables import precision_table_md, write_eval_md

    def rec(s, t, sim, x1, x5, x10):
        return {"src": s, "tgt": t, "sim": sim, "xlr@1": x1, "xlr@5": x5, "xlr@10": x10, "n_queries": 4, "n_candidates": 9}

    recs = [rec("en", "de", "cosine", 0.5, 0.75, 1.0), rec("en", "de", "csls", 0.25, 0.5, 0.75), rec("de", "en", "cosine", 0.0, 0.25, 1.0)]
    lines = precision_table_md(recs).splitlines()
    assert lines == [
        "| query | target | cosine xlr@1 | cosine xlr@5 | cosine xlr@10 | csls xlr@1 | csls xlr@5 | csls xlr@10 | queries | candidates |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| en | de | 50.0 | 75.0 | 100.0 | 25.0 | 50.0 | 75.0 | 4 | 9 |",
        "| de | en | 0.0 | 25.0 | 100.0 | - | - | - | 4 | 9 |",
    ]
    assert precision_table_md(recs[:1], ks=(1,)).splitlines()[2] == "| en | de | 50.0 | 4 | 9 |"
    model = SimpleNamespace(languages_=["de", "en"], rank=16)
    path = write_eval_md(tmp_path, SimpleNamespace(regime="joint", model=model, lam=10.0, test=recs))
    text = path.read_text()
    assert path == tmp_path / "eval.md" and text.startswith("# Cr5 joint (de, en), rank 16, lambda 10\n")
    assert "\n".join(lines) + "\n" in text


def test_cli_train_then_evaluate_text_only_dataset(shared_data, tmp_path):
    """`train cr5` writes a model + held-out evaluation; `evaluate` on DDTP (no images) reports
    XLR with the cr5 model and says that BkR needs images."""
    from click.testing import CliRunner

    from backretrieval.cli import main

    src = f"source_dir={shared_data / 'ddtp'}"
    out = tmp_path / "cr5"
    r = CliRunner().invoke(main, [
        "train", "cr5", "--dataset", "ddtp", "--langs", "en,de", "--rank", "16", "--lam", "10",
        "--test-size", "100", "--val-size", "50", "--dataset-option", src, "--dataset-option", "max_docs=3000",
        "--out", str(out), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    assert "| en | de |" in r.output
    for f in ("model.json", "weights.npz", "vocab/en.txt", "eval.md", "eval.json", "split.json", "heldout.jsonl"):
        assert (out / f).is_file(), f
    ev = json.loads((out / "eval.json").read_text())
    assert ev["regime"] == "joint" and len(ev["test"]) == 4
    assert {"xlr@1", "xlr@5", "xlr@10", "xlr_mrr"} <= set(ev["test"][0]) and "p@1" not in ev["test"][0]
    assert "| en | de |" in (out / "eval.md").read_text() and "cosine xlr@1" in (out / "eval.md").read_text()
    # a pairwise model on the same held-out concepts (--split): same test queries, same pools
    out2 = tmp_path / "cr5-pair"
    r = CliRunner().invoke(main, [
        "train", "cr5", "--dataset", "ddtp", "--regime", "pairwise", "--pair", "de-en", "--rank", "16",
        "--lam", "10", "--split", str(out / "split.json"), "--dataset-option", src, "--dataset-option", "max_docs=3000",
        "--out", str(out2), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    ev2 = json.loads((out2 / "eval.json").read_text())
    assert ev2["regime"] == "pairwise"
    key = lambda recs: sorted((x["src"], x["tgt"], x["sim"], x["n_queries"], x["n_candidates"]) for x in recs)  # noqa: E731
    assert key(ev2["test"]) == key(ev["test"])
    res = tmp_path / "ev"
    r = CliRunner().invoke(main, [
        "evaluate", "--dataset", str(out / "heldout.jsonl"), "--models", f"cr5:{out}", "--pairs", "en-de",
        "--n", "80", "--seeds", "1", "--out", str(res), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    rec = json.loads((res / "results.jsonl").read_text().splitlines()[0])
    assert rec["model"] == "cr5:cr5" and rec["model_spec"] == f"cr5:{out}" and rec["xlr@10"] > 0.5 and "bkr@10" not in rec
    r = CliRunner().invoke(main, [
        "evaluate", "--dataset", "ddtp", "--dataset-option", src, "--dataset-option", "max_docs=3000",
        "--models", f"cr5:{out}", "--pairs", "en-de", "--n", "60", "--seeds", "1", "--out", str(tmp_path / "ev2"), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    assert "BkR and CORR need images" in r.output


def test_single_token_dictionary():
    en = Corpus(dataset="x", lang="en", ids=["1", "2", "3", "4"], texts=["cat", "black cat", "dog", "sun"],
                concepts=["c1", "c2", "c3", None])
    ja = Corpus(dataset="x", lang="ja", ids=["1", "2", "3", "4"], texts=["猫", "黒い猫", "犬", "太陽"],
                concepts=["c1", "c2", "c3", "c4"])
    # "黒い猫" is the bigrams 黒い, い猫: two tokens; "sun" has no concept
    assert single_token_dictionary({"en": en, "ja": ja}, "en", "ja", field=None) == [("cat", "猫"), ("dog", "犬")]


def test_grid_skips_a_model_for_languages_it_cannot_embed(fitted, tmp_path, shared_data):
    """A Cr5 model trained on de/en/ja evaluated on emoji-cldr en-de and en-ru: it runs for en-de,
    is skipped (with a warning) for en-ru, and the other models run everywhere."""
    from backretrieval.analysis import EvalConfig, run_grid

    d = fitted.save(tmp_path / "m")
    logs: list[str] = []
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de"), ("en", "ru")], models=[f"cr5:{d}", "random"],
                     image_model="color-hist", n=100, seeds=[0])
    res = run_grid(cfg, tmp_path / "out", progress=False, log=logs.append)
    got = {(r["model"], r["tgt_lang"]) for r in res.records}
    assert got == {("cr5:m", "de"), ("random", "de"), ("random", "ru")}
    assert any("skipping cr5:" in m and "'ru'" in m and "no language 'ru'" in m for m in logs)
