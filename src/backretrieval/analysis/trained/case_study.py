"""The case study of the Backretrieval paper (Sec. 3.2, Table 2 / Fig. 3): a base model vs
Triplet vs TripletXL, per directed language pair, judged by BkR and by ground-truth XLR.

Inputs are the evaluation results of :func:`backretrieval.analysis.run_grid` (per-query ranks
per model, pair and seed); everything here is a function of those arrays:

* :func:`stacked_hits` -- per-query hit@K outcomes as a (pairs, seeds, N) array. Several
  *training* seeds of one model (models with the same label) are averaged query by query, so a
  model's outcome per query is its mean over training seeds (the CIs below then resample queries,
  with the training seeds fixed; the spread over training seeds is reported separately).
* :func:`spread_stats` -- sd and IQR across pairs of two models and their differences, with a
  bootstrap CI over pairs (the same resampled pairs for both models).
* :func:`worst_pairs` -- the bottom quartile of pairs by the base's score and the mean lift of a
  model there, with a CI from the per-query paired differences.
* :func:`ordering_agreement` -- per pair, the Spearman correlation between the models' order by
  BkR and their order by XLR (do the two metrics order base / Triplet / TripletXL the same?).
* :func:`case_study_summary` -- all tables of ``backretrieval case-study report``.

The statistics build on :mod:`backretrieval.analysis.stats` (percentile bootstrap, sign-flip
permutation test, Holm) and scipy; tests check them against naive loops.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..stats import bootstrap_ci, correlations, hits, holm, paired_permutation_test

Pair = tuple[str, str]


def spec_label(spec: str) -> str:
    """Short name of a model spec: ``tripletxl:/x/tripletxl`` -> ``tripletxl``, ``tripletxl:/x/b1`` -> ``tripletxl:b1``.

    Args:
        spec: a text-model spec, ``NAME`` or ``NAME:PATH``.

    Returns:
        ``spec`` itself when it has no ``:``; else ``NAME`` when the path's last folder is
        ``NAME``, otherwise ``NAME:FOLDER``.
    """
    name, sep, arg = spec.partition(":")
    if not sep:
        return spec
    base = Path(arg.rstrip("/")).name
    return name if base == name else f"{name}:{base}"


def groups_of(models: Sequence[str], labels: Mapping[str, str]) -> dict[str, list[str]]:
    """``{label: [model specs]}`` in first-seen order; models sharing a label are training seeds of one model.

    Args:
        models: model specs.
        labels: display label of every spec in ``models``.

    Returns:
        Label -> the specs with that label, labels and specs in the order of ``models``.

    Raises:
        KeyError: a spec without a label.
    """
    out: dict[str, list[str]] = {}
    for m in models:
        out.setdefault(labels[m], []).append(m)
    return out


def stacked_hits(result: Any, models: Sequence[str], pairs: Sequence[Pair], key: str, k: int) -> np.ndarray:
    """Per-query hit@k outcomes, (pairs, seeds, N), averaged over ``models`` (training seeds of one
    model, evaluated on the same queries).

    Args:
        result: an :class:`~backretrieval.analysis.EvalResult` (``ranks[(model, src, tgt, seed)][key]``).
        models: one or more model specs of the result.
        pairs: directed (source, target) pairs.
        key: ``"bkr"`` or ``"xlr"``.
        k: the K of hit@K.

    Returns:
        float64 array (pairs, evaluation seeds, N) with values in [0, 1].
    """
    seeds = sorted({r["seed"] for r in result.records})
    label = {r.get("model_spec", r["model"]): r["model"] for r in result.records}  # a spec by the label the grid gave it
    per_model = [
        np.stack([np.stack([hits(result.ranks[(label[m], s, t, seed)][key], k) for seed in seeds]) for s, t in pairs])
        for m in models
    ]
    return np.mean(per_model, axis=0)


def _iqr(x: np.ndarray, axis: int = -1) -> np.ndarray:
    q75, q25 = np.quantile(x, [0.75, 0.25], axis=axis)
    return q75 - q25


def spread_stats(x: np.ndarray, y: np.ndarray, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """How the spread across pairs of model A (``x``, one estimate per pair) compares with B's (``y``).

    Args:
        x, y: per-pair estimates of the two models, aligned by pair.
        n_boot: bootstrap resamples of the pairs (the same resampled pairs for both models).
        level: confidence level of the percentile intervals.
        seed: seed of the resampling.

    Returns:
        ``sd_a``, ``sd_b``, ``sd_diff`` (= sd_a - sd_b, ddof 1) with ``sd_diff_low`` / ``sd_diff_high``;
        ``iqr_a``, ``iqr_b``, ``iqr_diff`` with its interval; ``p_sd_not_smaller`` = the share of
        resamples with sd_a >= sd_b (small: A's spread is reliably smaller).

    Raises:
        ValueError: fewer than 2 pairs or misaligned inputs.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"spread_stats needs two aligned 1-d arrays of >= 2 pairs, got {x.shape} and {y.shape}")
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))
    d_sd = x[idx].std(axis=1, ddof=1) - y[idx].std(axis=1, ddof=1)
    d_iqr = _iqr(x[idx], axis=1) - _iqr(y[idx], axis=1)
    q = [(1 - level) / 2, 1 - (1 - level) / 2]
    sd_lo, sd_hi = np.quantile(d_sd, q)
    iqr_lo, iqr_hi = np.quantile(d_iqr, q)
    sd_a, sd_b, iqr_a, iqr_b = float(x.std(ddof=1)), float(y.std(ddof=1)), float(_iqr(x)), float(_iqr(y))
    return {"sd_a": sd_a, "sd_b": sd_b, "sd_diff": sd_a - sd_b, "sd_diff_low": float(sd_lo), "sd_diff_high": float(sd_hi),
            "iqr_a": iqr_a, "iqr_b": iqr_b, "iqr_diff": iqr_a - iqr_b, "iqr_diff_low": float(iqr_lo), "iqr_diff_high": float(iqr_hi),
            "p_sd_not_smaller": float((d_sd >= 0).mean())}


