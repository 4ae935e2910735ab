"""What one language pair's data decide about its models: every statistic of the pair, and the
verdict's answer, computed once (for :func:`~.compare.compare`, and for the calibration harness
``bench/bench_verdict_calibration.py``, which runs exactly this code on outcomes whose truth it knows).

The decision tests what it needs: the *best* model (the highest estimate) against each of the
other k - 1 models, each family corrected with Holm's step-down procedure over those k - 1
comparisons only:

* **superiority** -- the paired sign-flip test of the mean per-query difference (for 0/1
  outcomes the exact binomial test of the queries one model wins and the other loses;
  :func:`~.stats.sign_flip_p`); the best is *significantly better* than a model when its
  Holm-adjusted p-value is below ``alpha``;
* **equivalence** -- two one-sided tests (TOST, :func:`~.stats.tost`) of ``|gap| < margin`` with
  the paired standard error of the per-query differences (t with ``seeds * (N - 1)`` degrees of
  freedom); a model is *equivalent* to the best when its Holm-adjusted TOST p-value is below
  ``alpha``, which for one comparison is exactly "the 1 - 2 alpha interval of the gap lies inside
  (-margin, +margin)". Two models whose every paired difference is 0 are equivalent at any N.

CORR has no per-query outcomes: its tests read the bootstrap replicates stored with each record
(replicate b resamples the same source queries for every model, so differences are paired):
superiority by the Wald test ``2 Phi(-|d| / se)`` and equivalence by TOST with the bootstrap
standard error ``se`` of the replicates' difference (normal).

Each other model is then, against the best (:data:`VS_BEST`): ``worse`` (significantly),
``worse, within margin`` (significantly worse, and equivalent: the gap is real but smaller than
the margin), ``equivalent`` or ``undecided``; and the pair's answer (:func:`pair_status`) is one
of :data:`STATUSES`:

* ``only model`` -- one model;
* ``at chance`` -- the best model's interval reaches the metric's chance level: nothing can be
  concluded;
* ``ship`` -- the best is significantly better than every other model;
* ``equivalent`` -- every model the best does not beat significantly is equivalent to it: pick
  among the equivalent ones by cost or speed; not where the equivalence rests on the metric's
  ceiling at K > 1 (:func:`at_ceiling`: several models find every item among their top K, as
  at a large K/N), which says nothing about the models;
* ``not enough data`` -- neither.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from ..metrics.table import parse_metric
from .stats import bootstrap_means, holm, paired_se, sign_flip_p, tost

STATUSES = ("ship", "equivalent", "not enough data", "at chance", "only model")
VS_BEST = ("best", "worse", "worse, within margin", "equivalent", "undecided")


@dataclasses.dataclass
class PairDecision:
    """Every statistic of one language pair and what it decides.

    Attributes:
        order: the models, best first (highest estimate; equal estimates keep the input order).
        interval: model -> ``(estimate, low, high)``, the ``level`` percentile bootstrap interval.
        gaps: the gaps tested, one dict each: ``model_a`` (the higher estimate), ``model_b``,
            ``diff``, ``diff_low``, ``diff_high`` (the paired bootstrap interval) and ``p`` (the
            raw two-sided p-value); every two models, or only the best against each other.
        tests: the best against each other model, in ``order``: ``model_a`` (the best),
            ``model_b``, ``diff``, ``diff_low``, ``diff_high``, ``se``, ``p``, ``p_adj`` (Holm
            over the k - 1), ``better`` (``p_adj < alpha``), ``eq_low``, ``eq_high`` (the
            ``1 - 2 alpha`` interval), ``margin``, ``p_tost``, ``p_tost_adj`` (Holm over the
            k - 1), ``equivalent`` (``p_tost_adj < alpha``) and ``vs_best`` (:data:`VS_BEST`).
        status: the pair's answer (:data:`STATUSES`).
        comparisons: the k - 1 comparisons Holm corrected for.
    """

    order: list[str]
    interval: dict[str, tuple[float, float, float]]
    gaps: list[dict[str, Any]]
    tests: list[dict[str, Any]]
    status: str
    comparisons: int

    @property
    def equivalent_to_best(self) -> list[str]:
        """The best model and every model shown equivalent to it, best first."""
        return [self.order[0]] + [t["model_b"] for t in self.tests if t["equivalent"]]


def smaller_k(metric: str) -> bool:
    """Whether ``metric`` is taken at a K above 1 (``bkr@10``), where a smaller K exists.

    Args:
        metric: a metric name.

    Returns:
        True for ``...@K`` with K > 1.
    """
    _, k = parse_metric(metric)
    return bool(k and k > 1)


def vs_best(better: bool, equivalent: bool) -> str:
    """How a model stands against the best, from its two Holm-adjusted tests.

    Args:
        better: the best is significantly better than it.
        equivalent: it is equivalent to the best.

    Returns:
        One of :data:`VS_BEST` (not ``"best"``).
    """
    if better:
        return "worse, within margin" if equivalent else "worse"
    return "equivalent" if equivalent else "undecided"


def at_ceiling(best: tuple[float, float, float], equivalent: Sequence[float], margin: float) -> bool:
    """Whether an equivalence rests on the metric's ceiling: the best model's interval reaches 1
    and a model shown equivalent to it lies within the margin of 1. At K > 1 and a large K/N,
    several models then find (almost) every item among their top K, and the metric cannot tell
    them apart, whatever their quality (their paired differences may all be 0 without their
    being the same model).

    Args:
        best: the best model's ``(estimate, low, high)``.
        equivalent: the estimates of the models shown equivalent to it.
        margin: the equivalence margin.

    Returns:
        True at the ceiling.
    """
    return best[2] >= 1 - 1e-9 and any(est >= 1 - margin for est in equivalent)


def pair_status(marks: Sequence[str], best_low: float, chance: float | None, ceiling: bool = False,
                identical: bool = False) -> str:
    """The answer of one language pair.

    Args:
        marks: :func:`vs_best` of each model but the best.
        best_low: the lower end of the best model's interval.
        chance: the metric's chance level (None: none declared).
        ceiling: the equivalence rests on the metric's ceiling where a smaller K exists
            (:func:`at_ceiling`): not an answer.
        identical: every other model's per-query outcomes are the best's (every paired
            difference 0) and the best's estimate is above chance (:func:`identical`):
            equivalent at any N, even where the interval reaches chance.

    Returns:
        One of :data:`STATUSES`: ``only model`` without other models, ``at chance`` when the
        best model's interval reaches the chance level (unless every model is identical to
        it and its estimate is above chance), ``ship`` when every other model is significantly worse, ``equivalent`` when every
        model not significantly worse is equivalent (and that does not rest on the ceiling),
        else ``not enough data``.
    """
    if not marks:
        return "only model"
    if chance is not None and best_low <= chance and not identical:
        return "at chance"
    if all(m.startswith("worse") for m in marks):
        return "ship"
    if all(m != "undecided" for m in marks) and not ceiling:
        return "equivalent"
    return "not enough data"


def ceiling_of(interval: Mapping[str, tuple[float, float, float]], best: str, tests: Sequence[Mapping[str, Any]],
               smaller_k: bool) -> bool:
    """:func:`at_ceiling` of a pair's tests (False where no smaller K exists).

    Args:
        interval: model -> ``(estimate, low, high)``.
        best: the best model.
        tests: the best against each other model (``model_b``, ``equivalent``, ``se``).
        smaller_k: the metric is taken at a K above 1.

    Returns:
        Whether the pair's equivalence rests on the metric's ceiling.
    """
    return smaller_k and bool(tests) and at_ceiling(interval[best], [interval[t["model_b"]][0] for t in tests
                                                                    if t["equivalent"]], tests[0]["margin"])


def _decide(order: list[str], interval: Mapping[str, tuple[float, float, float]], tests: list[dict[str, Any]],
            *, margin: float, alpha: float, chance: float | None, smaller_k: bool) -> tuple[list[dict[str, Any]], str]:
    """Holm over the k - 1 superiority and equivalence tests, each model's standing, the answer."""
    if tests:
        for t, pa, pe in zip(tests, holm([t["p"] for t in tests]), holm([t["p_tost"] for t in tests])):
            t.update(p_adj=pa, better=bool(pa < alpha and t["diff"] > 0), p_tost_adj=pe, equivalent=bool(pe < alpha),
                     margin=margin)
            t["vs_best"] = vs_best(t["better"], t["equivalent"])
    ceiling = ceiling_of(interval, order[0], tests, smaller_k)
    same = identical(tests, interval[order[0]][0], chance)
    return tests, pair_status([t["vs_best"] for t in tests], interval[order[0]][1], chance, ceiling, same)


