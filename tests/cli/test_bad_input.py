"""Bad input is refused before any computation, as one ``error:`` line naming the file, line,
option or value, with exit code 2 (docs/bad-input.md); odd runs (no seed, no model) are
refused; results follow the umask.

Most cases fail in the option checks, before a dataset is read: they run in well under a second.
"Before any computation" is checked where it matters by giving the run an empty cache folder and
asserting that nothing was encoded into it, and by asserting that no result file was written.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import backretrieval
from backretrieval.cli import main
from backretrieval.core import DataError
from backretrieval.core.io import atomic_write, atomic_write_text
from commands import assert_refused, cli, grid, nothing_encoded, write_feature_items
from backretrieval.data import generic, load_dataset, multi30k

SRC = Path(backretrieval.__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------ small data
@pytest.fixture(scope="module")
def feature_data(tmp_path_factory) -> Path:
    """A generic JSONL file: 60 concepts in en, de and ja with precomputed image features (16-d).
    Runs on it need no model download and no image encoding (``--image-model precomputed``)."""
    return write_feature_items(tmp_path_factory.mktemp("feature-data"), 60,
                               {"en": "red cat number", "de": "rote Katze Nummer", "ja": "赤い猫 番号"})


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache folder for this test: whatever a run encodes lands here."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(cache))
    return cache


# ------------------------------------------------------------------------- non-UTF-8 data files
def test_non_utf8_jsonl_names_file_and_line(tmp_path, shared_data):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "lang": "en", "text": "tea"}\n{"id": "b", "lang": "en", "text": "caf\xe9"}\n')
    res = cli(["evaluate", "--dataset", path, "--pairs", "en-de", "--models", "random", "--n", "1", "--k", "1",
               "--seeds", "1", "--out", tmp_path / "out", "--quiet"])
    assert_refused(res, f"{path}: line 2: not UTF-8 (byte 0xe9 at column 39)")


def test_non_utf8_csv_and_json_array_name_the_line(tmp_path):
    csv = tmp_path / "latin1.csv"
    csv.write_bytes(b"id,lang,text\na,en,tea\nb,en,caf\xe9\n")
    with pytest.raises(DataError, match=r"latin1\.csv: line 3: not UTF-8 \(byte 0xe9 at column 9\)"):
        generic.load(csv)
    arr = tmp_path / "latin1.json"
    arr.write_bytes(b'[{"id": "a", "lang": "en",\n  "text": "caf\xe9"}]')
    with pytest.raises(DataError, match=r"latin1\.json: line 2: not UTF-8"):
        generic.load(arr)
    # a UTF-8 byte-order mark (as spreadsheet programs write it) is not part of the first column's name
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfid,lang,text\na,en,tea\n")
    assert generic.load(bom)["en"].ids == ["a"]


def test_non_utf8_multi30k_caption_names_file_and_line(tmp_path):
    """A Multi30K-format folder (captions written here) with one Latin-1 caption."""
    task1 = tmp_path / "data" / "task1"
    (task1 / "raw").mkdir(parents=True)
    (task1 / "image_splits").mkdir()
    (task1 / "image_splits" / "tiny.txt").write_text("1.jpg\n2.jpg\n", encoding="utf-8")
    (task1 / "raw" / "tiny.en").write_text("a dog runs\na cat sleeps\n", encoding="utf-8")
    (task1 / "raw" / "tiny.de").write_bytes(b"ein Hund rennt\neine Katze schl\xe4ft\n")
    assert multi30k.load(["en"], root=tmp_path, split="tiny")["en"].texts == ["a dog runs", "a cat sleeps"]
    with pytest.raises(DataError, match=r"tiny\.de: line 2: not UTF-8 \(byte 0xe4 at column 16\)"):
        multi30k.load(["en", "de"], root=tmp_path, split="tiny")


# ------------------------------------------------------------------------------ output folders
def test_out_below_a_file_is_refused_before_any_work(tmp_path, empty_cache, shared_data):
    blocker = tmp_path / "results"
    blocker.write_text("not a folder")
    res = cli(["evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models", "random", "--n", "50",
               "--seeds", "1", "--out", blocker / "run1", "--quiet"])
    assert_refused(res, f"--out {blocker / 'run1'} is below {blocker}, which is a file, not a folder")
    assert nothing_encoded(empty_cache)  # the emoji data were not even extracted


def test_out_that_is_a_file_is_one_error_line(tmp_path, feature_data):
    blocker = tmp_path / "results"
    blocker.write_text("x")
    assert_refused(cli(grid("evaluate", feature_data, blocker)), "'--out'", "is a file")


def _unprivileged(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that cannot write where file permissions forbid it. As root (as
    in many CI containers) permissions do not bind, so the capability that overrides them is
    dropped with util-linux's setpriv."""
    cmd = [sys.executable, "-m", "backretrieval.cli", *map(str, args)]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root: this test needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        cmd = [setpriv, "--bounding-set=-dac_override", *cmd]
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=300)


def test_unwritable_out_and_cache_folders_are_refused(tmp_path, feature_data):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        r = _unprivileged(grid("evaluate", feature_data, locked / "run"))
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip() == (
            f"error: --out {locked / 'run'} cannot be created: {locked} is not writable (Permission denied)"
        ), r.stderr
        assert not (locked / "run").exists()
        r = _unprivileged(grid("evaluate", feature_data, tmp_path / "out"), env={"BACKRETRIEVAL_CACHE": str(locked)})
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip() == f"error: cache folder ($BACKRETRIEVAL_CACHE) {locked} is not writable: Permission denied"
        assert not (tmp_path / "out").exists()
    finally:
        locked.chmod(0o755)


def test_cache_folder_that_is_a_file_is_refused(tmp_path, feature_data, monkeypatch):
    blocker = tmp_path / "cachefile"
    blocker.write_text("x")
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(blocker))
    assert_refused(cli(grid("evaluate", feature_data, tmp_path / "out")),
                   f"cache folder ($BACKRETRIEVAL_CACHE) {blocker} is a file, not a folder")
    monkeypatch.setenv("BACKRETRIEVAL_CACHE", str(blocker / "sub"))
    assert_refused(cli(grid("evaluate", feature_data, tmp_path / "out")), f"is below {blocker}, which is a file")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ option values
