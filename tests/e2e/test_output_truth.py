"""What the output says must be what was computed.

* an image model that needs image files, on a dataset that has only a precomputed feature file,
  is refused (naming model and dataset) instead of silently reading the feature file under its
  name; ``precomputed@noise=S`` really adds the noise; every record's ``image_model`` is the
  model that produced its features (and ``precomputed`` on image files is refused too);
* text-only data: summaries say "text only (no images): XLR only", records carry no image fields;
* seeds that all draw the same sample (N = everything there is) are said once, with the reason;
* leftovers A and B: a missing prerequisite (links for XLR, images for BkR) is refused right after
  sampling, before any encoding; ``run_grid(cfg, out_dir)`` checks ``out_dir`` first.

"Before any encoding" is checked by giving the run an empty cache folder and asserting that
nothing was written into it.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.cli import main
from backretrieval.core import BackretrievalError
from backretrieval.data import load_dataset


def cli(args: list) -> "object":
    return CliRunner().invoke(main, [str(a) for a in args])


def refused(res, *fragments: str) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for f in fragments:
        assert f in lines[0], (f, res.output)
    return lines[0]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(cache))
    return cache


def nothing_encoded(cache: Path) -> bool:
    """No embedding in the cache (loaders may still have unpacked their data there)."""
    emb = cache / "embeddings"
    return not any(p.is_file() for p in emb.rglob("*")) if emb.exists() else True


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def feature_data(tmp_path_factory) -> Path:
    """Generic JSONL, en and de, 80 concepts, a 32-d precomputed feature file (no image files).
    Images of one concept are near each other in both languages, so BkR is well above chance."""
    d = tmp_path_factory.mktemp("features")
    rng = np.random.default_rng(1)
    np.save(d / "feats.npy", rng.standard_normal((80, 32)).astype(np.float32))
    words = {"en": "red cat number", "de": "rote Katze Nummer"}
    rows = [{"id": f"{lang}{i}", "lang": lang, "text": f"{words[lang]} {i}", "concept": f"c{i}", "image_feature_row": i}
            for lang in ("en", "de") for i in range(80)]
    return write_jsonl(d / "items.jsonl", rows)


def grid(cmd: str, data: Path, out: Path, *extra) -> list:
    return [cmd, "--dataset", data, "--dataset-option", f"image_features={data.parent / 'feats.npy'}",
            "--pairs", "en-de", "--models", "random,tfidf-char", "--n", "30", "--k", "5", "--seeds", "2",
            "--out", out, "--quiet", *extra]


# ---------------------------------------------------------------------------------- item 1
@pytest.mark.parametrize("image_model", [None, "color-hist", "efficientnet-lite0@noise=1"])
def test_image_model_that_needs_files_is_refused_on_feature_only_data(tmp_path, feature_data, empty_cache, image_model):
    """Omitting --image-model (efficientnet-lite0), or naming any model that encodes image files,
    on feature-only data is refused: reading the feature file would label the records with that
    model's name."""
    extra = [] if image_model is None else ["--image-model", image_model]
    res = cli(grid("evaluate", feature_data, tmp_path / "out", *extra))
    name = image_model or "efficientnet-lite0"
    refused(res, f"image model {name!r} needs image files", f"dataset {feature_data}", "only precomputed image features",
            "'precomputed'")
    assert nothing_encoded(empty_cache) and not (tmp_path / "out" / "results.jsonl").exists()


def test_weak_image_model_that_needs_files_is_refused_in_meta(tmp_path, feature_data, empty_cache):
    res = cli(["meta", "--dataset", feature_data, "--dataset-option", f"image_features={feature_data.parent / 'feats.npy'}",
               "--pairs", "en-de", "--models", "random,tfidf-char,tfidf-char@mix=0.5", "--image-model", "precomputed",
               "--weak-image-models", "precomputed@noise=4,color-hist", "--n", "30", "--k", "5", "--seeds", "2",
               "--out", tmp_path / "meta", "--quiet"])
    refused(res, "image model 'color-hist' needs image files", f"dataset {feature_data}")
    assert nothing_encoded(empty_cache)


