"""Statistics over per-query outcomes: bootstrap confidence intervals and paired tests.

Outcomes are per-query numbers whose mean is the metric: ``hits(ranks, K)`` (0/1, mean =
Recall@K / BkR@K) or ``reciprocal(ranks)`` (mean = MRR). With several seeds the samples are
stacked as rows of a (seeds, N) array; resampling is *stratified by seed* (queries are drawn
with replacement within each seed's sample), so the interval is that of the mean over seeds.

* :func:`bootstrap_ci` -- percentile bootstrap interval of the mean.
* :func:`paired_bootstrap_diff` -- percentile bootstrap interval of the mean per-query
  difference between two models on the same queries (both resampled with the same indices).
* :func:`paired_permutation_test` -- two models on the same queries: a sign-flip permutation
  test of the mean per-query difference (exact under the null that the two models'
  outcomes are exchangeable query by query), two-sided.
* :func:`mcnemar_exact` -- the same question for 0/1 outcomes via the exact binomial test on
  discordant queries.
* :func:`holm` -- Holm-Bonferroni adjustment of a family of p-values.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from scipy import stats


def hits(ranks: np.ndarray, k: int) -> np.ndarray:
    return (np.asarray(ranks) <= k).astype(np.float64)


def reciprocal(ranks: np.ndarray) -> np.ndarray:
    return 1.0 / np.asarray(ranks, dtype=np.float64)


def _as_strata(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[None, :] if x.ndim == 1 else x


@dataclasses.dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    level: float

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {prefix: self.estimate, f"{prefix}_ci_low": self.low, f"{prefix}_ci_high": self.high}


def bootstrap_ci(
    outcomes: np.ndarray, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0, chunk: int = 200
) -> Interval:
    """Percentile bootstrap CI for the mean of ``outcomes`` ((N,) or (seeds, N), stratified)."""
    x = _as_strata(outcomes)
    s, n = x.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        total = np.zeros(b)
        for row in x:  # resample within each seed's sample
            total += row[rng.integers(0, n, size=(b, n))].mean(axis=1)
        means[start : start + b] = total / s
    alpha = (1 - level) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return Interval(float(x.mean()), float(lo), float(hi), level)


def paired_bootstrap_diff(
    a: np.ndarray, b: np.ndarray, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0, chunk: int = 200
) -> Interval:
    """Percentile bootstrap CI of ``mean(a) - mean(b)`` for outcomes aligned query by query
    ((N,) or (seeds, N), stratified by seed like :func:`bootstrap_ci`): each replicate draws one
    set of query indices per seed and applies it to both models, so the interval is that of the
    paired difference (narrower than two separate intervals when the models agree on queries).
    This is :func:`bootstrap_ci` of the per-query difference ``a - b``."""
    a, b = _as_strata(a), _as_strata(b)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align: shapes {a.shape} and {b.shape}")
    return bootstrap_ci(a - b, n_boot=n_boot, level=level, seed=seed, chunk=chunk)


@dataclasses.dataclass(frozen=True)
class PairedTest:
    mean_a: float
    mean_b: float
    diff: float  # mean_a - mean_b
    p_value: float
    method: str


def paired_permutation_test(a: np.ndarray, b: np.ndarray, *, n_perm: int = 10000, seed: int = 0) -> PairedTest:
    """Two-sided sign-flip test of mean(a - b) = 0 over aligned queries.

    The p-value counts the observed statistic itself ((1 + #extreme) / (1 + n_perm)), so it
    is never 0. When every difference is 0 the p-value is 1.
    """
    a, b = _as_strata(a), _as_strata(b)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align: shapes {a.shape} and {b.shape}")
    d = (a - b).ravel()
    obs = abs(d.mean())
    nz = d[d != 0]
    if nz.size == 0:
        return PairedTest(float(a.mean()), float(b.mean()), 0.0, 1.0, "sign-flip permutation")
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, n_perm, 500):
        m = min(500, n_perm - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(m, nz.size))
        extreme += int(np.count_nonzero(np.abs(signs @ nz) / d.size >= obs - 1e-12))
    p = (1 + extreme) / (1 + n_perm)
    return PairedTest(float(a.mean()), float(b.mean()), float(d.mean()), p, "sign-flip permutation")


def mcnemar_exact(hits_a: np.ndarray, hits_b: np.ndarray) -> PairedTest:
    """Exact McNemar test for paired 0/1 outcomes (binomial test on the discordant queries)."""
    a, b = np.asarray(hits_a, bool).ravel(), np.asarray(hits_b, bool).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align: shapes {a.shape} and {b.shape}")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    p = 1.0 if only_a + only_b == 0 else stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
    return PairedTest(float(a.mean()), float(b.mean()), float(a.mean() - b.mean()), float(p), "exact McNemar")


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given)."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p)
    adj = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj.tolist()


def correlations(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(Pearson r, Spearman rho); NaN where a side is constant."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    return float(stats.pearsonr(x, y).statistic), float(stats.spearmanr(x, y).statistic)