def identical(tests: Sequence[Mapping[str, Any]], best_estimate: float, chance: float | None) -> bool:
    """Whether every other model's per-query outcomes are the best's (every test's gap and
    standard error 0) and the best scores above chance: the same model under other names, worth
    calling equivalent even where its interval reaches chance (models tied at or below chance,
    as when all texts are equal, are at chance: none is the best).

    Args:
        tests: the best against each other model (``diff``, ``se``).
        best_estimate: the best model's estimate.
        chance: the metric's chance level (None: none).

    Returns:
        True when every paired difference is 0 and the estimate is above chance.
    """
    above = chance is None or best_estimate > chance
    return above and bool(tests) and all(t["diff"] == 0 and t["se"] == 0 for t in tests)


def decide_outcomes(outcomes: Mapping[str, np.ndarray], *, margin: float, alpha: float = 0.05, level: float = 0.95,
                    chance: float | None = None, n_boot: int = 1000, n_perm: int = 5000, seed: int = 0,
                    all_pairs: bool = True, smaller_k: bool = False) -> PairDecision:
    """Rank the models of one pair by their per-query outcomes and decide (the module's docstring).

    Args:
        outcomes: model -> its per-query outcomes on the pair, (N,) or (seeds, N), aligned
            query by query (e.g. :func:`~backretrieval.metrics.table.hits` of each seed's ranks).
        margin: the equivalence margin.
        alpha: the significance level of both test families.
        level: the confidence level of the intervals.
        chance: the metric's chance level (None: none).
        n_boot: bootstrap resamples (one draw of query indices serves every model and gap).
        n_perm: random sign patterns of a sign-flip test whose differences are not all of one
            magnitude (0/1 outcomes are tested exactly).
        seed: the seed of the resampling and of the sign patterns.
        all_pairs: test every two models, with every interval (for the tables and the page);
            False: only what the decision needs: the best against each other model, and the
            best model's interval (the other intervals are NaN; the draws are the same, so the
            best's interval and every decision are those of ``all_pairs=True``).
        smaller_k: the metric is taken at a K above 1 (``...@10``): an equivalence at the
            metric's ceiling is then no answer (:func:`at_ceiling`).

    Returns:
        The :class:`PairDecision`.
    """
    models = list(outcomes)
    data = {m: np.asarray(outcomes[m], dtype=np.float64) for m in models}
    means = {m: float(x.mean()) for m, x in data.items()}
    order = sorted(models, key=lambda m: -means[m])
    drawn = models if all_pairs else order[:1]
    boot = dict(zip(drawn, bootstrap_means([data[m] for m in drawn], n_boot=n_boot, seed=seed)))
    q = (1 - level) / 2
    nan = np.full(n_boot, np.nan)
    interval = {m: (means[m], *((float(v) for v in np.quantile(boot[m], [q, 1 - q])) if m in boot else (np.nan, np.nan)))
                for m in models}
    wanted = ([(a, b) for i, a in enumerate(order) for b in order[i + 1:]] if all_pairs
              else [(order[0], b) for b in order[1:]])
    gaps, tests = [], []
    for a, b in wanted:
        d = data[a] - data[b]
        lo, hi = np.quantile(boot.get(a, nan) - boot.get(b, nan), [q, 1 - q]) if b in boot else (np.nan, np.nan)
        p, _, nonzero = sign_flip_p(d, statistic="mean", n_random=n_perm, seed=seed, chunk=500, tol=1e-12,
                                    binary_exact=True)
        diff = float(d.mean()) if nonzero else 0.0
        gaps.append({"model_a": a, "model_b": b, "diff": diff, "diff_low": float(lo), "diff_high": float(hi), "p": p})
        if a == order[0]:
            se, df = paired_se(d)
            p_tost, eq_low, eq_high = tost(diff, se, margin, alpha=alpha, df=df)
            tests.append({**gaps[-1], "se": se, "eq_low": eq_low, "eq_high": eq_high, "p_tost": p_tost})
    tests, status = _decide(order, interval, tests, margin=margin, alpha=alpha, chance=chance, smaller_k=smaller_k)
    return PairDecision(order, interval, gaps, tests, status, len(tests))