def test_precomputed_noise_variant_applies_the_noise(tmp_path, feature_data):
    """precomputed@noise=S weakens the features (the rows differ from the plain features)."""
    res = cli(grid("evaluate", feature_data, tmp_path / "out", "--image-model", "precomputed"))
    assert res.exit_code == 0, res.output
    cfg = EvalConfig(dataset=str(feature_data), pairs=[("en", "de")], models=["random", "tfidf-char"], n=30, k=5,
                     seeds=[0, 1], image_model="precomputed", extra_image_models=["precomputed@noise=4"],
                     dataset_options={"image_features": str(feature_data.parent / "feats.npy")})
    both = run_grid(cfg, tmp_path / "both", progress=False)
    plain, noisy = both.records, both.others["precomputed@noise=4"].records
    assert {r["image_model"] for r in plain} == {"precomputed"}
    assert {r["image_model"] for r in noisy} == {"precomputed@noise=4"}
    for a, b in zip(plain, noisy):
        assert (a["model"], a["seed"]) == (b["model"], b["seed"])
        assert a["xlr@10"] == b["xlr@10"]  # text-only parts are shared
        assert a["corr"] != b["corr"]  # the image similarities changed
    # the noise is seeded by the feature vectors: a second run gives the same numbers
    again = run_grid(cfg, None, progress=False).others["precomputed@noise=4"].records
    assert [r["corr"] for r in again] == [r["corr"] for r in noisy]
    # the run on its own equals the plain records of the joint run
    alone = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert [r["corr"] for r in alone] == [r["corr"] for r in plain]
    # meta: the "how weak may g be" table has one distinct row per image model
    res = cli(["meta", "--dataset", feature_data, "--dataset-option", f"image_features={feature_data.parent / 'feats.npy'}",
               "--pairs", "en-de", "--models", "random,tfidf-char,tfidf-char@mix=0.5", "--image-model", "precomputed",
               "--weak-image-models", "precomputed@noise=4,precomputed@noise=16", "--n", "30", "--k", "5",
               "--seeds", "2", "--out", tmp_path / "meta", "--quiet", "--no-report"])
    assert res.exit_code == 0, res.output
    rows = json.loads((tmp_path / "meta" / "meta.json").read_text())["image_models"]
    assert [r["image_model"] for r in rows] == ["precomputed", "precomputed@noise=4", "precomputed@noise=16"]
    assert len({r["pearson[corr]"] for r in rows}) == 3


def test_precomputed_on_image_files_is_refused(tmp_path, shared_data, empty_cache):
    res = cli(["evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models", "random", "--image-model",
               "precomputed@noise=2", "--n", "20", "--k", "5", "--seeds", "1", "--out", tmp_path / "out", "--quiet"])
    refused(res, "image model 'precomputed@noise=2' reads a precomputed image-feature file",
            "dataset emoji-cldr", "has image files")
    assert nothing_encoded(empty_cache)


# ---------------------------------------------------------------------------------- item 3
@pytest.fixture(scope="module")
def text_only(tmp_path_factory) -> Path:
    """Generic JSONL without images: en and de, 40 concepts."""
    words = {"en": "blue dog item", "de": "blauer Hund Artikel"}
    rows = [{"id": f"{lang}{i}", "lang": lang, "text": f"{words[lang]} {i}", "concept": f"c{i}"}
            for lang in ("en", "de") for i in range(40)]
    return write_jsonl(tmp_path_factory.mktemp("text-only") / "items.jsonl", rows)


def test_text_only_summary_and_records_have_no_image_fields(tmp_path, text_only):
    out = tmp_path / "out"
    res = cli(["evaluate", "--dataset", text_only, "--pairs", "en-de,de-en", "--models", "random,tfidf-char",
               "--n", "30", "--k", "5", "--seeds", "2", "--out", out, "--quiet"])
    assert res.exit_code == 0, res.output
    summary = (out / "summary.md").read_text()
    first = summary.splitlines()[0]
    assert first.endswith("text only (no images): XLR only"), first
    assert "image model" not in summary and "Chance level" not in summary and "bkr" not in summary
    assert "text only (no images): XLR only" in res.stdout
    records = read_jsonl(out / "results.jsonl")
    assert len(records) == 8
    for r in records:
        assert not [k for k in r if k.startswith(("image", "bkr", "corr", "hubness"))], r
        assert r["xlr@1"] >= 0
    assert "image_model" not in (out / "results.csv").read_text().splitlines()[0].split(",")


