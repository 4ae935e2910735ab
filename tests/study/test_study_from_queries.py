"""``study create --from-queries OUT/queries.parquet --disagree A,B``: the study's queries are
exactly queries on which the two models retrieved different targets in the evaluation (checked
against a naive pass over the file); the selection rule on a hand-made table; clear errors."""
from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from click.testing import CliRunner

from backretrieval.cli import main
from backretrieval.core import BackretrievalError, DataError
from backretrieval.study import StudyConfig, create_study, disagreeing_queries

N = 40


def run(args):
    return CliRunner().invoke(main, args, catch_exceptions=False)


@pytest.fixture(scope="module")
def queries_file(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("ev")
    res = run(["evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models", "tfidf-char,random",
               "--image-model", "color-hist", "--n", str(N), "--seeds", "0,1", "--quiet", "--out", str(out), "--save-queries"])
    assert res.exit_code == 0, res.output
    return out / "queries.parquet"


def naive_disagreements(df, a, b):
    """Query ids of BkR's queries where models a and b retrieved different target sets in some seed."""
    rows = df[(df["sample_kind"] == "non-matching") & (df["src_lang"] == "en") & (df["tgt_lang"] == "de")]
    got = {}
    for _, r in rows.iterrows():
        got.setdefault((r["seed"], r["query_id"]), {})[r["model"]] = set(r["retrieved_ids"])
    return {q for (_, q), by in got.items() if by[a] != by[b]}


def study_items(path):
    con = sqlite3.connect(path)
    try:
        return [row[0] for row in con.execute("SELECT item_id FROM queries")]
    finally:
        con.close()


def test_cli_study_takes_the_disagreeing_queries(queries_file, tmp_path):
    expected = naive_disagreements(pd.read_parquet(queries_file), "tfidf-char", "random")
    assert len(expected) > 5
    out = tmp_path / "s.db"
    res = run(["study", "create", "--dataset", "emoji-cldr", "--src", "en", "--tgt", "de", "--models", "tfidf-char,random",
               "--from-queries", str(queries_file), "--disagree", "tfidf-char,random", "--queries", "5",
               "--pool-size", "300", "--images", "none", "--quiet", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{len(expected)} en queries on which tfidf-char, random disagree" in res.output
    items = study_items(out)
    assert len(items) == 5 and set(items) <= expected
    # all of them when there are fewer than --queries, in the file's order
    out2 = tmp_path / "all.db"
    res = run(["study", "create", "--dataset", "emoji-cldr", "--src", "en", "--tgt", "de", "--models", "tfidf-char,random",
               "--from-queries", str(queries_file), "--queries", "1000", "--pool-size", "300", "--images", "none",
               "--quiet", "--out", str(out2)])
    assert res.exit_code == 0, res.output
    assert set(study_items(out2)) == expected


def test_selection_rule_on_a_hand_made_table():
    def row(model, seed, q, ids, kind="non-matching", src="en"):
        return {"src_lang": src, "tgt_lang": "de", "model": model, "seed": seed, "query_id": q, "retrieved_ids": ids,
                "sample_kind": kind}

    table = pd.DataFrame([
        row("A", 0, "q1", ["t1"]), row("B", 0, "q1", ["t1"]),
        row("A", 0, "q2", ["t1", "t2"]), row("B", 0, "q2", ["t2", "t1"]),  # the same tied set, in another order
        row("A", 0, "q3", ["t1", "t2"]), row("B", 0, "q3", ["t2"]),  # a tie of A's that B does not share
        row("A", 1, "q1", ["t5"]), row("B", 1, "q1", ["t6"]),  # q1 disagrees in seed 1
        row("A", 0, "q4", ["t1"]), row("B", 0, "q4", ["t9"], kind="matching"),  # other samples do not count
        row("A", 0, "q4", ["t1"], kind="matching"), row("B", 0, "q4", ["t1"]),
        row("A", 0, "q5", ["t1"], src="fr"), row("B", 0, "q5", ["t2"], src="fr"),
    ])
    assert disagreeing_queries(table, "en", "de", ["A", "B"]) == ["q3", "q1"]
    with pytest.raises(BackretrievalError, match="model 'C' has no per-query results for en-de; they hold A, B"):
        disagreeing_queries(table, "en", "de", ["A", "C"])
    with pytest.raises(BackretrievalError, match="no pair ja-de; they hold en-de, fr-de"):
        disagreeing_queries(table, "ja", "de", ["A", "B"])
    with pytest.raises(BackretrievalError, match="two or more models"):
        disagreeing_queries(table, "en", "de", ["A", "A "])


def test_bad_input(queries_file, tmp_path, shared_data):
    base = ["study", "create", "--dataset", "emoji-cldr", "--src", "en", "--tgt", "de", "--models", "tfidf-char,random",
            "--quiet", "--out", str(tmp_path / "x.db")]
    res = CliRunner().invoke(main, [*base, "--disagree", "tfidf-char,random"])
    assert res.exit_code != 0 and "--disagree" in res.output and "needs --from-queries" in res.output
    res = CliRunner().invoke(main, [*base, "--from-queries", str(queries_file), "--disagree", "tfidf-char,use-m"])
    assert res.exit_code != 0 and "model 'use-m' has no per-query results for en-de" in res.output
    res = CliRunner().invoke(main, [*base, "--from-queries", str(queries_file), "--disagree", "random,random"])
    assert res.exit_code != 0 and "two or more models" in res.output
    not_parquet = tmp_path / "q.parquet"
    not_parquet.write_text("query_id\nq1\n")
    with pytest.raises(DataError, match="cannot read per-query results"):
        from backretrieval.study import read_query_table

        read_query_table(not_parquet)
    # ids of another dataset are named
    cfg = StudyConfig("emoji-cldr", "en", "de", ["tfidf-char", "random"], query_ids=["1f600", "no-such-emoji"])
    with pytest.raises(DataError, match="query id 'no-such-emoji' is not in the corpus"):
        create_study(cfg, tmp_path / "y.db", progress=False)
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "y.db").exists()
