"""Rank models per language pair with confidence intervals and mark significant gaps.

This is the no-ground-truth workflow of the Backretrieval paper (Section 3.2): with BkR only,
which model should we ship, for which pairs is the choice clear, and how large is the spread
across pairs? Works the same for XLR metrics where ground truth exists.

For each pair and model the per-query outcomes of all seeds are stacked; the estimate is their
mean (= the metric averaged over seeds), the interval a seed-stratified percentile bootstrap.
Models are sorted best first and each adjacent gap is tested with a paired sign-flip
permutation test over the same queries; p-values are Holm-adjusted within the pair.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import stats

from ..core import BackretrievalError
from .evaluate import EvalConfig, EvalResult
from .stats import bootstrap_ci, hits, holm, paired_permutation_test, reciprocal

_METRIC = re.compile(r"^(bkr|xlr|xlr_t2s)(?:@(\d+)|_(mrr))$")
METRICS_HELP = "bkr@K, bkr_mrr, xlr@K, xlr_mrr, xlr_t2s@K, xlr_t2s_mrr, corr"


def outcome_fn(metric: str):
    """``"bkr@10"`` -> (ranks key, function ranks -> per-query outcomes)."""
    m = _METRIC.match(metric)
    if not m:
        raise BackretrievalError(f"unknown metric {metric!r}: use {METRICS_HELP}")
    key, k, mrr = m.groups()
    return key, (reciprocal if mrr else (lambda r, k=int(k): hits(r, k)))


@dataclasses.dataclass
class Comparison:
    metric: str
    level: float
    alpha: float
    per_pair: pd.DataFrame  # pair, rank, model, estimate, ci_low, ci_high, p_vs_next, p_adj, significant
    across_pairs: pd.DataFrame  # model, mean, sd, min, max, pairs, mean_rank, wins
    run: dict[str, Any] = dataclasses.field(default_factory=dict)  # the evaluation's run.json (config, inputs, environment)

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON-serialisable data, with ``run``: what produced it (configuration,
        input fingerprints, software environment; see :func:`backretrieval.analysis.evaluate.run_info`)."""
        return {
            "metric": self.metric,
            "level": self.level,
            "alpha": self.alpha,
            "per_pair": self.per_pair.to_dict(orient="records"),
            "across_pairs": self.across_pairs.to_dict(orient="records"),
            "run": self.run,
        }


def compare(
    result: EvalResult | EvalConfig,
    metric: str = "bkr@10",
    *,
    n_boot: int = 1000,
    n_perm: int = 5000,
    level: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    out_dir: str | Path | None = None,
    executor: Any = None,
    progress: bool = False,
    log: Callable[[str], None] = lambda msg: None,
) -> Comparison:
    """Rank the models of each pair by ``metric`` with bootstrap intervals and Holm-adjusted gaps.

    Args:
        result: a finished grid, or an :class:`EvalConfig` to evaluate first (its ``models`` may
            name Python objects: ``models={"ours-v2": model, "use-m": "use-m"}``; with
            ``metric="corr"`` and ``corr_boot=0`` it gets 200 CORR bootstrap resamples).
        metric: ``bkr@K``, ``bkr_mrr``, ``xlr@K``, ``xlr_mrr``, ``xlr_t2s@K``, ``xlr_t2s_mrr`` or ``corr``.
        n_boot, n_perm: bootstrap resamples and permutations.
        level, alpha: the intervals' confidence level and the significance level of the gaps.
        seed: the resampling seed.
        out_dir, executor, progress, log: for a configuration, as for :func:`~.evaluate.evaluate`.

    Returns:
        The :class:`Comparison` (``per_pair`` and ``across_pairs`` name models as the records do).

    Raises:
        BackretrievalError: an unknown metric, or a pair without what the metric needs.
    """
    if isinstance(result, EvalConfig):
        from .evaluate import evaluate

        cfg = result
        if metric == "corr" and cfg.corr_boot == 0:
            cfg = dataclasses.replace(cfg, corr_boot=200)
        elif metric != "corr":
            outcome_fn(metric)  # an unknown metric fails before anything is computed
        needs = ("xlr",) if metric.startswith("xlr") else ("bkr",)
        result = evaluate(cfg, out_dir, progress=progress, log=log, executor=executor, needs=needs,
                          purpose=f"compare by {metric}")
    if metric == "corr":
        return dataclasses.replace(_compare_corr(result, level=level, alpha=alpha), run=result.run)
    key, fn = outcome_fn(metric)
    models = list(dict.fromkeys(r["model"] for r in result.records))
    pairs = list(dict.fromkeys((r["src_lang"], r["tgt_lang"]) for r in result.records))
    seeds = sorted({r["seed"] for r in result.records})
    rows = []
    for src, tgt in pairs:
        outcomes = {}
        for m in models:
            per_seed = [result.ranks.get((m, src, tgt, s), {}).get(key) for s in seeds]
            if any(x is None for x in per_seed):
                continue
            outcomes[m] = np.stack([fn(x) for x in per_seed])
        if not outcomes:
            raise BackretrievalError(f"{src}->{tgt}: no {key} results to compare (does the dataset have what {metric} needs?)")
        cis = {m: bootstrap_ci(o, n_boot=n_boot, level=level, seed=seed) for m, o in outcomes.items()}
        order = sorted(outcomes, key=lambda m: -cis[m].estimate)
        p_next = [
            paired_permutation_test(outcomes[a], outcomes[b], n_perm=n_perm, seed=seed).p_value
            for a, b in zip(order, order[1:])
        ]
        p_adj = holm(p_next) if p_next else []
        for i, m in enumerate(order):
            rows.append(
                {
                    "pair": f"{src}->{tgt}",
                    "rank": i + 1,
                    "model": m,
                    "estimate": cis[m].estimate,
                    "ci_low": cis[m].low,
                    "ci_high": cis[m].high,
                    "p_vs_next": p_next[i] if i < len(p_next) else np.nan,
                    "p_adj": p_adj[i] if i < len(p_adj) else np.nan,
                    "significant": bool(i < len(p_adj) and p_adj[i] < alpha),
                }
            )
    return dataclasses.replace(_finish(metric, level, alpha, rows), run=result.run)


