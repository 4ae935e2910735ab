"""Triplet / TripletXL (paper Sec. 3.2): losses against hand-computed values and naive loops,
neighbour search against brute force, training on real emoji-cldr titles/keywords, save/reload,
the no-cross-lingual-link guard, resume, the evaluation grid and the CLI."""
import json
import math

import numpy as np
import pytest
import torch

from backretrieval.core import DataError, EncoderError
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.cache import CachedTextEncoder
from backretrieval.encoders.trained.triplet import head_forward, represent, split_text, titles_and_bodies
from backretrieval.train.triplet import (
    TitleBodyData,
    Triplet,
    assert_no_links,
    cosine_distance,
    find_neighbours,
    triplet_loss,
    xl_loss,
)

S2 = 1 / math.sqrt(2)
LANGS = ["en", "de", "ja"]


def t(x):
    return torch.tensor(x, dtype=torch.float32)


# ----------------------------------------------------------------------------- losses by hand
def test_triplet_loss_hand_computed():
    x_rb = t([[1, 0], [0, 1], [1, 0]])
    x_rt = t([[1, 1], [1, 0], [1, 0]])
    neg = torch.tensor([1, 0, 0])
    per = triplet_loss(x_rb, x_rt, neg, alpha=0.1)
    # item 0: d((1,0),(1,1)) = 1 - 1/sqrt2; d((1,0),(1,0)) = 0      -> 1 - 1/sqrt2 + 0.1
    # item 1: d((0,1),(1,0)) = 1;          d((0,1),(1,1)) = 1 - 1/sqrt2 -> 1/sqrt2 + 0.1
    # item 2: d((1,0),(1,0)) = 0;          d((1,0),(1,1)) = 1 - 1/sqrt2 -> max(0, 1/sqrt2 - 1 + 0.1) = 0
    assert per.tolist() == pytest.approx([1 - S2 + 0.1, S2 + 0.1, 0.0], abs=1e-6)
    assert per[:2].mean().item() == pytest.approx(0.6, abs=1e-6)


def test_xl_loss_hand_computed():
    x_rb = t([[1, 0]])
    lang = torch.tensor([0])
    # neighbours' titles per language (L=3, K=2): own language 0: d = 0 and 1 -> mean 0.5;
    # language 1: d = 1 - 1/sqrt2 and 2 -> mean (3 - 1/sqrt2) / 2; language 2: d = 1 and 0 -> 0.5
    x_nt = t([[[[1, 0], [0, 1]], [[1, 1], [-1, 0]], [[0, -1], [1, 0]]]])
    mask = torch.ones(1, 3, 2, dtype=torch.bool)
    expected = abs((3 - S2) / 2 - 0.5) + abs(0.5 - 0.5)
    assert xl_loss(x_rb, lang, x_nt, mask).item() == pytest.approx(expected, abs=1e-6)
    # a missing slot is left out of its mean: language 1 keeps only (1,1) -> |1 - 1/sqrt2 - 0.5|
    mask[0, 1, 1] = False
    assert xl_loss(x_rb, lang, x_nt, mask).item() == pytest.approx(abs(1 - S2 - 0.5), abs=1e-6)
    # a language with no neighbour at all contributes nothing; so does an empty own language
    mask[0, 1, :] = False
    assert xl_loss(x_rb, lang, x_nt, mask).item() == pytest.approx(0.0, abs=1e-7)
    mask[0, 0, :] = False
    mask[0, 1, :] = True
    assert xl_loss(x_rb, lang, x_nt, mask).item() == 0.0


def _naive_triplet(xb, xt, neg, alpha):
    cos = lambda a, b: float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))  # noqa: E731
    return [max(0.0, (1 - cos(xb[i], xt[i])) - (1 - cos(xb[i], xt[neg[i]])) + alpha) for i in range(len(xb))]


def _naive_xl(xb, lang, xnt, mask):
    out = []
    for i in range(len(xb)):
        means = {}
        for l in range(xnt.shape[1]):
            ds = [1 - np.dot(xb[i], xnt[i, l, k]) / (np.linalg.norm(xb[i]) * np.linalg.norm(xnt[i, l, k]))
                  for k in range(xnt.shape[2]) if mask[i, l, k]]
            if ds:
                means[l] = float(np.mean(ds))
        own = means.get(int(lang[i]))
        out.append(0.0 if own is None else sum(abs(m - own) for l, m in means.items() if l != lang[i]))
    return out