@pytest.mark.parametrize(
    "extra, fragments",
    [
        (("--dataset-option", "colour=red"),
         ("Invalid value for '--dataset-option': unknown option 'colour' for a data file (items.jsonl); "
          "its options: image_features, name",)),
        (("--seeds", "-1,2"), ("Invalid value for '--seeds': seed -1 is negative; seeds are integers >= 0",)),
        (("--seeds", ","), ("Invalid value for '--seeds': ',' names no seed",)),
        (("--seeds", "0"), ("Invalid value for '--seeds': '0': the number of seeds must be at least 1",)),
        (("--seeds", "2,2"), ("Invalid value for '--seeds': seed 2 is given twice",)),
        (("--models", ","), ("Invalid value for '--models': ',' names no model",)),
        (("--sim", "csls", "--csls-k", "30"), ("Invalid value for '--csls-k': CSLS k=30 is larger than N=20",)),
        (("--executor", "threads"), ("Invalid value for '--executor': unknown executor 'threads'",)),
        (("--executor", "local:3"), ("Invalid value for '--executor': bad executor 'local:3': local takes no argument",)),
        (("--executor", "processes:0"), ("Invalid value for '--executor': bad executor 'processes:0': N must be positive",)),
    ],
    ids=["unknown-dataset-option", "negative-seed", "no-seed", "zero-seeds", "seed-twice", "no-model",
         "csls-k-above-n", "unknown-executor", "local-with-argument", "no-workers"],
)
def test_bad_grid_options_are_refused_before_any_work(tmp_path, feature_data, empty_cache, extra, fragments):
    out = tmp_path / "out"
    assert_refused(cli(grid("evaluate", feature_data, out, *extra)), *fragments)
    assert not out.exists() and nothing_encoded(empty_cache)


def test_unknown_dataset_option_through_the_api(shared_data):
    with pytest.raises(DataError, match=r"unknown option 'colour' for dataset 'emoji-cldr'; its options: text, source_dir, min_names"):
        load_dataset("emoji-cldr", langs=["en"], colour="red")


def test_dataset_option_values_get_the_loaders_types(tmp_path, feature_data):
    res = cli(grid("evaluate", feature_data, tmp_path / "o", "--dataset", "emoji-cldr", "--dataset-option", "min_names=many"))
    assert_refused(res, "Invalid value for '--dataset-option': option min_names='many': expected an integer")


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (("--level", "1.5"), ("Invalid value for '--level': 1.5 is not in the range 0<x<1.",)),
        (("--level", "nan"), ("Invalid value for '--level': 'nan' is not a finite number",)),
        (("--n-boot", "0"), ("Invalid value for '--n-boot': 0 is not in the range 2<=x<=100000.",)),
        (("--alpha", "0"), ("Invalid value for '--alpha': 0.0 is not in the range 0<x<1.",)),
        (("--metric", "foo@3"), ("Invalid value for '--metric': unknown metric 'foo@3'",)),
        (("--metric", "bkr@0"), ("Invalid value for '--metric': bkr@0: K must be at least 1",)),
        (("--metric", "xlr@50"), ("Invalid value for '--metric': xlr@50: K=50 is larger than N=20",)),
    ],
    ids=["level", "level-nan", "n-boot", "alpha", "metric", "metric-k0", "metric-k-above-n"],
)
def test_compare_options_are_checked_before_the_evaluation(tmp_path, feature_data, extra, fragments):
    out = tmp_path / "cmp"
    assert_refused(cli(grid("compare", feature_data, out, *extra)), *fragments)
    assert not (out / "results.jsonl").exists()  # nothing was evaluated


def test_meta_options(tmp_path, feature_data):
    out = tmp_path / "meta"
    assert_refused(cli(grid("meta", feature_data, out)), "Invalid value for '--models'", "give at least 3 models, got 2")
    assert_refused(cli(grid("meta", feature_data, out, "--models", "random,tfidf-char,random@mix=0.5",
                            "--weak-image-models", "colour-hist")),
                   "Invalid value for '--weak-image-models': unknown image model 'colour-hist'")
    three = ("--models", "random,tfidf-char,random@mix=0.5")
    for candidates, message in (
        ("bkr@5,xlr@1", "metric 'xlr@1' is no candidate proxy (it needs the ground truth it would stand in for): "
                         "use bkr@K, bkr_mrr, corr"),
        ("hub_max@5", "metric 'hub_max@5' is no candidate proxy (the metric table does not mark it one)"),
        ("corr,bkr_mrr,corr", "candidate 'corr' is given twice"),
        ("bkr@10", "candidate 'bkr@10': the records carry bkr@K at K = 1, 5 only (N=20, --k 5)"),
        ("bkr@ten", "unknown metric 'bkr@ten'"),
        (",", "give at least one candidate metric"),
    ):
        assert_refused(cli(grid("meta", feature_data, out, *three, "--candidates", candidates)),
                       f"Invalid value for '--candidates': {message}")
    assert not out.exists()


# --------------------------------------------------------------------------------- odd data rows
@pytest.mark.parametrize(
    "text", ["\u200b", "\u200b\u200d\ufeff", " \u2060 \u00ad", "\ufe0f"], ids=["zwsp", "zwsp-zwj-bom", "wj-shy", "vs16"]
)
def test_text_of_invisible_characters_is_empty(tmp_path, text):
    path = tmp_path / "items.jsonl"
    rows = [{"id": "ok", "lang": "en", "text": "a cat"}, {"id": "ghost", "lang": "en", "text": text}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"id 'ghost' \(line 2\): empty or whitespace-only text \(only invisible characters: U\+"):
        generic.load(path)
    from backretrieval.data import Corpus

    with pytest.raises(DataError, match="empty or whitespace-only text for id 'ghost'"):
        Corpus(dataset="t", lang="en", ids=["ok", "ghost"], texts=["a cat", text])


@pytest.mark.parametrize(
    "change, message",
    [
        ({"id": True}, "line 2: id must be a string or an integer, got bool True"),
        ({"id": 1.5}, "line 2: id must be a string or an integer, got float 1.5"),
        ({"id": ["a", 1]}, "line 2: id must be a string or an integer, got list ['a', 1]"),
        ({"lang": 7}, "id 'b' (line 2): lang must be a string, got int 7"),
        ({"concept": {"k": 1}}, "id 'b' (line 2): concept must be a string or an integer, got dict {'k': 1}"),
        ({"concept": False}, "id 'b' (line 2): concept must be a string or an integer, got bool False"),
        ({"title": 3}, "id 'b' (line 2): title must be a string, got int 3"),
    ],
    ids=["id-bool", "id-float", "id-list", "lang-int", "concept-dict", "concept-bool", "title-int"],
)
def test_wrong_typed_values_are_named_not_stringified(tmp_path, change, message):
    rows = [{"id": "a", "lang": "en", "text": "a cat", "concept": "cat"},
            {"id": "b", "lang": "en", "text": "a dog", "concept": "dog", **change}]
    path = tmp_path / "typed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        generic.load(path)
    assert str(e.value) == f"{path}: {message}"


