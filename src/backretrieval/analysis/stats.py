"""Statistics over per-query outcomes: bootstrap confidence intervals and paired tests.

Outcomes are per-query numbers whose mean is the metric: ``hits(ranks, K)`` (0/1, mean =
Recall@K / BkR@K) or ``reciprocal(ranks)`` (mean = MRR), from :mod:`backretrieval.metrics.table`. With several seeds the samples are
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
* :func:`bootstrap_means` -- the replicate means of several models' outcomes under the *same*
  resampled queries (one draw serves every model's interval and every paired gap's interval).
* :func:`paired_se` and :func:`tost` -- equivalence: the standard error of a paired mean
  difference and the two one-sided tests of ``|difference| < margin`` with the ``1 - 2 alpha``
  interval that goes with them.
* :func:`holm` -- Holm-Bonferroni adjustment of a family of p-values.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from scipy import special, stats

from ..metrics.table import hits, reciprocal  # the per-query outcomes of the metric table


def _as_strata(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[None, :] if x.ndim == 1 else x


@dataclasses.dataclass(frozen=True)
class Interval:
    """A bootstrap estimate with its percentile interval.

    Args:
        estimate: the statistic on the full sample (the mean, or the mean difference).
        low: lower end of the interval (the ``(1 - level) / 2`` quantile of the replicates).
        high: upper end (the ``(1 + level) / 2`` quantile).
        level: confidence level, e.g. 0.95.
    """

    estimate: float
    low: float
    high: float
    level: float

    def as_dict(self, prefix: str) -> dict[str, float]:
        """Flat record of the interval (``level`` is left out).

        Args:
            prefix: key of the estimate, e.g. ``"bkr@1"``.

        Returns:
            ``{prefix: estimate, prefix_ci_low: low, prefix_ci_high: high}``.
        """
        return {prefix: self.estimate, f"{prefix}_ci_low": self.low, f"{prefix}_ci_high": self.high}


def bootstrap_means(
    series: "list[np.ndarray] | tuple[np.ndarray, ...]", *, n_boot: int = 1000, seed: int = 0, chunk: int = 200
) -> np.ndarray:
    """Bootstrap replicate means of several aligned outcome arrays under the same resampled queries.

    Each replicate draws, within every seed's row, N query indices with replacement (one draw per
    seed and replicate, in the order :func:`bootstrap_ci` draws them) and applies them to every
    series, so replicate b of two models is on the same queries: the difference of their
    replicate means is the paired bootstrap replicate of their gap.

    Args:
        series: outcome arrays of the same shape, each (N,) or (seeds, N).
        n_boot: number of bootstrap replicates.
        seed: seed of ``numpy.random.default_rng`` drawing the indices.
        chunk: replicates drawn per block (memory ``chunk x N``); part of the random stream.

    Returns:
        An array (len(series), n_boot): replicate b's mean over seeds of each series.

    Raises:
        ValueError: the series do not all have the same shape.
    """
    xs = [_as_strata(x) for x in series]
    if len({x.shape for x in xs}) > 1:
        raise ValueError(f"paired outcomes must align: shapes {sorted({x.shape for x in xs})}")
    s, n = xs[0].shape
    rng = np.random.default_rng(seed)
    means = np.empty((len(xs), n_boot))
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        total = np.zeros((len(xs), b))
        for row in range(s):  # resample within each seed's sample
            idx = rng.integers(0, n, size=(b, n))
            for j, x in enumerate(xs):
                total[j] += x[row][idx].mean(axis=1)
        means[:, start : start + b] = total / s
    return means


def bootstrap_ci(
    outcomes: np.ndarray, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0, chunk: int = 200
) -> Interval:
    """Percentile bootstrap CI for the mean of ``outcomes`` ((N,) or (seeds, N), stratified).

    Each replicate draws N query indices with replacement within every seed's row and averages
    the rows' means, so the interval is that of the mean over seeds (:func:`bootstrap_means`).

    Args:
        outcomes: per-query outcomes, (N,) or (seeds, N) (e.g. :func:`hits`, :func:`reciprocal`).
        n_boot: number of bootstrap replicates.
        level: confidence level of the two-sided percentile interval.
        seed: seed of ``numpy.random.default_rng`` drawing the indices.
        chunk: replicates drawn per block (memory ``chunk x N``); part of the random stream, so
            changing it changes the interval slightly.

    Returns:
        An :class:`Interval`: the mean of all outcomes and the ``(1 - level) / 2`` and
        ``(1 + level) / 2`` quantiles of the replicate means.
    """
    x = _as_strata(outcomes)
    means = bootstrap_means([x], n_boot=n_boot, seed=seed, chunk=chunk)[0]
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
    This is :func:`bootstrap_ci` of the per-query difference ``a - b``.

    Args:
        a, b: per-query outcomes of two models on the same queries, same shape.
        n_boot: number of bootstrap replicates.
        level: confidence level of the two-sided percentile interval.
        seed: seed of the resampling.
        chunk: replicates drawn per block (part of the random stream).

    Returns:
        An :class:`Interval` of ``mean(a) - mean(b)``.

    Raises:
        ValueError: ``a`` and ``b`` do not have the same shape.
    """
    a, b = _as_strata(a), _as_strata(b)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align: shapes {a.shape} and {b.shape}")
    return bootstrap_ci(a - b, n_boot=n_boot, level=level, seed=seed, chunk=chunk)