# ---------------------------------------------------------------------------------- item 4
def test_seeds_that_all_draw_the_same_sample_are_said_once(tmp_path, text_only):
    out = tmp_path / "out"
    res = cli(["evaluate", "--dataset", text_only, "--pairs", "en-de,de-en", "--models", "random,tfidf-char",
               "--n", "40", "--k", "5", "--seeds", "3", "--out", out, "--quiet"])
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.stderr.splitlines() if "every seed draws the same sample" in ln]
    assert len(warnings) == 1, res.stderr
    assert "N=40 is all the data has for en->de" in warnings[0] and "de->en" in warnings[0]
    assert "all the concepts en and de share (XLR)" in warnings[0] and "give a smaller N" in warnings[0]
    assert "every seed draws the same sample" in (out / "summary.md").read_text()
    # the records themselves: identical across seeds, as the note says
    by_seed = {}
    for r in read_jsonl(out / "results.jsonl"):
        by_seed.setdefault((r["model"], r["src_lang"]), set()).add(r["xlr@5"])
    assert all(len(v) == 1 for v in by_seed.values())
    # a smaller N gives different samples and no note
    res = cli(["evaluate", "--dataset", text_only, "--pairs", "en-de", "--models", "random", "--n", "30", "--k", "5",
               "--seeds", "3", "--out", tmp_path / "smaller", "--quiet"])
    assert res.exit_code == 0 and "same sample" not in res.output
    # one seed: nothing to say
    res = cli(["evaluate", "--dataset", text_only, "--pairs", "en-de", "--models", "random", "--n", "40", "--k", "5",
               "--seeds", "1", "--out", tmp_path / "one", "--quiet"])
    assert res.exit_code == 0 and "same sample" not in res.output


# ---------------------------------------------------------------------------------- leftover A
@pytest.fixture(scope="module")
def images_without_links(tmp_path_factory, shared_data) -> Path:
    """Generic JSONL with emoji image files and no concept column: BkR works, XLR cannot."""
    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    rows = []
    for j, lang in enumerate(("en", "de")):
        c = ds[lang]
        for i in range(j, 240, 2):
            rows.append({"id": f"{lang}-{c.ids[i]}", "lang": lang, "text": c.texts[i], "image": c.image_paths[i]})
    return write_jsonl(tmp_path_factory.mktemp("no-links") / "items.jsonl", rows)


def test_compare_by_xlr_without_links_is_refused_before_encoding(tmp_path, images_without_links, empty_cache):
    res = cli(["compare", "--dataset", images_without_links, "--pairs", "en-de", "--models", "minilm-en,random",
               "--image-model", "color-hist", "--metric", "xlr@10", "--n", "50", "--seeds", "1",
               "--out", tmp_path / "cmp", "--quiet"])
    refused(res, "compare --metric xlr@10 needs cross-lingual links", f"dataset {images_without_links} (en-de) has none")
    assert nothing_encoded(empty_cache) and not (tmp_path / "cmp" / "compare.md").exists()


def test_meta_without_links_or_images_is_refused_before_encoding(tmp_path, images_without_links, text_only, empty_cache):
    models = "minilm-en,random,minilm-en@noise=1"
    res = cli(["meta", "--dataset", images_without_links, "--pairs", "en-de", "--models", models, "--image-model",
               "color-hist", "--n", "50", "--seeds", "1", "--out", tmp_path / "m1", "--quiet"])
    refused(res, "the meta-evaluation needs cross-lingual links")
    res = cli(["meta", "--dataset", text_only, "--pairs", "en-de", "--models", models, "--n", "20", "--seeds", "1",
               "--out", tmp_path / "m2", "--quiet"])
    refused(res, "the meta-evaluation needs images", f"dataset {text_only} (en-de) has none")
    assert nothing_encoded(empty_cache)


def test_compare_by_bkr_on_text_only_data_is_refused_before_encoding(tmp_path, text_only, empty_cache):
    res = cli(["compare", "--dataset", text_only, "--pairs", "en-de", "--models", "minilm-en,random", "--n", "20",
               "--seeds", "1", "--out", tmp_path / "cmp", "--quiet"])
    refused(res, "compare --metric bkr@10 needs images")
    assert nothing_encoded(empty_cache)


# ---------------------------------------------------------------------------------- leftover B
def test_api_evaluate_checks_out_dir_first(tmp_path, text_only, empty_cache):
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder")
    cfg = EvalConfig(dataset=str(text_only), pairs=[("en", "de")], models=["minilm-en"], n=20, k=5, seeds=[0])
    with pytest.raises(BackretrievalError, match=r"output folder .*results.*file"):
        run_grid(cfg, blocker / "run", progress=False)
    assert nothing_encoded(empty_cache)
