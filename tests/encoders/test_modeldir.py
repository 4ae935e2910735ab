"""The one model-directory format (encoders/trained/modeldir.py): round trips, errors, and the readers of
the legacy layouts (Cr5's cr5.json, Triplet's model.json format 1, M3L's config.json), which
must give exactly the vectors of the legacy readers -- through the encoders and through the
estimators' ``load``.

The three ``legacy_*`` writers write the legacy layouts, kept in tests/legacy_model_dirs.py so
the tests can build legacy directories."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from backretrieval.core import EncoderError, content_hash
from backretrieval.encoders.trained.modeldir import FORMAT, ModelDirError, read_model_dir, write_model_dir
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.train.cr5 import Cr5
from backretrieval.train.m3l import M3L
from backretrieval.train.triplet import Triplet
from legacy_model_dirs import legacy_cr5, legacy_m3l, legacy_triplet


# ----------------------------------------------------------------------------- the format
def test_round_trip_typed_values_arrays_and_files(tmp_path):
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "idf": np.array([1.5, 2.0])}
    hp = {"layers": (300, np.int64(200)), "lr": np.float32(0.5), "eta": None, "flag": True, "name": "x"}
    d = write_model_dir(tmp_path / "m", "triplet", hyper_parameters=hp, info={"n": 3, "stat": float("nan")},
                        arrays=arrays, files={"vocab/en.txt": "a\nb\n", "raw.bin": b"\x00\x01"})
    head = json.loads((d / "model.json").read_text())
    assert head["format"] == FORMAT and head["format_version"] == 1 and head["kind"] == "triplet"
    assert head["hyper_parameters"] == {"layers": [300, 200], "lr": 0.5, "eta": None, "flag": True, "name": "x"}
    assert isinstance(head["hyper_parameters"]["layers"][1], int) and head["stat"] is None  # NaN statistic -> null
    md = read_model_dir(d, "triplet")
    assert md.kind == "triplet" and md.legacy is None and md.header == "model.json"
    assert md.hyper_parameters == head["hyper_parameters"] and md.info == {"n": 3, "stat": None}
    assert md.files == ("raw.bin", "vocab/en.txt") and (d / "raw.bin").read_bytes() == b"\x00\x01"
    for k, a in arrays.items():
        np.testing.assert_array_equal(md.arrays[k], a)
        assert md.arrays[k].dtype == a.dtype
    with np.load(d / "weights.npz", allow_pickle=False) as z:  # no pickled object anywhere
        assert sorted(z.files) == ["idf", "w"]
    assert read_model_dir(d, arrays=False).arrays == {}
    assert md.files_hash() == content_hash((d / "model.json").read_bytes() + b"\0" + (d / "weights.npz").read_bytes(), 8)


def test_errors_name_the_directory_and_file(tmp_path):
    arr = {"w": np.zeros(2)}
    with pytest.raises(ModelDirError, match="not found: .*nope"):
        read_model_dir(tmp_path / "nope")
    with pytest.raises(ModelDirError, match=r"no model.json: not a trained cr5 model directory, or its training did not finish"):
        read_model_dir(tmp_path, "cr5")
    d = write_model_dir(tmp_path / "m", "m3l", hyper_parameters={}, info={}, arrays=arr, files={"split.json": "{}"})
    assert isinstance(ModelDirError("x"), EncoderError)
    with pytest.raises(ModelDirError, match=r"model.json holds a m3l model, not a cr5/triplet model"):
        read_model_dir(d, ("cr5", "triplet"))
    head = json.loads((d / "model.json").read_text())
    (d / "model.json").write_text(json.dumps({**head, "format_version": 2}))
    with pytest.raises(ModelDirError, match=r"model.json: format version 2 is newer than this package reads \(1\)"):
        read_model_dir(d)
    (d / "model.json").write_text(json.dumps({**head, "kind": "bert"}))
    with pytest.raises(ModelDirError, match="unknown model kind 'bert'"):
        read_model_dir(d)
    (d / "model.json").write_text(json.dumps({**head, "arrays": ["w", "v"]}))
    with pytest.raises(ModelDirError, match=r"weights.npz lacks array\(s\) v: the model directory is incomplete"):
        read_model_dir(d)
    (d / "model.json").write_text(json.dumps(head))
    (d / "split.json").unlink()
    with pytest.raises(ModelDirError, match=r"split.json is missing: the model directory is incomplete"):
        read_model_dir(d)
    (d / "model.json").write_text("{not json")
    with pytest.raises(ModelDirError, match="cannot read .*model.json"):
        read_model_dir(d)
    # what cannot be written is refused before anything is written
    bad = [
        (dict(hyper_parameters={"f": object()}), "hyper_parameters.f: a object cannot be saved"),
        (dict(hyper_parameters={"lr": float("inf")}), "hyper_parameters.lr: inf is not a finite number"),
        (dict(arrays={"o": np.array([{}], dtype=object)}), "array 'o' holds Python objects"),
        (dict(info={"kind": "x"}), "header key"),
        (dict(files={"../up.txt": "x"}), "cannot name a file"),
        (dict(files={"model.json": "x"}), "reserved"),
    ]
    for kw, msg in bad:
        args = {"hyper_parameters": {}, "info": {}, "arrays": arr, **kw}
        with pytest.raises(ModelDirError, match=msg):
            write_model_dir(tmp_path / "bad", "cr5", **args)
        assert not (tmp_path / "bad").exists()
    with pytest.raises(ModelDirError, match="unknown model kind"):
        write_model_dir(tmp_path / "bad", "word2vec", hyper_parameters={}, info={}, arrays=arr)


def test_rewriting_removes_the_header_first(tmp_path, monkeypatch):
    """An interrupted re-save leaves an incomplete directory, never the old header over new weights."""
    import backretrieval.encoders.trained.modeldir as mdmod

    d = write_model_dir(tmp_path / "m", "triplet", hyper_parameters={"a": 1}, info={}, arrays={"w": np.zeros(2)})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(mdmod, "atomic_save_npz", boom)
    with pytest.raises(OSError):
        write_model_dir(d, "triplet", hyper_parameters={"a": 2}, info={}, arrays={"w": np.ones(2)})
    with pytest.raises(ModelDirError, match="no model.json"):
        read_model_dir(d)
    # an older directory re-saved in the new format: its old header (and Cr5's cr5.npz) go first
    old = legacy_m3l(tmp_path / "old", [(np.ones((3, 2), np.float32), np.zeros(3, np.float32))])
    monkeypatch.undo()
    write_model_dir(old, "m3l", hyper_parameters={"loss": "m3l"}, info={}, arrays={"W0": np.zeros((1, 1))})
    assert not (old / "config.json").exists() and read_model_dir(old).legacy is None


# ----------------------------------------------------------------------------- Triplet: old and new directories
def _triplet_params(rng, dims=(7, 5, 4)):
    return [(rng.standard_normal((o, i)).astype(np.float32), rng.standard_normal(o).astype(np.float32))
            for i, o in zip(dims[:-1], dims[1:])]


def _naive_head(params, x, final_relu=True):
    h = x.astype(np.float64)
    for i, (w, b) in enumerate(params):
        h = h @ w.T.astype(np.float64) + b
        if i < len(params) - 1 or final_relu:
            h = np.maximum(h, 0)
    return h


@pytest.mark.parametrize("tower_key", [True, False])
def test_old_triplet_directory_loads_with_identical_vectors(tmp_path, tower_key):
    from backretrieval.encoders.trained.triplet import TripletEncoder, save_model

    rng = np.random.default_rng(0)
    params = _triplet_params(rng)
    cfg = {"method": "tripletxl", "base": "random", "final_relu": True,
           "hyper": {"lr": 0.01, "k": 5, "layers": [5, 4], "negatives": "batch"}, "languages": ["de", "en"], "n_train": 9}
    if tower_key:
        cfg["tower"] = "mlp"
    old = legacy_triplet(tmp_path / "old", cfg, params)
    new = save_model(tmp_path / "new", params, hyper_parameters={"method": "tripletxl", "base": "random", "lr": 0.01},
                     info={"languages": ["de", "en"]})
    md = read_model_dir(old, "triplet")
    assert md.legacy == "triplet-1" and md.kind == "triplet"
    assert md.hyper_parameters["method"] == "tripletxl" and md.hyper_parameters["tower"] == "mlp"
    assert md.hyper_parameters["k"] == 5 and md.info["n_train"] == 9 and md.info["input_dim"] == 7
    xt, xb = rng.standard_normal((6, 7)).astype(np.float32), rng.standard_normal((6, 7)).astype(np.float32)
    got_old = TripletEncoder(old, "tripletxl").embed_vectors(xt, xb)
    got_new = TripletEncoder(new, "tripletxl").embed_vectors(xt, xb)
    np.testing.assert_array_equal(got_old, got_new)
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    ref = np.concatenate([unit(_naive_head(params, xt)), unit(_naive_head(params, xb))], axis=1)
    np.testing.assert_allclose(got_old, ref, atol=1e-5)
    # the estimator reads the legacy directory too: same vectors, the recorded hyper-parameters
    est = Triplet.load(old)
    np.testing.assert_array_equal(est.transform(xt, xb), got_old)
    assert est.method == "tripletxl" and est.tower == "mlp" and est.k == 5 and est.languages_ == ["de", "en"]
    # the head's version of a legacy directory: the forward rule (f2: canonical products) and the files' hash as the legacy reader computed it
    want = content_hash((old / "model.json").read_bytes() + b"\0" + (old / "weights.npz").read_bytes(), 8)
    assert TripletEncoder(old, "tripletxl")._head_version == f"tripletxl-f2-{want}"
    with pytest.raises(EncoderError, match="holds a 'tripletxl' model"):
        get_text_encoder(f"triplet:{old}")
    np.savez(old / "weights.npz", w0=params[0][0], b0=params[0][1])  # the second layer is gone
    with pytest.raises(EncoderError, match=r"lacks array\(s\) w1, b1"):
        TripletEncoder(old, "tripletxl")


# ----------------------------------------------------------------------------- M3L / PATR: old and new directories
def _m3l_layers(rng, dims=(512, 6, 5, 4)):
    return [(rng.standard_normal((o, i)).astype(np.float32) * 0.1, rng.standard_normal(o).astype(np.float32))
            for i, o in zip(dims[:-1], dims[1:])]


def test_old_m3l_directory_loads_with_identical_vectors(tmp_path):
    from backretrieval.encoders.trained.m3l import M3LTextEncoder, forward, save_model

    rng = np.random.default_rng(1)
    layers = _m3l_layers(rng)
    old = legacy_m3l(tmp_path / "old", layers, loss="m3l")
    md = read_model_dir(old, "m3l")
    assert md.legacy == "m3l-1" and md.header == "config.json" and md.files == ("split.json",)
    hp = md.hyper_parameters
    assert hp["widths"] == [6, 5] and hp["rho"] == 4.0 and hp["lr"] == 0.001 and hp["beta1"] == 0.99
    assert (hp["split_seed"], hp["test_frac"], hp["val_frac"]) == (0, 0.25, 0.1)
    assert md.info["image_dim"] == 4 and md.info["best_epoch"] == 7 and "loss_params" not in md.info
    new = save_model(tmp_path / "new", layers, hyper_parameters=hp, info=md.info, split={"train": ["feat:a"]})
    texts = ["a cat", "ein Hund", "x"]
    got_old = M3LTextEncoder(old).map(texts, "en")
    np.testing.assert_array_equal(got_old, M3LTextEncoder(new).map(texts, "en"))
    base = get_text_encoder("random").encode(texts, "en")
    np.testing.assert_array_equal(got_old, forward(base, layers))
    est = M3L.load(old)  # the estimator reads the old directory too: same vectors
    np.testing.assert_array_equal(est.transform(base), got_old)
    assert est.loss == "m3l" and est.widths == [6, 5] and est.best_epoch_ == 7 and est.split_["test"] == ["feat:b"]
    # by hand: relu(x W^T + b), L2-normalised between blocks
    h = base.astype(np.float64)
    for i, (w, b) in enumerate(layers):
        h = np.maximum(h @ w.T + b, 0)
        if i < len(layers) - 1:
            h /= np.linalg.norm(h, axis=1, keepdims=True)
    np.testing.assert_allclose(got_old, h, rtol=1e-4, atol=1e-5)
    want = content_hash((old / "config.json").read_bytes() + b"\0" + (old / "weights.npz").read_bytes(), 8)
    assert M3LTextEncoder(old).version.startswith(f"m3l-f2-{want}+")  # f2: canonical products
    with pytest.raises(EncoderError, match=r"patr:.* is a model trained with the M3L loss: use m3l:"):
        get_text_encoder(f"patr:{old}")
    (old / "config.json").write_text(json.dumps({**json.loads((old / "config.json").read_text()), "format_version": 3}))
    with pytest.raises(EncoderError, match="format version 3 is newer"):
        M3LTextEncoder(old)


def test_patr_eta_becomes_typed_once_in_the_legacy_reader(tmp_path):
    """Old PATR directories carry the prose eta_rule (the oldest ones nothing else); the reader
    turns it into the typed eta / eta_quantile pair, and image-retrieval groups them as new ones."""
    from backretrieval.analysis.trained.image_retrieval import group_key, group_labels, model_settings

    layers = _m3l_layers(np.random.default_rng(2))
    typed = read_model_dir(legacy_m3l(tmp_path / "typed", layers, eta_quantile=0.5))
    prose = read_model_dir(legacy_m3l(tmp_path / "prose", layers, eta_quantile="absent",
                                      eta_rule="quantile 0.5 of squared distances between distinct training images"))
    prose90 = read_model_dir(legacy_m3l(tmp_path / "p90", layers, eta_quantile="absent", eta=9.0,
                                        eta_rule="quantile 0.9 of squared distances between distinct training images"))
    given = read_model_dir(legacy_m3l(tmp_path / "given", layers, eta_quantile="absent", eta_rule="given", eta=3.0))
    for md, eta, q in ((typed, None, 0.5), (prose, None, 0.5), (prose90, None, 0.9), (given, 3.0, None)):
        assert (md.hyper_parameters["eta"], md.hyper_parameters["eta_quantile"]) == (eta, q)
        assert "eta_rule" not in md.hyper_parameters
    assert prose90.info["eta"] == 9.0  # the eta that was used stays in the info
    assert group_key(typed) == group_key(prose) != group_key(prose90)
    assert model_settings(given)["eta"] == 3.0 and "eta_quantile" not in model_settings(given)
    assert model_settings(typed)["eta_quantile"] == 0.5 and "eta" not in model_settings(typed)
    names = group_labels([group_key(typed), group_key(prose90)])
    assert names[group_key(prose90)] == "random PATR (eta_quantile 0.9)"
    with pytest.raises(ModelDirError, match=r"config.json: unreadable eta_rule 'median'"):
        read_model_dir(legacy_m3l(tmp_path / "bad", layers, eta_quantile="absent", eta_rule="median"))


def test_image_retrieval_groups_new_and_old_directories_alike(tmp_path):
    """A model saved in the current format and the same model in the legacy layout form one
    configuration; other settings make their own rows, named by what differs."""
    from backretrieval.analysis.trained.image_retrieval import group_key, group_labels
    from backretrieval.encoders.trained.m3l import save_model

    layers = _m3l_layers(np.random.default_rng(3))
    old = read_model_dir(legacy_m3l(tmp_path / "old", layers, eta_quantile=0.5))
    hp = {"loss": "patr", "base": "random", "image_model": "precomputed", "train_langs": ("en",), "val_langs": None,
          "widths": (6, 5), "dropout": (0.2, 0.1, 0.0), "rho": 4.0, "alpha1": 0.5, "alpha2": 1.0, "eta": None,
          "eta_quantile": 0.5, "lr": 1e-3, "beta1": 0.99, "beta2": 0.999, "batch_size": 128, "epochs": 50, "patience": None,
          "select": "best", "init": "match", "standardize": True, "seed": 3, "split_seed": 0, "test_frac": 0.25,
          "val_frac": 0.1, "threads": None, "progress": False}
    new = read_model_dir(save_model(tmp_path / "new", layers, hyper_parameters=hp, info={**old.info, "eta": 4.2}))
    assert group_key(new) == group_key(old)  # the seed and the estimated eta do not count
    q90 = dataclasses.replace(new, hyper_parameters={**new.hyper_parameters, "eta_quantile": 0.9})
    lr = dataclasses.replace(new, hyper_parameters={**new.hyper_parameters, "lr": 0.01})
    keys = [group_key(m) for m in (new, old, q90, lr)]
    assert len(set(keys)) == 3
    names = group_labels(list(dict.fromkeys(keys)))
    assert names[keys[0]] == "random PATR (eta_quantile 0.5, lr 0.001)"
    assert names[keys[2]] == "random PATR (eta_quantile 0.9, lr 0.001)"
    assert names[keys[3]] == "random PATR (eta_quantile 0.5, lr 0.01)"
    assert group_labels([keys[0]]) == {keys[0]: "random PATR"}


# ----------------------------------------------------------------------------- Cr5: old and new directories
def test_old_cr5_directory_loads_with_identical_vectors(tmp_path):
    from backretrieval.encoders.trained.bow import fit_tfidf
    from backretrieval.encoders.trained.cr5 import Cr5Model

    rng = np.random.default_rng(4)
    texts = {"en": ["a red apple", "the red car", "an apple tree", "car and tree"],
             "de": ["ein roter apfel", "das rote auto", "ein apfelbaum", "auto und baum"]}
    vocab, idf, phi = {}, {}, {}
    for lang, t in texts.items():
        vocab[lang], idf[lang] = fit_tfidf(t, min_df=1)
        phi[lang] = rng.standard_normal((3, len(vocab[lang]))).astype(np.float32)
    meta = {"hyper_parameters": {"rank": 3, "lam": 1.0}, "training": {"n_concepts": 4}}
    old = legacy_cr5(tmp_path / "old", vocab, idf, phi, meta)
    new = Cr5Model(vocab, idf, phi, np.array([3.0, 2.0, 1.0]), meta).save(tmp_path / "new")
    assert not (new / "cr5.json").exists() and json.loads((new / "model.json").read_text())["kind"] == "cr5"
    md = read_model_dir(old, "cr5")
    assert md.legacy == "cr5-1" and md.hyper_parameters == {"rank": 3, "lam": 1.0} and md.info["rank"] == 3
    assert md.files == ("vocab/en.txt", "vocab/de.txt")
    a, b = Cr5Model.load(old), Cr5Model.load(new)
    est = Cr5.load(old)  # the estimator reads the old directory too: same vectors
    np.testing.assert_array_equal(est.transform(["a red tree", "unknown words only"], "en"),
                                  b.transform(["a red tree", "unknown words only"], "en"))
    assert est.rank == 3 and est.n_concepts_ == 4
    assert a.meta["hyper_parameters"] == b.meta["hyper_parameters"] and a.meta["training"] == b.meta["training"]
    q = ["a red tree", "unknown words only"]
    np.testing.assert_array_equal(a.transform(q, "en"), b.transform(q, "en"))
    ea, eb = get_text_encoder(f"cr5:{old}"), get_text_encoder(f"cr5:{new}")
    assert ea.dim == eb.dim == 4 and ea.languages == eb.languages == frozenset({"en", "de"})
    np.testing.assert_array_equal(ea.encode(q, "de"), eb.encode(q, "de"))
    x = a.tfidf(q[:1], "en").toarray() @ phi["en"].T.astype(np.float64)  # by hand: Phi_l x
    np.testing.assert_allclose(a.transform(q[:1], "en"), x, rtol=1e-5)
    head = json.loads((old / "cr5.json").read_text())
    (old / "cr5.json").write_text(json.dumps({**head, "format_version": 99}))
    with pytest.raises(EncoderError, match="cr5: .*cr5.json: format version 99 is newer"):
        Cr5Model.load(old)
    (old / "cr5.json").write_text(json.dumps(head))
    (old / "vocab" / "de.txt").unlink()
    with pytest.raises(EncoderError, match="cannot read vocabulary .*de.txt"):
        Cr5Model.load(old)


def test_legacy_eta_rule_is_translated_once(tmp_path):
    from backretrieval.encoders.trained.modeldir_legacy import eta_from_rule

    assert eta_from_rule({"eta_quantile": 0.25, "eta_rule": "ignored"}, tmp_path) == 0.25
    assert eta_from_rule({"eta_quantile": None}, tmp_path) is None
    assert eta_from_rule({}, tmp_path) is None
    assert eta_from_rule({"eta_rule": "given"}, tmp_path) is None
    assert eta_from_rule({"eta_rule": "quantile 0.1 of squared distances"}, tmp_path) == 0.1
    with pytest.raises(ModelDirError, match="unreadable eta_rule 'median'"):
        eta_from_rule({"eta_rule": "median"}, tmp_path)
