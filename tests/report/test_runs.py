"""One writer for every command: the folders written by ``evaluate``, ``compare``, ``meta``,
``case-study report`` and ``train cr5`` and by their run writers (``br.evaluate``, ``br.compare``,
``br.meta``, ``report.runs.case_study``, ``report.runs.train_cr5``) with the same inputs are equal
file by file (timings and the provenance line aside), and ``summary.md`` renders
``EvalResult.summary()``."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

import backretrieval as br
from backretrieval.cli import main
from backretrieval.report import runs
from backretrieval.report.runs.grid import summary_markdown

GRID = dict(dataset="emoji-cldr", pairs=[("en", "de"), ("de", "ja")], models=["tfidf-char", "random"],
            image_model="color-hist", n=60, seeds=[0, 1])
ARGS = ["--dataset", "emoji-cldr", "--pairs", "en-de,de-ja", "--models", "tfidf-char,random", "--image-model", "color-hist",
        "--n", "60", "--seeds", "0,1", "--quiet"]


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def _normal(path: Path, root: Path) -> bytes:
    """The file's bytes without what differs between two runs by design: timings (the records'
    ``*seconds`` fields, run.json's ``written``, the measured throughput and what shows it: the
    price book's record and its note, the price section of the report and its chart; the suite's
    workers share one price book, so another test may record a faster measurement between two runs) and the provenance line (the command typed)."""
    if path.stem.endswith("_cost"):  # the quality-versus-cost chart plots the measured throughput
        return b"T"
    data = path.read_bytes()
    if path.suffix == ".csv":  # the encode_seconds column
        df = pd.read_csv(path)
        return df.drop(columns=[c for c in df.columns if c.endswith("seconds")]).to_csv(index=False).encode()
    if path.suffix in (".json", ".jsonl", ".md", ".html"):
        text = data.decode("utf-8")
        text = re.sub(r'"(\w*seconds_?)": [0-9.e+-]+', r'"\1": T', text)
        text = re.sub(r'"written": "[^"]*"', '"written": T', text)
        text = re.sub(r'"(items_per_second|items_per_cpu_second|seconds_per_1m_items)": [0-9.e+-]+', r'"\1": T', text)
        text = re.sub(r'"speed": \{[^{}]*\}', '"speed": T', text)  # the price book's record, which any run may raise
        text = re.sub(r'"speed_note": "[^"]*"', '"speed_note": T', text)
        text = re.sub(r"<h2>The price of each answer</h2>.*?(?=<h2>)", "PRICE", text, flags=re.S)
        text = re.sub(r'"figures/compare_\w+_cost\.(png|svg)"', "F", text)
        text = re.sub(r'"command": "[^"]*"', '"command": C', text)
        text = re.sub(r"<p>Command:</p><pre>.*?</pre>", "<p>Command:</p><pre>C</pre>", text, flags=re.S)
        text = text.replace(str(root), "OUT")
        return text.encode()
    return data


def _same_folders(a: Path, b: Path) -> None:
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    differ = [name for name in fa if _normal(fa[name], a) != _normal(fb[name], b)]
    assert not differ, differ


def test_evaluate_writes_what_the_command_writes(tmp_path, shared_data):
    cli, py = tmp_path / "cli", tmp_path / "py"
    res = CliRunner().invoke(main, ["evaluate", *ARGS, "--save-queries", "--out", str(cli)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    result = br.evaluate(br.EvalConfig(**GRID), py, save_queries=True, progress=False)
    _same_folders(cli, py)
    assert (py / "summary.md").read_text(encoding="utf-8") == summary_markdown(result)
    assert summary_markdown(result).rstrip("\n") in res.output  # the command prints what it wrote
    summary = result.summary()
    assert set(summary["pair"]) == {"en->de", "de->ja"} and len(summary) == 4
    for _, row in summary.iterrows():  # each cell of summary.md is the table's mean ± sd
        assert f"| {row['model']} | {row['xlr@1']:.3f} ± {row['xlr@1_sd']:.3f} |" in (py / "summary.md").read_text()


def test_compare_writes_what_the_command_writes(tmp_path, shared_data):
    cli, py = tmp_path / "cli", tmp_path / "py"
    res = CliRunner().invoke(main, ["compare", *ARGS, "--n-boot", "100", "--report", "--save-queries", "--out", str(cli)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    c = br.compare(br.EvalConfig(**GRID), out_dir=py, report=True, save_queries=True, n_boot=100)
    _same_folders(cli, py)
    doc = json.loads((py / "compare.json").read_text())
    assert doc["verdict"]["text"] == c.verdict["text"] and doc["per_pair"] == json.loads(
        json.dumps(c.to_json()["per_pair"], default=float))
    assert {"compare.md", "compare.json", "report.html", "report.json", "queries.parquet", "results.jsonl"} <= {
        p.name for p in py.iterdir()}
    assert (cli / "compare.md").read_text(encoding="utf-8").rstrip("\n") in res.output


def test_earlier_optional_outputs_are_removed(tmp_path):
    from backretrieval.report.runs.grid import remove_earlier_outputs

    (tmp_path / "queries.parquet").write_bytes(b"old")
    (tmp_path / "report.html").write_text("old")
    (tmp_path / "image-models" / "g").mkdir(parents=True)
    (tmp_path / "image-models" / "g" / "queries.parquet").write_bytes(b"old")
    said = []
    remove_earlier_outputs(tmp_path, written=["report.html"], log=said.append)
    assert not (tmp_path / "queries.parquet").exists() and not (tmp_path / "image-models" / "g" / "queries.parquet").exists()
    assert (tmp_path / "report.html").exists()
    assert len(said) == 2 and all("--save-queries" in line for line in said)


def test_meta_writes_what_the_command_writes(tmp_path, shared_data):
    cli, py = tmp_path / "cli", tmp_path / "py"
    models = ["tfidf-char", "random", "tfidf-char@mix=0.5"]
    args = [a if a != "tfidf-char,random" else ",".join(models) for a in ARGS]
    res = CliRunner().invoke(main, ["meta", *args, "--k", "5", "--weak-image-models", "color-hist@noise=1",
                                    "--out", str(cli)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    m = br.meta(br.EvalConfig(**{**GRID, "models": models, "k": 5}), py, image_models=["color-hist@noise=1"], progress=False)
    _same_folders(cli, py)
    assert {"meta.json", "meta.md", "report.html", "results.jsonl"} <= {p.name for p in py.iterdir()}
    assert res.output.endswith((py / "meta.md").read_text(encoding="utf-8"))  # the command prints what it wrote
    assert list(m.candidates) == ["bkr@5", "corr"]


def test_the_case_study_writes_what_the_command_writes(tmp_path, shared_data):
    cli, py = tmp_path / "cli", tmp_path / "py"
    models = ["tfidf-char", "random", "random?seed=1"]
    res = CliRunner().invoke(main, [
        "case-study", "report", "--langs", "en,de,ja", "--models", ",".join(models), "--labels", "base,triplet,triplet",
        "--image-model", "color-hist", "--bkr-n", "40", "--seeds", "1", "--k", "5", "--n-boot", "50", "--out", str(cli),
        "--quiet"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    summary = runs.case_study(["en", "de", "ja"], models, py, labels=["base", "triplet", "triplet"], image_model="color-hist",
                              bkr_n=40, seeds=[0], k=5, n_boot=50, progress=False)
    _same_folders(cli, py)
    assert (py / "case_study.md").read_text(encoding="utf-8") in res.output
    assert {r["model"] for r in summary["metrics"]} == {"base", "triplet"}
    assert (py / "case_study.png").read_bytes()[:4] == b"\x89PNG"


def test_train_cr5_writes_what_the_command_writes(tmp_path):
    """A concept-aligned two-language file; the command and the writer write the same model
    directory (the command's defaults are the library's), and the run is an object (Cr5Run)."""
    data = tmp_path / "docs.jsonl"
    rows = [{"id": f"{lang}{i}", "lang": lang, "concept": f"c{i}",
             "text": " ".join(f"{w}{i % m}" for m in (23, 19, 17, 13, 11, 7)) + f" {w}x{i}"}
            for lang, w in (("en", "w"), ("de", "v")) for i in range(200)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cli, py = tmp_path / "cli", tmp_path / "py"
    res = CliRunner().invoke(main, ["train", "cr5", "--dataset", str(data), "--rank", "8", "--lam", "1,10", "--min-df", "1",
                                    "--test-size", "20", "--val-size", "10", "--out", str(cli), "--quiet"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    from backretrieval.data import load_dataset

    run = runs.train_cr5(load_dataset(str(data)), out_dir=py, meta={"dataset": str(data), "dataset_options": {}},
                         regime="joint", languages=["de", "en"], lams=[1.0, 10.0],
                         params=dict(rank=8, min_df=1), split_options=dict(test_size=20, val_size=10))
    _same_folders(cli, py)
    assert {"model.json", "eval.json", "eval.md", "split.json", "heldout.jsonl"} <= {p.name for p in py.iterdir()}
    assert [r["lam"] for r in run.lambda_table] == [1.0, 10.0] and run.lam in (1.0, 10.0) and len(run.test) == 4
    assert json.loads((py / "eval.json").read_text())["test"] == json.loads(json.dumps(run.test))