def _finish(metric: str, level: float, alpha: float, rows: list[dict[str, Any]]) -> Comparison:
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
            "wins": g["rank"].apply(lambda r: int((r == 1).sum())),
        }
    ).sort_values("mean", ascending=False).reset_index()
    return Comparison(metric, level, alpha, per_pair, across)


def _compare_corr(result: EvalResult, *, level: float, alpha: float) -> Comparison:
    """CORR per pair: the estimate is the mean over seeds; the interval and the paired tests come
    from the bootstrap resamples of the source queries stored with each record
    (``EvalConfig.corr_boot``; replicate b uses the same resample for every model of a sample,
    so differences are paired). p-value of a gap: a two-sided Wald test with the bootstrap
    standard error of the paired difference, ``2 Phi(-|d| / se*(d))`` (unlike the percentile
    count of replicates below 0, it has no 1/B floor, which Holm's correction would inflate)."""
    models = list(dict.fromkeys(r["model"] for r in result.records))
    pairs = list(dict.fromkeys((r["src_lang"], r["tgt_lang"]) for r in result.records))
    seeds = sorted({r["seed"] for r in result.records})
    value = {(r["model"], r["src_lang"], r["tgt_lang"], r["seed"]): r.get("corr") for r in result.records}
    rows = []
    q = (1 - level) / 2
    for src, tgt in pairs:
        reps, est = {}, {}
        for m in models:
            boots = [result.ranks.get((m, src, tgt, s), {}).get("corr_boot") for s in seeds]
            vals = [value.get((m, src, tgt, s)) for s in seeds]
            if any(b is None for b in boots) or any(v is None for v in vals):
                continue
            reps[m] = np.mean(np.stack(boots), axis=0)  # replicate b of the mean over seeds
            est[m] = float(np.mean(vals))
        if not reps:
            raise BackretrievalError(
                f"{src}->{tgt}: no CORR bootstrap to compare: CORR needs images, and intervals need "
                "EvalConfig.corr_boot > 0 (the compare command sets it)"
            )
        order = sorted(reps, key=lambda m: -est[m])
        p_next = []
        for a, b in zip(order, order[1:]):
            se = float(np.nanstd(reps[a] - reps[b], ddof=1))
            diff = est[a] - est[b]
            p_next.append(float(2 * stats.norm.sf(abs(diff) / se)) if se > 0 else (1.0 if diff == 0 else 0.0))
        p_adj = holm(p_next) if p_next else []
        for i, m in enumerate(order):
            lo, hi = np.nanquantile(reps[m], [q, 1 - q])
            rows.append(
                {
                    "pair": f"{src}->{tgt}",
                    "rank": i + 1,
                    "model": m,
                    "estimate": est[m],
                    "ci_low": float(lo),
                    "ci_high": float(hi),
                    "p_vs_next": p_next[i] if i < len(p_next) else np.nan,
                    "p_adj": p_adj[i] if i < len(p_adj) else np.nan,
                    "significant": bool(i < len(p_adj) and p_adj[i] < alpha),
                }
            )
    return _finish("corr", level, alpha, rows)

