"""End-to-end: the CLI and the evaluation grid on the real data in ../shared/data.

The emoji test runs the issue's acceptance check at full size (en->de, N=1500): the random
model's BkR@10 sits at chance K/N, the real encoders are far above it, and XLR and BkR order
the models the same way.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.cli import main
from backretrieval.core import BackretrievalError
from backretrieval.data import load_dataset

tasks_module = importlib.import_module("backretrieval.analysis.evaluate.tasks")  # where the grid finds the task

REQUIRED_KEYS = {
    "model", "image_model", "src_lang", "tgt_lang", "seed", "n", "k",
    "xlr@1", "xlr@5", "xlr@10", "bkr@10", "bkr_mrr", "corr",
}
TIMING_KEYS = {"seconds", "encode_seconds"}


def run(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def strip_timing(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


@pytest.fixture(scope="module")
def emoji_en_de(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("emoji-en-de")
    res = run([
        "evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de",
        "--models", "use-m,tfidf-char,random", "--image-model", "efficientnet-lite0",
        "--n", "1500", "--seeds", "1", "--k", "10", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    return out, res.output


def test_evaluate_emoji_en_de_acceptance(emoji_en_de):
    out, output = emoji_en_de
    records = {r["model"]: r for r in read_jsonl(out / "results.jsonl")}
    assert set(records) == {"use-m", "tfidf-char", "random"}
    for r in records.values():
        assert REQUIRED_KEYS <= set(r), REQUIRED_KEYS - set(r)
        assert (r["n"], r["k"], r["src_lang"], r["tgt_lang"]) == (1500, 10, "en", "de")
    chance = 10 / 1500
    sd = math.sqrt(chance * (1 - chance) / 1500)
    rnd = records["random"]
    assert abs(rnd["bkr@10"] - chance) < 4 * sd, rnd["bkr@10"]
    assert abs(rnd["xlr@10"] - chance) < 4 * sd, rnd["xlr@10"]
    for m in ("use-m", "tfidf-char"):
        assert records[m]["bkr@10"] > 10 * chance
        assert records[m]["xlr@10"] > 10 * chance
    order_xlr = sorted(records, key=lambda m: -records[m]["xlr@10"])
    order_bkr = sorted(records, key=lambda m: -records[m]["bkr@10"])
    assert order_xlr == order_bkr == ["use-m", "tfidf-char", "random"]
    # the table on stdout and the files beside results.jsonl
    assert "en->de" in output and "use-m" in output
    csv = pd.read_csv(out / "results.csv")
    assert len(csv) == 3 and REQUIRED_KEYS <= set(csv.columns)
    assert (out / "summary.md").read_text().startswith("# emoji-cldr")


def test_evaluate_rerun_reuses_finished_records(emoji_en_de):
    out, _ = emoji_en_de
    before = read_jsonl(out / "results.jsonl")
    res = run([
        "evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de",
        "--models", "use-m,tfidf-char,random", "--n", "1500", "--seeds", "1", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0
    assert "resuming: 3 finished records" in res.output
    assert read_jsonl(out / "results.jsonl") == before


def _cfg(**kw) -> EvalConfig:
    base = dict(dataset="emoji-cldr", pairs=[("en", "ja")], models=["use-m", "random"], n=200, seeds=[0, 1])
    base.update(kw)
    return EvalConfig(**base)


def test_interrupted_grid_resumes_with_identical_results(tmp_path, monkeypatch, shared_data):
    reference = run_grid(_cfg(), tmp_path / "straight", progress=False)
    real = tasks_module.run_sample_task
    calls = {"n": 0}

    def flaky(task):
        calls["n"] += 1
        if calls["n"] == 2:  # the second sample (en-ja, seed 1)
            raise KeyboardInterrupt("simulated Ctrl-C in the middle of the grid")
        return real(task)

    out = tmp_path / "interrupted"
    monkeypatch.setattr(tasks_module, "run_sample_task", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_grid(_cfg(), out, progress=False)
    assert not (out / "results.jsonl").exists()  # nothing half-written
    assert len(list((out / ".partial").glob("*.json"))) == 2  # both models of the first sample
    monkeypatch.setattr(tasks_module, "run_sample_task", real)
    logs: list[str] = []
    resumed = run_grid(_cfg(), out, progress=False, log=logs.append)
    assert any("resuming: 2 finished records" in m for m in logs)
    assert strip_timing(resumed.records) == strip_timing(reference.records)
    for key, ranks in reference.ranks.items():
        for name, arr in ranks.items():
            np.testing.assert_array_equal(resumed.ranks[key][name], arr)
    # a different configuration does not reuse the records
    other = run_grid(_cfg(k=5), out, progress=False, log=logs.append)
    assert all(r["k"] == 5 for r in other.records)


def test_process_executor_and_extra_image_models_match_local(tmp_path, shared_data):
    cfg = _cfg(extra_image_models=["color-hist"])
    local = run_grid(cfg, tmp_path / "local", progress=False)
    procs = run_grid(cfg, tmp_path / "procs", progress=False, executor="processes:2")
    assert strip_timing(procs.records) == strip_timing(local.records)
    assert set(local.others) == {"color-hist"}
    assert strip_timing(procs.others["color-hist"].records) == strip_timing(local.others["color-hist"].records)
    # g-independent parts are shared, g-dependent ones are not
    a, b = local.records[0], local.others["color-hist"].records[0]
    assert (a["image_model"], b["image_model"]) == ("efficientnet-lite0", "color-hist")
    assert a["xlr@10"] == b["xlr@10"] and a["hubness_skew@10"] == b["hubness_skew@10"]
    assert a["bkr@10"] != b["bkr@10"] and a["corr"] != b["corr"]
    # one image model on its own gives the same records as inside the joint run
    alone = run_grid(_cfg(image_model="color-hist"), None, progress=False)
    assert strip_timing(alone.records) == strip_timing(local.others["color-hist"].records)
    assert (tmp_path / "local" / "image-models" / "color-hist" / "results.jsonl").is_file()


def test_same_seed_same_numbers_and_seeds_differ(tmp_path, shared_data):
    a = run_grid(_cfg(seeds=[0, 1]), None, progress=False)
    b = run_grid(_cfg(seeds=[0, 1]), None, progress=False)
    assert strip_timing(a.records) == strip_timing(b.records)
    # another seed draws other samples: both the matching (XLR) and the non-matching (BkR) queries
    # change, so their per-query ranks do; the same seed repeats them exactly
    for side in ("xlr", "bkr"):
        r0, r1 = (a.ranks[("use-m", "en", "ja", s)][side] for s in (0, 1))
        assert len(r0) == len(r1) == 200 and not np.array_equal(r0, r1), side
        assert np.array_equal(r0, b.ranks[("use-m", "en", "ja", 0)][side])


def test_variants_and_csls_run_through_the_grid(tmp_path, shared_data):
    res = run_grid(
        _cfg(models=["use-m", "use-m@trunc=64", "use-m@pca=16", "use-m@noise=2", "use-m@mix=1"], seeds=[0], sim="csls"),
        tmp_path,
        progress=False,
    )
    rec = {r["model"]: r for r in res.records}
    assert all(r["sim"] == "csls" for r in res.records)
    # heavier damage, lower scores; mix=1 is the random baseline
    assert rec["use-m"]["xlr@10"] > rec["use-m@noise=2"]["xlr@10"] > rec["use-m@mix=1"]["xlr@10"]
    assert rec["use-m@mix=1"]["bkr@10"] < 0.05


def test_serving_forms_run_through_the_grid(tmp_path):
    """``@int8`` and ``@binary`` of any model (here ``precomputed:``, looked up by id): records say
    ``sim: dot``, the binary form's ranks are those of the Hamming distances of the rows' sign
    bits, ``run.json`` records the bytes per item of each form, and CSLS or approximate search are
    refused naming the form, before any work."""
    import reference as ref
    from commands import write_feature_items
    from backretrieval.analysis.evaluate.features import draw_samples

    data = write_feature_items(tmp_path, 60, {"en": "red cat number", "de": "rote Katze Nummer"})
    rng = np.random.default_rng(3)
    vecs = {lang: rng.standard_normal((60, 40)).astype(np.float32) for lang in ("en", "de")}
    vecs["de"] = vecs["en"] + 0.8 * vecs["de"]  # translations near each other
    emb = tmp_path / "emb.npz"
    np.savez(emb, langs=np.repeat(["en", "de"], 60), ids=[f"{lang}{i}" for lang in ("en", "de") for i in range(60)],
             vectors=np.concatenate([vecs["en"], vecs["de"]]))
    specs = [f"precomputed:{emb}", f"precomputed:{emb}@int8", f"precomputed:{emb}@trunc=16@binary"]
    models = ["emb", "emb@int8", "emb@trunc=16@binary"]  # the labels the records use (LABEL=SPEC)
    cfg = EvalConfig(dataset=str(data), dataset_options={"image_features": str(tmp_path / "feats.npy")}, pairs=[("en", "de")],
                     models=dict(zip(models, specs)), image_model="precomputed", n=30, k=5, seeds=[0])
    res = run_grid(cfg, tmp_path / "out", progress=False)
    assert {r["model"]: r["sim"] for r in res.records} == dict(zip(models, ["cosine", "dot", "dot"]))
    encoding = json.loads((tmp_path / "out" / "run.json").read_text())["encoding"]
    assert [encoding[m]["bytes_per_item"] for m in models] == [160, 40, 2]
    ds = load_dataset(str(data), image_features=str(tmp_path / "feats.npy"))
    rows = draw_samples(ds, "en", "de", 30, 0).xlr
    bits = [vecs[lang][idx, :16] for lang, idx in zip(("en", "de"), rows)]
    fwd, bwd = ref.ranks_from_scores(ref.hamming_scores(*bits))
    got = res.ranks[(models[2], "en", "de", 0)]
    assert got["xlr"].tolist() == fwd.tolist() and got["xlr_t2s"].tolist() == bwd.tolist()
    for option, message in (({"sim": "csls"}, "--sim csls"), ({"approx": "hnsw"}, "--approx")):
        with pytest.raises(BackretrievalError, match=f"serving form \\(int8 codes\\).*{message}"):
            run_grid(dataclasses.replace(cfg, **option), None, progress=False)


# ------------------------------------------------------------------------------- bad input


def _bad(tmp_path: Path, *args: str, message: str, command: str = "evaluate") -> None:
    out = tmp_path / "out"
    base = {"--dataset": "emoji-cldr", "--pairs": "en-de", "--models": "random", "--n": "100", "--seeds": "1"}
    argv = list(args)
    for key, value in base.items():
        if key not in argv:
            argv += [key, value]
    res = CliRunner().invoke(main, [command, *argv, "--out", str(out), "--quiet"])
    assert res.exit_code == 2, res.output
    assert message in res.output, res.output
    assert "Traceback" not in res.output
    assert not (out / "results.jsonl").exists() and not (out / "results.csv").exists()


def test_unknown_dataset(tmp_path):
    _bad(tmp_path, "--dataset", "no-such-set", message="unknown dataset 'no-such-set'")


def test_unknown_language(tmp_path, shared_data):
    _bad(tmp_path, "--pairs", "en-xx", message="unknown language 'xx'")


def test_unknown_model(tmp_path, shared_data):
    _bad(tmp_path, "--models", "random,bert-huge", message="unknown text model 'bert-huge'")


def test_k_larger_than_n(tmp_path, shared_data):
    _bad(tmp_path, "--n", "5", "--k", "10", message="K=10 is larger than N=5")


def test_n_larger_than_available(tmp_path, shared_data):
    _bad(tmp_path, "--n", "5000", message="N=5000 is too large for en-de: at most N=")


def test_same_language_pair(tmp_path):
    _bad(tmp_path, "--pairs", "en-en", message="source and target are the same language")


def _tiny_generic(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "items.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return p


def test_non_matching_impossible(tmp_path, shared_data):
    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    rows = []
    for lang in ("en", "de"):
        c = ds[lang]
        for i in range(3):  # the same three concepts in both languages
            rows.append({"id": c.ids[i], "lang": lang, "text": c.texts[i], "concept": c.ids[i], "image": c.image_paths[i]})
    path = _tiny_generic(tmp_path, rows)
    _bad(tmp_path, "--dataset", str(path), "--n", "2", "--k", "1", command="compare",
         message="N=2 is too large for en-de: at most N=1 for BkR, which compare --metric bkr@1 needs (BkR's two samples")


def test_small_catalogue_gets_the_largest_n_and_the_low_power_note(tmp_path, shared_data):
    from small_catalogue import write_catalogue

    shop = str(write_catalogue(tmp_path / "shop"))  # 60 products in en, de, es
    _bad(tmp_path, "--dataset", shop, "--pairs", "en-de,en-es", "--n", "50", command="compare",
         message="N=50 is too large for en-de: at most N=30 for BkR, which compare --metric bkr@10 needs (BkR's two "
                 "samples need N en and N de items")
    _bad(tmp_path, "--dataset", shop, "--pairs", "en-de", "--n", "300", message="Use --n 60 or less")
    res = CliRunner().invoke(main, ["evaluate", "--dataset", shop, "--pairs", "en-de", "--models", "random",
                                    "--image-model", "color-hist", "--n", "30", "--seeds", "3", "--quiet",
                                    "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert ("BkR@10 has little power at N=30, K=10, 3 seeds (en-de): chance is 0.333, and only gaps above 0.28 "
            "between the best and each other model are detected 80% of the time (60 distinct queries") in res.output


def test_xlr_at_the_catalogues_own_n(tmp_path, shared_data):
    """compare --metric xlr@10 --n 60 on 60 linked products: XLR's own limit, BkR left out with a note."""
    from small_catalogue import write_catalogue

    shop = str(write_catalogue(tmp_path / "shop"))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["compare", "--dataset", shop, "--pairs", "en-de", "--models", "random,tfidf-char",
                                    "--image-model", "color-hist", "--n", "60", "--seeds", "1", "--metric", "xlr@10",
                                    "--n-boot", "100", "--margin", "0.1", "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "compare.json").read_text())
    assert doc["n"] == 60 and doc["metric"] == "xlr@10" and doc["margin"] == 0.1 and doc["beside"] is None
    assert doc["verdict"]["margin"] == 0.1 and doc["verdict"]["pairs"][0]["power"]["largest_n"] == 60
    md = (out / "compare.md").read_text()
    assert "Note: BkR and CORR not computed on en-de: N=60 is more than its sample allows (at most N=30" in md
    assert "within ±0.1 of it, the margin" in md


def test_missing_image_and_empty_text_and_duplicate_id(tmp_path, shared_data):
    ds = load_dataset("emoji-cldr", langs=["en"])
    c = ds["en"]
    good = [{"id": c.ids[i], "lang": "en", "text": c.texts[i], "image": c.image_paths[i]} for i in range(4)]
    missing = good[:3] + [{"id": "x", "lang": "en", "text": "ghost", "image": str(tmp_path / "nope.png")}]
    _bad(tmp_path, "--dataset", str(_tiny_generic(tmp_path, missing)), "--pairs", "en-de", message="image file not found")
    empty = good[:3] + [{"id": "y", "lang": "en", "text": "   ", "image": c.image_paths[3]}]
    _bad(tmp_path, "--dataset", str(_tiny_generic(tmp_path, empty)), message="empty or whitespace-only text")
    dup = good + [dict(good[0])]
    _bad(tmp_path, "--dataset", str(_tiny_generic(tmp_path, dup)), message=f"duplicate id {c.ids[0]!r}")


def test_nan_embedding_is_named(tmp_path, shared_data):
    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    rng = np.random.default_rng(0)
    rows = [
        {"lang": lang, "id": i, "embedding": rng.standard_normal(8).tolist()} for lang in ("en", "de") for i in ds[lang].ids
    ]
    bad = {r["id"] for r in rows[len(ds["en"]) :: 2]}  # every other German item is broken
    for r in rows:
        if r["lang"] == "de" and r["id"] in bad:
            r["embedding"][3] = float("nan")
    emb = tmp_path / "emb.parquet"
    pd.DataFrame(rows).to_parquet(emb)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, [
        "evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models", f"precomputed:{emb}",
        "--n", "100", "--seeds", "1", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 2, res.output
    # pandas writes NaN inside a list as a parquet null; the reader names the item either way
    assert "in the embedding of" in res.output
    named = res.output.split(" id ")[1].split("'")[1]
    assert named in bad
    assert not (out / "results.jsonl").exists()


# ------------------------------------------------------------------------- text-only and no-truth


def test_text_only_dataset_reports_xlr_and_says_bkr_needs_images(tmp_path, shared_data):
    out = tmp_path / "ddtp"
    res = run([
        "evaluate", "--dataset", "ddtp", "--pairs", "de-en", "--models", "use-m,random",
        "--n", "300", "--seeds", "1", "--sim", "csls", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    assert "BkR and CORR need images" in res.output
    recs = {r["model"]: r for r in read_jsonl(out / "results.jsonl")}
    assert {"xlr@1", "xlr@5", "xlr@10", "xlr_t2s@10", "xlr_mrr"} <= set(recs["use-m"])
    assert "bkr@10" not in recs["use-m"]
    assert recs["use-m"]["xlr@1"] > 0.3 > recs["random"]["xlr@10"]


def test_compare_on_data_without_links(tmp_path, shared_data):
    """Section 3.2's workflow: images but no cross-lingual links, BkR only, ranking with CIs."""
    ds = load_dataset("emoji-cldr", langs=["en", "de", "ja"])
    rows = []
    for j, lang in enumerate(("en", "de", "ja")):
        c = ds[lang]
        for i in range(j, len(c), 3):  # each language gets its own third of the emoji: no shared item
            rows.append({"id": f"{lang}-{c.ids[i]}", "lang": lang, "text": c.texts[i], "image": c.image_paths[i]})
    path = _tiny_generic(tmp_path, rows)
    out = tmp_path / "cmp"
    res = run([
        "compare", "--dataset", str(path), "--pairs", "en-de,de-ja", "--models", "random,use-m",
        "--n", "400", "--seeds", "2", "--n-boot", "200", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "compare.json").read_text())
    assert doc["metric"] == "bkr@10"
    per_pair = pd.DataFrame(doc["per_pair"])
    for pair, g in per_pair.groupby("pair"):
        top = g.sort_values("rank").iloc[0]
        assert top["model"] == "use-m" and top["significant"], g
        assert top["ci_low"] <= top["estimate"] <= top["ci_high"]
    assert "xlr@10" not in read_jsonl(out / "results.jsonl")[0]
    assert (out / "compare.md").read_text().count("| 1 | use-m |") == 2


def test_listing_commands():
    res = run(["datasets"])
    assert res.exit_code == 0 and "emoji-cldr" in res.output and "ddtp" in res.output
    res = run(["models"])
    assert res.exit_code == 0
    for name in ("use-m", "e5-small", "minilm-en", "tfidf-char", "random", "precomputed:PATH", "st:PATH", "efficientnet-lite0", "color-hist"):
        assert name in res.output