def test_losses_match_naive_loops_on_random_batches():
    rng = np.random.default_rng(3)
    B, L, K, D = 9, 4, 3, 6
    xb, xt = rng.standard_normal((B, D)), rng.standard_normal((B, D))
    neg = (np.arange(B) + rng.integers(1, B, B)) % B
    assert (neg != np.arange(B)).all()
    got = triplet_loss(t(xb), t(xt), torch.from_numpy(neg), 0.2).numpy()
    np.testing.assert_allclose(got, _naive_triplet(xb, xt, neg, 0.2), atol=1e-5)
    lang = rng.integers(0, L, B)
    xnt = rng.standard_normal((B, L, K, D))
    mask = rng.random((B, L, K)) > 0.3
    got = xl_loss(t(xb), torch.from_numpy(lang), t(xnt), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(got, _naive_xl(xb, lang, xnt, mask), atol=1e-5)
    assert cosine_distance(t([[0.0, 0.0]]), t([[1.0, 0.0]])).item() == pytest.approx(1.0)  # zero vector: cos 0


def test_negatives_are_other_items_of_the_batch_or_language():
    from backretrieval.train.triplet import sample_negatives

    g = torch.Generator().manual_seed(0)
    lang = torch.tensor([0, 0, 1, 1, 1, 2])
    for _ in range(50):
        neg = sample_negatives(lang, g, "batch")
        assert (neg != torch.arange(6)).all()
        neg = sample_negatives(lang, g, "language")
        assert (neg != torch.arange(6)).all()
        assert (lang[neg[:5]] == lang[:5]).all()  # same language where the batch has another one
    seen = {int(sample_negatives(lang, g, "language")[2]) for _ in range(60)}
    assert seen == {3, 4}  # uniform over the other items of the language
    with pytest.raises(Exception, match="negatives"):
        sample_negatives(lang, g, "hard")


# ----------------------------------------------------------------------------- neighbours
def _naive_neighbours(bodies, titles, pool_lang, query_self, n_langs, k):
    out = np.full((len(bodies), n_langs, k), -1)
    for q in range(len(bodies)):
        for l in range(n_langs):
            cand = [j for j in np.flatnonzero(pool_lang == l) if j != query_self[q]]
            sims = [np.dot(bodies[q], titles[j]) / (np.linalg.norm(bodies[q]) * np.linalg.norm(titles[j])) for j in cand]
            best = [cand[i] for i in np.argsort(-np.array(sims), kind="stable")[:k]]
            out[q, l, : len(best)] = best
    return out


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_neighbours_match_brute_force(backend):
    rng = np.random.default_rng(5)
    n_pool, d = 40, 8
    titles = rng.standard_normal((n_pool, d)).astype(np.float32)
    bodies = rng.standard_normal((n_pool + 6, d)).astype(np.float32)
    pool_lang = np.concatenate([np.zeros(20), np.ones(17), np.full(3, 2)]).astype(np.int64)  # language 2: 3 items
    query_self = np.concatenate([np.arange(n_pool), np.full(6, -1)])  # 6 validation queries
    got = find_neighbours(bodies, titles, pool_lang, query_self, 3, 4, backend=backend)
    want = _naive_neighbours(bodies, titles, pool_lang, query_self, 3, 4)
    np.testing.assert_array_equal(got, want)
    own = query_self >= 0
    assert not (got[own] == query_self[own][:, None, None]).any()  # never itself
    # language 2 has 3 items: its own members get 2 neighbours (+ one empty slot), others 3
    assert (got[37:40, 2, 2:] == -1).all() and (got[:37, 2, 3] == -1).all() and (got[:37, 2, :3] >= 0).all()


# ----------------------------------------------------------------------------- no links
def test_training_data_carries_no_links(shared_data):
    from backretrieval.data import load_dataset

    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    with pytest.raises(DataError, match="cross-lingual link"):
        assert_no_links(ds["en"])  # a Corpus has ids and concepts
    with pytest.raises(DataError, match="TitleBodyData"):
        Triplet("triplet").fit(ds["en"])
    data = TitleBodyData.from_dataset(ds, ["en", "de"], max_per_lang=50, seed=1)
    assert len(data) == 100 and data.counts() == {"de": 50, "en": 50}
    assert not hasattr(data, "concepts") and not hasattr(data, "ids")
    with pytest.raises((AttributeError, TypeError)):
        data.concepts = ["x"]  # no place for links (slots, frozen)
    assert_no_links(data)
    # the per-language subset does not depend on which other languages are loaded
    only_de = TitleBodyData.from_dataset(ds, ["de"], max_per_lang=50, seed=1)
    assert only_de.titles == tuple(t for t, l in zip(data.titles, data.langs) if l == "de")


def test_split_rule_and_empty_fields():
    assert split_text("Title line\nbody one\nbody two") == ("Title line", "body one\nbody two")
    assert split_text("just a name") == ("just a name", "just a name")
    titles, bodies = titles_and_bodies(["a", "b"], {"title": ["cat", ""], "body": ["", "dog, pet"]}, "x")
    assert titles == ["cat", "dog, pet"] and bodies == ["cat", "dog, pet"]
    with pytest.raises(DataError, match="id 'e9'"):
        titles_and_bodies(["a"], {"title": [" "], "body": [""]}, "x", ids=["e9"])


# ----------------------------------------------------------------------------- synthetic fits
def _synthetic(n=240, d=16, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 6)).astype(np.float32)
    a = rng.standard_normal((6, d)).astype(np.float32)
    langs = np.array(["en", "de", "fr"])[rng.integers(0, 3, n)]
    shift = {"en": 0.0, "de": 1.5, "fr": -1.5}
    off = np.array([shift[l] for l in langs], np.float32)[:, None]
    xt = z @ a + 0.3 * rng.standard_normal((n, d)).astype(np.float32) + off
    xb = z @ a + 0.3 * rng.standard_normal((n, d)).astype(np.float32) + off
    return xt, xb, langs


