"""``meta`` over pairs that live in separate files (en-de.jsonl, en-fr.jsonl)
in one run, with one merged Table 1 -- by repeating ``--dataset`` or with a list file."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.data import load_dataset

MODELS = "random,tfidf-char,tfidf-char@mix=0.5,tfidf-char@mix=0.9"


def cli(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory, shared_data) -> Path:
    """en-de.jsonl and en-fr.jsonl: 400 emoji each, their names and image files, concept = emoji."""
    d = tmp_path_factory.mktemp("pairs")
    ds = load_dataset("emoji-cldr", langs=["en", "de", "fr"])
    for other in ("de", "fr"):
        rows = []
        for lang in ("en", other):
            c = ds[lang]
            rows += [{"id": c.ids[i], "lang": lang, "text": c.texts[i], "concept": c.ids[i], "image": c.image_paths[i]}
                     for i in range(400)]
        (d / f"en-{other}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return d


def meta(out: Path, *datasets, pairs: str = "en-de,en-fr"):
    args = ["meta"]
    for ds in datasets:
        args += ["--dataset", ds]
    return cli([*args, "--pairs", pairs, "--models", MODELS, "--image-model", "color-hist", "--n", "100", "--k", "5",
                "--seeds", "2", "--out", out, "--quiet", "--no-report"])


def test_meta_merges_pairs_from_several_files(tmp_path, pair_files):
    out = tmp_path / "meta"
    res = meta(out, pair_files / "en-de.jsonl", pair_files / "en-fr.jsonl")
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "meta.json").read_text())
    assert set(doc["pairs"]) == {"en->de", "en->fr"}
    assert doc["dataset"] == [str(pair_files / "en-de.jsonl"), str(pair_files / "en-fr.jsonl")]
    for entry in doc["pairs"].values():
        assert entry["n_models"] == 4 and entry["seeds"] == 2
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["dataset"], r["pair"]) for r in records} == {("en-de", "en->de"), ("en-fr", "en->fr")}
    assert len(records) == 2 * 4 * 2
    for name in ("en-de.jsonl", "en-fr.jsonl"):  # each dataset's own grid, resumable on its own
        assert (out / "datasets" / name / "results.jsonl").is_file()
        assert list((out / "datasets" / name / ".partial").glob("*.json"))
    assert "| en->de |" in res.output and "| en->fr |" in res.output
    # the same with a list file (relative paths, a comment, options per line); a rerun resumes
    listing = pair_files / "datasets.txt"
    listing.write_text("# the two files\nen-de.jsonl\nen-fr.jsonl name=en-fr\n", encoding="utf-8")
    res2 = meta(out, f"@{listing}")
    assert res2.exit_code == 0, res2.output
    # en-de.jsonl resumes its 8 records; en-fr.jsonl has a loader option now, so its records are recomputed
    assert res2.output.count("resuming: 8 finished records") == 1, res2.output
    assert json.loads((out / "meta.json").read_text())["pairs"] == doc["pairs"]


def test_a_pair_in_two_files_is_kept_once_per_file(tmp_path, pair_files):
    copy = tmp_path / "en-de-shop2.jsonl"
    copy.write_text((pair_files / "en-de.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    out = tmp_path / "meta"
    res = meta(out, pair_files / "en-de.jsonl", copy, pair_files / "en-fr.jsonl")
    assert res.exit_code == 0, res.output
    pairs = json.loads((out / "meta.json").read_text())["pairs"]
    assert set(pairs) == {"en->de [en-de.jsonl]", "en->de [en-de-shop2.jsonl]", "en->fr"}
    # the same data, the same seeds: the same correlations
    assert pairs["en->de [en-de.jsonl]"]["pearson[bkr@5]"] == pairs["en->de [en-de-shop2.jsonl]"]["pearson[bkr@5]"]
    assert "calibration" in json.loads((out / "meta.json").read_text())  # 3 pairs: leave one out works


def test_bad_dataset_lists_are_refused(tmp_path, pair_files):
    res = meta(tmp_path / "m", pair_files / "en-de.jsonl", pair_files / "en-fr.jsonl", pairs="en-de,en-ja")
    assert res.exit_code == 2 and "error: pair en-ja is in none of the datasets" in res.output, res.output
    res = meta(tmp_path / "m", pair_files / "en-de.jsonl", pair_files / "en-fr.jsonl", pairs="en-de")
    assert res.exit_code == 2 and f"error: dataset {pair_files / 'en-fr.jsonl'} has none of the pairs en-de" in res.output
    res = meta(tmp_path / "m", pair_files / "en-de.jsonl", pair_files / "en-de.jsonl")
    assert res.exit_code == 2 and "is given twice" in res.output, res.output
    bad = tmp_path / "list.txt"
    bad.write_text("en-de.jsonl nonsense=1\n", encoding="utf-8")
    res = meta(tmp_path / "m", f"@{bad}")
    assert res.exit_code == 2 and "nonsense" in res.output and res.output.startswith("error: "), res.output
    res = meta(tmp_path / "m", f"@{tmp_path / 'missing.txt'}")
    assert res.exit_code == 2 and "cannot read the dataset list" in res.output, res.output
    assert not (tmp_path / "m" / "meta.json").exists()