def test_integer_ids_and_concepts_match_their_string_forms(tmp_path):
    """7, 7.0 (parquet's integer column with gaps) and "7" are one concept; before, 7.0 became
    the concept "7.0", silently unlinked from "7"."""
    import pandas as pd

    pd.DataFrame({"id": [1, 2], "lang": ["en", "en"], "text": ["a", "b"], "concept": [7.0, np.nan]}).to_parquet(tmp_path / "en.parquet")
    assert generic.load(tmp_path / "en.parquet")["en"].concepts == ["7", None]
    rows = [{"id": 1, "lang": "de", "text": "x", "concept": 7}, {"id": "2", "lang": "de", "text": "y", "concept": "7"}]
    (tmp_path / "de.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    de = generic.load(tmp_path / "de.jsonl")["de"]
    assert de.ids == ["1", "2"] and de.concepts == ["7", "7"]


# ------------------------------------------------------------------------------------ output hygiene
def test_summary_keeps_the_bkr_column_for_any_k(tmp_path, feature_data):
    out = tmp_path / "k5"
    res = cli(grid("evaluate", feature_data, out, "--k", "5"))
    assert res.exit_code == 0, res.output
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "| model | xlr@1 | xlr@10 | bkr@5 | bkr_mrr | corr |" in summary, summary


def test_meta_with_k_other_than_10(tmp_path, feature_data):
    out = tmp_path / "meta5"
    res = cli(grid("meta", feature_data, out, "--models", "tfidf-char,random,tfidf-char@noise=2",
                   "--pairs", "en-de,de-en", "--seeds", "2"))
    assert res.exit_code == 0, res.output
    md = (out / "meta.md").read_text(encoding="utf-8")
    assert "Correlation across models of each candidate (bkr@5, corr) with the ground truth XLR@10 (whatever K is)" in md
    assert "| model | xlr@10 | bkr@5 | corr | hubness_skew@5 |" in md, md
    doc = json.loads((out / "meta.json").read_text(encoding="utf-8"))
    assert doc["candidates"] == ["bkr@5", "corr"] and doc["truth"] == "xlr@10"
    assert set(doc["pairs"]["en->de"]["best"]) == {"pearson", "spearman"}
    assert (out / "figures" / "scatter.png").stat().st_size > 1000 and (out / "report.html").is_file()


@pytest.fixture
def umask():
    """Set the process umask for a test and restore it."""
    old = os.umask(0o022)
    yield lambda m: os.umask(m)
    os.umask(old)


def test_result_files_follow_the_umask_and_private_files_are_0600(tmp_path, umask):
    umask(0o022)
    atomic_write_text(tmp_path / "shared.txt", "x")
    assert stat.S_IMODE((tmp_path / "shared.txt").stat().st_mode) == 0o644
    umask(0o027)
    with atomic_write(tmp_path / "group.bin", "wb") as fh:
        fh.write(b"x")
    assert stat.S_IMODE((tmp_path / "group.bin").stat().st_mode) == 0o640
    atomic_write_text(tmp_path / "secret.txt", "token", private=True)
    assert stat.S_IMODE((tmp_path / "secret.txt").stat().st_mode) == 0o600
    # replacing a file gives the new file the mode of the new write
    atomic_write_text(tmp_path / "secret.txt", "public now")
    assert stat.S_IMODE((tmp_path / "secret.txt").stat().st_mode) == 0o640


def test_evaluate_results_are_shareable(tmp_path, feature_data, umask):
    umask(0o022)
    out = tmp_path / "run"
    assert cli(grid("evaluate", feature_data, out)).exit_code == 0
    for name in ("results.jsonl", "results.csv", "summary.md"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name


# ---------------------------------------------------------------------------------- image-retrieval
@pytest.fixture(scope="module")
def m3l_model(feature_data, tmp_path_factory) -> Path:
    """A one-epoch M3L model on the feature data (base 'random': plumbing, not quality)."""
    model_dir = tmp_path_factory.mktemp("m3l") / "model"
    res = CliRunner().invoke(main, [
        "train", "m3l", "--dataset", str(feature_data), "--dataset-option", f"image_features={feature_data.parent / 'feats.npy'}",
        "--train-langs", "en", "--base", "random", "--image-model", "precomputed", "--epochs", "1", "--batch-size", "16",
        "--widths", "8,8", "--test-frac", "0.4", "--val-frac", "0.2", "--threads", "1", "--out", str(model_dir), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    return model_dir


def test_image_retrieval_default_plot_languages_never_clash_with_langs(tmp_path, feature_data, m3l_model):
    """--langs en,de,ja with the default --plot-langs (en,de,ru,ja): plot en,de,ja and say that ru
    is left out, instead of refusing the user's valid choice."""
    out = tmp_path / "ir"
    res = CliRunner().invoke(main, [
        "image-retrieval", "--model", str(m3l_model), "--dataset", str(feature_data),
        "--dataset-option", f"image_features={feature_data.parent / 'feats.npy'}",
        "--langs", "en,de,ja", "--plot-images", "10", "--n-perm", "10", "--out", str(out), "--quiet",
    ])
    assert res.exit_code == 0, res.output
    assert "projection plot: en, de, ja of the default plot languages en,de,ru,ja (ru not in --langs)" in res.output
    assert (out / "projection.png").stat().st_size > 1000
    # a plot language the user names explicitly must be one of --langs
    res = CliRunner().invoke(main, [
        "image-retrieval", "--model", str(m3l_model), "--dataset", str(feature_data),
        "--dataset-option", f"image_features={feature_data.parent / 'feats.npy'}",
        "--langs", "en,de", "--plot-langs", "en,ru", "--out", str(tmp_path / "ir2"), "--quiet",
    ])
    assert_refused(res, "Invalid value for '--plot-langs': plot language 'ru' is not in --langs (en,de)")


def test_image_retrieval_options(tmp_path, feature_data, m3l_model):
    base = ["image-retrieval", "--dataset", str(feature_data), "--langs", "en", "--out", str(tmp_path / "ir"), "--quiet"]
    assert_refused(cli([*base, "--model", m3l_model, "--ks", "0,5"]), "Invalid value for '--ks': 0 is not in [1, inf]")
    assert_refused(cli([*base, "--model", m3l_model, "--langs", ","]), "Invalid value for '--langs': ',' names no language")
    assert_refused(cli([*base, "--model", tmp_path]), "Invalid value for '--model'", "no model.json: not a trained m3l model directory")
    assert not (tmp_path / "ir").exists()


# ----------------------------------------------------------------------------------- training
def test_train_m3l_refuses_an_unwritable_out_before_training(tmp_path, feature_data, empty_cache):
    blocker = tmp_path / "models"
    blocker.write_text("x")
    res = cli(["train", "m3l", "--dataset", feature_data, "--dataset-option", f"image_features={feature_data.parent / 'feats.npy'}",
               "--base", "random", "--image-model", "precomputed", "--epochs", "1", "--out", blocker / "m3l", "--quiet"])
    assert_refused(res, f"--out {blocker / 'm3l'} is below {blocker}, which is a file, not a folder")
    assert nothing_encoded(empty_cache)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["train", "m3l", "--seed", "-1"], ("Invalid value for '--seed': -1 is not in the range x>=0.",)),
        (["train", "m3l", "--widths", "1024,2.5"], ("Invalid value for '--widths': '2.5' is not an integer",)),
        (["train", "m3l", "--dropout", "0.2,0.1,1"], ("Invalid value for '--dropout': 1 is not in [0, 1)",)),
        (["train", "m3l", "--val-frac", "0"], ("val_frac=0 leaves no validation images",)),
        (["train", "m3l", "--train-langs", ","], ("Invalid value for '--train-langs': ',' names no language",)),
        (["train", "patr", "--eta-quantile", "1"], ("Invalid value for '--eta-quantile': 1.0 is not in the range 0<x<1.",)),
        (["train", "triplet", "--layers", "300,abc"], ("Invalid value for '--layers': 'abc' is not an integer",)),
        (["train", "triplet", "--seed", "-3"], ("Invalid value for '--seed': -3 is not in the range x>=0.",)),
        (["train", "triplet", "--max-per-lang", "0"], ("Invalid value for '--max-per-lang': 0 is not in the range x>=1.",)),
        (["train", "tripletxl", "--base", "bert-huge"], ("Invalid value for '--base': unknown text model 'bert-huge'",)),
        (["train", "cr5", "--langs", ","], ("Invalid value for '--langs': ',' names no language",)),
        (["train", "cr5", "--lam", "1,0"], ("Invalid value for '--lam': lambda 0 is not positive",)),
        (["train", "cr5", "--regime", "pairwise", "--pair", "en-de,de-fr"], ("Invalid value for '--pair': 'en-de,de-fr': give one pair",)),
    ],
    ids=["m3l-seed", "m3l-widths", "m3l-dropout", "m3l-val-frac", "m3l-langs", "patr-eta-q", "triplet-layers",
         "triplet-seed", "triplet-max-per-lang", "tripletxl-base", "cr5-langs", "cr5-lam", "cr5-pair"],
)
def test_training_options_are_refused_before_the_data_is_read(tmp_path, feature_data, empty_cache, args, fragments):
    out = tmp_path / "model"
    assert_refused(cli([*args, "--dataset", feature_data, "--out", out, "--quiet"]), *fragments)
    assert not out.exists() and nothing_encoded(empty_cache)


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--seeds", "-1,0"], ("Invalid value for '--seeds': seed -1 is negative",)),
        (["--langs", "en"], ("Invalid value for '--langs': 'en': give at least two languages",)),
        (["--n-boot", "0"], ("Invalid value for '--n-boot': 0 is not in the range 2<=x<=100000.",)),
        (["--k", "20", "--bkr-n", "10"], ("Invalid value for '--k': K=20 is larger than N=10 (--bkr-n)",)),
        (["--labels", "a,a"], ("Invalid value for '--labels': one non-empty label per model", "the base's label used once")),
        (["--bkr-dataset", "emoji"], ("unknown dataset 'emoji'",)),
        (["--image-model", "colour-hist"], ("Invalid value for '--image-model': unknown image model 'colour-hist'",)),
        (["--models", "random,triplet"], ("Invalid value for '--models': text model 'triplet' needs an argument",)),
    ],
    ids=["seeds", "one-language", "n-boot", "k-above-n", "labels", "dataset", "image-model", "model"],
)
def test_case_study_report_options(tmp_path, empty_cache, args, fragments):
    out = tmp_path / "cs"
    base = {"--langs": "en,de", "--models": "random,tfidf-char"}
    argv = ["case-study", "report", *args]
    for k, v in base.items():
        if k not in argv:
            argv += [k, v]
    assert_refused(cli([*argv, "--out", out, "--quiet"]), *fragments)
    assert not out.exists() and nothing_encoded(empty_cache)


