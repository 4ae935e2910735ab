"""Figures of the meta-evaluation and comparisons (matplotlib, Agg backend, PNG).

* :func:`scatter_candidates` -- the paper's Fig. 2: XLR vs each candidate proxy (BkR, CORR, ...)
  across models for one pair and seed, with Pearson r and Spearman rho.
* :func:`boxplot_by_model` -- the paper's Fig. 3: a metric per model, one point per language
  pair (mean over seeds), extreme pairs annotated.
* :func:`heatmap` -- pair x model table of a metric, values printed in the cells.
* :func:`degradation_plot` -- each candidate's correlation with XLR per image model ("how weak may g be").
* :func:`calibration_plot` -- predicted vs true XLR of a candidate's leave-one-pair-out calibration.

Every function takes plain records / frames, writes one PNG atomically and returns its path.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..analysis.evaluate import pair_labels
from ..analysis.meta import KINDS, candidates_of, column
from ..core import atomic_write

DPI = 130
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    plt = pyplot()
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    with atomic_write(path, "wb") as fh:
        fh.write(buf.getvalue())
    return path


def _frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
    return df


def _corr_text(x: np.ndarray, y: np.ndarray) -> str:
    from scipy import stats

    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return "r = n/a"
    return f"Pearson r = {stats.pearsonr(x, y).statistic:.3f}\nSpearman ρ = {stats.spearmanr(x, y).statistic:.3f}"


def short_label(model: str, width: int = 40) -> str:
    """``model`` cut to ``width`` characters (an ellipsis marks the cut), for axis labels; a
    model's label (shorter than 40 characters) is shown whole."""
    return model if len(model) <= width else model[: width - 1] + "…"


def scatter_candidates(
    records: Sequence[dict[str, Any]], pair: str, seed: int, path: str | Path, *, truth: str = "xlr@10",
    candidates: Sequence[str] = ("bkr@10", "corr"),
) -> Path:
    """The ground truth (x) vs each candidate (one panel each), one point per model, for one pair and seed."""
    plt = pyplot()
    df = _frame(records)
    d = df[(df["pair"] == pair) & (df["seed"] == seed)].sort_values(truth)
    if d.empty:
        raise ValueError(f"no records for pair {pair} and seed {seed}")
    fig, axes = plt.subplots(1, len(candidates), figsize=(5.5 * len(candidates), 4.8), squeeze=False)
    for i, (ax, col) in enumerate(zip(axes[0], candidates)):
        x, y = d[truth].to_numpy(float), d[col].to_numpy(float)
        ax.scatter(x, y, s=36, color=COLORS[i % len(COLORS)], edgecolor="black", linewidth=0.5, zorder=3)
        for xi, yi, m in zip(x, y, d["model"]):
            ax.annotate(short_label(m), (xi, yi), textcoords="offset points", xytext=(4, 3), fontsize=7, alpha=0.85)
        ax.text(0.03, 0.97, _corr_text(x, y), transform=ax.transAxes, va="top", fontsize=9,
                bbox=dict(boxstyle="round", facecolor="white", alpha=0.85))
        ax.set_xlabel(f"ground truth ({truth})")
        ax.set_ylabel(col)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{pair}, seed {seed}: each point is a model")
    return _save(fig, path)


def boxplot_by_model(records: Sequence[dict[str, Any]], metric: str, path: str | Path, *, annotate: int = 1) -> Path:
    """One box per model over language pairs (each point: a pair's mean over seeds); the
    ``annotate`` lowest and highest pairs of each model are labelled. Models sorted by mean."""
    plt = pyplot()
    df = _frame(records)
    means = df.groupby(["model", "pair"], sort=False)[metric].mean().reset_index()
    order = means.groupby("model")[metric].mean().sort_values().index.tolist()
    data = [means.loc[means["model"] == m, metric].to_numpy() for m in order]
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(order) + 2), 0.45 * len(order) + 2.2))
    ax.boxplot(data, orientation="horizontal", widths=0.6, showmeans=True, meanprops=dict(marker="D", markerfacecolor="white", markeredgecolor="black", markersize=5))
    rng = np.random.default_rng(0)
    for i, m in enumerate(order, start=1):
        sub = means[means["model"] == m].sort_values(metric)
        y = i + rng.uniform(-0.15, 0.15, len(sub))
        ax.scatter(sub[metric], y, s=12, color="tab:blue", alpha=0.7, zorder=3)
        if len(sub) > 2 * annotate:
            for (_, r), yy in list(zip(sub.iterrows(), y))[:annotate] + list(zip(sub.iterrows(), y))[-annotate:]:
                ax.annotate(r["pair"], (r[metric], yy), textcoords="offset points", xytext=(3, 4), fontsize=7, color="dimgray")
    ax.set_yticks(range(1, len(order) + 1), [short_label(m, 28) for m in order], fontsize=8)
    ax.set_xlabel(f"{metric} (one point per language pair, mean over seeds; ◇ = mean)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{metric} per model across {means['pair'].nunique()} language pairs")
    return _save(fig, path)