@dataclasses.dataclass(frozen=True)
class PairedTest:
    """Result of a paired test of two models on the same queries.

    Args:
        mean_a: mean outcome of model A.
        mean_b: mean outcome of model B.
        diff: ``mean_a - mean_b``.
        p_value: two-sided p-value of "no difference".
        method: the test, ``"sign-flip permutation"`` or ``"exact McNemar"``.
    """

    mean_a: float
    mean_b: float
    diff: float  # mean_a - mean_b
    p_value: float
    method: str


def sign_flip_p(
    d: np.ndarray,
    *,
    statistic: str = "mean",
    n_random: int = 10000,
    seed: int = 0,
    exact_max: int = 0,
    chunk: int = 500,
    tol: float = 1e-12,
    binary_exact: bool = False,
) -> tuple[float, str, int]:
    """Two-sided paired sign-flip test of mean(d) = 0: the project's one implementation.

    Under the null each non-zero difference's sign is a fair coin. A sign pattern is *extreme*
    when its statistic reaches the observed one within ``tol``: ``|sum(s * d)| / n >= |mean(d)|
    - tol`` (``statistic="mean"``) or ``|sum(s * d)| >= |sum(d)| - tol`` (``"sum"``). With at
    most ``exact_max`` non-zero differences all ``2^n`` patterns are enumerated (exact p =
    extreme / all); otherwise ``n_random`` random patterns are drawn from
    ``numpy.random.default_rng(seed)`` in blocks of ``chunk`` (part of the stream, hence of the
    result) and p = (1 + extreme) / (1 + n_random), never 0. With ``binary_exact``, differences
    whose non-zero values all have the same magnitude (two models' 0/1 outcomes: each query is
    won, lost or tied) get the exact p at any size: the sum of the flipped signs is ``2B - n``
    with B binomial(n, 1/2), so p = P(|2B - n| >= |wins - losses|) (the two-sided exact McNemar
    test on the discordant queries).

    Args:
        d: per-query differences (any shape; flattened).
        statistic: ``"mean"`` or ``"sum"`` (equivalent up to ``tol``'s scale).
        n_random: random sign patterns when not exact.
        seed: seed of the patterns.
        exact_max: enumerate exactly up to this many non-zero differences (0: never).
        chunk: patterns drawn per block.
        tol: tolerance of the "reaches the observed statistic" comparison.
        binary_exact: the exact binomial p when every non-zero difference has the same magnitude.

    Returns:
        ``(p, method, nonzero)``: the p-value (1.0 when every difference is 0), ``"exact"`` or
        ``"random"``, and the number of non-zero differences.

    Raises:
        ValueError: an unknown ``statistic``.
    """
    if statistic not in ("mean", "sum"):
        raise ValueError(f"statistic must be 'mean' or 'sum', got {statistic!r}")
    d = np.asarray(d, dtype=np.float64).ravel()
    nz = d[d != 0]
    if nz.size == 0:
        return 1.0, "exact", 0
    mag = np.abs(nz)
    if binary_exact and float(mag.max() - mag.min()) <= tol * float(mag.max()):
        wins = int(np.count_nonzero(nz > 0))
        return min(1.0, 2.0 * float(special.bdtr(min(wins, nz.size - wins), nz.size, 0.5))), "exact", int(nz.size)
    if statistic == "mean":
        obs = abs(d.mean())
        count = lambda signs: int(np.count_nonzero(np.abs(signs @ nz) / d.size >= obs - tol))  # noqa: E731
    else:
        obs = abs(nz.sum())
        count = lambda signs: int(np.count_nonzero(np.abs(signs @ nz) >= obs - tol))  # noqa: E731
    if nz.size <= exact_max:
        n = nz.size
        extreme, total = 0, 0
        block = 1 << min(n, 16)  # bit j of the pattern index flips the sign of nz[j]
        for start in range(0, 1 << n, block):
            idx = np.arange(start, start + block, dtype=np.int64)
            extreme += count(1.0 - 2.0 * ((idx[:, None] >> np.arange(n)) & 1))
            total += block
        return extreme / total, "exact", int(nz.size)
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, n_random, chunk):
        m = min(chunk, n_random - start)
        extreme += count(rng.choice(np.array([-1.0, 1.0]), size=(m, nz.size)))
    return (1 + extreme) / (1 + n_random), "random", int(nz.size)


