"""Cr5, Triplet and M3L on the one estimator shape (train/base.py): parameters from __init__ stored
unmodified, clone, named hyper-parameter errors checked before any fitting, one not-fitted error,
fit / transform / save / load with the same vectors after loading, and Triplet's checkpoint
resume key, which must stay what stored checkpoints are keyed by."""
from __future__ import annotations

import dataclasses
import inspect
import json

import numpy as np
import pytest
import sklearn.exceptions
from sklearn.base import clone

from backretrieval.core import BackretrievalError, content_hash
from backretrieval.core.canonical import matmul as canonical_matmul
from backretrieval.data import Corpus, Dataset
from backretrieval.train.base import HyperParameterError, NotFittedError
from backretrieval.train.cr5 import Cr5
from backretrieval.train.m3l import M3L
from backretrieval.train.triplet import TitleBodyData, Triplet, resume_key


def _synthetic():
    """tests/train/test_triplet.py's _synthetic data (n=240, d=16, seed 0), with ``z @ a`` as the
    canonical product: the keys pinned below hash these bytes, which must not depend on the CPU's
    BLAS kernel (a float32 ``z @ a`` differs in its last bits under OPENBLAS_CORETYPE=Prescott)."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((240, 6)).astype(np.float32)
    a = rng.standard_normal((6, 16)).astype(np.float32)
    langs = np.array(["en", "de", "fr"])[rng.integers(0, 3, 240)]
    off = np.array([{"en": 0.0, "de": 1.5, "fr": -1.5}[x] for x in langs], np.float32)[:, None]
    za = canonical_matmul(z, a)
    xt = za + 0.3 * rng.standard_normal((240, 16)).astype(np.float32) + off
    xb = za + 0.3 * rng.standard_normal((240, 16)).astype(np.float32) + off
    return xt, xb, langs


def _old_key(est, xt, xb, lang_idx, languages):
    """The resume key computed independently, from the estimator's attributes (the reference rule)."""
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
    # pinned keys: stored checkpoints must still resume (_old_key recomputes them)
    (dict(method="triplet", layers=(12, 8), batch_size=32, epochs=3, seed=7, threads=1), "32139cfc59a8d75a484407186f7bff1b"),
    (dict(method="tripletxl", layers=(24,), batch_size=32, epochs=3, seed=7, threads=1, tower="residual", k=3,
          negatives="language"), "29a82def1f7479696e687d4ad9764f5d"),
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
    for call in (lambda: est.transform(xt, xb), lambda: est.save(tmp_path)):
        with pytest.raises(sklearn.exceptions.NotFittedError, match="Triplet is not fitted yet"):
            call()
    assert not (tmp_path / "model.json").exists()
    assert est.fit_vectors(xt, xb, langs) is est and est.transform(xt, xb).shape == (240, 16)


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
    for call in (lambda: m.save(tmp_path / "m"), lambda: m.transform(np.zeros((1, 4), np.float32))):
        with pytest.raises(NotFittedError, match="M3L is not fitted yet"):
            call()
    assert not hasattr(m, "layers_") and not hasattr(m, "info_")
    assert not (tmp_path / "m").exists()


# ----------------------------------------------------------------------------- one shape for all three
def _concept_corpora(n: int = 36) -> Dataset:
    """en/de documents of n concepts over a small shared vocabulary, with title/body columns."""
    rng = np.random.default_rng(3)
    words = {"en": [f"w{i}" for i in range(40)], "de": [f"v{i}" for i in range(40)]}
    corpora = {}
    for lang, vocab in words.items():
        titles, bodies = [], []
        for i in range(n):
            own = [vocab[(i + j) % 40] for j in range(4)]
            noise = [vocab[k] for k in rng.integers(0, 40, 3)]
            titles.append(" ".join(own[:2]))
            bodies.append(" ".join(own + noise))
        texts = [f"{t}\n{b}" for t, b in zip(titles, bodies)]
        corpora[lang] = Corpus(dataset="toy", lang=lang, ids=[str(i) for i in range(n)], texts=texts,
                               concepts=[str(i) for i in range(n)], extra={"title": titles, "body": bodies})
    return Dataset("toy", corpora)