def test_same_seed_same_numbers_and_resume(tmp_path):
    xt, xb, langs = _synthetic()
    kw = dict(layers=(12, 8), batch_size=32, k=3, seed=7)
    a = Triplet("tripletxl", epochs=3, **kw).fit_vectors(xt, xb, langs)
    b = Triplet("tripletxl", epochs=3, **kw).fit_vectors(xt, xb, langs)
    for (wa, ba), (wb, bb) in zip(a.params_, b.params_):
        np.testing.assert_array_equal(wa, wb)
        np.testing.assert_array_equal(ba, bb)
    assert [h["epoch"] for h in a.history_] == [0, 1, 2, 3]
    # interrupted after 2 epochs, resumed to 3: the same weights and history as one run
    Triplet("tripletxl", epochs=2, **kw).fit_vectors(xt, xb, langs, checkpoint_dir=tmp_path)
    c = Triplet("tripletxl", epochs=3, **kw).fit_vectors(xt, xb, langs, checkpoint_dir=tmp_path)
    for (wa, _), (wc, _) in zip(a.params_, c.params_):
        np.testing.assert_array_equal(wa, wc)
    assert [h["val_loss"] for h in c.history_] == [h["val_loss"] for h in a.history_]
    # another seed is another run (the checkpoint is not reused)
    d = Triplet("tripletxl", epochs=1, **{**kw, "seed": 8}).fit_vectors(xt, xb, langs, checkpoint_dir=tmp_path)
    assert not np.array_equal(d.params_[0][0], a.params_[0][0])


def test_early_stopping_and_bad_settings():
    xt, xb, langs = _synthetic(n=120)
    # lr 0.5 overshoots: the validation loss stops improving within a few epochs, so patience 2 must stop the run
    est = Triplet("triplet", epochs=30, lr=0.5, patience=2, layers=(8, 8), batch_size=16).fit_vectors(xt, xb, langs)
    trained = [h for h in est.history_ if h["epoch"] > 0]
    best = min(trained, key=lambda h: h["val_loss"])
    assert est.best_epoch_ == best["epoch"]
    assert est.stopped_early_ and len(trained) < 30
    assert trained[-1]["epoch"] - best["epoch"] == 2  # exactly `patience` epochs without a better validation loss
    assert all(h["val_loss"] >= best["val_loss"] for h in trained if h["epoch"] > best["epoch"])
    # the kept weights are those of the best epoch, not the last: retraining to that epoch gives them
    again = Triplet("triplet", epochs=best["epoch"], lr=0.5, layers=(8, 8), batch_size=16, restore_best=False).fit_vectors(xt, xb, langs)
    for (wa, _), (wb, _) in zip(est.params_, again.params_):
        np.testing.assert_array_equal(wa, wb)
    # without patience all epochs run
    full = Triplet("triplet", epochs=8, lr=0.5, layers=(8, 8), batch_size=16).fit_vectors(xt, xb, langs)
    assert not full.stopped_early_ and full.history_[-1]["epoch"] == 8
    with pytest.raises(Exception, match="batch_size"):
        Triplet(batch_size=1).fit_vectors(xt, xb, langs)
    with pytest.raises(Exception, match="method"):
        Triplet("quadruplet").fit_vectors(xt, xb, langs)