def paired_permutation_test(a: np.ndarray, b: np.ndarray, *, n_perm: int = 10000, seed: int = 0) -> PairedTest:
    """Two-sided sign-flip test of mean(a - b) = 0 over aligned queries (:func:`sign_flip_p`).

    Args:
        a, b: per-query outcomes of two models, (N,) or (seeds, N), aligned.
        n_perm: random sign patterns.
        seed: seed of the patterns.

    Returns:
        A :class:`PairedTest`. The p-value counts the observed statistic itself ((1 + #extreme)
        / (1 + n_perm)), so it is never 0; when every difference is 0 it is 1.

    Raises:
        ValueError: ``a`` and ``b`` do not have the same shape.
    """
    a, b = _as_strata(a), _as_strata(b)
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align: shapes {a.shape} and {b.shape}")
    d = (a - b).ravel()
    p, _, nonzero = sign_flip_p(d, statistic="mean", n_random=n_perm, seed=seed, chunk=500, tol=1e-12)
    diff = 0.0 if nonzero == 0 else float(d.mean())
    return PairedTest(float(a.mean()), float(b.mean()), diff, p, "sign-flip permutation")


def mcnemar_exact(hits_a: np.ndarray, hits_b: np.ndarray) -> PairedTest:
    """Exact McNemar test for paired 0/1 outcomes (binomial test on the discordant queries).

    Args:
        hits_a: 0/1 (or boolean) outcomes of model A, any shape (flattened; non-zero = hit).
        hits_b: outcomes of model B on the same queries, same shape.

    Returns:
        A :class:`PairedTest` whose p-value is the two-sided exact binomial test (p = 1/2) of
        the queries only A gets right among those exactly one model gets right; 1.0 when no
        query is discordant.

    Raises:
        ValueError: the two arrays do not have the same number of outcomes.
    """
    a, b = np.asarray(hits_a, bool).ravel(), np.asarray(hits_b, bool).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes must align: shapes {a.shape} and {b.shape}")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    p = 1.0 if only_a + only_b == 0 else stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
    return PairedTest(float(a.mean()), float(b.mean()), float(a.mean() - b.mean()), float(p), "exact McNemar")


def paired_se(d: np.ndarray) -> tuple[float, int]:
    """The standard error of the mean of paired per-query differences, stratified by seed.

    Args:
        d: per-query differences of two models, (N,) or (seeds, N): the mean over seeds of the
            seeds' means is the gap, so its variance is the sum of the seeds' ``var / N`` over
            the number of seeds squared.

    Returns:
        ``(se, df)``: the standard error (0.0 when every difference is 0; NaN with N = 1 and
        some difference not 0) and its degrees of freedom, ``seeds * (N - 1)``.
    """
    x = _as_strata(d)
    s, n = x.shape
    if not np.any(x):
        return 0.0, s * (n - 1)
    if n < 2:
        return float("nan"), 0
    return float(np.sqrt(np.var(x, axis=1, ddof=1).sum() / n) / s), s * (n - 1)


def tost(diff: float, se: float, margin: float, *, alpha: float = 0.05, df: int | None = None) -> tuple[float, float, float]:
    """Two one-sided tests (TOST) of equivalence: is the gap ``diff`` inside ``(-margin, +margin)``?

    The null hypothesis is that the true gap lies outside: ``gap <= -margin`` or ``gap >=
    margin``; each side is tested one-sided with the statistic ``(diff -+ margin) / se`` (Student's
    t with ``df`` degrees of freedom, else the normal), and the TOST p-value is the larger of the
    two. It is below ``alpha`` exactly when the ``1 - 2 alpha`` interval ``diff -+ q * se`` lies
    inside ``(-margin, +margin)``.

    Args:
        diff: the estimated gap.
        se: its standard error (0: no uncertainty, as for two models whose every paired
            difference is 0).
        margin: the equivalence margin, > 0.
        alpha: the level of each one-sided test (and ``1 - 2 alpha`` of the interval).
        df: degrees of freedom of the t distribution; None or 0: the normal.

    Returns:
        ``(p, low, high)``: the TOST p-value (1.0 with an undefined standard error) and the
        ``1 - 2 alpha`` interval of the gap.
    """
    if not np.isfinite(se):
        return 1.0, float("-inf"), float("inf")
    if se == 0:
        return (0.0 if abs(diff) < margin else 1.0), float(diff), float(diff)
    if df:  # Student's t: sf(x) = stdtr(df, -x)
        p = max(float(special.stdtr(df, -(diff + margin) / se)), float(special.stdtr(df, -(margin - diff) / se)))
        q = float(special.stdtrit(df, 1 - alpha))
    else:
        p = max(float(special.ndtr(-(diff + margin) / se)), float(special.ndtr(-(margin - diff) / se)))
        q = float(special.ndtri(1 - alpha))
    return p, float(diff - q * se), float(diff + q * se)


def holm(p_values: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given).

    Args:
        p_values: the family's raw p-values.

    Returns:
        Adjusted p-values in the input order: the i-th smallest is multiplied by ``m - i + 1``
        (m tests, i from 1), made non-decreasing along the sorted order and capped at 1.
    """
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
    """Pearson and Spearman correlation of two aligned samples.

    Args:
        x: 1-D values (e.g. one metric per model).
        y: 1-D values of the same length.

    Returns:
        ``(pearson_r, spearman_rho)``; both NaN when there are fewer than 3 values or either
        side is constant (a correlation is undefined or meaningless there).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    return float(stats.pearsonr(x, y).statistic), float(stats.spearmanr(x, y).statistic)