def test_case_study_figure_that_is_a_folder(tmp_path):
    assert_refused(cli(["case-study", "report", "--langs", "en,de", "--models", "random,tfidf-char",
                        "--figure", tmp_path, "--out", tmp_path / "cs"]), "'--figure'", "is a directory")


def test_case_study_prepare_checks_out_and_options(tmp_path, empty_cache):
    blocker = tmp_path / "work"
    blocker.write_text("x")
    assert_refused(cli(["case-study", "prepare", "--langs", "en,de", "--out", blocker / "w"]), "which is a file")
    assert_refused(cli(["case-study", "prepare", "--langs", "en,de", "--holdout", "1", "--out", tmp_path / "w"]),
                   "Invalid value for '--holdout': 1.0 is not in the range 0<x<1.")
    assert_refused(cli(["case-study", "prepare", "--langs", "en,de", "--dataset-option", "max_docs=0.5", "--out", tmp_path / "w"]),
                   "Invalid value for '--dataset-option': option max_docs='0.5': expected an integer")
    assert nothing_encoded(empty_cache)


def test_usage_errors_are_one_line_too(tmp_path):
    assert_refused(cli(["evaluate", "--dataset", "emoji-cldr"]), "Missing option '--pairs'.")
    assert_refused(cli(["evalute"]), "No such command 'evalute'")
    assert_refused(cli(["evaluate", "--bogus"]), "No such option '--bogus'", "evaluate --help")
    res = cli(["train"])  # a group alone still shows its help
    assert "Commands:" in res.output


# ------------------------------------------------------------------------------ the grid's size
@pytest.mark.parametrize(
    "seeds, message",
    [
        ("1000000000", "Invalid value for '--seeds': '1000000000': at most 1,000 seeds in one grid "
                       "(for one given seed write e.g. '1000000000,')"),
        ("100000000000000000000", "Invalid value for '--seeds': '100000000000000000000': at most 1,000 seeds in one grid"),
        ("20261126", "Invalid value for '--seeds': '20261126': at most 1,000 seeds in one grid"),
        ("100000000000000000000,", "Invalid value for '--seeds': seed 100000000000000000000 is too large; "
                                   "seeds are integers from 0 to 4294967295 (2**32 - 1)"),
        (",".join(map(str, range(1001))), "Invalid value for '--seeds': 1,001 seeds given; at most 1,000 in one grid"),
        ("9" * 400, "Invalid value for '--seeds':"),
    ],
    ids=["count-1e9", "count-1e20", "count-date", "seed-1e20", "list-1001", "400-digits"],
)
def test_seed_count_and_values_are_bounded(tmp_path, feature_data, empty_cache, seeds, message):
    out = tmp_path / "out"
    assert_refused(cli(grid("evaluate", feature_data, out, "--seeds", seeds)), message)
    assert not out.exists() and nothing_encoded(empty_cache)


def test_an_absurd_grid_is_refused_with_its_size(tmp_path, feature_data, empty_cache):
    models = ",".join(["random", "tfidf-char", *(f"random@noise={i}" for i in range(1, 200))])
    out = tmp_path / "out"
    res = cli(grid("evaluate", feature_data, out, "--models", models, "--pairs", "en-de,de-en,en-ja", "--seeds", "200"))
    assert_refused(res, "the grid has 201 models x 3 pairs x 200 seeds x 1 image model = 120,600 records; "
                        "one run computes at most 100,000: split it into several runs")
    assert not out.exists() and nothing_encoded(empty_cache)
    res = cli(grid("meta", feature_data, out, "--models", models, "--pairs", "en-de,de-en", "--seeds", "200",
                   "--weak-image-models", "color-hist"))
    assert_refused(res, "the grid has 201 models x 2 pairs x 200 seeds x 2 image models = 160,800 records")


