"""One writer for every output: the folders written by the commands and by ``br.evaluate`` /
``br.compare`` with the same inputs are equal file by file (timings and the provenance line aside),
and ``summary.md`` renders ``EvalResult.summary()``."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

import backretrieval as br
from backretrieval.cli import main
from backretrieval.report.outputs import summary_markdown

GRID = dict(dataset="emoji-cldr", pairs=[("en", "de"), ("de", "ja")], models=["tfidf-char", "random"],
            image_model="color-hist", n=60, seeds=[0, 1])
ARGS = ["--dataset", "emoji-cldr", "--pairs", "en-de,de-ja", "--models", "tfidf-char,random", "--image-model", "color-hist",
        "--n", "60", "--seeds", "0,1", "--quiet"]


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def _normal(path: Path, root: Path) -> bytes:
    """The file's bytes without what differs between two runs by design: timings (the records'
    ``*seconds`` fields, run.json's ``written``, the measured throughput and what shows it: the
    price section of the report and its chart) and the provenance line (the command typed)."""
    if path.stem.endswith("_cost"):  # the quality-versus-cost chart plots the measured throughput
        return b"T"
    data = path.read_bytes()
    if path.suffix == ".csv":  # the encode_seconds column
        df = pd.read_csv(path)
        return df.drop(columns=[c for c in df.columns if c.endswith("seconds")]).to_csv(index=False).encode()
    if path.suffix in (".json", ".jsonl", ".md", ".html"):
        text = data.decode("utf-8")
        text = re.sub(r'"(\w*seconds)": [0-9.e+-]+', r'"\1": T', text)
        text = re.sub(r'"written": "[^"]*"', '"written": T', text)
        text = re.sub(r'"(items_per_second|seconds_per_1m_items)": [0-9.e+-]+', r'"\1": T', text)
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
    from backretrieval.report.outputs import remove_earlier_outputs

    (tmp_path / "queries.parquet").write_bytes(b"old")
    (tmp_path / "report.html").write_text("old")
    (tmp_path / "image-models" / "g").mkdir(parents=True)
    (tmp_path / "image-models" / "g" / "queries.parquet").write_bytes(b"old")
    said = []
    remove_earlier_outputs(tmp_path, written=["report.html"], log=said.append)
    assert not (tmp_path / "queries.parquet").exists() and not (tmp_path / "image-models" / "g" / "queries.parquet").exists()
    assert (tmp_path / "report.html").exists()
    assert len(said) == 2 and all("--save-queries" in line for line in said)
