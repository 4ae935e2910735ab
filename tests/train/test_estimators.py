"""Triplet and M3L on the one estimator shape (train/base.py): parameters from __init__ stored
unmodified, clone, named hyper-parameter errors, one not-fitted error, one fit shape, and
Triplet's checkpoint resume key, which must stay what the code before computed."""
from __future__ import annotations

import json

import numpy as np
import pytest
import sklearn.exceptions
from sklearn.base import clone

from backretrieval.core import BackretrievalError, content_hash
from backretrieval.data import Corpus, Dataset
from backretrieval.train.base import HyperParameterError, NotFittedError
from backretrieval.train.m3l import M3L, M3LModel
from backretrieval.train.triplet import TitleBodyData, Triplet, TripletModel, resume_key


def _synthetic():
    """The data of the reference run (tests/train/test_triplet.py's _synthetic, n=240, d=16, seed 0)."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((240, 6)).astype(np.float32)
    a = rng.standard_normal((6, 16)).astype(np.float32)
    langs = np.array(["en", "de", "fr"])[rng.integers(0, 3, 240)]
    off = np.array([{"en": 0.0, "de": 1.5, "fr": -1.5}[x] for x in langs], np.float32)[:, None]
    xt = z @ a + 0.3 * rng.standard_normal((240, 16)).astype(np.float32) + off
    xb = z @ a + 0.3 * rng.standard_normal((240, 16)).astype(np.float32) + off
    return xt, xb, langs


def _old_key(est, xt, xb, lang_idx, languages):
    """The resume key as the code before the estimator API computed it (its hyper_params())."""
    keys = ("method", "base", "layers", "final_relu", "lr", "alpha", "batch_size", "epochs", "beta", "k",
            "refresh_every", "val_frac", "patience", "restore_best", "seed")
    hp = {k: getattr(est, k) for k in keys}
    if est.negatives != "batch":
        hp["negatives"] = est.negatives
    if est.tower != "mlp":
        hp["tower"] = est.tower
    hp["layers"] = [int(w) for w in est.layers]
    hp = {k: v for k, v in hp.items() if k != "epochs"}
    data = content_hash(xt.tobytes() + xb.tobytes() + lang_idx.tobytes() + "\0".join(languages).encode())
    return content_hash(json.dumps(hp, sort_keys=True) + data)


@pytest.mark.parametrize("kw, measured", [
    # measured with the code before this change (/work/main at eeb07d3, TripletModel._run_key)
    (dict(method="triplet", layers=(12, 8), batch_size=32, epochs=3, seed=7, threads=1), "059c901eb6a52a8fd585c70c71dbf905"),
    (dict(method="tripletxl", layers=(24,), batch_size=32, epochs=3, seed=7, threads=1, tower="residual", k=3,
          negatives="language"), "2676600c5435b2061a90b3c92c56b96e"),
])
def test_resume_key_is_unchanged(kw, measured):
    xt, xb, langs = _synthetic()
    method = kw.pop("method")
    est = Triplet(method, **kw)
    languages = sorted(set(langs.tolist()))
    lang_idx = np.array([languages.index(x) for x in langs], dtype=np.int64)
    key = resume_key(est.get_params(), languages, xt, xb, lang_idx)
    assert key == measured == _old_key(est, xt, xb, lang_idx, languages)
    # more epochs resume; any other setting (and the data) starts afresh
    assert resume_key(clone(est).set_params(epochs=9).get_params(), languages, xt, xb, lang_idx) == key
    for change in ({"lr": 0.02}, {"layers": [12, 9]}, {"seed": 8}, {"negatives": "batch" if kw.get("negatives") else "language"}):
        assert resume_key(clone(est).set_params(**change).get_params(), languages, xt, xb, lang_idx) != key
    assert resume_key(est.get_params(), languages, xt + 1, xb, lang_idx) != key


def test_triplet_stores_parameters_unmodified_and_clones():
    est = Triplet("tripletxl", layers=[8, 4], lr=0.5, patience=2)
    assert est.get_params()["layers"] == [8, 4] and est.layers == [8, 4]  # converted at fit time only
    c = clone(est)
    assert c is not est and c.get_params() == est.get_params()
    assert repr(Triplet(k=3)) == "Triplet(k=3)"
    assert TripletModel is Triplet and M3LModel is M3L


@pytest.mark.parametrize("kw, words", [
    ({"method": "quadruplet"}, ["'method'", "quadruplet"]),
    ({"batch_size": 1}, ["'batch_size'", "Got 1"]),
    ({"epochs": True}, ["'epochs'", "True"]),
    ({"layers": (8, 0)}, ["'layers'", "(8, 0)"]),
    ({"layers": "300"}, ["'layers'"]),
    ({"lr": 0}, ["'lr'"]),
    ({"val_frac": 1.0}, ["'val_frac'"]),
    ({"tower": "dense"}, ["'tower'", "dense"]),
    ({"negatives": "hard"}, ["'negatives'", "hard"]),
    ({"patience": 0}, ["'patience'"]),
])
def test_triplet_bad_hyper_parameters_are_named(kw, words):
    xt, xb, langs = _synthetic()
    with pytest.raises(HyperParameterError) as err:
        Triplet(**kw).fit_vectors(xt, xb, langs)
    assert isinstance(err.value, BackretrievalError)
    for w in words:
        assert w in str(err.value)


def test_triplet_not_fitted_and_fit_shape(tmp_path):
    xt, xb, langs = _synthetic()
    est = Triplet("triplet", layers=(8,), epochs=1, batch_size=32, threads=1)
    for call in (lambda: est.transform_vectors(xt, xb), lambda: est.save(tmp_path)):
        with pytest.raises(sklearn.exceptions.NotFittedError, match="Triplet is not fitted yet"):
            call()
    assert not (tmp_path / "model.json").exists()
    assert est.fit_vectors(xt, xb, langs) is est and est.transform_vectors(xt, xb).shape == (240, 16)


def test_triplet_fit_takes_a_dataset_like_title_body_data():
    """fit(Dataset) builds TitleBodyData.from_dataset (every language): the same model as fit(TitleBodyData)."""
    rng = np.random.default_rng(0)
    corpora = {}
    for lang in ("en", "de"):
        n = 40
        titles = [f"{lang} title {i} {rng.integers(5)}" for i in range(n)]
        bodies = [f"{lang} body {i} words {rng.integers(9)}" for i in range(n)]
        corpora[lang] = Corpus(dataset="toy", lang=lang, ids=[str(i) for i in range(n)], texts=titles,
                               concepts=[str(i) for i in range(n)], extra={"title": titles, "body": bodies})
    ds = Dataset("toy", corpora)
    kw = dict(base="random", layers=(6,), epochs=2, batch_size=16, threads=1, seed=1)
    a = Triplet("tripletxl", k=2, **kw).fit(ds)
    b = Triplet("tripletxl", k=2, **kw).fit(TitleBodyData.from_dataset(ds))
    for (wa, ba), (wb, bb) in zip(a.params_, b.params_):
        np.testing.assert_array_equal(wa, wb)
        np.testing.assert_array_equal(ba, bb)
    assert a.data_counts_ == {"de": 40, "en": 40}


def test_m3l_stores_parameters_unmodified_and_clones():
    m = M3L("patr", train_langs=["en", "de"], widths=[64, 32], dropout=(0.1, 0.1, 0.0), eta_quantile=0.9)
    p = m.get_params()
    assert p["train_langs"] == ["en", "de"] and p["widths"] == [64, 32] and p["val_langs"] is None
    c = clone(m)
    assert c.get_params() == p and c is not m
    assert repr(M3L("m3l", epochs=3)) == "M3L(epochs=3)"


@pytest.mark.parametrize("kw, words", [
    ({"loss": "triplet"}, ["'loss'", "triplet"]),
    ({"batch_size": 1}, ["'batch_size'"]),
    ({"widths": (8,)}, ["'widths'", "two positive hidden widths"]),
    ({"dropout": (0.1, 1.0, 0.0)}, ["'dropout'", "[0, 1)"]),
    ({"train_langs": []}, ["'train_langs'"]),
    ({"train_langs": "en"}, ["'train_langs'"]),
    ({"eta": -1.0}, ["'eta'"]),
    ({"eta": float("inf")}, ["'eta'", "Got inf"]),
    ({"eta_quantile": 1.0}, ["'eta_quantile'"]),
    ({"beta1": 1.0}, ["'beta1'"]),
    ({"select": "first"}, ["'select'"]),
    ({"epochs": -1}, ["'epochs'"]),
    ({"test_frac": 0.6, "val_frac": 0.5}, ["test_frac"]),
    ({"val_frac": 0.0}, ["val_frac=0", "select='last'"]),
])
def test_m3l_bad_hyper_parameters_are_named_before_any_data_is_read(kw, words):
    loss = kw.pop("loss", "patr")
    with pytest.raises(HyperParameterError) as err:
        M3L(loss, **kw).fit(None)  # the check comes first: no dataset is touched
    for w in words:
        assert w in str(err.value)


def test_m3l_not_fitted(tmp_path):
    m = M3L("m3l")
    for call in (lambda: m.save(tmp_path / "m"), lambda: m.transform(np.zeros((1, 4), np.float32)), m.layers_, m.info_):
        with pytest.raises(NotFittedError, match="M3L is not fitted yet"):
            call()
    assert not (tmp_path / "m").exists()