def test_eval_config_checks_seeds_and_size_for_python_users():
    from backretrieval.analysis import EvalConfig
    from backretrieval.core import BackretrievalError

    def cfg(**kw):
        return EvalConfig(**{"dataset": "emoji-cldr", "pairs": [("en", "de")], "models": ["random"], **kw})

    assert cfg(seeds=range(3)).seeds == [0, 1, 2] and cfg(seeds=[np.int64(4)]).seeds == [4]
    for seeds, message in [
        (range(10**20), "more than 1,000 seeds; one grid takes at most 1,000"),
        ([10**20], "seed 100000000000000000000 is too large; seeds are integers from 0 to 4294967295"),
        ([-1], "seed -1 is negative"),
        ([1, 1], "seed 1 is given twice"),
        ([1.5], "seed 1.5 is not an integer"),
        ([True], "seed True is not an integer"),
        ([], "no seed given"),
    ]:
        with pytest.raises(BackretrievalError) as e:
            cfg(seeds=seeds)
        assert str(e.value).startswith(message), (seeds, str(e.value))
    with pytest.raises(BackretrievalError, match=r"= 200,000 records; one run computes at most 100,000"):
        cfg(models=[f"random@noise={i}" for i in range(200)], seeds=range(1000))


# ---------------------------------------------------------------------------------- study and compare ranges
@pytest.mark.parametrize(
    "args, message",
    [
        (["analyze", "S.db", "--n-boot", "0"], "Invalid value for '--n-boot': 0 is not in the range 2<=x<=100000."),
        (["analyze", "S.db", "--n-boot", "-5"], "Invalid value for '--n-boot': -5 is not in the range 2<=x<=100000."),
        (["analyze", "S.db", "--bkr-seeds", "0"], "Invalid value for '--bkr-seeds': 0 is not in the range 1<=x<=1000."),
        (["analyze", "S.db", "--bkr-n", "0"], "Invalid value for '--bkr-n': 0 is not in the range x>=1."),
        (["analyze", "S.db", "--image-model", "nope"], "Invalid value for '--image-model': unknown image model 'nope'"),
        (["create", "--seed", "-1"], "Invalid value for '--seed': -1 is not in the range x>=0."),
        (["create", "--raters", "-1"], "Invalid value for '--raters': -1 is not in the range x>=0."),
        (["create", "--queries", "0"], "Invalid value for '--queries': 0 is not in the range x>=1."),
        (["create", "--pool-size", "0"], "Invalid value for '--pool-size': 0 is not in the range x>=1."),
        (["serve", "S.db", "--port", "-1"], "Invalid value for '--port': -1 is not in the range 0<=x<=65535."),
        (["serve", "S.db", "--port", "70000"], "Invalid value for '--port': 70000 is not in the range 0<=x<=65535."),
        (["add-rater", "S.db", "--port", "70000"], "Invalid value for '--port': 70000 is not in the range 0<=x<=65535."),
    ],
    ids=["analyze-n-boot-0", "analyze-n-boot-neg", "analyze-bkr-seeds", "analyze-bkr-n", "analyze-image-model",
         "create-seed", "create-raters", "create-queries", "create-pool-size", "serve-port-neg", "serve-port-big",
         "add-rater-port"],
)
def test_study_options_are_ranged(tmp_path, args, message):
    args = [str(tmp_path / a) if a == "S.db" else a for a in args]
    if args[0] == "create":
        args += ["--dataset", "emoji-cldr", "--src", "en", "--tgt", "de", "--models", "random,tfidf-char",
                 "--out", str(tmp_path / "S.db")]
    assert_refused(cli(["study", *args]), message)
    assert not (tmp_path / "S.db").exists()


def test_study_analyze_checks_its_parameters_in_python(tmp_path):
    from backretrieval.core import BackretrievalError, EncoderError
    from backretrieval.study.analyze import analyze

    with pytest.raises(BackretrievalError, match=r"n_boot must be an integer >= 2, got 0"):
        analyze(tmp_path / "S.db", n_boot=0)
    with pytest.raises(EncoderError, match=r"unknown image model 'nope'"):
        analyze(tmp_path / "S.db", image_model="nope")


def test_compare_n_boot_is_bounded_before_the_evaluation(tmp_path, feature_data, empty_cache):
    out = tmp_path / "cmp"
    assert_refused(cli(grid("compare", feature_data, out, "--n-boot", "1000000000")),
                   "Invalid value for '--n-boot': 1000000000 is not in the range 2<=x<=100000.")
    assert not out.exists() and nothing_encoded(empty_cache)


# ----------------------------------------------------------------------------------- model files
@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
def test_cr5_model_with_non_finite_weights_is_refused(tmp_path, bad):
    """A NaN in Phi would make every text the bias-only vector (the Triplet reader refuses the same)."""
    from backretrieval.core import EncoderError
    from backretrieval.encoders import get_text_encoder
    from backretrieval.encoders.trained.cr5 import Cr5Model

    vocab = {"en": ["cat", "dog", "red"], "de": ["katze", "hund", "rot"]}
    rng = np.random.default_rng(0)
    phi = {lang: rng.standard_normal((2, 3)).astype(np.float32) for lang in vocab}
    model_dir = Cr5Model(vocab, {lang: np.ones(3) for lang in vocab}, phi).save(tmp_path / "cr5")
    assert np.isfinite(get_text_encoder(f"cr5:{model_dir}").encode(["red cat"], "en")).all()
    with np.load(model_dir / "weights.npz") as z:
        arrays = dict(z)
    arrays["phi__de"][1, 2] = bad
    np.savez(model_dir / "weights.npz", **arrays)
    with pytest.raises(EncoderError) as e:
        get_text_encoder(f"cr5:{model_dir}").encode(["rot"], "de")
    assert str(e.value) == f"cr5: {model_dir}: cr5 model: Phi of 'de' holds NaN or inf (1 of 6 values)"


def test_out_never_overwrites_an_input(tmp_path, feature_data, empty_cache):
    """`--dataset D/results.csv --out D`: the results would replace the user's data, so the run is refused."""
    d = tmp_path / "D"
    d.mkdir()
    data = d / "results.jsonl"
    shutil.copy(feature_data, data)
    before = data.read_bytes()
    for cmd in ("evaluate", "compare"):
        assert_refused(cli(grid(cmd, feature_data, d, "--dataset", str(data))),
                       f"--out {d} would overwrite the input {data} (--dataset): write the results to another folder")
    feats = d / "figures" / "feats.npy"  # an input below a folder the run owns
    feats.parent.mkdir()
    shutil.copy(feature_data.parent / "feats.npy", feats)
    assert_refused(cli(grid("evaluate", feature_data, d, "--dataset-option", f"image_features={feats}")),
                   f"would overwrite the input {feats} (--dataset-option image_features)")
    assert_refused(cli(grid("meta", feature_data, d, "--models", "random,tfidf-char,random@noise=1",
                            "--dataset", str(feature_data), "--dataset", str(data))), f"the input {data} (--dataset)")
    assert data.read_bytes() == before and nothing_encoded(empty_cache)
    # data beside the results, under a name the run does not write, is fine
    shutil.copy(feature_data, d / "items.jsonl")
    res = cli(grid("evaluate", feature_data, d, "--dataset", str(d / "items.jsonl")))
    assert res.exit_code == 0, res.output
    assert (d / "results.jsonl").read_bytes() != before


