"""The writers of the legacy model-directory layouts (Cr5's cr5.json, Triplet's model.json
format 1, M3L's config.json), kept here (and only here) so the tests can build legacy directories
(tests/encoders/test_modeldir.py, tests/train/test_triplet.py, tests/train/test_m3l.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def legacy_triplet(d: Path, config: dict, params) -> Path:
    """Triplet's legacy layout: model.json ``"format": 1``."""
    d.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, (w, b) in enumerate(params):
        arrays[f"w{i}"], arrays[f"b{i}"] = np.asarray(w, np.float32), np.asarray(b, np.float32)
    np.savez(d / "weights.npz", **arrays)
    cfg = {**config, "format": 1, "layers": [int(w.shape[0]) for w, _ in params], "input_dim": int(params[0][0].shape[1])}
    (d / "model.json").write_text(json.dumps(cfg, indent=1, sort_keys=True))
    return d


def legacy_m3l(d: Path, layers, *, loss="patr", eta_rule=None, eta_quantile=0.5, eta=3.5, **over) -> Path:
    """M3L's legacy layout: weights.npz W0.., split.json, config.json last."""
    d.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for i, (w, b) in enumerate(layers):
        arrays[f"W{i}"], arrays[f"b{i}"] = w, b
    np.savez(d / "weights.npz", **arrays)
    (d / "split.json").write_text(json.dumps({"train": ["feat:a"], "val": [], "test": ["feat:b"]}))
    if loss == "m3l":
        lp = {"rho": 4.0, "alpha1": 0.5, "alpha2": 1.0, "d": "squared euclidean"}
    else:
        lp = {"eta": eta, "d": "squared euclidean"}
        if eta_quantile != "absent":
            lp["eta_quantile"] = eta_quantile
        q = 0.5 if eta_quantile == "absent" else eta_quantile  # the oldest directories: the prose rule only
        lp["eta_rule"] = eta_rule or ("given" if q is None else f"quantile {q} of squared distances between distinct training images")
    in_dim = layers[0][0].shape[1]
    cfg = {
        "format": "backretrieval-m3l", "format_version": 1, "loss": loss, "base": "random", "base_version": None,
        "in_dim": in_dim, "image_model": "precomputed", "image_model_version": "y", "image_dim": layers[-1][0].shape[0],
        "widths": [int(w.shape[0]) for w, _ in layers], "dropout": [0.2, 0.1, 0.0], "init": "match", "init_scale": 1.0,
        "standardize": True, "input_scale": 1.0, "loss_params": lp,
        "optimizer": {"name": "adam", "lr": 0.001, "beta1": 0.99, "beta2": 0.999}, "batch_size": 128, "epochs": 50,
        "epochs_run": 50, "patience": None, "select": "best", "best_epoch": 7, "seed": 0, "train_langs": ["en"],
        "val_langs": ["en"], "source": {"dataset": "x"},
        "split": {"seed": 0, "test_frac": 0.25, "val_frac": 0.1, "images": {"train": 1, "val": 0, "test": 1}, "rule": "sha"},
        "n_train_captions": 1, "n_val_captions": 0, "history": [{"epoch": 0}], "weights_hash": "h", **over,
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=1))
    return d


def legacy_cr5(d: Path, vocab, idf, phi, meta) -> Path:
    """Cr5's legacy layout: vocab/<lang>.txt, cr5.npz, cr5.json last."""
    from backretrieval.encoders.trained.bow import TOKENIZER_VERSION

    for lang in phi:
        (d / "vocab").mkdir(parents=True, exist_ok=True)
        (d / "vocab" / f"{lang}.txt").write_text("".join(t + "\n" for t in vocab[lang]), encoding="utf-8")
    arrays = {}
    for lang in phi:
        arrays[f"phi__{lang}"] = np.asarray(phi[lang], np.float32)
        arrays[f"idf__{lang}"] = idf[lang]
    np.savez(d / "cr5.npz", **arrays)
    head = {**meta, "format": "backretrieval.cr5", "format_version": 1, "tokenizer": TOKENIZER_VERSION,
            "languages": list(phi), "rank": int(next(iter(phi.values())).shape[0]),
            "vocabulary_sizes": {lang: len(vocab[lang]) for lang in phi}}
    (d / "cr5.json").write_text(json.dumps(head, indent=1, ensure_ascii=False))
    return d
