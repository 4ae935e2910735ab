"""The metric table (backretrieval.metrics.table): every entry is consistent with the function
that reports it, with both evaluation routes, with the summary, and with what compare and meta
accept; and the one parser of metric names says what is wrong with a bad name."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import backretrieval.metrics as M
from backretrieval.analysis import EvalConfig, summarize
from backretrieval.analysis.compare import check_metric, compare_models, counterpart, outcome_fn
from backretrieval.analysis.evaluate import EvalResult
from backretrieval.analysis.evaluate.features import NEEDS
from backretrieval.analysis.evaluate.tasks import SampleTask, run_sample_task
from backretrieval.analysis.meta import calibrate_leave_one_pair_out, per_seed_correlations
from backretrieval.cli import main
from backretrieval.core import BackretrievalError
from backretrieval.metrics.table import (
    BY_NAME, METRICS, RANK_SOURCES, approx_ks, chance_level, known_metrics, metric_name, parse_metric, shown_columns,
    summary_columns,
)
from backretrieval.metrics.values import rank_values

N, K = 40, 7
SPECS = {s.name: s for s in METRICS}
RANKABLE = [s.name for s in METRICS if s.rankable]
CANDIDATES = [s.name for s in METRICS if s.candidate]


def _rows(rng, n, d=16):
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.fixture(scope="module")
def sample():
    """A sample with some structure: targets are noisy copies of the sources, images noisy copies too."""
    rng = np.random.default_rng(3)
    src = _rows(rng, N)
    tgt = src + 0.8 * _rows(rng, N)
    st, tt = _rows(rng, N), None
    tt = st[rng.permutation(N)] + 0.5 * _rows(rng, N)
    si = st[:, :8] + 0.3 * _rows(rng, N, 8)
    ti = tt[:, :8] + 0.3 * _rows(rng, N, 8)
    return src, tgt, st, tt, si, ti


def _task(sample, approx=None):
    src, tgt, st, tt, si, ti = sample
    return SampleTask("en", "de", 0, N, K, "cosine", 10, ["m"], {"m": (src, tgt)}, {"m": (st, tt)}, {"g": (si, ti)},
                      approx=approx)


@pytest.fixture(scope="module")
def exact_run(sample):
    (_, runs) = run_sample_task(_task(sample))
    return runs[0]


@pytest.fixture(scope="module")
def approx_run(sample):
    (_, runs) = run_sample_task(_task(sample, "hnsw"))
    return runs[0]


def _metric_keys(values):
    """The record keys that name a metric of the table."""
    out = []
    for key in values:
        try:
            parse_metric(key)
        except BackretrievalError:
            continue
        out.append(key)
    return out


# ----------------------------------------------------------------------------- the entries themselves
@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_entry_is_well_formed(spec):
    assert spec.name == spec.stem + ("@K" if spec.at_k else "") and spec.description
    assert spec.source in (*RANK_SOURCES, "text", "corr")
    assert spec.exact or spec.approx
    assert spec.needs_truth != spec.needs_images  # one sample or the other
    assert ("xlr" if spec.needs_truth else "bkr") in NEEDS
    assert bool(spec.ks) == spec.at_k
    assert all(isinstance(k, int) and k >= 1 or k in ("k", "depth") for k in spec.ks)
    assert (spec.outcome is not None) == (spec.source in RANK_SOURCES)
    for field in ("summary", "shown"):
        sel = getattr(spec, field)
        assert sel is False or isinstance(sel, tuple if spec.at_k else bool), field
    if spec.shown:
        assert spec.summary  # shown by default implies summarised
    if spec.rankable:  # compare sorts best first by the estimate; the reports draw chance levels
        assert spec.higher_is_better and spec.chance is not None
    if spec.counterpart is not None:
        other = SPECS[spec.counterpart]
        assert other.counterpart == spec.name and other.at_k == spec.at_k and other.rankable and spec.rankable


@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_name_round_trips(spec):
    for k in ((1, 10, 123) if spec.at_k else (None,)):
        name = spec.key(k)
        assert parse_metric(name) == (spec, k)
        assert metric_name(spec.name, k) == name
    assert BY_NAME[spec.name] is spec


@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_function_exists_and_reports_the_metric(spec, sample):
    fn = spec.resolve()
    assert callable(fn)
    if "." not in spec.function:  # a public name of backretrieval.metrics
        assert spec.function in M.__all__ and getattr(M, spec.function) is fn
    src, tgt, st, tt, si, ti = sample
    ks = (1, 5, K) if spec.at_k else (1,)
    if spec.function in ("xlr", "approx.xlr_approx"):
        out = fn(src, tgt, ks, **({"method": "flat"} if "approx" in spec.function else {}))
    elif spec.function in ("bkr", "approx.bkr_approx"):
        out = fn(st, tt, si, ti, ks, **({"method": "flat"} if "approx" in spec.function else {}))
    elif spec.source == "text":
        out = fn(st, tt, K)
    else:
        out = fn(st, tt, si, ti)
    if "depth" in spec.ks or spec.source == "text":  # at the depth searched; at the K given
        wanted = [spec.key(max(ks))]
    else:
        wanted = [spec.key(k) for k in (ks if spec.at_k else (None,))]
    assert set(wanted) <= set(out), (wanted, sorted(out))


@pytest.mark.parametrize("source", RANK_SOURCES)
def test_rank_metrics_equal_the_public_functions(sample, source):
    src, tgt, st, tt, si, ti = sample
    if source == "bkr":
        ranks, _ = M.bkr_ranks(st, tt, si, ti)
        reported = M.bkr(st, tt, si, ti, (1, 5, K))
    else:
        fwd, bwd = M.xlr_ranks(src, tgt)
        ranks = fwd if source == "xlr" else bwd
        reported = M.xlr(src, tgt, (1, 5, 10))
    values = rank_values(source, ranks, N, K)
    assert values and all(reported[key] == v for key, v in values.items())


@pytest.mark.parametrize("source", RANK_SOURCES)
def test_approximate_rank_metrics_equal_the_approximate_functions(sample, source):
    from backretrieval.metrics.approx import bkr_approx, xlr_approx

    src, tgt, st, tt, si, ti = sample
    ks = approx_ks(N, K)
    if source == "bkr":
        out = bkr_approx(st, tt, si, ti, ks, method="hnsw", seed=0, found_at=True)
        pos = out["found_at"]
    else:
        out = xlr_approx(src, tgt, ks, method="hnsw", seed=0, found_at=True)
        pos = out["found_at" if source == "xlr" else "t2s_found_at"]
    ranks = np.where(pos > 0, pos, np.inf).astype(np.float64)
    values = rank_values(source, ranks, N, K, depth=max(ks))
    assert set(values) == {f"{source}@{k}" for k in ks} | {f"{source}_mrr@{max(ks)}"}
    assert all(out[key] == v for key, v in values.items())


def test_approx_ks_are_every_k_of_the_exact_route():
    assert approx_ks(300, 10) == (1, 5, 10) and approx_ks(300, 20) == (1, 5, 10, 20) and approx_ks(7, 3) == (1, 3, 5)


# ----------------------------------------------------------------------------- the routes compute the table
def test_exact_route_computes_exactly_the_exact_metrics(exact_run):
    _, _, values, ranks = exact_run
    expected = [s.key(k) for s in METRICS if s.exact for k in s.record_ks(N, K)]
    assert sorted(_metric_keys(values)) == sorted(expected)
    assert values["bkr_chance"] == BY_NAME["bkr@K"].chance(K, N) == K / N
    for source in RANK_SOURCES:  # the stored ranks give the record's values
        assert all(values[key] == v for key, v in rank_values(source, ranks[source], N, K).items())


def test_approximate_route_computes_exactly_the_approximate_metrics(approx_run):
    _, _, values, _ = approx_run
    depth = max(approx_ks(N, K))
    expected = [s.key(k) for s in METRICS if s.approx for k in s.record_ks(N, K, depth)]
    assert sorted(_metric_keys(values)) == sorted(expected)
    assert not any(key.startswith(("hubness", "hub_")) or key.endswith("median_rank") for key in values)


def test_every_summary_column_is_in_the_summary(exact_run, approx_run):
    for run, depth in ((exact_run, None), (approx_run, max(approx_ks(N, K)))):
        model, g, values, _ = run
        record = {"model": model, "src_lang": "en", "tgt_lang": "de", "seed": 0, **values}
        columns = summary_columns(K, depth)
        summary = summarize([record, {**record, "seed": 1}], columns)
        assert set(columns) <= set(summary.columns) and all(f"{c}_sd" in summary.columns for c in columns)
        assert set(shown_columns(K, depth)) <= set(columns)
    assert summary_columns() == ("xlr@1", "xlr@10", "xlr_t2s@10", "bkr@10", "bkr_mrr", "corr", "hubness_skew@10")
    assert shown_columns(5, 20) == ("xlr@1", "xlr@10", "bkr@5", "bkr_mrr@20", "corr")


# ----------------------------------------------------------------------------- who accepts which metric
def _result(exact_run):
    model, g, values, ranks = exact_run
    records, all_ranks = [], {}
    for i, name in enumerate(["a", "b", "c"]):
        for seed in (0, 1):
            records.append({"model": name, "src_lang": "en", "tgt_lang": "de", "seed": seed, "image_model": "g",
                            **{k: (v + i if isinstance(v, float) else v) for k, v in values.items()}})
            all_ranks[(name, "en", "de", seed)] = {**ranks, "corr_boot": np.linspace(0, 1, 20) + i}
    cfg = EvalConfig("synthetic", [("en", "de")], ["a", "b", "c"], n=N, seeds=[0, 1], k=K)
    return EvalResult(cfg, records, all_ranks)


@pytest.mark.parametrize("spec", METRICS, ids=lambda s: s.name)
def test_compare_accepts_exactly_the_rankable_metrics_and_meta_the_candidates(spec, exact_run):
    name = spec.key(5)
    result = _result(exact_run)
    if spec.rankable:
        assert check_metric(name) == (spec, 5 if spec.at_k else None)
        if spec.exact:
            assert compare_models(result, name, n_boot=20, n_perm=20).metric == name
        if spec.outcome is not None:
            assert outcome_fn(name)[0] == spec.source
    else:
        for call in (lambda: check_metric(name), lambda: compare_models(result, name)):
            with pytest.raises(BackretrievalError, match=f"metric '{name}' cannot rank models: use " + ", ".join(RANKABLE)):
                call()
    assert not (spec.candidate and spec.needs_truth)  # a proxy of the truth cannot need it
    if spec.candidate:
        per_seed = per_seed_correlations(result.records, candidates=[name]) if spec.exact else None
        assert per_seed is None or f"pearson[{name}]" in per_seed
    else:
        why = "it needs the ground truth it would stand in for" if spec.needs_truth else "the metric table does not mark it one"
        for call in (lambda: per_seed_correlations(result.records, candidates=[name]),
                     lambda: calibrate_leave_one_pair_out(result.records, x=name)):
            with pytest.raises(BackretrievalError, match=rf"^metric '{name}' is no candidate proxy \({why}\): use "
                                                          + ", ".join(CANDIDATES) + "$"):
                call()


def _listed(names: list[str], last: str) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


def test_approximate_records_rank_by_their_rank_metrics_only():
    approx = [s.name for s in METRICS if s.rankable and s.approx and s.source in RANK_SOURCES]
    exact_only = [name for name in RANKABLE if name not in approx]
    assert known_metrics(rankable=True, approx=True, ranks=True) == tuple(approx)
    assert "bkr@K" in approx and "xlr@K" in approx and "corr" in exact_only  # the papers' metrics, both routes
    assert check_metric("bkr@5", approx_depth=10)[1] == 5
    message = (f"bkr_mrr: with --approx compare ranks by {_listed(approx, 'or')} (K <= 10); "
               f"{_listed(exact_only, 'and')} need exact search")
    with pytest.raises(BackretrievalError, match=re.escape(message)):
        check_metric("bkr_mrr", approx_depth=10)
    with pytest.raises(BackretrievalError, match="--approx searches the top 10 only"):
        check_metric("xlr@20", approx_depth=10)


def test_chance_levels_and_counterparts():
    assert chance_level("bkr@10", 200) == 0.05 and chance_level("xlr@500", 200) == 1.0
    assert chance_level("xlr_t2s_mrr", 3) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert chance_level("bkr_mrr@2", 4) == pytest.approx((1 + 1 / 2) / 4)
    assert chance_level("corr", 10) == 0.0 and chance_level("hubness_skew@10", 10) is None
    assert chance_level("nonsense", 10) is None
    assert counterpart("bkr@5") == "xlr@5" and counterpart("xlr_mrr") == "bkr_mrr"
    assert counterpart("xlr_t2s@10") is None and counterpart("corr") is None and counterpart("nonsense") is None


# ----------------------------------------------------------------------------- the parser's errors
ALL = ", ".join(s.name for s in METRICS)


@pytest.mark.parametrize("name, message", [
    ("foo@3", f"unknown metric 'foo@3': use {ALL}"),
    ("bkr@ten", f"unknown metric 'bkr@ten': use {ALL}"),
    ("xlr@K", f"unknown metric 'xlr@K': use {ALL}"),
    ("", f"unknown metric '': use {ALL}"),
    (None, f"unknown metric None: use {ALL}"),
    ("bkr", "metric 'bkr' needs a cut-off: bkr@K, e.g. bkr@10"),
    ("hubness_skew", "metric 'hubness_skew' needs a cut-off: hubness_skew@K, e.g. hubness_skew@10"),
    ("corr@3", "metric 'corr@3' takes no cut-off: use corr"),
    ("xlr_median_rank@5", "metric 'xlr_median_rank@5' takes no cut-off: use xlr_median_rank"),
    ("bkr@0", "bkr@0: K must be at least 1"),
])
def test_parser_names_the_bad_name(name, message):
    with pytest.raises(BackretrievalError) as e:
        parse_metric(name)
    assert str(e.value) == message


def test_parser_for_ranking_lists_the_rankable_metrics():
    rankable = ", ".join(RANKABLE)
    assert {"xlr@K", "bkr@K", "corr"} <= set(RANKABLE)  # the papers' metrics rank models
    with pytest.raises(BackretrievalError, match=f"^unknown metric 'foo@3': use {rankable}$"):
        parse_metric("foo@3", rankable=True)
    with pytest.raises(BackretrievalError, match=f"^metric 'hub_max@10' cannot rank models: use {rankable}$"):
        parse_metric("hub_max@10", rankable=True)
    with pytest.raises(BackretrievalError, match="unknown metric 'xlr@K ': use xlr@K, xlr_mrr, xlr_mrr@K, "):
        metric_name("xlr@K ")


def test_metrics_command_lists_the_table():
    res = CliRunner().invoke(main, ["metrics"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert [line.split()[0] for line in lines] == [s.name for s in METRICS]
    assert all(("rankable" in line) == s.rankable for line, s in zip(lines, METRICS))
    assert all(("candidate proxy" in line) == s.candidate for line, s in zip(lines, METRICS))
    assert {"bkr@K", "corr"} <= set(CANDIDATES)  # the paper's candidate proxies
    assert "--metric" in CliRunner().invoke(main, ["compare", "--help"]).output


def test_summarize_reads_the_table_by_default():
    rec = {"model": "m", "src_lang": "en", "tgt_lang": "de", "seed": 0, "xlr@1": 0.5, "hubness_skew@10": 1.0,
           "hubness_skew@5": 2.0, "bkr_median_rank": 3.0}
    df = summarize([rec])
    assert isinstance(df, pd.DataFrame) and {"xlr@1", "hubness_skew@10"} <= set(df.columns)
    assert "hubness_skew@5" not in df.columns and "bkr_median_rank" not in df.columns
