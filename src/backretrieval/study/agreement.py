"""Inter-rater agreement: Krippendorff's alpha (nominal, ordinal, interval), missing data allowed.

Krippendorff, K. (2011). *Computing Krippendorff's Alpha-Reliability*. Annenberg School for
Communication, University of Pennsylvania. With the coincidence matrix

    o_ck = sum over units u with m_u >= 2 values of  (number of ordered c-k value pairs from
           different raters in u) / (m_u - 1),      n_c = sum_k o_ck,  n = sum_c n_c,

alpha is ``1 - (n - 1) * sum_ck o_ck d_ck / sum_ck n_c n_k d_ck``, where ``d_ck`` is the squared
difference function of the level of measurement:

* nominal: 0 if c = k else 1;
* ordinal: ``(sum_{g=c..k} n_g - (n_c + n_k) / 2)^2`` (ranks by the pooled value frequencies);
* interval: ``(c - k)^2``.

Units rated by fewer than two raters are not pairable and are left out. Alpha is undefined
(``nan``) when fewer than two values are pairable or all pairable values are equal.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

LEVELS = ("nominal", "ordinal", "interval")


def value_counts(data: np.ndarray, values: Sequence[float]) -> np.ndarray:
    """(units, values) counts from a (raters, units) matrix with ``nan`` for missing."""
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2:
        raise ValueError(f"reliability data must be (raters, units), got shape {data.shape}")
    values = np.asarray(values, dtype=np.float64)
    present = ~np.isnan(data)
    unknown = ~np.isin(data[present], values)
    if unknown.any():
        raise ValueError(f"value {data[present][unknown][0]!r} is not in the value domain {values.tolist()}")
    counts = np.zeros((data.shape[1], values.size), dtype=np.float64)
    for j, v in enumerate(values):
        counts[:, j] = np.sum(data == v, axis=0)
    return counts


def coincidences(counts: np.ndarray) -> np.ndarray:
    """The coincidence matrix ``o`` (values x values) of pairable units."""
    counts = np.asarray(counts, dtype=np.float64)
    m = counts.sum(axis=1)
    keep = m >= 2
    c, m = counts[keep], m[keep]
    # ordered pairs of values from different raters: n_uc n_uk (c != k), n_uc (n_uc - 1) (c == k)
    o = (c / (m - 1)[:, None]).T @ c
    o -= np.diag((c / (m - 1)[:, None]).sum(axis=0))
    return o


def distance(level: str, values: np.ndarray, n_c: np.ndarray) -> np.ndarray:
    """Squared difference ``d_ck`` for the level of measurement."""
    values = np.asarray(values, dtype=np.float64)
    if level == "nominal":
        return 1.0 - np.eye(values.size)
    if level == "interval":
        return (values[:, None] - values[None, :]) ** 2
    if level == "ordinal":
        cum = np.concatenate([[0.0], np.cumsum(n_c)])
        i, k = np.meshgrid(np.arange(values.size), np.arange(values.size), indexing="ij")
        lo, hi = np.minimum(i, k), np.maximum(i, k)
        between = cum[hi + 1] - cum[lo]  # sum of n_g for g from lo to hi
        return (between - (n_c[i] + n_c[k]) / 2.0) ** 2
    raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")


def krippendorff_alpha(data: np.ndarray, level: str = "ordinal", values: Sequence[float] | None = None) -> float:
    """Alpha of a (raters, units) matrix with ``nan`` for missing ratings. ``values`` is the
    ordered value domain (default: the sorted distinct values present)."""
    data = np.asarray(data, dtype=np.float64)
    if values is None:
        values = np.unique(data[~np.isnan(data)])
    values = np.asarray(values, dtype=np.float64)
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    o = coincidences(value_counts(data, values))
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if n < 2:
        return float("nan")
    d = distance(level, values, n_c)
    expected = (n_c[:, None] * n_c[None, :] * d).sum()
    if expected == 0:
        return float("nan")
    return float(1.0 - (n - 1) * (o * d).sum() / expected)