def worst_pairs(base_scores: np.ndarray, frac: float = 0.25) -> np.ndarray:
    """Indices of the bottom ``frac`` of pairs by the base's score (at least one; ties: lower index first).

    Args:
        base_scores: the base model's estimate per pair.
        frac: share of pairs, in (0, 1].

    Returns:
        sorted int array of ``ceil(frac * pairs)`` pair indices.
    """
    s = np.asarray(base_scores, float)
    n = max(1, math.ceil(frac * s.size))
    return np.sort(np.argsort(s, kind="stable")[:n])


def mean_lift(model_hits: np.ndarray, base_hits: np.ndarray, *, n_boot: int = 1000, seed: int = 0) -> dict[str, float]:
    """Mean per-query difference model - base over the given (pairs, seeds, N) outcomes, with a
    95% percentile bootstrap CI (queries resampled within every (pair, seed) stratum).

    Args:
        model_hits: per-query outcomes of the model, (..., N), e.g. (pairs, seeds, N) hit@K.
        base_hits: the base model's outcomes on the same queries, same shape.
        n_boot: bootstrap replicates.
        seed: seed of the resampling.

    Returns:
        ``lift`` (mean of model - base over every query), ``lift_low`` and ``lift_high``.
    """
    d = np.asarray(model_hits, float) - np.asarray(base_hits, float)
    ci = bootstrap_ci(d.reshape(-1, d.shape[-1]), n_boot=n_boot, seed=seed)
    return {"lift": ci.estimate, "lift_low": ci.low, "lift_high": ci.high}


def _spearman3(a: np.ndarray, b: np.ndarray) -> float:
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(sps.spearmanr(a, b).statistic)