def heatmap(records: Sequence[dict[str, Any]], metric: str, path: str | Path) -> Path:
    """Pair (rows) x model (columns, best on average first) of a metric's mean over seeds."""
    plt = pyplot()
    df = _frame(records)
    table = df.pivot_table(index="pair", columns="model", values=metric, aggfunc="mean", sort=False)
    table = table[table.mean().sort_values(ascending=False).index]
    fig, ax = plt.subplots(figsize=(max(6, 0.75 * table.shape[1] + 2.5), max(3, 0.42 * table.shape[0] + 1.8)))
    im = ax.imshow(table.to_numpy(float), cmap="viridis", aspect="auto")
    vmax = np.nanmax(table.to_numpy(float)) if table.size else 1.0
    for (i, j), v in np.ndenumerate(table.to_numpy(float)):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v < 0.6 * vmax else "black")
    ax.set_xticks(range(table.shape[1]), [short_label(c) for c in table.columns], rotation=40, ha="right", fontsize=8)
    ax.set_yticks(range(table.shape[0]), table.index, fontsize=8)
    fig.colorbar(im, ax=ax, shrink=0.8, label=metric)
    ax.set_title(f"{metric}: language pair x model (mean over seeds)")
    return _save(fig, path)


def degradation_plot(degradation: pd.DataFrame, path: str | Path) -> Path:
    """Grouped bars: each candidate's mean Pearson / Spearman with XLR per image model (± sd); the
    candidates are read from the frame's ``pearson[<c>]`` columns."""
    plt = pyplot()
    d = degradation.reset_index(drop=True)
    cols = [(column(kind, c), f"{c} {kind.capitalize()}", i) for i, c in enumerate(candidates_of(d)) for kind in KINDS]
    x = np.arange(len(d))
    w = 0.8 / len(cols)
    fig, ax = plt.subplots(figsize=(max(6, 0.4 * len(cols) * len(d) + 2), 4.2))
    for k, (col, label, i) in enumerate(cols):
        err = d.get(f"{col}_sd")
        ax.bar(x + (k - (len(cols) - 1) / 2) * w, d[col], w, yerr=err, label=label, color=COLORS[i % len(COLORS)],
               alpha=1.0 if label.endswith("Pearson") else 0.45, edgecolor="black", linewidth=0.4, capsize=2)
    ax.set_xticks(x, [short_label(str(g), 40) for g in d["image_model"]], rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("correlation with XLR@10 across models")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_ylim(min(-0.1, float(np.nanmin(d[[c for c, _, _ in cols]].to_numpy(float))) - 0.05), 1.05)
    ax.legend(fontsize=8, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("How weak may the image similarity g be? (mean ± sd over pairs and seeds)", pad=24)
    return _save(fig, path)


def calibration_plot(calibration: Any, path: str | Path) -> Path:
    """Leave-one-pair-out predictions of XLR from a candidate (``calibration.x``) with their
    intervals, against the truth."""
    plt = pyplot()
    rows = calibration.rows
    fig, ax = plt.subplots(figsize=(6.2, 5.6))
    pairs = list(dict.fromkeys(rows["pair"]))
    cmap = plt.get_cmap("tab10" if len(pairs) <= 10 else "tab20")
    for i, pair in enumerate(pairs):
        r = rows[rows["pair"] == pair]
        err = np.vstack([r["xlr_pred"] - r["low"], r["high"] - r["xlr_pred"]])
        ax.errorbar(r["xlr_true"], r["xlr_pred"], yerr=err, fmt="o", ms=4, color=cmap(i % cmap.N), alpha=0.8, elinewidth=0.8, capsize=2, label=pair)
    lo, hi = 0.0, max(1e-3, float(max(rows["xlr_true"].max(), rows["high"].max()))) * 1.03
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, linestyle="--")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(f"true {calibration.y} (held-out pair)")
    ax.set_ylabel(f"{calibration.y} predicted from {calibration.x}")
    mae = rows["abs_error"].mean()
    ax.set_title(f"Calibration, leave one pair out: MAE {mae:.3f}, {int(calibration.level * 100)}% interval coverage {rows['covered'].mean():.2f}", fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.grid(alpha=0.3)
    return _save(fig, path)