def _image_corpora(folder) -> Dataset:
    """The corpora of _concept_corpora with precomputed image features (one image per concept)."""
    ds = _concept_corpora()
    feats = np.random.default_rng(4).standard_normal((36, 6)).astype(np.float32)
    np.save(folder / "feats.npy", feats)
    corpora = {lang: dataclasses.replace(c, image_features=str(folder / "feats.npy"), image_rows=np.arange(36))
               for lang, c in ds.corpora.items()}
    return Dataset("toy", corpora)


def _cr5_case(tmp_path):
    ds = _concept_corpora()
    return Cr5(rank=3, lam=1.0, min_df=1, min_words=1), (ds,), (ds["de"].texts[:5] + ["unknown"], "de"), {"rank": 0}


def _triplet_case(tmp_path):
    rng = np.random.default_rng(5)
    est = Triplet("tripletxl", base="random", layers=(6,), epochs=2, batch_size=16, k=2, threads=1, seed=1)
    x = (rng.standard_normal((5, 512)).astype(np.float32), rng.standard_normal((5, 512)).astype(np.float32))
    return est, (_concept_corpora(),), x, {"lr": 0}


def _m3l_case(tmp_path):
    est = M3L("patr", base="random", image_model="precomputed", train_langs=["en"], val_langs=["en", "de"], widths=(8, 8),
              batch_size=16, epochs=2, test_frac=0.2, val_frac=0.2, threads=1)
    x = (np.random.default_rng(6).standard_normal((5, 512)).astype(np.float32),)
    return est, (_image_corpora(tmp_path),), x, {"batch_size": 1}


@pytest.mark.parametrize("case", [_cr5_case, _triplet_case, _m3l_case], ids=["Cr5", "Triplet", "M3L"])
def test_every_estimator_has_one_shape(case, tmp_path):
    """fit -> self, transform, save(path, *, info), classmethod load(path) giving the same vectors,
    NotFittedError before fit, a bad parameter refused before any fitting work, sklearn's
    get_params / set_params / clone, and every public fit wrapped in the base's fit_context."""
    est, fit_args, x, bad = case(tmp_path)
    cls = type(est)
    assert [p for p in inspect.signature(cls.save).parameters] == ["self", "path", "info"]
    assert inspect.signature(cls.save).parameters["info"].kind is inspect.Parameter.KEYWORD_ONLY
    assert isinstance(inspect.getattr_static(cls, "load"), classmethod)
    for name in ("fit", "fit_vectors"):
        if hasattr(cls, name):
            assert getattr(getattr(cls, name), "__fit_context__", False), f"{cls.__name__}.{name}"
    # parameters: sklearn's protocol
    params = est.get_params()
    c = clone(est)
    assert c is not est and c.get_params() == params
    assert c.set_params(seed=9) is c and c.seed == 9 and est.seed != 9
    # a bad parameter is refused before any fitting work (None would fail as data otherwise)
    with pytest.raises(HyperParameterError) as err:
        clone(est).set_params(**bad).fit(None)
    assert repr(next(iter(bad))) in str(err.value)
    # before fit
    for call in (lambda: est.transform(*x), lambda: est.save(tmp_path / "early")):
        with pytest.raises(NotFittedError, match=f"{cls.__name__} is not fitted yet"):
            call()
    assert not (tmp_path / "early").exists()
    # fit, transform, save, load
    assert est.fit(*fit_args) is est
    want = est.transform(*x)
    assert want.dtype == np.float32 and want.shape[0] == 5 + (cls is Cr5)
    d = est.save(tmp_path / "model", info={"note": "shape test"})
    assert json.loads((d / "model.json").read_text())["note"] == "shape test"
    again = cls.load(d)
    assert type(again) is cls and again is not est
    np.testing.assert_array_equal(again.transform(*x), want)
    assert again.get_params() == json.loads(json.dumps(params))  # tuples come back as lists
    # a loaded estimator saves the same model again
    again2 = cls.load(again.save(tmp_path / "again"))
    np.testing.assert_array_equal(again2.transform(*x), want)
