"""What the verdict's tests can detect at a given number of queries: the numbers behind every
power note (:mod:`.power` before a run, :mod:`backretrieval.analysis.verdict` after it).

The verdict ships the best of k models when its gap to each of the other k - 1 is significant
after Holm's step-down correction over those k - 1 comparisons (:mod:`backretrieval.analysis.decision`).
:func:`ship_power` predicts how often that happens when the best leads each other model by the
same true gap:

* each comparison is the paired sign-flip test of the mean per-query difference; with q
  queries and a per-query standard deviation ``sd`` of the difference, the mean is about normal
  with mean ``gap`` and standard error ``sd / sqrt(q)``, and the test rejects at level ``a`` when
  it exceeds ``z(1 - a/2) * sqrt((sd^2 + gap^2) / q)`` (the sign-flip distribution's spread is
  that of the raw differences, gap included);
* the k - 1 statistics share the best model's outcomes: they are equicorrelated, correlation
  ``rho`` (0.5 when the models' outcomes have equal variances and equal pairwise correlations);
* 0/1 outcomes (hits at K) are tested exactly, and the exact test is discrete: the threshold moves
  up by half a query's difference (:data:`CONTINUITY`; without it the prediction was up to 9
  points too high at N = 50 in the simulation of bench/bench_verdict_calibration.py, with it
  every cell of that simulation lies within 5 points);
* Holm rejects all of them when the largest statistic clears the level ``alpha / (k - 1)``, the
  next ``alpha / (k - 2)``, ..., the smallest ``alpha``. Given the shared component the
  statistics are independent, so the chance that their order statistics clear that ladder is a
  small recursion over the ladder's rungs (:func:`_ladder`), integrated over the shared
  component by Gauss-Hermite quadrature: deterministic, no simulation.

:func:`detectable_gap` inverts it (the gap shipped 80 % of the time), :func:`queries_for_gap` the
other way (the queries a gap needs) and :func:`queries_for_equivalence` gives the queries the
equivalence test needs to show two models within the margin. ``sd`` comes from the data where
the per-query outcomes are there (the verdict) and is ``sqrt(0.5)`` before a run (two models
whose hits are independent, each near 0.5: the largest spread a difference of two shares can
have, so the note before a run is on the safe side). The harness ``bench/bench_verdict_calibration.py``
measures these predictions against simulated and real decisions (BENCHMARKS.md).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

SD_INDEPENDENT = math.sqrt(0.5)  # sd of the per-query difference of two independent hit rates near 0.5
RHO = 0.5  # correlation of the k - 1 comparisons with the best
POWER = 0.8
CONTINUITY = 0.5  # queries: the exact test of 0/1 outcomes is discrete (see ship_power)
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(32)
_WEIGHTS = _WEIGHTS / math.sqrt(2 * math.pi)


def _ladder(center: np.ndarray, scale: float, thresholds: np.ndarray) -> np.ndarray:
    """P(the order statistics of m iid N(center, scale^2) clear ``thresholds``): the largest
    above ``thresholds[0]``, the second largest above ``thresholds[1]``, ... (decreasing
    thresholds), for each value of ``center``."""
    m = len(thresholds)
    above = special.ndtr((center[:, None] - thresholds[None, :]) / scale)  # (nodes, m): P(z > t_i), increasing in i
    mass = np.diff(np.concatenate([np.zeros((len(center), 1)), above], axis=1), axis=1)  # P(t_i < z <= t_{i-1})
    dist = np.zeros((len(center), m + 1))
    dist[:, 0] = 1.0  # how many of the m statistics lie above the rungs passed so far
    used = np.zeros(len(center))
    counts = np.arange(m + 1)
    for i in range(m):
        q = np.clip(mass[:, i] / np.maximum(1.0 - used, 1e-300), 0.0, 1.0)
        new = np.zeros_like(dist)
        for c in range(i, m + 1):  # states below i were cut at the previous rung
            if not dist[:, c].any():
                continue
            x = counts[: m - c + 1]
            pmf = special.comb(m - c, x) * q[:, None] ** x * (1.0 - q[:, None]) ** (m - c - x)  # binomial (nodes, m - c + 1)
            new[:, c:] += dist[:, c : c + 1] * pmf
        new[:, : i + 1] = 0.0  # at least i + 1 statistics above rung i
        dist, used = new, used + mass[:, i]
    return dist[:, m]


def ship_power(gap: float, queries: float, sd: float = SD_INDEPENDENT, comparisons: int = 1, alpha: float = 0.05,
               rho: float = RHO, discrete: bool = False) -> float:
    """The probability that the verdict ships the best model when it leads each of the other
    ``comparisons`` models by ``gap`` (see the module's docstring for the model).

    Args:
        gap: the true gap in the metric between the best model and each other model.
        queries: the queries behind each estimate (N per seed times the seeds, at most the
            distinct items that can be queries).
        sd: the standard deviation of one query's difference between two models.
        comparisons: the comparisons Holm corrects for (the number of models - 1).
        alpha: the significance level.
        rho: the correlation between the comparisons.
        discrete: the outcomes are 0/1 (hits at K), tested exactly: the threshold moves up by
            half a query's difference (a continuity correction of 0.5 / queries on the mean).

    Returns:
        A probability in [0, 1] (0 for no query).
    """
    if queries <= 0 or comparisons < 1:
        return 0.0
    if sd <= 0:
        return 1.0 if gap > 0 else 0.0
    m = int(comparisons)
    widen = math.sqrt(1.0 + (gap / sd) ** 2)
    rungs = widen * stats.norm.isf(alpha / (2.0 * np.arange(m, 0, -1)))  # alpha/(2m) first: the largest statistic
    if discrete:
        rungs = rungs + CONTINUITY / (math.sqrt(queries) * sd)
    shift = gap * math.sqrt(queries) / sd
    r = min(max(rho, 0.0), 0.999) if m > 1 else 0.0
    center = shift + math.sqrt(r) * _NODES
    return float(np.clip(np.dot(_WEIGHTS, _ladder(center, math.sqrt(1.0 - r), rungs)), 0.0, 1.0))


def detectable_gap(queries: float, sd: float = SD_INDEPENDENT, comparisons: int = 1, alpha: float = 0.05,
                   power: float = POWER, discrete: bool = False) -> float:
    """The smallest gap between the best model and each other model that ``queries`` queries
    ship ``power`` of the time (:func:`ship_power`).

    Args:
        queries: the queries behind each estimate.
        sd: the standard deviation of one query's difference (default: the largest a
            difference of two shares can have, so the gap is an upper bound).
        comparisons: the comparisons Holm corrects for (models - 1).
        alpha: the significance level.
        power: the probability to reach.
        discrete: 0/1 outcomes (:func:`ship_power`).

    Returns:
        The gap, in (0, 1]; ``inf`` when even a gap of 1 is not reached (no query, or too few).
    """
    if queries <= 0 or ship_power(1.0, queries, sd, comparisons, alpha, discrete=discrete) < power:
        return math.inf
    low, high = 0.0, 1.0
    for _ in range(24):
        mid = (low + high) / 2
        if ship_power(mid, queries, sd, comparisons, alpha, discrete=discrete) >= power:
            high = mid
        else:
            low = mid
    return high


def queries_for_gap(gap: float, sd: float = SD_INDEPENDENT, comparisons: int = 1, alpha: float = 0.05,
                    power: float = POWER, discrete: bool = False) -> int:
    """The queries :func:`detectable_gap` needs to detect ``gap``.

    Args:
        gap: a gap in the metric, > 0.
        sd: the standard deviation of one query's difference.
        comparisons: the comparisons Holm corrects for (models - 1).
        alpha: the significance level.
        power: the probability to reach.
        discrete: 0/1 outcomes (:func:`ship_power`).

    Returns:
        The smallest number of queries whose detectable gap is at most ``gap``.
    """
    if gap <= 0:
        return math.inf  # type: ignore[return-value]
    high = 1
    while ship_power(gap, high, sd, comparisons, alpha, discrete=discrete) < power:
        high *= 2
        if high > 2**40:
            return math.inf  # type: ignore[return-value]
    low = high // 2  # fails (or 0)
    while high - low > 1:
        mid = (low + high) // 2
        if ship_power(gap, mid, sd, comparisons, alpha, discrete=discrete) >= power:
            high = mid
        else:
            low = mid
    return high


def queries_for_equivalence(gap: float, margin: float, sd: float, comparisons: int = 1, alpha: float = 0.05,
                            power: float = POWER) -> int | None:
    """The queries the equivalence test (two one-sided tests, Holm over ``comparisons``) needs
    to show two models within ``margin`` ``power`` of the time when their true gap is ``gap``
    (normal approximation, Bonferroni's level for the first of Holm's steps: on the safe side).

    Args:
        gap: the true gap between the two models.
        margin: the equivalence margin.
        sd: the standard deviation of one query's difference.
        comparisons: the comparisons Holm corrects for.
        alpha: the level of each one-sided test.
        power: the probability to reach.

    Returns:
        The queries; 0 when ``sd`` is 0 and ``|gap| < margin``; None when ``|gap| >= margin``
        (no amount of data shows it).
    """
    room = margin - abs(gap)
    if room <= 0:
        return None
    if sd <= 0:
        return 0
    z = stats.norm.isf(alpha / max(comparisons, 1)) + stats.norm.isf((1 - power) / (2 if gap == 0 else 1))
    return math.ceil((z * sd / room) ** 2)