def decide_replicates(reps: Mapping[str, np.ndarray], est: Mapping[str, float], *, margin: float, alpha: float = 0.05,
                      level: float = 0.95, chance: float | None = None) -> PairDecision:
    """The same for CORR, from each model's bootstrap replicates (replicate b on the same
    resampled queries for every model): every two models' gap, and the decision.

    Args:
        reps: model -> its bootstrap replicates of the metric (mean over seeds).
        est: model -> its estimate.
        margin: the equivalence margin.
        alpha: the significance level of both test families.
        level: the confidence level of the intervals.
        chance: the metric's chance level (None: none).

    Returns:
        The :class:`PairDecision` (``p``: the two-sided Wald p-value of the gap with the
        bootstrap standard error; equivalence by TOST with the same standard error, normal).
    """
    q = (1 - level) / 2
    interval = {m: (float(est[m]), *(float(v) for v in np.nanquantile(reps[m], [q, 1 - q]))) for m in reps}
    order = sorted(reps, key=lambda m: -interval[m][0])
    gaps, tests = [], []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            d = reps[a] - reps[b]
            diff = float(est[a] - est[b])
            lo, hi = np.nanquantile(d, [q, 1 - q])
            se = float(np.nanstd(d, ddof=1)) if np.count_nonzero(~np.isnan(d)) > 1 else float("nan")
            p = (float(2 * sps.norm.sf(abs(diff) / se)) if se > 0 else
                 (1.0 if diff == 0 else 0.0) if se == 0 else 1.0)  # no spread: a fixed gap; none known: no evidence
            gaps.append({"model_a": a, "model_b": b, "diff": diff, "diff_low": float(lo), "diff_high": float(hi), "p": p})
            if a == order[0]:
                p_tost, eq_low, eq_high = tost(diff, se, margin, alpha=alpha)
                tests.append({**gaps[-1], "se": se, "eq_low": eq_low, "eq_high": eq_high, "p_tost": p_tost})
    tests, status = _decide(order, interval, tests, margin=margin, alpha=alpha, chance=chance, smaller_k=False)
    return PairDecision(order, interval, gaps, tests, status, len(tests))