# ------------------------------------------------------------------------------------ image files
def _png_claiming(path: Path, width: int, height: int) -> Path:
    """A PNG of a few hundred bytes whose header claims ``width`` x ``height`` pixels (its data
    is a valid 1 x 1 image's: a decoder that trusted the header would allocate the full size)."""
    import io
    import struct
    import zlib

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (1, 1), (200, 10, 10)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    ihdr = 8  # after the signature: length (4), b"IHDR" (4), then width, height
    data[ihdr + 8 : ihdr + 16] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[ihdr + 4 : ihdr + 8 + 13]))
    data[ihdr + 8 + 13 : ihdr + 8 + 17] = struct.pack(">I", crc)
    path.write_bytes(bytes(data))
    return path


def test_huge_images_are_refused_from_their_header(tmp_path):
    """A 13,300 x 13,300 PNG would cost color-hist 7.8 GB; every image model reads through load_rgb."""
    from backretrieval.encoders.image.batching import MAX_PIXELS, preprocess_batch
    from backretrieval.encoders import get_image_encoder

    bomb = _png_claiming(tmp_path / "bomb.png", 13_300, 13_300)
    assert bomb.stat().st_size < 1000
    message = (f"image {bomb} is 13,300 x 13,300 = 176,890,000 pixels; image models read at most 25,000,000 "
               "(e.g. 5,000 x 5,000): downscale it")
    with pytest.raises(DataError) as e:
        get_image_encoder("color-hist").encode_images([bomb])
    assert str(e.value) == message
    with pytest.raises(DataError, match="image models read at most 25,000,000"):
        preprocess_batch([bomb], 224, (0.5,) * 3, (0.5,) * 3)  # the CNN models' loader
    with pytest.raises(DataError, match=r"has more than 25,000,000 pixels"):  # beyond Pillow's own bomb limit
        get_image_encoder("color-hist").encode_images([_png_claiming(tmp_path / "b2.png", 20_000, 20_000)])
    assert MAX_PIXELS == 25_000_000
    with pytest.raises(DataError, match="is 5,001 x 5,000 = 25,005,000 pixels"):
        get_image_encoder("color-hist").encode_images([_png_claiming(tmp_path / "b3.png", 5_001, 5_000)])


def test_16_bit_and_float_grey_images_are_rescaled(tmp_path):
    """A 16-bit grey PNG and a [0, 1] float TIFF give the 8-bit image of the same picture
    (Pillow's own conversion makes the first almost white and the second black)."""
    from PIL import Image

    from backretrieval.encoders.image.batching import load_rgb
    from backretrieval.encoders.image.color_hist import color_histogram

    ramp8 = np.tile(np.arange(256, dtype=np.uint8), (8, 1))
    Image.fromarray(ramp8, "L").save(tmp_path / "g8.png")
    Image.fromarray(ramp8.astype(np.uint16) * 257).save(tmp_path / "g16.png")
    Image.fromarray(ramp8.astype(np.float32) / 255).save(tmp_path / "f.tiff")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I") and Image.open(tmp_path / "f.tiff").mode == "F"
    ref = np.asarray(load_rgb(tmp_path / "g8.png"))
    for name in ("g16.png", "f.tiff"):
        assert np.array_equal(np.asarray(load_rgb(tmp_path / name)), ref), name
        assert np.allclose(color_histogram(tmp_path / name), color_histogram(tmp_path / "g8.png"))
    Image.fromarray(ramp8.astype(np.float32)).save(tmp_path / "f255.tiff")
    with pytest.raises(DataError) as e:
        load_rgb(tmp_path / "f255.tiff")
    assert str(e.value) == f"image {tmp_path / 'f255.tiff'}: floating-point pixel values must be in [0, 1], got 0 to 255"
    Image.fromarray(np.full((4, 4), -5, dtype=np.int32), "I").save(tmp_path / "neg.tiff")
    with pytest.raises(DataError, match=r"integer pixel values must be in 0\.\.65535 \(16 bits\), got -5 to -5"):
        load_rgb(tmp_path / "neg.tiff")


# ------------------------------------------------------------------------------------ faults
def test_sigterm_of_the_caller_ends_the_process_workers(tmp_path):
    """`kill` (SIGTERM) of a run with `--executor processes:N` ends its workers too: alive, they
    would hold the caller's stdout and stderr, and a wrapper reading the output would hang."""
    import signal
    import time

    (tmp_path / "slowtask.py").write_text(
        "import os, time\nfrom pathlib import Path\n\n"
        "def task(marker):\n    Path(marker).write_text(str(os.getpid()))\n    time.sleep(120)\n    return marker\n"
    )
    code = (
        "import sys\nfrom slowtask import task\nfrom backretrieval.analysis.executors import ProcessExecutor\n"
        f"markers = [{str(tmp_path / 'w0')!r}, {str(tmp_path / 'w1')!r}]\n"
        "for m in ProcessExecutor(2).imap(task, markers):\n    print(m, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 240  # the workers start (spawn, imports) and begin their tasks
        while not all((tmp_path / m).exists() and (tmp_path / m).read_text() for m in ("w0", "w1")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.2)
        workers = [int((tmp_path / m).read_text()) for m in ("w0", "w1")]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)  # EOF: nothing holds the pipes any more
        assert proc.returncode == -signal.SIGTERM and out == b""
        for pid in workers:  # and the workers are gone (or zombies waiting for init to reap them)
            stat = Path(f"/proc/{pid}/stat")
            deadline = time.monotonic() + 30
            while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                assert time.monotonic() < deadline, f"worker {pid} outlived its parent"
                time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        for m in ("w0", "w1"):  # never leave a worker of this test behind
            if (tmp_path / m).exists() and (tmp_path / m).read_text():
                pid = int((tmp_path / m).read_text())
                with contextlib.suppress(OSError):
                    if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(pid, signal.SIGKILL)


def test_more_process_workers_than_cores_is_warned_and_capped_at_the_tasks(tmp_path, feature_data):
    from backretrieval.analysis.executors import usable_cores

    res = CliRunner().invoke(main, grid("evaluate", feature_data, tmp_path / "out", "--executor", "processes:4096"))
    assert res.exit_code == 0, res.output
    assert (f"--executor processes:4096: 4096 workers for {usable_cores()} usable CPU cores; they share the cores and "
            "each takes its own memory (no more workers start than the grid has tasks)") in res.output



def test_the_process_pool_is_no_larger_than_the_tasks(monkeypatch):
    import backretrieval.analysis.executors.processes as executors

    sizes = []

    class Recording(executors.ProcessPoolExecutor):  # the real pool, its size noted
        def __init__(self, max_workers, *args, **kwargs):
            sizes.append(max_workers)
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(executors, "ProcessPoolExecutor", Recording)
    assert sorted(executors.ProcessExecutor(64).imap(abs, [-1, -2, 3])) == [1, 2, 3]
    assert sizes == [3]
    assert list(executors.ProcessExecutor(64).imap(abs, [])) == [] and sizes == [3]