# ----------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def emoji_model(shared_data, tmp_path_factory):
    """TripletXL trained on 3 x 200 real emoji-cldr names (titles) and keywords (bodies)."""
    from backretrieval.data import load_dataset

    ds = load_dataset("emoji-cldr", langs=LANGS)
    data = TitleBodyData.from_dataset(ds, LANGS, max_per_lang=200, seed=0)
    est = Triplet("tripletxl", epochs=6, threads=2, seed=0).fit(data)
    out = tmp_path_factory.mktemp("tripletxl")
    est.save(out, info={"dataset": "emoji-cldr"})
    return est, out, ds


def test_training_on_real_subset_lowers_validation_loss(emoji_model):
    est, out, _ = emoji_model
    h = est.history_
    assert h[0]["epoch"] == 0 and "train_loss" not in h[0]  # the untrained network
    assert h[-1]["val_loss"] < 0.7 * h[0]["val_loss"]
    # learning continues after the first epoch: the best later epoch beats epoch 1, which beats the untrained network
    assert h[1]["val_loss"] < h[0]["val_loss"] and min(r["val_loss"] for r in h[2:]) < h[1]["val_loss"]
    assert h[-1]["train_loss"] < h[1]["train_loss"]
    assert est.n_train_ == 540 and est.n_val_ == 60
    saved = json.loads((out / "model.json").read_text())
    hp = saved["hyper_parameters"]
    assert saved["kind"] == "triplet" and saved["uses_cross_lingual_links"] is False and hp["method"] == "tripletxl"
    assert saved["languages"] == sorted(LANGS) and hp["beta"] == 0.01 and hp["k"] == 5


def test_saved_model_reloads_with_identical_embeddings(emoji_model):
    est, out, ds = emoji_model
    c = ds["de"].subset(np.arange(40))
    enc = get_text_encoder(f"tripletxl:{out}")
    assert enc.dim == 600 and enc.wants_extra == ("title", "body") and enc.cacheable is False
    got = enc.encode(c.texts, "de", ids=c.ids, extra=c.extra)
    base = CachedTextEncoder(get_text_encoder("use-m"))
    titles, bodies = titles_and_bodies(c.texts, c.extra, "x")
    want = est.transform(base.encode(titles, "de"), base.encode(bodies, "de"))
    np.testing.assert_array_equal(got, want)
    again = Triplet.load(out)  # the estimator read back maps to the same vectors, bit for bit
    np.testing.assert_array_equal(again.transform(base.encode(titles, "de"), base.encode(bodies, "de")), want)
    assert again.history_ == json.loads(json.dumps(est.history_)) and again.best_epoch_ == est.best_epoch_
    # the numpy inference is the torch network
    with torch.no_grad():
        ht = est.tower_(torch.from_numpy(base.encode(titles, "de"))).numpy()
        hb = est.tower_(torch.from_numpy(base.encode(bodies, "de"))).numpy()
    np.testing.assert_allclose(got, represent(ht, hb), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got[:, :300], axis=1), 1, atol=1e-5)
    # a second load gives the same vectors; wrong method name or a broken directory is a clear error
    np.testing.assert_array_equal(get_text_encoder(f"tripletxl:{out}").encode(c.texts, "de", extra=c.extra), got)
    with pytest.raises(EncoderError, match="holds a 'tripletxl' model"):
        get_text_encoder(f"triplet:{out}")
    with pytest.raises(EncoderError, match="not a folder"):
        get_text_encoder(f"tripletxl:{out / 'nope'}")
    # without extra columns the texts are split: first line title, rest body
    one = enc.encode(["Katze\nTier, Haustier"], "de")
    np.testing.assert_array_equal(one, est.transform(base.encode(["Katze"], "de"), base.encode(["Tier, Haustier"], "de")))
    assert head_forward(est.params_, np.zeros((1, 512), np.float32)).shape == (1, 300)


