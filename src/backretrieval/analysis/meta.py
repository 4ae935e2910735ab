"""Meta-evaluation (Backretrieval paper, Section 3.1, Table 1 and Fig. 2): does BkR order models
the way the ground truth XLR does, and better than the CORR baseline?

For every language pair and seed the models are data points (XLR_f, BkR_f, CORR_f); Pearson
and Spearman of BkR vs XLR and of CORR vs XLR are computed across models, then averaged over
seeds (mean and sd). BkR's and CORR's correlations are compared across seeds with a paired
Wilcoxon signed-rank test (and a paired t-test), per pair and correlation type.

Also here: calibration (a monotone map from BkR to XLR, judged on held-out pairs) and the
"how weak may g be" comparison across image models.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from ..core import BackretrievalError
from .stats import correlations

TRUTH = "xlr@10"
CANDIDATES = {"bkr": "bkr@10", "corr": "corr"}


def per_seed_correlations(
    records: Sequence[dict[str, Any]], truth: str = TRUTH, candidates: dict[str, str] = CANDIDATES
) -> pd.DataFrame:
    """One row per (image_model, pair, seed): ``pearson_<c>``, ``spearman_<c>`` for each candidate
    metric c, computed across the models."""
    df = pd.DataFrame(records)
    df["pair"] = df["src_lang"] + "->" + df["tgt_lang"]
    rows = []
    for (img, pair, seed), g in df.groupby(["image_model", "pair", "seed"], sort=False):
        row: dict[str, Any] = {"image_model": img, "pair": pair, "seed": seed, "n_models": len(g)}
        for name, col in candidates.items():
            r, rho = correlations(g[truth].to_numpy(), g[col].to_numpy())
            row[f"pearson_{name}"], row[f"spearman_{name}"] = r, rho
        rows.append(row)
    return pd.DataFrame(rows)


def _paired_p(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(Wilcoxon signed-rank p, paired t-test p) for a - b over seeds; NaN when undefined."""
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    if a.size < 2 or np.all(a == b):
        return float("nan"), float("nan")
    w = stats.wilcoxon(a, b).pvalue
    t = stats.ttest_rel(a, b).pvalue
    return float(w), float(t)


