"""Rank models per language pair with confidence intervals, and decide which to ship.

This is the no-ground-truth workflow of the Backretrieval paper (Section 3.2): with BkR only,
which model should we ship, for which pairs is the choice clear, and how large is the spread
across pairs? Works the same for XLR metrics where ground truth exists.

For each pair and model the per-query outcomes of all seeds are stacked; the estimate is their
mean (= the metric averaged over seeds), the interval a seed-stratified percentile bootstrap.
Models are sorted best first. Per pair, :mod:`.decision` computes every statistic once: the
paired bootstrap interval and paired sign-flip test of every two models' gap (exact for 0/1
outcomes), and the decision's own tests, the best model against each other model (superiority
and equivalence within the margin, each Holm-adjusted over those k - 1 comparisons:
:attr:`Comparison.equivalence`), which the verdict (:mod:`.verdict`), the rankings' marks and the
report's sentences all read. The adjacent gaps' p-values are Holm-adjusted over the pair's
adjacent gaps, all gaps' over all of the pair's model pairs (the table of significant wins). CORR
has no per-query outcomes: its intervals and gaps come from the bootstrap replicates stored with
each record (``EvalConfig.corr_boot``; replicate b uses the same resample of the source queries
for every model of a sample, so differences are paired), a gap's p-value from a two-sided Wald
test with the bootstrap standard error of the paired difference, ``2 Phi(-|d| / se*(d))`` (unlike
the percentile count of replicates below 0, it has no 1/B floor, which Holm's correction would
inflate), its equivalence from the same standard error.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from ..core import BackretrievalError
from ..metrics.table import MetricSpec, approx_ks, chance_level, counterpart, known_metrics, parse_metric
from .comparison import EQUIVALENCE_COLUMNS, PAIRWISE_COLUMNS, Comparison
from .costs import cheapest_equivalent, model_costs
from .decision import PairDecision, decide_outcomes, decide_replicates, smaller_k
from .evaluate import EvalConfig, EvalResult
from .evaluate.config import check_margin
from .stats import holm
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


def compare_models(
    result: EvalResult | EvalConfig,
    metric: str | None = None,
    *,
    n_boot: int = 1000,
    n_perm: int = 5000,
    level: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    margin: float | None = None,
    beside: bool = True,
    out_dir: str | Path | None = None,
    executor: Any = None,
    progress: bool = False,
    log: Callable[[str], None] = lambda msg: None,
) -> Comparison:
    """Rank the models of each pair by ``metric`` with bootstrap intervals, test what the decision
    needs, and give the verdict.

    Every statistic a report shows is computed here, once: the per-model intervals, the paired
    bootstrap interval and sign-flip p-value of every two models' gap (the adjacent gaps' raw
    p-values are the same tests), the decision's tests of the best model against each other
    model (superiority and equivalence within ``margin``, Holm over those k - 1 comparisons:
    :attr:`Comparison.equivalence`), the Holm corrections of the tables, the significant wins,
    the counterpart metric's comparison and the verdict.

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
        margin: the equivalence margin: two models whose gap is shown to lie within
            ``(-margin, +margin)`` are equivalent (None: the configuration's ``margin``, 0.05
            unless set).
        beside: also rank by the metric's counterpart (:func:`~backretrieval.metrics.table.counterpart`)
            where the records have it (:attr:`Comparison.beside`).
        out_dir: for a configuration, where its records go, as for :func:`~.evaluate.run_grid`.
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
    spec, _ = check_metric(metric, approx_depth=cfg.approx_depth)  # a metric it cannot rank by fails before anything is computed
    if isinstance(result, EvalConfig):
        from .evaluate import run_grid

        if spec.outcome is None and cfg.corr_boot == 0:
            cfg = dataclasses.replace(cfg, corr_boot=200)
        if margin is not None:  # the note before the run measures against the same margin
            cfg = dataclasses.replace(cfg, margin=check_margin(margin))
        needs = ("xlr",) if spec.needs_truth else ("bkr",)
        result = run_grid(cfg, out_dir, progress=progress, log=log, executor=executor, needs=needs,
                          purpose=f"compare by {metric}")
    margin = result.config.margin if margin is None else check_margin(margin)
    stats_ = dict(n_boot=n_boot, n_perm=n_perm, level=level, alpha=alpha, seed=seed, margin=margin)
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
    bootstrap interval of the per-query difference (both models resampled with the same queries,
    :func:`.stats.bootstrap_means`) and the paired sign-flip p-value (:func:`.stats.sign_flip_p`,
    exact for 0/1 outcomes); p-values are Holm-adjusted over all ``m(m-1)/2`` gaps of the
    language pair (the table of wins; the verdict's own tests are :attr:`Comparison.equivalence`). For ``corr`` the interval and
    the p-value come from the stored bootstrap replicates (the percentile interval of the
    replicates' difference; the Wald p-value of :func:`compare_models`). This is
    :attr:`Comparison.pairwise` of :func:`compare_models` with the same arguments.

    Args:
        result: a finished grid.
        metric: as for :func:`compare_models`.
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
    return _rank(result, metric, n_boot=n_boot, n_perm=n_perm, level=level, alpha=alpha, seed=seed,
                 margin=result.config.margin).pairwise


def _rank(result: EvalResult, metric: str, *, n_boot: int, n_perm: int, level: float, alpha: float,
          seed: int, margin: float) -> Comparison:
    """The comparison by one metric: per pair the decision's statistics (:mod:`.decision`),
    the adjacent gaps' raw p-values looked up among every two models' tests, the two Holm
    corrections of the tables."""
    spec, _ = check_metric(metric)
    models, pairs, seeds = _extent(result)
    chance = None if spec.outcome is None else chance_level(metric, result.config.n)
    rows: list[dict[str, Any]] = []
    gap_rows: list[dict[str, Any]] = []
    eq_rows: list[dict[str, Any]] = []
    for src, tgt in pairs:
        label = f"{src}->{tgt}"
        if spec.outcome is None:
            reps, est = _corr_replicates(result, models, src, tgt, seeds)
            if not reps:
                raise BackretrievalError(
                    f"{src}->{tgt}: no CORR bootstrap to compare: CORR needs images, and intervals need "
                    "EvalConfig.corr_boot > 0 (the compare command sets it)"
                )
            dec = decide_replicates(reps, est, margin=margin, alpha=alpha, level=level, chance=chance)
        else:
            key, fn = outcome_fn(metric)
            outcomes = _outcomes(result, key, fn, models, src, tgt, seeds)
            if not outcomes:
                raise BackretrievalError(f"{src}->{tgt}: no {key} results to compare (does the dataset have what {metric} needs?)")
            dec = decide_outcomes(outcomes, margin=margin, alpha=alpha, level=level, chance=chance, n_boot=n_boot,
                                  n_perm=n_perm, seed=seed, smaller_k=smaller_k(metric))
        rows += _ranked_rows(label, dec, alpha)
        p_adj = holm([g["p"] for g in dec.gaps]) if dec.gaps else []
        gap_rows += [{"pair": label, **g, "p_adj": pa, "significant": bool(pa < alpha)} for g, pa in zip(dec.gaps, p_adj)]
        eq_rows += [{"pair": label, **t, "comparisons": dec.comparisons} for t in dec.tests]
    c = _finish(metric, level, alpha, rows, pd.DataFrame(gap_rows, columns=PAIRWISE_COLUMNS))
    c.equivalence = pd.DataFrame(eq_rows, columns=EQUIVALENCE_COLUMNS)
    c.run, c.n, c.seeds, c.margin = result.run, result.config.n, len(seeds), margin
    c.chance = chance
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


def _ranked_rows(pair: str, dec: PairDecision, alpha: float) -> list[dict[str, Any]]:
    """The ``per_pair`` rows of one language pair: models best first with (estimate, low, high),
    the raw and Holm-adjusted p-value of each gap to the next model, and how each stands against
    the best (the decision's mark)."""
    order, interval = dec.order, dec.interval
    p_of = {frozenset((g["model_a"], g["model_b"])): g["p"] for g in dec.gaps}
    p_next = [p_of[frozenset((a, b))] for a, b in zip(order, order[1:])]
    p_adj = holm(p_next) if p_next else []
    marks = {t["model_b"]: t["vs_best"] for t in dec.tests}
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
            "vs_best": marks.get(m, "best"),
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
        spec, _ = check_metric(metric, approx_depth=result.config.approx_depth)
    except BackretrievalError:
        return False
    key = "corr_boot" if spec.outcome is None else spec.source
    return bool(result.records) and all(
        result.ranks.get((r["model"], r["src_lang"], r["tgt_lang"], r["seed"]), {}).get(key) is not None
        for r in result.records
    )


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