def ordering_agreement(bkr: pd.DataFrame, truth: pd.DataFrame) -> dict[str, Any]:
    """Per pair, do BkR and the ground truth order the models the same?

    Args:
        bkr: (pairs x models) BkR estimates.
        truth: (pairs x models) ground-truth estimates, same index and columns as ``bkr``.

    Returns:
        ``per_pair`` {pair: Spearman rho of the models' BkR vs truth scores, NaN when a metric ties
        every model}; ``mean_rho`` over the defined pairs; ``share_identical`` (rho = 1: the same
        order), ``share_positive`` (rho > 0) among defined pairs; ``n_defined``.

    Raises:
        ValueError: the two tables do not have the same pairs and models.
    """
    if list(bkr.index) != list(truth.index) or list(bkr.columns) != list(truth.columns):
        raise ValueError("ordering_agreement: BkR and ground-truth tables must have the same pairs and models")
    rho = {p: _spearman3(bkr.loc[p].to_numpy(float), truth.loc[p].to_numpy(float)) for p in bkr.index}
    defined = np.array([v for v in rho.values() if not math.isnan(v)])
    n = defined.size
    return {"per_pair": rho, "n_defined": int(n),
            "mean_rho": float(defined.mean()) if n else float("nan"),
            "share_identical": float((defined > 1 - 1e-9).mean()) if n else float("nan"),
            "share_positive": float((defined > 0).mean()) if n else float("nan")}


def _views(results: Mapping[str, Any], k: int, truth_k: int, names: Mapping[str, str]) -> list[tuple[str, str, str, int]]:
    views = [(f"BkR@{k} ({names['bkr']})", "bkr", "bkr", k), (f"XLR@{truth_k} ({names['bkr']})", "bkr", "xlr", truth_k)]
    if "xlr" in results:
        views.append((f"XLR@{truth_k} ({names['xlr']})", "xlr", "xlr", truth_k))
    return [v for v in views if any(v[2] in r for r in results[v[1]].ranks.values())]


def _metric_rows(title, stacks, per_seed, base, n_boot, pairs):
    rows, base_st = [], stacks[base]
    for lab, st in stacks.items():
        mean_ci = bootstrap_ci(st.reshape(-1, st.shape[-1]), n_boot=n_boot, seed=1)  # strata = (pair, seed)
        col = pd.Series(st.mean(axis=(1, 2)), index=[f"{s}->{t}" for s, t in pairs])
        row = {"metric": title, "model": lab, "mean": mean_ci.estimate, "ci_low": mean_ci.low, "ci_high": mean_ci.high,
               "sd": float(col.std(ddof=1)), "iqr": float(_iqr(col.to_numpy())), "min": float(col.min()), "worst_pair": str(col.idxmin()),
               "q25": float(col.quantile(0.25)), "max": float(col.max()), "training_seeds": len(per_seed[lab]),
               "sd_over_training_seeds": float(np.std(per_seed[lab], ddof=1)) if len(per_seed[lab]) > 1 else float("nan")}
        if lab != base:
            tests = [paired_permutation_test(st[i], base_st[i], n_perm=2000, seed=i) for i in range(len(pairs))]
            p_adj = holm([t.p_value for t in tests])
            row["pairs_better"] = int(sum(t.diff > 0 and p < 0.05 for t, p in zip(tests, p_adj)))
            row["pairs_worse"] = int(sum(t.diff < 0 and p < 0.05 for t, p in zip(tests, p_adj)))
            lift = mean_lift(st, base_st, n_boot=n_boot, seed=2)
            row.update({"delta_vs_base": lift["lift"], "delta_low": lift["lift_low"], "delta_high": lift["lift_high"]})
        rows.append(row)
    return rows


