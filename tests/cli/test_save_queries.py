"""``evaluate --save-queries`` / ``compare --save-queries`` on a small emoji sample: OUT/queries.parquet
holds every record's queries with the columns of ``EvalResult.queries``; a rerun with the option
after a run without it resumes every record (nothing recomputed) and writes the file; approximate
search is refused with the option."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from backretrieval.analysis.evaluate.queries import QUERY_COLUMNS
from backretrieval.cli import main

N = 40
GRID = ["--dataset", "emoji-cldr", "--pairs", "en-de,de-en", "--models", "tfidf-char,random", "--image-model", "color-hist",
        "--n", str(N), "--seeds", "0,", "--quiet"]


def run(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=False)


def stored(out: Path) -> dict[str, int]:
    """The stored record files and their modification times (ns)."""
    return {p.name: p.stat().st_mtime_ns for p in (out / ".partial").glob("*.*")}


def test_rerun_with_save_queries_resumes_and_writes_the_table(tmp_path, shared_data):
    out = tmp_path / "ev"
    res = run(["evaluate", *GRID, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert not (out / "queries.parquet").exists()
    before = stored(out)
    res = run(["evaluate", *GRID, "--out", str(out), "--save-queries"])
    assert res.exit_code == 0, res.output
    assert "resuming: 4 finished records" in res.output and "recomputing" not in res.output
    assert stored(out) == before  # nothing recomputed, nothing rewritten
    assert f"wrote {out / 'queries.parquet'}" in res.output
    df = pd.read_parquet(out / "queries.parquet")
    assert list(df.columns) == list(QUERY_COLUMNS)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(df) == len(records) * 2 * N  # every record: its non-matching and its matching queries
    for r in records:
        rows = df[(df["model"] == r["model"]) & (df["src_lang"] == r["src_lang"]) & (df["tgt_lang"] == r["tgt_lang"])]
        nm = rows[rows["sample_kind"] == "non-matching"]
        # the stored ranks behind the record: its BkR@10 and XLR@1 from the table's ranks
        assert (nm["bkr_rank"] <= 10).mean() == r["bkr@10"]
        assert (rows.loc[rows["sample_kind"] == "matching", "xlr_rank"] == 1).mean() == r["xlr@1"]
        assert all(rid in ids for rid, ids in zip(nm["retrieved_id"], nm["retrieved_ids"]))
    assert str(df["bkr_rank"].dtype) == "Int64" and str(df["is_translation"].dtype) == "boolean"
    assert all(Path(p).is_file() for p in df["query_image"].unique())


def test_compare_save_queries(tmp_path, shared_data):
    out = tmp_path / "cmp"
    res = run(["compare", *GRID, "--n-boot", "50", "--out", str(out), "--save-queries"])
    assert res.exit_code == 0, res.output
    df = pd.read_parquet(out / "queries.parquet")
    assert set(df["model"]) == {"tfidf-char", "random"} and set(df["pair"]) == {"en->de", "de->en"}
    assert len(df) == 4 * 2 * N


def test_save_queries_refuses_approximate_search(tmp_path):
    res = CliRunner().invoke(main, ["evaluate", *GRID, "--out", str(tmp_path / "a"), "--approx", "hnsw", "--save-queries"])
    assert res.exit_code != 0
    assert "--save-queries" in res.output and "approximate search keeps no per-query results" in res.output