def test_trained_model_in_the_evaluation_grid(emoji_model, tmp_path):
    from backretrieval.analysis import EvalConfig, run_grid

    _, out, _ = emoji_model
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "ja")], models=["use-m", f"tripletxl:{out}"], image_model="color-hist", n=80, seeds=[0])
    res = run_grid(cfg, tmp_path / "grid", progress=False)
    recs = {r["model"]: r for r in res.records}
    assert set(recs) == {"use-m", f"tripletxl:{out.name}"} and recs[f"tripletxl:{out.name}"]["model_spec"] == f"tripletxl:{out}"
    # the records are the means of the per-query ranks the grid keeps
    for name, r in recs.items():
        ranks = res.ranks[(name, "en", "ja", 0)]
        assert r["bkr@10"] == pytest.approx(float((ranks["bkr"] <= 10).mean()))
        assert r["xlr@10"] == pytest.approx(float((ranks["xlr"] <= 10).mean()))
    assert recs[f"tripletxl:{out.name}"]["xlr@10"] > 10 / 80  # far above chance on real pairs
    assert recs[f"tripletxl:{out.name}"]["bkr@10"] > 2 * 10 / 80  # BkR too: a real cross-lingual signal, not chance
    assert recs["use-m"]["bkr@10"] > 2 * 10 / 80


