"""Rank models per language pair with confidence intervals and mark significant gaps.

This is the no-ground-truth workflow of the Backretrieval paper (Section 3.2): with BkR only,
which model should we ship, for which pairs is the choice clear, and how large is the spread
across pairs? Works the same for XLR metrics where ground truth exists.

For each pair and model the per-query outcomes of all seeds are stacked; the estimate is their
mean (= the metric averaged over seeds), the interval a seed-stratified percentile bootstrap.
Models are sorted best first; every two models' gap gets a paired bootstrap interval and a
paired sign-flip permutation test over the same queries. The adjacent gaps' p-values are
Holm-adjusted over the pair's adjacent gaps (the ranking's ``>`` / ``~``), all gaps' over all of
the pair's model pairs (the significant wins and the verdict, :mod:`.verdict`). CORR has no
per-query outcomes: its intervals and gaps come from the bootstrap replicates stored with each
record (``EvalConfig.corr_boot``; replicate b uses the same resample of the source queries for
every model of a sample, so differences are paired), a gap's p-value from a two-sided Wald test
with the bootstrap standard error of the paired difference, ``2 Phi(-|d| / se*(d))`` (unlike the
percentile count of replicates below 0, it has no 1/B floor, which Holm's correction would inflate).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import stats

from ..core import BackretrievalError
from ..metrics.table import MetricSpec, approx_ks, chance_level, counterpart, known_metrics, parse_metric
from .comparison import PAIRWISE_COLUMNS, Comparison
from .costs import cheapest_equivalent, model_costs
from .evaluate import EvalConfig, EvalResult
from .stats import bootstrap_ci, holm, paired_bootstrap_diff, paired_permutation_test
from .verdict import verdict


def _listed(names: tuple[str, ...], last: str) -> str:
    return ", ".join(names[:-1]) + f" {last} " + names[-1] if len(names) > 1 else "".join(names)


def check_metric(metric: str, *, approx_depth: int | None = None) -> tuple[MetricSpec, int | None]:
    """The table entry and K of a metric models can be ranked by (the rankable metrics of
    :mod:`backretrieval.metrics.table`).

    Args:
        metric: a metric name, e.g. ``"bkr@10"``, ``"xlr_mrr"``, ``"corr"``.
        approx_depth: for records of the approximate route, the depth searched (the largest K):
            only metrics of per-query ranks that route computes are accepted, with K up to it.

    Returns:
        ``(spec, K)`` as :func:`~backretrieval.metrics.table.parse_metric` gives them.

    Raises:
        BackretrievalError: naming ``metric``: unknown, not rankable, or not available from
            approximate search.
    """
    spec, k = parse_metric(metric, rankable=True)
    if approx_depth is not None:
        ok = known_metrics(rankable=True, approx=True, ranks=True)
        if spec.name not in ok:
            rest = tuple(m for m in known_metrics(rankable=True) if m not in ok)
            raise BackretrievalError(f"{metric}: with --approx compare ranks by {_listed(ok, 'or')} (K <= {approx_depth}); "
                                     f"{_listed(rest, 'and')} need exact search")
        if k > approx_depth:
            raise BackretrievalError(f"{metric}: --approx searches the top {approx_depth} only; give K <= {approx_depth}")
    return spec, k


def _depth(cfg: EvalConfig) -> int | None:
    """The depth the approximate route searches for ``cfg`` (None: exact search)."""
    return max(approx_ks(cfg.n, cfg.k)) if cfg.approx else None


def outcome_fn(metric: str):
    """``"bkr@10"`` -> (ranks key, function ranks -> per-query outcomes).

    Args:
        metric: a rankable metric of per-query ranks (``bkr@K``, ``bkr_mrr``, ``xlr@K``,
            ``xlr_mrr``, ``xlr_t2s@K``, ``xlr_t2s_mrr``; not ``corr``, which has none).

    Returns:
        ``(key, fn)``: the key of the per-query ranks in ``EvalResult.ranks[...]`` (the metric's
        source: ``"bkr"``, ``"xlr"``, ``"xlr_t2s"``) and its per-query outcome at K
        (:func:`~backretrieval.metrics.table.hits`, :func:`~backretrieval.metrics.table.reciprocal`).

    Raises:
        BackretrievalError: an unknown metric, one that cannot rank models, or one without
            per-query outcomes.
    """
    spec, k = check_metric(metric)
    if spec.outcome is None:
        raise BackretrievalError(f"metric {metric!r} has no per-query outcomes; use compare(), which ranks it by its bootstrap")
    return spec.source, (lambda r, spec=spec, k=k: spec.outcome(r, k))


def compare(
    result: EvalResult | EvalConfig,
    metric: str | None = None,
    *,
    n_boot: int = 1000,
    n_perm: int = 5000,
    level: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    beside: bool = True,
    out_dir: str | Path | None = None,
    executor: Any = None,
    progress: bool = False,
    log: Callable[[str], None] = lambda msg: None,
) -> Comparison:
    """Rank the models of each pair by ``metric`` with bootstrap intervals and Holm-adjusted gaps.

    Every statistic a report shows is computed here, once: the per-model intervals, the paired
    bootstrap interval and sign-flip p-value of every two models' gap (the adjacent gaps' raw
    p-values are the same tests), both Holm corrections, the significant wins, the counterpart
    metric's comparison and the verdict.

    Args:
        result: a finished grid, or an :class:`EvalConfig` to evaluate first (its ``models`` may
            name Python objects: ``models={"ours-v2": model, "use-m": "use-m"}``; with
            ``metric="corr"`` and ``corr_boot=0`` it gets 200 CORR bootstrap resamples).
        metric: a rankable metric of the metric table: ``bkr@K``, ``bkr_mrr``, ``xlr@K``,
            ``xlr_mrr``, ``xlr_t2s@K``, ``xlr_t2s_mrr`` or ``corr`` (:func:`check_metric`);
            None: ``bkr@K`` with the configuration's K.
        n_boot: bootstrap resamples of the intervals.
        n_perm: sign-flip permutations of each gap's test.
        level: the intervals' confidence level.
        alpha: the significance level of the gaps.
        seed: the resampling seed.
        beside: also rank by the metric's counterpart (:func:`~backretrieval.metrics.table.counterpart`)
            where the records have it (:attr:`Comparison.beside`).
        out_dir: for a configuration, where its records go, as for :func:`~.evaluate.evaluate`.
        executor: for a configuration, where its per-sample tasks run.
        progress: for a configuration, show progress bars.
        log: for a configuration, receives the notable events of the evaluation.

    Returns:
        The :class:`Comparison` (``per_pair`` and ``across_pairs`` name models as the records do).

    Raises:
        BackretrievalError: an unknown metric, one that the records of approximate search do not
            hold (:func:`check_metric`), or a pair without what the metric needs.
    """
    cfg = result if isinstance(result, EvalConfig) else result.config
    metric = f"bkr@{cfg.k}" if metric is None else metric
    spec, _ = check_metric(metric, approx_depth=_depth(cfg))  # a metric it cannot rank by fails before anything is computed
    if isinstance(result, EvalConfig):
        from .evaluate import evaluate

        if spec.outcome is None and cfg.corr_boot == 0:
            cfg = dataclasses.replace(cfg, corr_boot=200)
        needs = ("xlr",) if spec.needs_truth else ("bkr",)
        result = evaluate(cfg, out_dir, progress=progress, log=log, executor=executor, needs=needs,
                          purpose=f"compare by {metric}")
    stats_ = dict(n_boot=n_boot, n_perm=n_perm, level=level, alpha=alpha, seed=seed)
    main = _rank(result, metric, **stats_)
    other = counterpart(metric) if beside else None
    if other is not None and has_metric(result, other):
        main.beside = _rank(result, other, **stats_)
    main.verdict = verdict(main, largest_n=getattr(result, "largest_n", None))
    main.costs = model_costs(getattr(result, "run", None) or {}, list(main.across_pairs["model"]))
    main.cheapest = cheapest_equivalent(main.verdict, main.costs, getattr(cfg, "cost", "bytes"))
    return main


def pairwise(
    result: EvalResult,
    metric: str = "bkr@10",
    *,
    n_boot: int = 1000,
    n_perm: int = 5000,
    level: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
) -> pd.DataFrame:
    """Every two models on every language pair: the gap and whether it is significant.

    For each pair of models ``(a, b)`` on a language pair (``a`` the one with the higher
    estimate) the gap ``diff = estimate(a) - estimate(b)`` gets a paired, seed-stratified
    bootstrap interval of the per-query difference (:func:`.stats.paired_bootstrap_diff`) and the
    paired sign-flip permutation p-value (:func:`.stats.paired_permutation_test`); p-values are
    Holm-adjusted over all ``m(m-1)/2`` gaps of the language pair. For ``corr`` the interval and
    the p-value come from the stored bootstrap replicates (the percentile interval of the
    replicates' difference; the Wald p-value of :func:`compare`). This is
    :attr:`Comparison.pairwise` of :func:`compare` with the same arguments.

    Args:
        result: a finished grid.
        metric: as for :func:`compare`.
        n_boot: bootstrap resamples of each gap's interval.
        n_perm: permutations of each gap's test.
        level: confidence level of the intervals.
        alpha: significance level of the Holm-adjusted p-values.
        seed: seed of the resampling and of the permutations.

    Returns:
        One row per language pair and model pair: ``pair, model_a, model_b, diff, diff_low,
        diff_high, p, p_adj, significant`` (``significant``: ``p_adj < alpha``).

    Raises:
        BackretrievalError: an unknown metric, or a pair without what it needs.
    """
    check_metric(metric)
    return _rank(result, metric, n_boot=n_boot, n_perm=n_perm, level=level, alpha=alpha, seed=seed).pairwise


def _rank(result: EvalResult, metric: str, *, n_boot: int, n_perm: int, level: float, alpha: float,
          seed: int) -> Comparison:
    """The comparison by one metric: per pair the intervals, every two models' gap (one test
    each; the adjacent gaps' raw p-values are looked up among them), the two Holm corrections."""
    spec, _ = check_metric(metric)
    models, pairs, seeds = _extent(result)
    rows: list[dict[str, Any]] = []
    gap_rows: list[dict[str, Any]] = []
    q = (1 - level) / 2
    for src, tgt in pairs:
        if spec.outcome is None:
            reps, est = _corr_replicates(result, models, src, tgt, seeds)
            if not reps:
                raise BackretrievalError(
                    f"{src}->{tgt}: no CORR bootstrap to compare: CORR needs images, and intervals need "
                    "EvalConfig.corr_boot > 0 (the compare command sets it)"
                )
            interval = {m: (est[m], *(float(v) for v in np.nanquantile(reps[m], [q, 1 - q]))) for m in reps}
            gaps = _corr_gaps(reps, est, level=level)
        else:
            key, fn = outcome_fn(metric)
            outcomes = _outcomes(result, key, fn, models, src, tgt, seeds)
            if not outcomes:
                raise BackretrievalError(f"{src}->{tgt}: no {key} results to compare (does the dataset have what {metric} needs?)")
            cis = {m: bootstrap_ci(o, n_boot=n_boot, level=level, seed=seed) for m, o in outcomes.items()}
            interval = {m: (c.estimate, c.low, c.high) for m, c in cis.items()}
            gaps = _rank_gaps(outcomes, n_boot=n_boot, n_perm=n_perm, level=level, seed=seed)
        order = sorted(interval, key=lambda m: -interval[m][0])
        p_of = {frozenset((g["model_a"], g["model_b"])): g["p"] for g in gaps}
        p_next = [p_of[frozenset((a, b))] for a, b in zip(order, order[1:])]
        rows += _ranked_rows(f"{src}->{tgt}", order, interval, p_next, alpha)
        p_adj = holm([g["p"] for g in gaps]) if gaps else []
        gap_rows += [{"pair": f"{src}->{tgt}", **g, "p_adj": pa, "significant": bool(pa < alpha)} for g, pa in zip(gaps, p_adj)]
    c = _finish(metric, level, alpha, rows, pd.DataFrame(gap_rows, columns=PAIRWISE_COLUMNS))
    c.run, c.n, c.seeds = result.run, result.config.n, len(seeds)
    c.chance = None if spec.outcome is None else chance_level(metric, result.config.n)
    return c


def _extent(result: EvalResult) -> tuple[list[str], list[tuple[str, str]], list[int]]:
    """The models and language pairs of ``result``'s records (in order of appearance) and its seeds (sorted)."""
    models = list(dict.fromkeys(r["model"] for r in result.records))
    pairs = list(dict.fromkeys((r["src_lang"], r["tgt_lang"]) for r in result.records))
    seeds = sorted({r["seed"] for r in result.records})
    return models, pairs, seeds


def _outcomes(result: EvalResult, key: str, fn: Callable[[np.ndarray], np.ndarray], models: list[str], src: str,
              tgt: str, seeds: list[int]) -> dict[str, np.ndarray]:
    """Per model that has ranks ``key`` on ``src->tgt`` for every seed: its per-query outcomes
    ``fn(ranks)``, one row per seed."""
    out = {}
    for m in models:
        per_seed = [result.ranks.get((m, src, tgt, s), {}).get(key) for s in seeds]
        if all(x is not None for x in per_seed):
            out[m] = np.stack([fn(x) for x in per_seed])
    return out


def _corr_replicates(result: EvalResult, models: list[str], src: str, tgt: str,
                     seeds: list[int]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Per model that has CORR and its bootstrap replicates on ``src->tgt`` for every seed:
    replicate b of the mean over seeds, and the mean CORR over seeds."""
    value = {(r["model"], r["src_lang"], r["tgt_lang"], r["seed"]): r.get("corr") for r in result.records}
    reps, est = {}, {}
    for m in models:
        boots = [result.ranks.get((m, src, tgt, s), {}).get("corr_boot") for s in seeds]
        vals = [value.get((m, src, tgt, s)) for s in seeds]
        if all(b is not None for b in boots) and all(v is not None for v in vals):
            reps[m] = np.mean(np.stack(boots), axis=0)  # replicate b of the mean over seeds
            est[m] = float(np.mean(vals))
    return reps, est


def _wald_p(diff: float, rep_diff: np.ndarray) -> float:
    """Two-sided Wald p-value of a gap ``diff`` with the bootstrap standard error of its replicates."""
    se = float(np.nanstd(rep_diff, ddof=1))
    return float(2 * stats.norm.sf(abs(diff) / se)) if se > 0 else (1.0 if diff == 0 else 0.0)


def _ranked_rows(pair: str, order: list[str], interval: dict[str, tuple[float, float, float]], p_next: list[float],
                 alpha: float) -> list[dict[str, Any]]:
    """The ``per_pair`` rows of one language pair: models best first with (estimate, low, high)
    and the raw and Holm-adjusted p-value of each gap to the next model."""
    p_adj = holm(p_next) if p_next else []
    return [
        {
            "pair": pair,
            "rank": i + 1,
            "model": m,
            "estimate": interval[m][0],
            "ci_low": interval[m][1],
            "ci_high": interval[m][2],
            "p_vs_next": p_next[i] if i < len(p_next) else np.nan,
            "p_adj": p_adj[i] if i < len(p_adj) else np.nan,
            "significant": bool(i < len(p_adj) and p_adj[i] < alpha),
        }
        for i, m in enumerate(order)
    ]


def _finish(metric: str, level: float, alpha: float, rows: list[dict[str, Any]], pw: pd.DataFrame) -> Comparison:
    """The comparison of the ranked rows and the pairwise gaps: ``across_pairs`` adds per model
    its spread over pairs, its first places and its significant wins, losses and ties."""
    per_pair = pd.DataFrame(rows)
    g = per_pair.groupby("model", sort=False)
    across = pd.DataFrame(
        {
            "mean": g["estimate"].mean(),
            "sd": g["estimate"].std(ddof=1).fillna(0.0),
            "min": g["estimate"].min(),
            "max": g["estimate"].max(),
            "pairs": g.size(),
            "mean_rank": g["rank"].mean(),
            "firsts": g["rank"].apply(lambda r: int((r == 1).sum())),
        }
    ).sort_values("mean", ascending=False).reset_index()
    across = across.merge(wins(pw, across["model"].tolist()), on="model", how="left")
    return Comparison(metric, level, alpha, per_pair, across, pairwise=pw)


def has_metric(result: EvalResult, metric: str) -> bool:
    """Whether every record of ``result`` has what ranking by ``metric`` needs (per-query ranks,
    or CORR bootstrap replicates).

    Args:
        result: a finished grid.
        metric: a metric name (an unknown one has nothing).

    Returns:
        False for an unknown metric, one the records of approximate search do not hold, or a
        result without records.
    """
    try:
        spec, _ = check_metric(metric, approx_depth=_depth(result.config))
    except BackretrievalError:
        return False
    key = "corr_boot" if spec.outcome is None else spec.source
    return bool(result.records) and all(
        result.ranks.get((r["model"], r["src_lang"], r["tgt_lang"], r["seed"]), {}).get(key) is not None
        for r in result.records
    )


def _rank_gaps(outcomes: dict[str, np.ndarray], *, n_boot: int, n_perm: int, level: float, seed: int) -> list[dict[str, Any]]:
    """Every two models' gap (higher mean first): paired bootstrap interval and sign-flip p-value."""
    order = sorted(outcomes, key=lambda m: -float(outcomes[m].mean()))
    gaps = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            ci = paired_bootstrap_diff(outcomes[a], outcomes[b], n_boot=n_boot, level=level, seed=seed)
            p = paired_permutation_test(outcomes[a], outcomes[b], n_perm=n_perm, seed=seed).p_value
            gaps.append({"model_a": a, "model_b": b, "diff": ci.estimate, "diff_low": ci.low, "diff_high": ci.high, "p": p})
    return gaps


def _corr_gaps(reps: dict[str, np.ndarray], est: dict[str, float], *, level: float) -> list[dict[str, Any]]:
    """Every two models' CORR gap (higher first): percentile interval of the replicates'
    difference and the Wald p-value of :func:`_compare_corr`."""
    order = sorted(reps, key=lambda m: -est[m])
    q = (1 - level) / 2
    gaps = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            d = reps[a] - reps[b]
            diff = est[a] - est[b]
            lo, hi = np.nanquantile(d, [q, 1 - q])
            gaps.append({"model_a": a, "model_b": b, "diff": diff, "diff_low": float(lo), "diff_high": float(hi),
                         "p": _wald_p(diff, d)})
    return gaps


def wins(pw: pd.DataFrame, models: list[str] | None = None) -> pd.DataFrame:
    """Per model, from :func:`pairwise`: ``wins`` (language pair x opponent gaps it leads
    significantly after Holm), ``losses`` (the same, trailing) and ``ties`` (gaps not significant).
    ``models`` fixes the row order (default: order of appearance).

    Args:
        pw: the frame of :func:`pairwise`.
        models: the models, in the row order wanted (None: order of appearance in ``pw``).

    Returns:
        Columns ``model, wins, losses, ties``; wins + losses + ties is the number of gaps the
        model takes part in.
    """
    names = models or list(dict.fromkeys([*pw["model_a"], *pw["model_b"]]))
    sig = pw[pw["significant"].astype(bool)]
    return pd.DataFrame({
        "model": names,
        "wins": [int((sig["model_a"] == m).sum()) for m in names],
        "losses": [int((sig["model_b"] == m).sum()) for m in names],
        "ties": [int(((pw["model_a"] == m) | (pw["model_b"] == m)).sum() - ((sig["model_a"] == m) | (sig["model_b"] == m)).sum()) for m in names],
    })