def test_a_second_run_into_the_same_out_is_refused_while_the_first_writes(tmp_path, feature_data):
    """Two runs writing one --out at once would leave files of both: the second is refused."""
    from backretrieval.core.io import LOCK_FILE, folder_lock

    out = tmp_path / "out"
    code = ("import sys, time\nfrom backretrieval.core.io import folder_lock\n"
            f"with folder_lock({str(out)!r}):\n    print('holding', flush=True)\n    sys.stdin.read()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout.readline().strip() == b"holding"
        for cmd in ("evaluate", "compare", "meta"):
            extra = ("--models", "random,tfidf-char,random@noise=1") if cmd == "meta" else ()
            line = assert_refused(cli(grid(cmd, feature_data, out, "--k", "3", *extra)),
                                  f"--out {out} is being written by another run")
            assert line.endswith(": wait for it to finish or choose another folder"), line
            if Path("/proc/locks").exists():
                assert f"(process {holder.pid})" in line, line
        assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written beside it
    finally:
        holder.communicate(b"", timeout=60)
    # the folder is free again; a refused run into a new folder leaves nothing behind
    res = cli(grid("evaluate", feature_data, out, "--k", "3"))
    assert res.exit_code == 0, res.output
    with folder_lock(out):  # re-entrant in one process: run_grid() inside a command that holds the folder
        from backretrieval.analysis import EvalConfig, run_grid

        cfg = EvalConfig(dataset=str(feature_data), pairs=[("en", "xx")], models=["random"], image_model="precomputed",
                         n=5, k=1, dataset_options={"image_features": str(feature_data.parent / "feats.npy")})
        with pytest.raises(DataError):
            run_grid(cfg, tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()


def test_results_jsonl_is_strict_json_with_null_for_undefined_metrics(tmp_path):
    from backretrieval.analysis.evaluate.records import write_results

    def strict(line: str):
        return json.loads(line, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))

    records = [{"model": "a", "corr": float("nan"), "hubness_skew@10": np.float32("nan"), "bkr@10": 0.25},
               {"model": "b", "corr": float("inf"), "hubness_skew@10": 1.5, "bkr@10": np.float64(0.5)}]
    write_results(records, tmp_path, {"note": float("nan"), "n": np.int64(3)})
    rows = [strict(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert rows == [{"model": "a", "corr": None, "hubness_skew@10": None, "bkr@10": 0.25},
                    {"model": "b", "corr": None, "hubness_skew@10": 1.5, "bkr@10": 0.5}]
    assert strict((tmp_path / "run.json").read_text()) == {"note": None, "n": 3}
    assert (tmp_path / "results.csv").read_text().splitlines()[1] == "a,,,0.25"
    assert records[0]["corr"] != records[0]["corr"]  # the caller's records are left as they are


def test_access_log_redacts_tokens_in_odd_paths():
    import secrets

    from backretrieval.study.server import redact

    tok, other = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    lines = {
        f'"GET /r/{tok}/state HTTP/1.1" 200': '"GET /r/[rater1]/state HTTP/1.1" 200',
        f'"GET /r%2F{tok}/state HTTP/1.1" 404': '"GET /r%2F[rater1]/state HTTP/1.1" 404',
        f'"GET /r//{tok} HTTP/1.1" 404': '"GET /r//[rater1] HTTP/1.1" 404',
        f'"GET /R/{tok} HTTP/1.1" 404': '"GET /R/[rater1] HTTP/1.1" 404',
        f'"GET /x/{tok}/y HTTP/1.1" 404': '"GET /x/[rater1]/y HTTP/1.1" 404',
    }
    for line, want in lines.items():
        assert redact(line, (tok, "rater1")) == want
    # an unknown token: four characters, on any route and anywhere in the line
    for line in (f'"GET /r%2f{other}/state HTTP/1.1"', f'"GET /R//{other}"', f'"GET /static/{other}.js"',
                 f'"GET /%72/{other}"', f'"GET /{other[:25]}"'):
        got = redact(line)
        assert other[:5] not in got.replace(f"[{other[:4]}...]", ""), got
    assert redact('"GET /static/study.js HTTP/1.1" 200') == '"GET /static/study.js HTTP/1.1" 200'
    assert redact('"GET /r/abc/img/0123456789abcdef HTTP/1.1"') == '"GET /r/[abc...]/img/0123456789abcdef HTTP/1.1"'


def test_a_file_too_large_or_a_full_disk_names_the_file(tmp_path, feature_data, empty_cache):
    """ENOSPC / EFBIG raised by a write name no file; the error line names the file being
    written. Here the file-size limit (RLIMIT_FSIZE) makes every write above 1,000
    bytes fail as a full disk would."""
    assert cli(grid("evaluate", feature_data, tmp_path / "warm")).exit_code == 0  # the cache is filled
    out = tmp_path / "out"
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
            "from backretrieval.cli import main\nsys.argv = ['backretrieval', *sys.argv[1:]]\nmain()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code, *grid("evaluate", feature_data, out)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()  # the low-power note of this tiny grid may come first
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], lines
    assert errors[0].startswith(f"error: {out}{os.sep}") and errors[0].endswith(": File too large"), errors
    assert not [p for p in out.rglob("*") if p.is_file() and ".tmp-" in p.name]  # nothing half-written


def test_atomic_write_names_the_file_of_an_anonymous_os_error(tmp_path):
    import errno

    target = tmp_path / "r.txt"
    with pytest.raises(OSError) as e:
        with atomic_write(target, "w"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert e.value.filename == str(target) and e.value.errno == errno.ENOSPC and not target.exists()
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------- nesting, cycles
def test_deeply_nested_json_is_a_named_error_not_a_recursion_error(tmp_path):
    from backretrieval.core import EncoderError
    from backretrieval.encoders import get_text_encoder

    deep = "[" * 100_000 + "]" * 100_000
    jsonl = tmp_path / "deep.jsonl"
    jsonl.write_text('{"id": "a", "lang": "en", "text": "a cat"}\n' + deep + "\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        generic.load(jsonl)
    assert str(e.value) == f"{jsonl}: line 2: invalid JSON: nested too deeply (arrays or objects inside each other)"
    arr = tmp_path / "deep.json"
    arr.write_text("[" + deep + "]", encoding="utf-8")
    with pytest.raises(DataError, match=r"deep\.json: invalid JSON: nested too deeply"):
        generic.load(arr)
    res = cli(["evaluate", "--dataset", jsonl, "--pairs", "en-de", "--models", "random", "--n", "1", "--k", "1",
               "--seeds", "1", "--out", tmp_path / "out", "--quiet"])
    assert_refused(res, f"{jsonl}: line 2: invalid JSON: nested too deeply")
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.json").write_text('{"format": "backretrieval.model", "x": ' + deep + "}", encoding="utf-8")
    with pytest.raises(EncoderError) as e:
        get_text_encoder(f"cr5:{model}")
    assert f"cannot read {model / 'model.json'}: JSON nested too deeply (arrays or objects inside each other)" in str(e.value)


def test_a_triplet_model_whose_base_names_itself_is_refused(tmp_path):
    from backretrieval.core import EncoderError
    from backretrieval.encoders import get_text_encoder
    from backretrieval.encoders.trained.triplet import save_model

    params = [(np.eye(4, dtype=np.float32), np.zeros(4, np.float32))]
    a, b = tmp_path / "a", tmp_path / "b"
    save_model(a, params, hyper_parameters={"method": "triplet", "base": f"triplet:{a}"})
    with pytest.raises(EncoderError) as e:
        get_text_encoder(f"triplet:{a}")
    assert str(e.value) == (f"triplet:{a}: the model is its own base (triplet:{a} -> triplet:{a}); "
                            "its base must be another text model")
    save_model(a, params, hyper_parameters={"method": "triplet", "base": f"tripletxl:{b}"})  # a cycle of two
    save_model(b, params, hyper_parameters={"method": "tripletxl", "base": f"triplet:{a}"})
    with pytest.raises(EncoderError, match=rf"the model is its own base \(triplet:{a} -> tripletxl:{b} -> triplet:{a}\)"):
        get_text_encoder(f"triplet:{a}")
    save_model(a, params, hyper_parameters={"method": "triplet", "base": "random"})  # a base that is no model: fine
    assert get_text_encoder(f"triplet:{a}").base_spec == "random"


# --------------------------------------------------------------------------------- the cache
@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda k, v: (k.reshape(1, -1), v), "keys must be a 1-D array of strings, got <U32 of shape (1, 3)"),
        (lambda k, v: (np.arange(3), v), "keys must be a 1-D array of strings, got int64 of shape (3,)"),
        (lambda k, v: (k, v[:2]), "vecs must be a float matrix with one row per key (3), got float32 of shape (2,"),
        (lambda k, v: (k, np.full_like(v, np.nan)), "vecs hold NaN or inf"),
        (lambda k, v: (k, v[:, :3]), "vectors of width 3, the other shards' are"),
    ],
    ids=["keys-2d", "keys-int", "vecs-rows", "vecs-nan", "vecs-width"],
)
def test_a_damaged_cache_shard_is_ignored_by_file_and_re_encoded(tmp_path, damage, why):
    """A crafted or damaged shard (2-D keys, NaN vectors, ...) is the cache's fault, not the
    data's: it is ignored with a warning naming the file, and its items are encoded again."""
    from backretrieval.encoders import get_text_encoder
    from backretrieval.encoders.cache import CacheWarning, CachedTextEncoder
    from backretrieval.encoders.trained.cr5 import Cr5Model

    vocab = ["cat", "dog", "red", "tea", "green", "text", "more"]
    rng = np.random.default_rng(0)
    model = Cr5Model({"en": vocab}, {"en": np.ones(len(vocab))}, {"en": rng.standard_normal((6, len(vocab)))}).save(tmp_path / "cr5")
    spec = f"cr5:{model}"
    texts = ["a red cat", "a dog", "green tea"]
    enc = CachedTextEncoder(get_text_encoder(spec), root=tmp_path / "cache")
    want = enc.encode(texts, "en")
    enc.encode(["another text", "and one more"], "en")  # a second, healthy shard
    shards = sorted((tmp_path / "cache").rglob("shard-*.npz"))
    assert len(shards) == 2
    shard = next(p for p in shards if len(np.load(p)["keys"]) == 3)
    with np.load(shard) as z:
        keys, vecs = damage(z["keys"], z["vecs"])
    np.savez(shard, keys=keys, vecs=vecs)
    again = CachedTextEncoder(get_text_encoder(spec), root=tmp_path / "cache")
    with pytest.warns(CacheWarning) as w:
        got = again.encode(texts, "en")
    assert np.array_equal(got, want) and again.n_encoded == 3  # encoded again, same vectors
    msg = str(w[0].message)
    assert msg.startswith(f"cache shard {shard} ignored ({why}") and msg.endswith("; its items are encoded again"), msg