# ----------------------------------------------------------------------------- CLI
def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_cli_prepare_train_and_case_study(emoji_model, tmp_path):
    from click.testing import CliRunner

    from backretrieval.cli import main

    _, model_dir, ds = emoji_model
    rows = []
    for lang in ["en", "de"]:
        c = ds[lang]
        for i in range(120):
            rows.append({"id": c.ids[i], "lang": lang, "concept": c.concepts[i], "text": c.texts[i],
                         "title": c.extra["title"][i], "body": c.extra["body"][i]})
    src = tmp_path / "items.jsonl"
    _write_jsonl(src, rows)
    runner = CliRunner()
    work = tmp_path / "work"
    r = runner.invoke(main, ["case-study", "prepare", "--dataset", str(src), "--langs", "en,de", "--holdout", "0.3", "--out", str(work)])
    assert r.exit_code == 0, r.output
    train_rows = [json.loads(x) for x in (work / "items_train.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (work / "items_heldout.jsonl").read_text().splitlines()]
    assert all("concept" not in x for x in train_rows) and all("concept" in x for x in held)
    assert len(train_rows) + len(held) == 240
    held_en = {x["concept"] for x in held if x["lang"] == "en"}
    held_de = {x["concept"] for x in held if x["lang"] == "de"}
    assert held_en == held_de and 0.15 < len(held_en) / 120 < 0.45  # the same concepts held out in both
    trained_texts = {x["text"] for x in train_rows}
    assert not any(x["text"] in trained_texts for x in held if x["lang"] == "en")
    en_titles = [x["title"] for x in train_rows if x["lang"] == "en"]
    assert en_titles != [c for c in ds["en"].extra["title"][:120] if c in en_titles]  # order shuffled

    out = tmp_path / "m"
    r = runner.invoke(main, ["train", "triplet", "--dataset", str(work / "items_train.jsonl"), "--epochs", "2", "--layers", "32,16",
                             "--out", str(out), "--quiet", "--threads", "1"])
    assert r.exit_code == 0, r.output
    for f in ("model.json", "weights.npz", "history.csv", "history.json", "curves.png"):
        assert (out / f).is_file(), f
    assert get_text_encoder(f"triplet:{out}").dim == 32
    r = runner.invoke(main, ["train", "tripletxl", "--dataset", str(src), "--langs", "en,xx", "--out", str(tmp_path / "bad"), "--quiet"])
    assert r.exit_code != 0 and "xx" in r.output

    rep = tmp_path / "report"
    r = runner.invoke(main, ["case-study", "report", "--langs", "en,de", "--models", f"use-m,triplet:{out},tripletxl:{model_dir}",
                             "--xlr-dataset", str(work / "items_heldout.jsonl"), "--bkr-n", "60", "--xlr-n", "30", "--seeds", "1",
                             "--labels", "use-m,triplet,tripletxl", "--image-model", "color-hist", "--n-boot", "100", "--out", str(rep), "--quiet"])
    assert r.exit_code == 0, r.output
    md = (rep / "case_study.md").read_text()
    for part in ("BkR@10 (emoji-cldr)", "XLR@1 (emoji-cldr)", "XLR@1 (items_heldout)", "Did BkR tell the truth", "Did TripletXL narrow the spread"):
        assert part in md, part
    js = json.loads((rep / "case_study.json").read_text())
    assert {m["model"] for m in js["metrics"]} == {"use-m", "triplet", "tripletxl"}
    assert (rep / "case_study.png").stat().st_size > 1000


# ----------------------------------------------------------------------------- residual tower
def test_residual_tower_is_the_identity_at_initialisation(tmp_path):
    """x + f(x) with f's last layer at zero: the torch tower, the numpy head and a saved model
    that was never trained all give the base encoder's own vectors."""
    from backretrieval.encoders.trained.triplet import save_model
    from backretrieval.train.triplet import build_tower, params_of

    xt, xb, _ = _synthetic(n=50, d=16)
    torch.manual_seed(0)
    tower = build_tower(16, (12, 8), True, "residual")
    with torch.no_grad():
        np.testing.assert_array_equal(tower(torch.from_numpy(xt)).numpy(), xt)
    params = params_of(tower)
    assert [w.shape for w, _ in params] == [(12, 16), (8, 12), (16, 8)]
    assert not params[-1][0].any() and not params[-1][1].any() and params[0][0].any()
    np.testing.assert_array_equal(head_forward(params, xb, tower="residual"), xb)
    # the same weights read as an mlp tower are not the identity (all-zero output)
    assert not head_forward(params, xb, tower="mlp").any()
    # an untrained residual model directory encodes texts exactly as the base encoder does
    base = get_text_encoder("random")
    titles, bodies = ["cat", "dog face", "red apple"], ["pet, cat", "dog, pet", "fruit, apple"]
    vt, vb = base.encode(titles, "en"), base.encode(bodies, "en")
    d = vt.shape[1]
    save_model(tmp_path, params_of(build_tower(d, (32,), True, "residual")),
               hyper_parameters={"method": "triplet", "base": "random", "tower": "residual", "final_relu": True})
    enc = get_text_encoder(f"triplet:{tmp_path}")
    assert enc.dim == 2 * d and enc.tower == "residual"
    got = enc.encode(["x"] * 3, "en", extra={"title": titles, "body": bodies})
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(got, np.concatenate([unit(vt), unit(vb)], axis=1), atol=1e-6)


def test_residual_tower_trains_and_round_trips(tmp_path):
    xt, xb, langs = _synthetic(n=240, d=16)
    est = Triplet("tripletxl", tower="residual", layers=(24,), epochs=6, batch_size=32, k=3, seed=1).fit_vectors(xt, xb, langs)
    h = est.history_
    assert h[0]["epoch"] == 0 and min(r["val_loss"] for r in h[1:]) < 0.9 * h[0]["val_loss"]  # it learns
    assert [w.shape for w, _ in est.params_] == [(24, 16), (16, 24)]
    assert np.abs(est.params_[-1][0]).max() > 1e-3  # f moved away from zero
    out = est.transform(xt, xb)
    assert out.shape == (240, 32)
    assert not np.allclose(out, represent(xt, xb), atol=1e-3)  # no longer the identity
    # save / load: the same vectors through the encoder's numpy head; the tower kind is saved
    est.save(tmp_path)
    cfg = json.loads((tmp_path / "model.json").read_text())
    assert cfg["hyper_parameters"]["tower"] == "residual"
    from backretrieval.encoders.trained.triplet import TripletEncoder

    enc = TripletEncoder(tmp_path, "tripletxl")
    np.testing.assert_array_equal(enc.embed_vectors(xt, xb), out)
    with torch.no_grad():
        np.testing.assert_allclose(represent(est.tower_(torch.from_numpy(xt)).numpy(), est.tower_(torch.from_numpy(xb)).numpy()), out, atol=1e-5)
    # a legacy directory without a "tower" key (format 1) loads as the mlp tower
    from legacy_model_dirs import legacy_triplet

    mlp = Triplet("triplet", layers=(8,), epochs=1, batch_size=32, seed=1).fit_vectors(xt, xb, langs)
    old = legacy_triplet(tmp_path / "old", {"method": "triplet", "base": "random", "final_relu": True}, mlp.params_)
    enc = TripletEncoder(old, "triplet")
    assert enc.tower == "mlp"
    np.testing.assert_array_equal(enc.embed_vectors(xt, xb), mlp.transform(xt, xb))
    # bad settings and broken files are named
    with pytest.raises(Exception, match="tower"):
        Triplet(tower="dense").fit_vectors(xt, xb, langs)
    legacy_triplet(old, {"method": "triplet", "base": "random", "tower": "dense"}, mlp.params_)
    with pytest.raises(EncoderError, match="unknown tower 'dense'"):
        TripletEncoder(old, "triplet")
