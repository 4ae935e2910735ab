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
from ..metrics.table import metric_name, parse_metric
from .evaluate import pair_labels
from .models import RUN_ONLY_NOTE
from .stats import correlations

TRUTH = "xlr@10"
CANDIDATES = {"bkr": "bkr@10", "corr": "corr"}


def _check_metrics(*names: str) -> None:
    """Each name is a metric that can rank models (the metric table's rankable ones)."""
    for name in names:
        parse_metric(name, rankable=True)


def per_seed_correlations(
    records: Sequence[dict[str, Any]], truth: str = TRUTH, candidates: dict[str, str] = CANDIDATES
) -> pd.DataFrame:
    """One row per (image_model, pair, seed): ``pearson_<c>``, ``spearman_<c>`` for each candidate
    metric c, computed across the models.

    Args:
        records: evaluation records, one per (model, pair, seed, image model), each with
            ``image_model``, ``src_lang``, ``tgt_lang`` (or ``pair``), ``seed`` and the metric keys.
        truth: the ground-truth metric key (default ``"xlr@10"``).
        candidates: short name -> metric key of each metric judged against ``truth``.
            ``truth`` and the candidates are metrics that can rank models (the metric table's
            rankable ones).

    Returns:
        A frame with columns ``image_model``, ``pair``, ``seed``, ``n_models`` and
        ``pearson_<name>``, ``spearman_<name>`` per candidate, in the records' first-seen order.
        A correlation is NaN when the group has fewer than 3 models or either metric is constant
        across them.

    Raises:
        BackretrievalError: ``truth`` or a candidate is not a metric that can rank models (named).
    """
    _check_metrics(truth, *candidates.values())
    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
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
    """Table 1: per pair, mean and sd over seeds of each correlation, and p-values of BkR vs CORR.

    Args:
        per_seed: the frame of :func:`per_seed_correlations` with candidates ``bkr`` and ``corr``.

    Returns:
        Pair label (``"en->de"``; with several image models ``"en->de [g]"``) -> ``image_model``,
        ``seeds``, ``n_models``, ``{pearson,spearman}_{bkr,corr}`` as ``{"mean", "sd"}`` over
        seeds (NaN seeds ignored; mean NaN when every seed is NaN, sd 0.0 with fewer than two
        finite seeds) and ``p_{pearson,spearman}_{wilcoxon,ttest}``: two-sided paired p-values of
        BkR's against CORR's correlation across seeds (NaN with fewer than two seeds where both
        are defined, or when the two are equal on every seed).
    """
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

    Args:
        rows: columns ``pair``, ``model``, ``bkr`` (the metric mapped from), ``xlr_true``,
            ``xlr_pred``, ``low``, ``high`` (the interval, clipped to [0, 1]), ``abs_error`` and
            ``covered`` (whether the true value lies in the unclipped interval).
        level: the interval's nominal coverage, e.g. 0.9.
    """

    rows: pd.DataFrame
    level: float

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


def fit_calibration(bkr: np.ndarray, xlr: np.ndarray):
    """An increasing isotonic map BkR -> XLR (clipped outside the fitted range).

    Args:
        bkr: 1-D BkR values (one per model, or per model and pair).
        xlr: the matching 1-D XLR values.

    Returns:
        A fitted :class:`sklearn.isotonic.IsotonicRegression` (outputs in [0, 1]; inputs outside
        the fitted range get the prediction at its nearest end).
    """
    from sklearn.isotonic import IsotonicRegression

    return IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(bkr, xlr)


def calibrate_leave_one_pair_out(
    records: Sequence[dict[str, Any]], x: str = "bkr@10", y: str = TRUTH, level: float = 0.9
) -> Calibration:
    """Leave-one-pair-out isotonic calibration of ``x`` (BkR) to ``y`` (XLR), see :class:`Calibration`.

    Records are first averaged per (pair, model) over seeds. A pair is held out in turn; the map
    is fitted on the other pairs; its interval half-width is the ``level * (1 + 1/n)`` quantile
    of the absolute residuals of each other pair predicted by a map fitted without that pair
    too. A held-out pair is skipped when the other pairs hold fewer than 3 (pair, model) means.

    Args:
        records: evaluation records with ``model``, ``src_lang``, ``tgt_lang`` (or ``pair``)
            and the two metric keys.
        x: the metric calibrated from.
        y: the ground-truth metric predicted.
        level: nominal coverage of the interval.

    Returns:
        A :class:`Calibration` (``rows`` empty when no pair could be held out).

    Raises:
        BackretrievalError: ``x`` or ``y`` is not a metric that can rank models (named).
    """
    _check_metrics(x, y)
    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
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
    up as the image similarity g gets weaker. CORR is shown beside it.

    Args:
        per_seed: the frame of :func:`per_seed_correlations` (all image models).

    Returns:
        One row per image model (first-seen order): the mean of ``pearson_bkr``,
        ``spearman_bkr``, ``pearson_corr``, ``spearman_corr`` over pairs and seeds (NaN entries
        skipped) and their standard deviations (``*_sd``, ddof 1).
    """
    cols = ["pearson_bkr", "spearman_bkr", "pearson_corr", "spearman_corr"]
    g = per_seed.groupby("image_model", sort=False)[cols]
    return g.mean().join(g.std(ddof=1).add_suffix("_sd")).reset_index()