def case_study_summary(
    results: Mapping[str, Any], models: Sequence[str], labels: Mapping[str, str], pairs: Sequence[Pair], k: int, truth_k: int,
    n_boot: int, names: Mapping[str, str] | None = None, *, worst_frac: float = 0.25,
) -> dict[str, Any]:
    """All tables of the case study.

    Args:
        results: ``{"bkr": EvalResult on the image data, "xlr": EvalResult on held-out linked data (optional)}``.
        models: model specs, the base model first; specs sharing a label are training seeds of one model.
        labels: display label per spec.
        pairs: directed pairs.
        k: K of BkR@K.
        truth_k: K of the ground-truth XLR@K.
        n_boot: bootstrap resamples.
        names: display name per data set (keys ``bkr``, ``xlr``).
        worst_frac: the share of pairs (lowest base score) whose lift :func:`worst_pairs` reports.

    Returns:
        ``metrics`` (one row per metric and model: mean with CI, lift over the base with CI, sd / IQR /
        min / quartile across pairs, pairs significantly better / worse), ``per_pair`` (estimate and CI
        tables per metric), ``truth`` (did BkR tell the truth: correlations, sign agreement, rankings,
        per-pair ordering agreement), ``spread`` (Triplet vs base, TripletXL vs Triplet / base), ``worst`` (lift on the
        base's worst pairs), ``xl_vs_triplet`` (mean per-query lift of each TripletXL over the first Triplet, with CI).
        The views are BkR@k and XLR@truth_k on the image data, and XLR@truth_k on the held-out
        data when ``results`` has ``"xlr"``; a view whose ranks are missing is left out.

    Raises:
        ValueError: the base model's label is shared by several specs.
    """
    names = dict(names or {"bkr": "image data", "xlr": "held-out data"})
    groups = groups_of(models, labels)
    base = labels[models[0]]
    if len(groups[base]) != 1:
        raise ValueError(f"the base model {base!r} must be a single model")
    out: dict[str, Any] = {"metrics": [], "per_pair": {}, "truth": {}, "spread": {}, "worst": {}, "xl_vs_triplet": {}}
    index = [f"{s}->{t}" for s, t in pairs]
    for title, which, key, kk in _views(results, k, truth_k, names):
        res = results[which]
        stacks = {lab: stacked_hits(res, ms, pairs, key, kk) for lab, ms in groups.items()}
        per_seed = {lab: [stacked_hits(res, [m], pairs, key, kk).mean() for m in ms] for lab, ms in groups.items()}
        est = pd.DataFrame({lab: st.mean(axis=(1, 2)) for lab, st in stacks.items()}, index=index)
        lows, highs = {}, {}
        for lab, st in stacks.items():
            cis = [bootstrap_ci(st[i], n_boot=n_boot, seed=i) for i in range(len(pairs))]
            lows[lab], highs[lab] = [c.low for c in cis], [c.high for c in cis]
        out["metrics"].extend(_metric_rows(title, stacks, per_seed, base, n_boot, pairs))
        out["per_pair"][title] = {"estimate": est, "low": pd.DataFrame(lows, index=index), "high": pd.DataFrame(highs, index=index)}
        trip = [g for g in groups if _kind(g) == "triplet"]
        for lab in (g for g in groups if _kind(g) == "tripletxl" and trip):
            lift = mean_lift(stacks[lab], stacks[trip[0]], n_boot=n_boot, seed=4)
            out["xl_vs_triplet"][f"{title}: {lab} - {trip[0]}"] = {**lift, "share_pairs_higher": float((est[lab] > est[trip[0]]).mean())}
        bottom = worst_pairs(est[base].to_numpy(), worst_frac)
        for lab in groups:
            if lab != base:
                lift = mean_lift(stacks[lab][bottom], stacks[base][bottom], n_boot=n_boot, seed=3)
                out["worst"][f"{title}: {lab}"] = {"pairs": [index[i] for i in bottom], "base_mean": float(est[base].iloc[bottom].mean()),
                                                   "model_mean": float(est[lab].iloc[bottom].mean()), **lift}
    out["truth"] = _truth(out["per_pair"], list(groups), base)
    trip = [g for g in groups if _kind(g) == "triplet"]
    xls = [g for g in groups if _kind(g) == "tripletxl"]
    comparisons = [(a, base) for a in trip] + [(a, other) for a in xls for other in trip[:1] + [base]]
    for title, d in out["per_pair"].items():
        for a, other in comparisons:  # is Triplet's spread larger than the base's? does TripletXL narrow it?
            out["spread"][f"{title}: {a} vs {other}"] = spread_stats(d["estimate"][a].to_numpy(), d["estimate"][other].to_numpy(), n_boot=n_boot)
    return out