def meta_table(per_seed: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Table 1: per pair, mean and sd over seeds of each correlation, and p-values of BkR vs CORR."""
    out: dict[str, dict[str, Any]] = {}
    for (img, pair), g in per_seed.groupby(["image_model", "pair"], sort=False):
        key = pair if per_seed["image_model"].nunique() == 1 else f"{pair} [{img}]"
        entry: dict[str, Any] = {"image_model": img, "seeds": int(len(g)), "n_models": int(g["n_models"].max())}
        for kind in ("pearson", "spearman"):
            for cand in ("bkr", "corr"):
                v = g[f"{kind}_{cand}"].to_numpy(float)
                entry[f"{kind}_{cand}"] = {
                    "mean": float(np.nanmean(v)) if np.isfinite(v).any() else float("nan"),
                    "sd": float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else 0.0,
                }
            w, t = _paired_p(g[f"{kind}_bkr"].to_numpy(float), g[f"{kind}_corr"].to_numpy(float))
            entry[f"p_{kind}_wilcoxon"], entry[f"p_{kind}_ttest"] = w, t
        out[key] = entry
    return out


# --------------------------------------------------------------------------- calibration

@dataclasses.dataclass
class Calibration:
    """Leave-one-pair-out evaluation of a monotone (isotonic) map from BkR to XLR.

    For each held-out pair the map is fitted on the (model, pair) means of all other pairs; the
    interval is +- the ``level`` quantile of the absolute leave-one-pair-out residuals within
    those fitting pairs (a cross-conformal interval). ``rows`` has one row per (held-out pair, model).
    """

    rows: pd.DataFrame
    level: float

    def summary(self) -> pd.DataFrame:
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


def fit_calibration(bkr: np.ndarray, xlr: np.ndarray):
    """An increasing isotonic map BkR -> XLR (clipped outside the fitted range)."""
    from sklearn.isotonic import IsotonicRegression

    return IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(bkr, xlr)


def calibrate_leave_one_pair_out(
    records: Sequence[dict[str, Any]], x: str = "bkr@10", y: str = TRUTH, level: float = 0.9
) -> Calibration:
    df = pd.DataFrame(records)
    df["pair"] = df["src_lang"] + "->" + df["tgt_lang"]
    means = df.groupby(["pair", "model"], sort=False)[[x, y]].mean().reset_index()
    rows = []
    for pair in means["pair"].unique():
        train, test = means[means["pair"] != pair], means[means["pair"] == pair]
        if train["pair"].nunique() < 1 or len(train) < 3:
            continue
        iso = fit_calibration(train[x].to_numpy(), train[y].to_numpy())
        # honest residuals for the interval: each training pair predicted by a map fitted
        # without it (in-sample isotonic residuals are far too small)
        resid = []
        for other in train["pair"].unique():
            fit_on, judge = train[train["pair"] != other], train[train["pair"] == other]
            if len(fit_on) >= 2:
                m = fit_calibration(fit_on[x].to_numpy(), fit_on[y].to_numpy())
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
                    "bkr": r[x],
                    "xlr_true": r[y],
                    "xlr_pred": float(p_),
                    "low": max(0.0, float(p_) - q),
                    "high": min(1.0, float(p_) + q),
                    "abs_error": abs(float(p_) - r[y]),
                    "covered": bool(p_ - q <= r[y] <= p_ + q),
                }
            )
    return Calibration(pd.DataFrame(rows), level)


# --------------------------------------------------------------------------- weak g

def image_model_degradation(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean correlation with XLR per image model (averaged over pairs and seeds): how BkR holds
    up as the image similarity g gets weaker. CORR is shown beside it."""
    cols = ["pearson_bkr", "spearman_bkr", "pearson_corr", "spearman_corr"]
    g = per_seed.groupby("image_model", sort=False)[cols]
    return g.mean().join(g.std(ddof=1).add_suffix("_sd")).reset_index()


# --------------------------------------------------------------------------- the whole study

@dataclasses.dataclass
class MetaResult:
    """Everything the ``meta`` command reports. ``results[image_model]`` is the evaluation grid run
    with that image model; the first image model is the main one."""

    results: dict[str, Any]  # image model -> EvalResult
    per_seed: pd.DataFrame
    table: dict[str, dict[str, Any]]  # main image model only (Table 1)
    calibration: Calibration | None
    degradation: pd.DataFrame

    @property
    def main(self):
        return next(iter(self.results.values()))

    @property
    def run(self) -> dict[str, Any]:
        """What produced the results: configuration, input fingerprints, software environment."""
        return self.main.run


def run_meta(cfg, out_dir=None, *, image_models: Sequence[str] = (), progress: bool = True, log=lambda m: None, executor=None) -> MetaResult:
    """Run the evaluation grid of ``cfg`` (its ``image_model`` is the main g) together with each
    extra image model (sharing everything that does not depend on g), then the meta-evaluation."""
    from .evaluate import evaluate

    if len(cfg.models) < 3:
        raise BackretrievalError(f"meta-evaluation correlates metrics across models: give at least 3 models, got {len(cfg.models)}")
    cfg = dataclasses.replace(cfg, extra_image_models=[*cfg.extra_image_models, *image_models])
    res = evaluate(cfg, out_dir, progress=progress, log=log, executor=executor)
    results = {cfg.image_model: res, **res.others}
    records = [r for sub in results.values() for r in sub.records]
    bkr_key = f"bkr@{cfg.k}"
    missing = [r for r in records if r.get(TRUTH) is None or r.get(bkr_key) is None]
    if missing:
        r = missing[0]
        raise BackretrievalError(
            f"meta-evaluation needs both ground truth and images: {r['model']} {r['src_lang']}->{r['tgt_lang']} has no "
            f"{TRUTH if r.get(TRUTH) is None else bkr_key}"
        )
    per_seed = per_seed_correlations(records, candidates={"bkr": bkr_key, "corr": "corr"})
    main = per_seed[per_seed["image_model"] == cfg.image_model]
    calibration = None
    if len(cfg.pairs) >= 3:
        calibration = calibrate_leave_one_pair_out(res.records, x=bkr_key)
    return MetaResult(results, per_seed, meta_table(main), calibration, image_model_degradation(per_seed))
