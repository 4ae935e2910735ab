"""``--approx hnsw|ivf`` on a small real grid: XLR@K and BkR@K from
self-calibrating FAISS top-K lists, records that say so and carry the calibration, summaries
that say what was not computed, and options that are refused up front."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from backretrieval.analysis import EvalConfig, run_grid
from backretrieval.cli import main

GRID = ["--dataset", "emoji-cldr", "--pairs", "en-de", "--models", "use-m,random", "--n", "200", "--k", "10",
        "--seeds", "2"]
SEARCHES = ("approx_xlr_", "approx_xlr_t2s_", "approx_bkr_text_", "approx_bkr_image_")


def cli(args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def approx_run(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("approx")
    res = cli(["evaluate", *GRID, "--approx", "hnsw", "--approx-always", "--out", out, "--quiet"])
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    exact = run_grid(EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["use-m", "random"], n=200, k=10,
                                seeds=[0, 1]), None, progress=False)
    return out, res.output, records, exact.records


def _perfect(r: dict, prefix: str) -> bool:
    """At N=200 the tuning and held-out samples (100 each) are all the queries: perfect on both,
    the approximate lists are the exact ones."""
    k = "1" if prefix == "approx_bkr_text_" else "10"
    return all(r[f"{prefix}{p}agreement"] == 1.0 and r[f"{prefix}{p}recall@{k}"] == 1.0 for p in ("", "tuning_"))


def test_records_say_approximate_and_carry_the_calibration(approx_run):
    _, _, records, _ = approx_run
    assert len(records) == 4
    for r in records:
        assert r["approximate"] is True and r["approx"] == "hnsw" and r["approx_target"] == 0.99
        assert r["approx_cost_check"] is False
        for p in SEARCHES:
            # N=200: tuning and held-out samples of 100 each (half of the queries each)
            assert r[f"{p}tuning_sample"] == r[f"{p}heldout_sample"] == 100
            assert r[f"{p}tuning_agreement"] >= 0.99
            assert 0 < r[f"{p}agreement_low95"] <= r[f"{p}agreement"] <= 1
            assert r[f"{p}ef_search"] >= 1 and r[f"{p}exact_fallback"] is False and r[f"{p}route"] == "approximate"
            assert r[f"{p}cost"] > r[f"{p}cost_exact"]  # at N=200 it costs more than exact: why --approx-always
            assert r[f"{p}calibration_seconds"] >= 0 and r[f"{p}calibration_tried"]
        assert {"xlr@1", "xlr@5", "xlr@10", "xlr_mrr@10", "xlr_t2s@10", "bkr@10", "bkr_mrr@10", "corr"} <= set(r)
        # exact-only quantities are absent, not made up
        assert not {"hubness_skew@10", "bkr_median_rank", "xlr_median_rank", "xlr_mrr", "bkr_mrr"} & set(r)


def test_recall_at_k_equals_exact_search_where_agreement_is_1(approx_run):
    _, _, records, exact = approx_run
    exact = {(r["model"], r["seed"]): r for r in exact}
    checked = 0
    for r in records:
        e = exact[(r["model"], r["seed"])]
        if _perfect(r, "approx_xlr_"):
            assert [r[f"xlr@{k}"] for k in (1, 5, 10)] == [e[f"xlr@{k}"] for k in (1, 5, 10)]
            checked += 1
        if _perfect(r, "approx_xlr_t2s_"):
            assert [r[f"xlr_t2s@{k}"] for k in (1, 5, 10)] == [e[f"xlr_t2s@{k}"] for k in (1, 5, 10)]
            checked += 1
        if _perfect(r, "approx_bkr_text_") and _perfect(r, "approx_bkr_image_"):
            assert [r[f"bkr@{k}"] for k in (1, 5, 10)] == [e[f"bkr@{k}"] for k in (1, 5, 10)]
            checked += 1
        assert r["corr"] == e["corr"]  # CORR is exact either way
    assert checked >= 6, checked  # at N=200 HNSW finds the exact lists for (nearly) every search


def test_summary_says_what_was_and_was_not_computed(approx_run):
    out, output, _, _ = approx_run
    summary = (out / "summary.md").read_text()
    for text in ("Approximate search (hnsw", "MRR truncated at K", "Not computed (exact search only): hubness",
                 "0 of 16 searches ran as exact search (0 because it was cheaper)", "held-out", "bkr_mrr@10"):
        assert text in summary, text
    assert "| bkr_mrr |" not in summary
    assert summary in output + "\n"
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["approx"] == "hnsw" and run["config"]["approx_target"] == 0.99


def test_small_n_searches_exactly_where_the_cost_model_says_so(tmp_path, shared_data):
    """Without --approx-always, N=200 is searched exactly: the samples' exact search alone costs
    more than exact search of all queries. The records say which route ran and why."""
    res = cli(["evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de", "--models", "random", "--n", "200",
               "--k", "10", "--seeds", "1", "--approx", "hnsw", "--out", tmp_path, "--quiet"])
    assert res.exit_code == 0, res.output
    (r,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert r["approximate"] is False and r["approx_cost_check"] is True
    for p in SEARCHES:
        assert r[f"{p}route"] == "exact" and r[f"{p}exact_fallback"] is True
        assert r[f"{p}route_reason"].startswith(
            "cost: the exact search of source -> target ranks target -> source in the same pass" if p == "approx_xlr_t2s_"
            else "cost: checked hnsw search takes at least")
        assert r[f"{p}cost_exact"] == 200 * 200 or p == "approx_bkr_image_"  # the image search: distinct queries only
    assert "4 of 4 searches ran as exact search (4 because it was cheaper)" in (tmp_path / "summary.md").read_text()
    exact = run_grid(EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["random"], n=200, k=10, seeds=[0]),
                     None, progress=False).records[0]
    assert [r[f"xlr@{k}"] for k in (1, 5, 10)] == [exact[f"xlr@{k}"] for k in (1, 5, 10)]
    assert [r[f"bkr@{k}"] for k in (1, 5, 10)] == [exact[f"bkr@{k}"] for k in (1, 5, 10)]


def test_compare_ranks_by_approximate_recall(tmp_path, approx_run):
    res = cli(["compare", *GRID, "--approx", "hnsw", "--approx-always", "--metric", "xlr@5", "--n-boot", "100", "--out", tmp_path, "--quiet"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["per_pair"][0]["model"] == "use-m"
    records = {(r["model"], r["seed"]): r for r in approx_run[2]}
    est = (records[("use-m", 0)]["xlr@5"] + records[("use-m", 1)]["xlr@5"]) / 2
    assert doc["per_pair"][0]["estimate"] == pytest.approx(est)
    assert (tmp_path / "compare.md").read_text().startswith("Approximate search (hnsw")


@pytest.mark.parametrize("extra, message", [
    (["--approx", "hnsw", "--metric", "bkr_mrr"], "with --approx compare ranks by xlr@K, xlr_t2s@K or bkr@K"),
    (["--approx", "hnsw", "--metric", "corr"], "xlr_mrr, xlr_t2s_mrr, bkr_mrr and corr need exact search"),
    (["--approx", "hnsw", "--metric", "bkr@20", "--k", "10"], "--approx searches the top 10 only"),
    (["--approx", "hnsw", "--sim", "csls"], "approximate search ranks by cosine only"),
    (["--approx", "annoy"], "'annoy' is not one of 'hnsw', 'ivf'"),
    (["--approx", "ivf", "--approx-target", "0"], "--approx-target"),
    (["--approx-always"], "needs --approx"),
])
def test_bad_approx_options_are_refused_up_front(tmp_path, extra, message):
    res = cli(["compare", *GRID, *extra, "--out", tmp_path / "out", "--quiet"])
    assert res.exit_code == 2, res.output
    assert message in res.output and res.output.startswith("error: "), res.output
    assert not (tmp_path / "out").exists()


def test_exact_runs_keep_their_resume_keys():
    """An exact configuration's key leaves ``approx`` out, so stored records in OUT/.partial of
    exact runs keep their keys."""
    cfg = EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=["use-m"], n=200, seeds=[0])
    assert cfg.key() == "d09c05e88488f28e"  # pinned: the key stored records of this configuration carry
    assert EvalConfig(**{**cfg.__dict__, "approx": "hnsw"}).key() != cfg.key()


def test_approximate_and_exact_records_are_identical_on_data_with_ties(shared_data):
    """emoji-cldr en->ja under tfidf-char has exact ties (names that share their character n-grams,
    skin-tone siblings): --approx gives the exact records' numbers, on the exact route the cost
    model takes at N = 1,500 and on the approximate route forced (--approx-always), where HNSW
    finds the exact lists at this size; the tie rule is the exact metrics' on both."""
    kw = dict(dataset="emoji-cldr", pairs=[("en", "ja")], models=["tfidf-char"], n=1500, k=10, seeds=[0])
    exact = run_grid(EvalConfig(**kw), None, progress=False).records[0]
    for cost_check in (True, False):
        r = run_grid(EvalConfig(**kw, approx="hnsw", approx_cost_check=cost_check), None, progress=False).records[0]
        assert r["approximate"] is (not cost_check)
        keys = [key for key in r if key.split("@")[0] in ("xlr", "xlr_t2s", "bkr")]
        assert len(keys) == 9
        assert {key: r[key] for key in keys} == {key: exact[key] for key in keys}, cost_check