def _kind(label: str) -> str:
    """``triplet`` / ``tripletxl`` / other, from a label such as ``tripletxl-beta1`` or ``triplet:b1``."""
    return label.split(":")[0].split("-")[0]


def _truth(per_pair: Mapping[str, Any], labs: list[str], base: str) -> dict[str, Any]:
    """Did BkR tell the truth? For every ground-truth view: correlation over (model, pair) points,
    sign agreement of the gains vs the base per pair, the rankings of the means, and the per-pair
    ordering agreement."""
    titles = list(per_pair)
    if not titles or not titles[0].startswith("BkR"):
        return {}
    b = per_pair[titles[0]]["estimate"]
    truth = {}
    for title in titles[1:]:
        x = per_pair[title]["estimate"]
        r, rho = correlations(b.to_numpy().ravel(), x.to_numpy().ravel())
        agree = {m: float((np.sign(b[m] - b[base]) == np.sign(x[m] - x[base])).mean()) for m in labs if m != base}
        truth[title] = {"pearson": r, "spearman": rho, "sign_agreement_vs_base": agree,
                        "ranking_bkr": list(b.mean().sort_values(ascending=False).index),
                        "ranking_truth": list(x.mean().sort_values(ascending=False).index),
                        "ordering": ordering_agreement(b, x)}
    return truth


def directed_pairs(langs: Sequence[str]) -> list[Pair]:
    """Every ordered pair of distinct languages, in the order given.

    Args:
        langs: language codes.

    Returns:
        ``(source, target)`` for every source and every other target: n (n - 1) pairs, sources
        in the given order, then targets in the given order.
    """
    return [(s, t) for s in langs for t in langs if s != t]


def evaluate_case_study(
    langs: Sequence[str], models: Sequence[str], out: str | Path, *, bkr_dataset: str = "emoji-cldr", xlr_dataset: str | None = None,
    bkr_n: int = 1500, xlr_n: int = 250, seeds: Sequence[int] = (0,), k: int = 10, image_model: str = "efficientnet-lite0",
    progress: bool = False, log: Any = None,
) -> dict[str, Any]:
    """Run the evaluation grid of the case study (resumable under ``out/bkr`` and ``out/xlr``).

    Args:
        langs: languages; every directed pair is evaluated.
        models: model specs (base model first).
        out: work folder of the evaluation records.
        bkr_dataset: data with images for BkR (and XLR where it has links).
        xlr_dataset: optional held-out linked data for a second ground-truth XLR.
        bkr_n: sample size per side of the BkR grid.
        xlr_n: sample size per side of the held-out XLR grid.
        seeds: evaluation (sampling) seeds.
        k: K of BkR@K.
        image_model: the image model g of BkR.
        progress: show progress bars.
        log: called with each progress message (None: silent).

    Returns:
        ``{"bkr": EvalResult[, "xlr": EvalResult]}``.

    Raises:
        BackretrievalError: what :func:`~.evaluate.run_grid` raises (unknown dataset, model or
            language, a sample larger than the data, ...).
    """
    from ..evaluate import EvalConfig, run_grid

    pairs = directed_pairs(langs)
    out = Path(out)
    log = log or (lambda msg: None)
    results = {"bkr": run_grid(EvalConfig(dataset=bkr_dataset, pairs=pairs, models=list(models), image_model=image_model, n=bkr_n,
                                          seeds=list(seeds), k=k), out / "bkr", progress=progress, log=log)}
    if xlr_dataset:
        results["xlr"] = run_grid(EvalConfig(dataset=xlr_dataset, pairs=pairs, models=list(models), image_model=image_model, n=xlr_n,
                                             seeds=list(seeds), k=k), out / "xlr", progress=progress, log=log)
    return results
