"""Calibration for the meta-evaluation: a monotone (isotonic) map from a candidate proxy to the
ground truth XLR, judged on held-out language pairs (leave one pair out, cross-conformal intervals).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..metrics.table import parse_metric
from .evaluate import pair_labels


@dataclasses.dataclass
class Calibration:
    """Leave-one-pair-out evaluation of a monotone (isotonic) map from a candidate to XLR.

    For each held-out pair the map is fitted on the (model, pair) means of all other pairs; the
    interval is +- the ``level`` quantile of the absolute leave-one-pair-out residuals within
    those fitting pairs (a cross-conformal interval). ``rows`` has one row per (held-out pair, model).

    Args:
        rows: columns ``pair``, ``model``, ``x`` (the candidate's value, mapped from),
            ``xlr_true``, ``xlr_pred``, ``low``, ``high`` (the interval, clipped to [0, 1]),
            ``abs_error`` and ``covered`` (whether the true value lies in the unclipped interval).
        level: the interval's nominal coverage, e.g. 0.9.
        x: the candidate's metric key (``"bkr@10"``).
        y: the ground truth's metric key.
    """

    rows: pd.DataFrame
    level: float
    x: str = "bkr@10"
    y: str = "xlr@10"

    def summary(self) -> pd.DataFrame:
        """Per held-out pair: how well the map fitted on the other pairs predicts it.

        Returns:
            One row per pair: ``mae`` and ``max_error`` (absolute XLR error), ``coverage`` (share
            of models whose true XLR lies in the interval) and ``spearman_pred_vs_true`` (NaN
            with fewer than 3 models).
        """
        g = self.rows.groupby("pair")
        return pd.DataFrame(
            {
                "mae": g["abs_error"].mean(),
                "max_error": g["abs_error"].max(),
                "coverage": g["covered"].mean(),
                "spearman_pred_vs_true": g.apply(
                    lambda d: stats.spearmanr(d["xlr_pred"], d["xlr_true"]).statistic if len(d) > 2 else np.nan,
                    include_groups=False,
                ),
            }
        ).reset_index()


def fit_calibration(x: np.ndarray, xlr: np.ndarray, increasing: bool = True):
    """A monotone isotonic map from a candidate to XLR (clipped outside the fitted range).

    Args:
        x: 1-D values of the candidate (one per model, or per model and pair).
        xlr: the matching 1-D XLR values.
        increasing: the map's direction (False for a candidate where lower is better).

    Returns:
        A fitted :class:`sklearn.isotonic.IsotonicRegression` (outputs in [0, 1]; inputs outside
        the fitted range get the prediction at its nearest end).
    """
    from sklearn.isotonic import IsotonicRegression

    return IsotonicRegression(increasing=increasing, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(x, xlr)


def calibrate_leave_one_pair_out(
    records: Sequence[dict[str, Any]], x: str = "bkr@10", y: str = "xlr@10", level: float = 0.9
) -> Calibration:
    """Leave-one-pair-out isotonic calibration of candidate ``x`` to ``y`` (XLR), see :class:`Calibration`.

    Records are first averaged per (pair, model) over seeds. A pair is held out in turn; the map
    is fitted on the other pairs; its interval half-width is the ``level * (1 + 1/n)`` quantile
    of the absolute residuals of each other pair predicted by a map fitted without that pair
    too. A held-out pair is skipped when the other pairs hold fewer than 3 (pair, model) means.

    Args:
        records: evaluation records with ``model``, ``src_lang``, ``tgt_lang`` (or ``pair``)
            and the two metric keys.
        x: the candidate calibrated from (a candidate proxy of the metric table; the map
            decreases where lower is better).
        y: the ground-truth metric predicted.
        level: nominal coverage of the interval.

    Returns:
        A :class:`Calibration` (``rows`` empty when no pair could be held out).

    Raises:
        BackretrievalError: ``x`` is no candidate proxy or ``y`` cannot rank models (named).
    """
    spec, _ = parse_metric(x, candidate=True)
    parse_metric(y, rankable=True)
    up = spec.higher_is_better
    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
    means = df.groupby(["pair", "model"], sort=False)[[x, y]].mean().reset_index()
    rows = []
    for pair in means["pair"].unique():
        train, test = means[means["pair"] != pair], means[means["pair"] == pair]
        if train["pair"].nunique() < 1 or len(train) < 3:
            continue
        iso = fit_calibration(train[x].to_numpy(), train[y].to_numpy(), up)
        # honest residuals for the interval: each training pair predicted by a map fitted
        # without it (in-sample isotonic residuals are far too small)
        resid = []
        for other in train["pair"].unique():
            fit_on, judge = train[train["pair"] != other], train[train["pair"] == other]
            if len(fit_on) >= 2:
                m = fit_calibration(fit_on[x].to_numpy(), fit_on[y].to_numpy(), up)
                resid.extend(np.abs(m.predict(judge[x].to_numpy()) - judge[y].to_numpy()))
        if not resid:
            resid = list(np.abs(iso.predict(train[x].to_numpy()) - train[y].to_numpy()))
        q = float(np.quantile(resid, min(1.0, level * (1 + 1 / len(resid)))))
        pred = iso.predict(test[x].to_numpy())
        for (_, r), p_ in zip(test.iterrows(), pred):
            rows.append(
                {
                    "pair": pair,
                    "model": r["model"],
                    "x": r[x],
                    "xlr_true": r[y],
                    "xlr_pred": float(p_),
                    "low": max(0.0, float(p_) - q),
                    "high": min(1.0, float(p_) + q),
                    "abs_error": abs(float(p_) - r[y]),
                    "covered": bool(p_ - q <= r[y] <= p_ + q),
                }
            )
    return Calibration(pd.DataFrame(rows), level, x, y)
