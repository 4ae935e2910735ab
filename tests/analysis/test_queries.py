"""What each query retrieved (``EvalResult.queries``): on a small emoji sample, the retrieved
targets of both samples equal a naive argmax-with-ties over the models' own vectors (one model
forces many ties), the ranks are the records' per-query ranks, the ground-truth columns follow
the links, the filters take the public spellings, and a resumed run gives the same table."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import reference as ref
from backretrieval.analysis import EvalConfig, PythonTextModel, run_grid
from backretrieval.analysis.evaluate.queries import QUERY_COLUMNS
from backretrieval.core import BackretrievalError

N = 24
COLUMNS = ["pair", "src_lang", "tgt_lang", "model", "seed", "query_id", "query_text", "retrieved_id", "retrieved_ids",
           "retrieved_text", "bkr_rank", "xlr_rank", "is_translation", "query_image", "retrieved_image", "sample_kind"]


def few_patterns(texts):
    """Four sign patterns in {-1, 1}^16 by text length: most targets tie with others, and every
    dot product is exact."""
    base = np.where(np.random.default_rng(7).random((4, 16)) < 0.5, -1.0, 1.0).astype(np.float32)
    return base[[len(t) % 4 for t in texts]]


def char_counts(texts):
    """Character counts hashed into 12 dimensions (rarely tied)."""
    out = np.zeros((len(texts), 12), np.float32)
    for i, t in enumerate(texts):
        for ch in t:
            out[i, ord(ch) % 12] += 1.0
    return out + 0.01


MODELS = {"ties": PythonTextModel("ties", few_patterns, version="1"),
          "counts": PythonTextModel("counts", char_counts, version="1")}


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("queries")
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=dict(MODELS), image_model="color-hist",
                     n=N, seeds=[0, 1])
    return cfg, out, run_grid(cfg, out, progress=False)


def test_columns_and_rows(run):
    _, _, res = run
    df = res.queries()
    assert list(df.columns) == COLUMNS == list(QUERY_COLUMNS)
    # per record: the N queries of the non-matching sample, then the N of the matching one
    assert len(df) == len(res.records) * 2 * N
    for (model, seed), g in df.groupby(["model", "seed"], sort=False):
        assert g["sample_kind"].tolist() == ["non-matching"] * N + ["matching"] * N
        assert (g["pair"] == "en->de").all() and (g["src_lang"] == "en").all() and (g["tgt_lang"] == "de").all()
    assert str(df["bkr_rank"].dtype) == "Int64" and str(df["xlr_rank"].dtype) == "Int64"
    assert str(df["is_translation"].dtype) == "boolean"


@pytest.mark.parametrize("model", list(MODELS))
def test_retrieved_targets_are_the_naive_argmax_with_ties(run, model):
    _, _, res = run
    df = res.queries(model=model)
    for seed in (0, 1):
        for kind in ("non-matching", "matching"):
            items = res.items[("en", "de", seed)][kind]
            rows = df[(df["seed"] == seed) & (df["sample_kind"] == kind)]
            assert rows["query_id"].tolist() == items.src.ids
            src = MODELS[model].encode(items.src.texts, "en")
            tgt = MODELS[model].encode(items.tgt.texts, "de")
            expected = ref.nearest_with_ties(src, tgt)
            assert rows["retrieved_ids"].tolist() == [[items.tgt.ids[j] for j in lst] for lst in expected]
            assert rows["retrieved_id"].tolist() == [items.tgt.ids[lst[0]] for lst in expected]
            assert rows["retrieved_text"].tolist() == [items.tgt.texts[lst[0]] for lst in expected]
            assert rows["query_text"].tolist() == items.src.texts
    if model == "ties":  # the forced ties reach the table
        assert df["retrieved_ids"].map(len).max() > 1


def test_ranks_and_ground_truth(run):
    _, _, res = run
    df = res.queries()
    for (model, seed), g in df.groupby(["model", "seed"]):
        ranks = res.ranks[(model, "en", "de", seed)]
        nm, m = g[g["sample_kind"] == "non-matching"], g[g["sample_kind"] == "matching"]
        assert nm["bkr_rank"].tolist() == ranks["bkr"].tolist() and nm["xlr_rank"].isna().all()
        assert m["xlr_rank"].tolist() == ranks["xlr"].tolist() and m["bkr_rank"].isna().all()
        # the matching sample's translation is the aligned target: retrieved alone exactly at rank 1
        items = res.items[("en", "de", seed)]["matching"]
        alone = [ids == [items.tgt.ids[i]] for i, ids in enumerate(m["retrieved_ids"])]
        assert m["is_translation"].tolist() == alone == (m["xlr_rank"] == 1).tolist()
        assert not nm["is_translation"].any()  # the non-matching sample holds no translation
    assert df.loc[df["sample_kind"] == "matching", "is_translation"].any()  # some query finds its translation
    for col in ("query_image", "retrieved_image"):
        paths = df[col].unique()
        assert all(isinstance(p, str) and p.endswith(".png") for p in paths)


def test_filters(run):
    _, _, res = run
    full = res.queries()
    one = res.queries(pair="en-de", model="counts", seed=1)
    assert len(one) == 2 * N and set(one["model"]) == {"counts"} and set(one["seed"]) == {1}
    pd.testing.assert_frame_equal(res.queries(pair=("en", "de")), full)
    pd.testing.assert_frame_equal(res.queries(pair=["en:de"], seed=[0, 1]), full)
    assert set(res.queries(sample="matching")["sample_kind"]) == {"matching"}
    with pytest.raises(BackretrievalError, match="no record matches.*counts en->de seed 0"):
        res.queries(pair="de-en")
    with pytest.raises(BackretrievalError, match="unknown sample 'aligned'"):
        res.queries(sample="aligned")


def test_resumed_run_gives_the_same_table(run):
    cfg, out, res = run
    lines = []
    again = run_grid(cfg, out, progress=False, log=lines.append)
    assert any("resuming: 4 finished records" in line for line in lines), lines
    pd.testing.assert_frame_equal(again.queries(), res.queries())


def test_text_only_and_approximate_results_say_what_they_lack(run, tmp_path):
    cfg, _, res = run
    # a pair without images: only the matching sample's rows, no image paths, no BkR rank
    path = tmp_path / "texts.jsonl"
    items = res.items[("en", "de", 0)]["matching"]
    rows = [{"id": f"{lang}-{i}", "lang": lang, "text": t, "concept": f"c{i}"}
            for side, lang in ((items.src, "en"), (items.tgt, "de")) for i, t in enumerate(side.texts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    text_only = run_grid(EvalConfig(dataset=str(path), pairs=[("en", "de")], models={"counts": MODELS["counts"]}, n=N,
                                    seeds=[0]), progress=False).queries()
    assert set(text_only["sample_kind"]) == {"matching"} and len(text_only) == N
    assert text_only["bkr_rank"].isna().all() and text_only["query_image"].isna().all()
    assert text_only["is_translation"].tolist() == (text_only["xlr_rank"] == 1).tolist()
    # a record from approximate search keeps ranks only: named
    approx = type(res)(res.config, [dict(res.records[0], approximate=False)], res.ranks, items=res.items)
    with pytest.raises(BackretrievalError, match="ties en->de seed 0 comes from approximate search"):
        approx.queries()


def test_records_stored_without_retrieved_targets(run, tmp_path, monkeypatch):
    """A record of the previous metrics version (ranks only) is recomputed, so its queries are
    known; reused on request (reuse_stale) it is named as lacking them."""
    import dataclasses

    from backretrieval.core import env

    cfg, _, res = run
    out = tmp_path / "old"
    monkeypatch.setattr(env, "METRICS_VERSION", env.METRICS_VERSION - 1)
    run_grid(cfg, out, progress=False)
    for npz in (out / ".partial").glob("*.npz"):  # what a record of that version holds: ranks only
        with np.load(npz) as z:
            kept = {k: z[k] for k in z.files if "retrieved" not in k}
        np.savez(npz, **kept)
    monkeypatch.undo()
    reused = run_grid(dataclasses.replace(cfg, reuse_stale=True), out, progress=False)
    with pytest.raises(BackretrievalError, match="record ties en->de seed 0 holds no retrieved targets of its non-matching"):
        reused.queries()
    lines = []
    again = run_grid(cfg, out, progress=False, log=lines.append)
    assert any(f"metrics version {env.METRICS_VERSION - 1} -> {env.METRICS_VERSION}" in line and "recomputing 4 records" in line
               for line in lines), lines
    pd.testing.assert_frame_equal(again.queries(), res.queries())