# --------------------------------------------------------------------------- the whole study

@dataclasses.dataclass
class MetaResult:
    """Everything the ``meta`` command reports. ``results[image_model]`` is the evaluation grid run
    with that image model; the first image model is the main one.

    Args:
        results: image model -> its :class:`~.evaluate.EvalResult`, the main one first.
        per_seed: :func:`per_seed_correlations` over all image models.
        table: :func:`meta_table` of the main image model (Table 1).
        calibration: :func:`calibrate_leave_one_pair_out` on the main image model's records,
            None with fewer than 3 pairs.
        degradation: :func:`image_model_degradation` ("how weak may g be").
        datasets: the datasets merged (one: ``[cfg.dataset]``).
    """

    results: dict[str, Any]  # image model -> EvalResult
    per_seed: pd.DataFrame
    table: dict[str, dict[str, Any]]  # main image model only (Table 1)
    calibration: Calibration | None
    degradation: pd.DataFrame
    datasets: list[str] = dataclasses.field(default_factory=list)  # the datasets merged (one: [cfg.dataset])

    @property
    def main(self):
        """The evaluation result of the main (first) image model."""
        return next(iter(self.results.values()))

    @property
    def run(self) -> dict[str, Any]:
        """What produced the results: configuration, input fingerprints, software environment."""
        return self.main.run


def run_meta(cfg, out_dir=None, *, image_models: Sequence[Any] = (), progress: bool = True, log=lambda m: None, executor=None) -> MetaResult:
    """Run the evaluation grid of ``cfg`` (its ``image_model`` is the main g) together with each
    extra image model (sharing everything that does not depend on g), then the meta-evaluation.

    BkR is taken at ``cfg.k`` (``bkr@K``); the ground truth is always ``xlr@10`` (``TRUTH``).

    Args:
        cfg: the grid (:class:`~.evaluate.EvalConfig`); needs a dataset with ground truth and images.
        out_dir: output folder of the grid (records, resumable); None writes nothing.
        image_models: extra (weaker) image models g, added to ``cfg.extra_image_models``: spec
            strings or Python objects (see :mod:`.models`).
        progress: show progress bars.
        log: called with each progress message.
        executor: how the grid's tasks run (see :func:`~.executors.get_executor`; None: local).

    Returns:
        The :class:`MetaResult`.

    Raises:
        BackretrievalError: fewer than 3 models, or a record without ``xlr@10`` or ``bkr@K``
            (the dataset lacks ground truth or images); the grid's own errors pass through.
    """
    from .evaluate import evaluate

    if len(cfg.models) < 3:
        raise BackretrievalError(f"meta-evaluation correlates metrics across models: give at least 3 models, got {len(cfg.models)}")
    cfg = dataclasses.replace(cfg, extra_image_models=[*cfg.extra_image_models, *image_models])
    res = evaluate(cfg, out_dir, progress=progress, log=log, executor=executor, needs=("xlr", "bkr"),
                   purpose="the meta-evaluation")
    results = {cfg.image_model_name: res, **res.others}
    return _meta(cfg, results, [cfg.dataset])


def _meta(cfg, results: dict[str, Any], datasets: list[str]) -> MetaResult:
    """The meta-evaluation of finished grids (``results[image_model]``, the main one first)."""
    res = results[cfg.image_model_name]
    records = [r for sub in results.values() for r in sub.records]
    bkr_key = metric_name("bkr@K", cfg.k)
    missing = [r for r in records if r.get(TRUTH) is None or r.get(bkr_key) is None]
    if missing:
        r = missing[0]
        raise BackretrievalError(
            f"meta-evaluation needs both ground truth and images: {r['model']} {r['src_lang']}->{r['tgt_lang']} has no "
            f"{TRUTH if r.get(TRUTH) is None else bkr_key}"
        )
    per_seed = per_seed_correlations(records, candidates={"bkr": bkr_key, "corr": "corr"})
    main = per_seed[per_seed["image_model"] == cfg.image_model_name]
    calibration = None
    if pair_labels(pd.DataFrame(res.records)).nunique() >= 3:
        calibration = calibrate_leave_one_pair_out(res.records, x=bkr_key)
    return MetaResult(results, per_seed, meta_table(main), calibration, image_model_degradation(per_seed), list(datasets))