# --------------------------------------------------------------------------------- the emoji tarballs
@pytest.mark.parametrize("cut", [0.5, 0.0001], ids=["half", "header-only"])
def test_a_truncated_emoji_tarball_is_a_clear_error(tmp_path, shared_data, empty_cache, cut):
    """gzip's EOFError would reach click, which prints a bare `Aborted!`; the error names the tarball."""
    src = tmp_path / "npm"
    src.mkdir()
    for f in (shared_data / "npm").glob("*.tgz"):
        if f.name.startswith("emoji-datasource"):
            data = f.read_bytes()
            (src / f.name).write_bytes(data[: max(20, int(len(data) * cut))])
            bad = src / f.name
        else:
            (src / f.name).symlink_to(f)
    res = cli(["evaluate", "--dataset", "emoji-cldr", "--dataset-option", f"source_dir={src}", "--pairs", "en-de",
               "--models", "random", "--n", "10", "--k", "1", "--seeds", "1", "--out", tmp_path / "out", "--quiet"])
    line = assert_refused(res, f"error: emoji-cldr: {bad} is damaged or truncated (",
                          "): delete it and run again to fetch it anew")
    assert "Aborted" not in res.output, line
    assert not [p for p in (empty_cache / "emoji-cldr").iterdir()] if (empty_cache / "emoji-cldr").exists() else True


def test_newlines_in_paths_do_not_break_the_one_line_errors(tmp_path):
    folder = tmp_path / "two\nlines\tand\x1b[31mred"
    folder.mkdir()
    path = folder / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "lang": "en", "text": "caf\xe9"}\n')
    res = cli(["evaluate", "--dataset", path, "--pairs", "en-de", "--models", "random", "--n", "1", "--k", "1",
               "--seeds", "1", "--out", tmp_path / "out", "--quiet"])
    shown = str(path).replace("\n", "\\n").replace("\t", "\\t").replace("\x1b", "\\x1b")
    assert_refused(res, f"error: {shown}: line 1: not UTF-8 (byte 0xe9 at column 39)")
    blocker = tmp_path / "a\nfile"
    blocker.write_text("x")
    assert_refused(cli(grid("evaluate", path, blocker / "out")), "a\\nfile, which is a file, not a folder")


def test_study_serve_on_a_busy_port_is_our_own_one_line_error(tmp_path, shared_data):
    import socket

    db = tmp_path / "S.db"
    res = cli(["study", "create", "--dataset", "emoji-cldr", "--dataset-option", f"source_dir={shared_data / 'npm'}",
               "--src", "en", "--tgt", "de", "--models", "random,tfidf-char", "--queries", "2", "--per-model", "2",
               "--images", "none", "--out", db, "--quiet"])
    assert res.exit_code == 0, res.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res = cli(["study", "serve", db, "--port", port])
    assert_refused(res, f"error: cannot serve the study on 127.0.0.1:{port} (Address already in use): another program "
                        f"listens on port {port}; stop it or choose another --port (0 picks a free one)")
    assert "Either identify and stop that program" not in res.output  # Werkzeug's own text