def dataset_pairs(spec: str, options: dict[str, Any], pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs of ``pairs`` whose two languages dataset ``spec`` has (in the order given).

    Args:
        spec: a registered dataset or a data file.
        options: its loader options.
        pairs: the directed pairs asked for.

    Returns:
        The pairs the dataset can evaluate.

    Raises:
        DataError: the dataset cannot be loaded (named by the loader).
    """
    from ..core import DataError
    from ..data import load_dataset

    langs = list(dict.fromkeys(lang for pair in pairs for lang in pair))
    try:
        available = set(load_dataset(spec, langs=langs, **options).languages)
    except DataError as e:
        if not str(e).startswith("unknown language"):
            raise
        available = set(load_dataset(spec, langs=None, **options).languages)
    return [p for p in pairs if p[0] in available and p[1] in available]


def run_meta_datasets(
    cfg, datasets: Sequence[tuple[str, dict[str, Any]]], out_dir=None, *, image_models: Sequence[Any] = (),
    progress: bool = True, log=lambda m: None, executor=None,
) -> MetaResult:
    """One meta-evaluation over pairs that live in several datasets (e.g. ``en-de.jsonl`` and
    ``en-fr.jsonl``): each dataset is evaluated on the pairs of ``cfg.pairs`` it has (its grid in
    ``OUT/datasets/<name>/``, resumable on its own), then the records are merged into one
    Table 1, one calibration and one "how weak may g be" table. A pair found in several datasets
    is kept once per dataset, labelled ``"en->de [name]"``.

    Args:
        cfg: the grid (its ``dataset`` and ``dataset_options`` are replaced per dataset).
        datasets: ``(dataset, loader options)`` for each dataset.
        out_dir: the output folder (None: nothing written).
        image_models: extra (weaker) image models (spec strings or Python objects).
        progress, log, executor: as for :func:`~.evaluate.evaluate`.

    Returns:
        The merged :class:`MetaResult` (``results[g].records`` carry ``dataset`` and ``pair``).

    Raises:
        BackretrievalError: fewer than 3 models, a pair that no dataset has, a dataset with none of the pairs.
    """
    from pathlib import Path

    from .evaluate import EvalResult, evaluate, slug

    if len(cfg.models) < 3:
        raise BackretrievalError(f"meta-evaluation correlates metrics across models: give at least 3 models, got {len(cfg.models)}")
    if len(datasets) == 1:
        spec, options = datasets[0]
        return run_meta(dataclasses.replace(cfg, dataset=spec, dataset_options=dict(options)), out_dir,
                        image_models=image_models, progress=progress, log=log, executor=executor)
    # which pairs each dataset has, before anything is computed
    plans = [(spec, options, dataset_pairs(spec, options, cfg.pairs)) for spec, options in datasets]
    for s, t in cfg.pairs:
        if not any((s, t) in pairs for _, _, pairs in plans):
            raise BackretrievalError(f"pair {s}-{t} is in none of the datasets {', '.join(spec for spec, _, _ in plans)}")
    for spec, _, pairs in plans:
        if not pairs:
            raise BackretrievalError(f"dataset {spec} has none of the pairs {', '.join(f'{s}-{t}' for s, t in cfg.pairs)}")
    where = {}
    for spec, _, pairs in plans:
        for pair in pairs:
            where.setdefault(pair, []).append(spec)
    names: dict[str, str] = {}
    for spec, _, _ in plans:  # a short, unique, file-name-safe name per dataset
        name = slug(Path(spec).name)
        while name in names.values():
            name += "+"
        names[spec] = name
    merged: dict[str, list[dict[str, Any]]] = {}
    runs = []
    said: set[str] = set()

    def log_once(msg: str) -> None:  # the run-only note every dataset's grid would repeat is said once
        if RUN_ONLY_NOTE in msg:
            if msg in said:
                return
            said.add(msg)
        log(msg)

    extra = [*cfg.extra_image_models, *image_models]
    for spec, options, pairs in plans:
        sub = dataclasses.replace(cfg, dataset=spec, dataset_options=dict(options), pairs=pairs, extra_image_models=extra)
        log(f"meta: dataset {spec}: pairs {', '.join(f'{s}-{t}' for s, t in pairs)}")
        res = evaluate(sub, None if out_dir is None else Path(out_dir) / "datasets" / names[spec], progress=progress,
                       log=log_once, executor=executor, needs=("xlr", "bkr"), purpose="the meta-evaluation")
        runs.append(res.run)
        for g, r in {cfg.image_model_name: res, **res.others}.items():
            for rec in r.records:
                pair = (rec["src_lang"], rec["tgt_lang"])
                label = f"{pair[0]}->{pair[1]}" + (f" [{names[spec]}]" if len(where[pair]) > 1 else "")
                merged.setdefault(g, []).append({**rec, "pair": label})
    run = {"format": 1, "datasets": runs}
    results = {g: EvalResult(cfg, recs, {}, run=run) for g, recs in merged.items()}
    return _meta(dataclasses.replace(cfg, extra_image_models=extra), results, [spec for spec, _, _ in plans])
