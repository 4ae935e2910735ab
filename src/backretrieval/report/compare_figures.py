"""Figures of a model comparison (``compare --report``), each written as PNG and SVG.

* :func:`heatmap_ci` -- language pair x model table of the ranked metric, the estimate and the
  half-width of its bootstrap interval in each cell, chance level marked on the colour bar. The
  colour range spans the values and reaches down to chance below them; equal values get a range
  of their own (:func:`colour_range`), and a chance level outside the range is said in the title
  (:func:`chance_note`) instead of being drawn far off the bar.
* :func:`forest` -- one panel per language pair: each model's estimate with its interval, best
  first, each marked against the pair's best by the verdict's tests; chance
  level as a dashed line.
* :func:`spread` -- the paper's Fig. 3: one box per model over language pairs (each point a
  pair's estimate, the mean over seeds), chance level as a dashed line.
* :func:`wins_chart` -- per model, significant pairwise wins / ties / losses after Holm, and
  the mean rank over pairs.
* :func:`cost_quality` -- the price of each answer: quality with its interval against vector
  size, measured encoding time and API cost per million items, the Pareto front filled.

Every function takes a :class:`~backretrieval.analysis.comparison.Comparison` (and the frames
derived from it), writes ``STEM.png`` and ``STEM.svg`` atomically and returns both paths.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.comparison import Comparison
from ..core import atomic_write
from .figures import DPI, pyplot, short_label


def _save(fig, stem: Path) -> tuple[Path, Path]:
    """``stem``.png and ``stem``.svg (SVG without a date and with fixed element ids, so the same
    figure gives the same file)."""
    import matplotlib

    plt = pyplot()
    out = []
    with matplotlib.rc_context({"svg.hashsalt": "backretrieval", "svg.fonttype": "path"}):
        for fmt in ("png", "svg"):
            buf = io.BytesIO()
            kw = {"dpi": DPI} if fmt == "png" else {"metadata": {"Date": None}}
            fig.savefig(buf, format=fmt, bbox_inches="tight", **kw)
            path = stem.with_suffix(f".{fmt}")
            with atomic_write(path, "wb") as fh:
                fh.write(buf.getvalue())
            out.append(path)
    plt.close(fig)
    return out[0], out[1]


def model_order(c: Comparison) -> list[str]:
    """Models best first by their mean over pairs (the order of ``across_pairs``)."""
    return c.across_pairs["model"].tolist()


def _chance_label(chance: float | None) -> str:
    return "" if chance is None else f"chance {chance:.3g}"


def colour_range(values: np.ndarray, chance: float | None) -> tuple[float, float]:
    """The heatmap's colour range: the finite values' span, extended down to ``chance`` when
    chance lies below them; equal values (every model tied) get a range of
    ``max(0.01, 10% of the value)`` around them, so the range always has a width."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    lo, hi = (float(v.min()), float(v.max())) if v.size else (0.0, 1.0)
    if chance is not None and np.isfinite(chance) and chance < lo:
        lo = float(chance)
    if not hi - lo > 1e-9 * max(1.0, abs(hi)):
        pad = max(0.005, 0.05 * abs(hi))
        lo, hi = lo - pad, hi + pad
    return lo, hi


def chance_note(c: Comparison, chance: float | None) -> str:
    """What the heatmap says about a chance level outside its colour range ("" when it is on the bar)."""
    if chance is None:
        return ""
    lo, hi = colour_range(c.per_pair["estimate"].to_numpy(float), chance)
    if lo <= chance <= hi:
        return ""
    return f"chance {chance:.3g} lies {'above' if chance > hi else 'below'} every value (not on the colour bar)"


def heatmap_title(c: Comparison, chance: float | None) -> str:
    """The heatmap's title: what the cells hold and, where it is off the bar, where chance lies."""
    pct = int(round(c.level * 100))
    note = chance_note(c, chance)
    return f"{c.metric}: estimate ± half-width of its {pct}% bootstrap interval" + (f"\n{note}" if note else "")


def heatmap_ci(c: Comparison, stem: Path, chance: float | None) -> tuple[Path, Path]:
    """Pairs (rows) x models (columns, best on average first): estimate and ± CI half-width."""
    plt = pyplot()
    d = c.per_pair
    models = model_order(c)
    pairs = list(dict.fromkeys(d["pair"]))
    est = d.pivot(index="pair", columns="model", values="estimate").reindex(index=pairs, columns=models)
    half = ((d["ci_high"] - d["ci_low"]) / 2).to_frame("h").assign(pair=d["pair"], model=d["model"])
    half = half.pivot(index="pair", columns="model", values="h").reindex(index=pairs, columns=models)
    v = est.to_numpy(float)
    fig, ax = plt.subplots(figsize=(max(5.5, 1.05 * len(models) + 2.5), max(2.6, 0.5 * len(pairs) + 1.8)))
    lo, hi = colour_range(v, chance)
    im = ax.imshow(v, cmap="viridis", aspect="auto", vmin=lo, vmax=hi)
    for (i, j), x in np.ndenumerate(v):
        if np.isfinite(x):
            light = (x - lo) < 0.6 * (hi - lo)
            ax.text(j, i, f"{x:.3f}\n±{half.iat[i, j]:.3f}", ha="center", va="center", fontsize=7.5,
                    color="white" if light else "black")
    ax.set_xticks(range(len(models)), [short_label(m) for m in models], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(pairs)), pairs, fontsize=8)
    cb = fig.colorbar(im, ax=ax, shrink=0.85, label=c.metric)
    if chance is not None and lo <= chance <= hi:
        cb.ax.axhline(chance, color="red", linewidth=2)
        cb.ax.text(1.05, chance, " chance", transform=cb.ax.get_yaxis_transform(), color="red", fontsize=7, va="center")
    ax.set_title(heatmap_title(c, chance), fontsize=10)
    return _save(fig, stem)


VS_BEST_MARKS = {"worse": "<", "worse, within margin": "< ≈", "equivalent": "≈", "undecided": "?"}


def forest(c: Comparison, stem: Path, chance: float | None) -> tuple[Path, Path]:
    """One panel per pair: models (best at the top) with their intervals, each marked against
    the pair's best by the verdict's tests (``<`` significantly worse, ``≈`` within the margin,
    ``?`` undecided; :attr:`~backretrieval.analysis.comparison.Comparison.equivalence`)."""
    from matplotlib.transforms import blended_transform_factory

    plt = pyplot()
    pairs = list(dict.fromkeys(c.per_pair["pair"]))
    ncol = 2 if len(pairs) == 4 else min(3, len(pairs))
    nrow = -(-len(pairs) // ncol)
    n_models = c.per_pair.groupby("pair").size().max()
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, (0.42 * n_models + 1.3) * nrow), squeeze=False)
    xmin = min(c.per_pair["ci_low"].min(), chance if chance is not None else np.inf)
    xmax = max(c.per_pair["ci_high"].max(), chance if chance is not None else -np.inf)
    pad = 0.05 * (xmax - xmin if xmax > xmin else 1.0)
    for ax, pair in zip(axes.ravel(), pairs):
        g = c.per_pair[c.per_pair["pair"] == pair].sort_values("rank")
        y = np.arange(len(g))[::-1]
        err = np.vstack([g["estimate"] - g["ci_low"], g["ci_high"] - g["estimate"]])
        ax.errorbar(g["estimate"], y, xerr=err, fmt="o", color="tab:blue", ecolor="tab:blue", capsize=3, ms=5)
        ax.set_yticks(y, [short_label(m, 20) for m in g["model"]], fontsize=8)
        ax.set_ylim(-0.6, len(g) - 0.4)
        ax.set_xlim(xmin - pad, xmax + pad)
        if chance is not None:
            ax.axvline(chance, color="red", linestyle="--", linewidth=1, label=_chance_label(chance))
        trans = blended_transform_factory(ax.transAxes, ax.transData)
        for k, (_, r) in enumerate(g.iterrows()):  # each model against the pair's best, by the verdict's tests
            mark = VS_BEST_MARKS.get(r.get("vs_best", ""), "")
            if mark:
                ax.text(1.02, y[k], mark, transform=trans, va="center", fontsize=9)
        ax.set_title(pair, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlabel(c.metric, fontsize=8)
    for ax in axes.ravel()[len(pairs):]:
        ax.axis("off")
    pct = int(round(c.level * 100))
    fig.suptitle(f"{c.metric} per pair with {pct}% intervals; right: against the best, < significantly worse, "
                 f"≈ within ±{c.margin:g}, ? undecided (Holm, alpha {c.alpha:g}); red dashes: "
                 f"{_chance_label(chance) or 'no chance level'}", fontsize=9)
    fig.tight_layout()
    return _save(fig, stem)


def spread(c: Comparison, stem: Path, chance: float | None) -> tuple[Path, Path]:
    """The average over pairs with its spread across pairs: a box per model (best at the top),
    one point per pair, the mean as a diamond."""
    plt = pyplot()
    models = model_order(c)[::-1]  # boxplot draws bottom-up: best at the top
    data = [c.per_pair.loc[c.per_pair["model"] == m, "estimate"].to_numpy(float) for m in models]
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(models) + 1.8))
    ax.boxplot(data, orientation="horizontal", widths=0.6, showmeans=True,
               meanprops=dict(marker="D", markerfacecolor="white", markeredgecolor="black", markersize=5))
    rng = np.random.default_rng(0)
    for i, vals in enumerate(data, start=1):
        ax.scatter(vals, i + rng.uniform(-0.15, 0.15, len(vals)), s=14, color="tab:blue", alpha=0.7, zorder=3)
    if chance is not None:
        ax.axvline(chance, color="red", linestyle="--", linewidth=1, label=_chance_label(chance))
        ax.legend(fontsize=8, loc="lower right")
    ax.set_yticks(range(1, len(models) + 1), [short_label(m, 28) for m in models], fontsize=8)
    ax.set_xlabel(f"{c.metric} (one point per language pair; ◇ = mean over pairs)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{c.metric} across {c.per_pair['pair'].nunique()} language pairs", fontsize=10)
    return _save(fig, stem)


def wins_chart(c: Comparison, w: pd.DataFrame, stem: Path) -> tuple[Path, Path]:
    """Left: significant pairwise wins, ties and losses after Holm per model; right: mean rank."""
    plt = pyplot()
    models = model_order(c)[::-1]
    w = w.set_index("model").reindex(models)
    ranks = c.across_pairs.set_index("model").reindex(models)["mean_rank"]
    y = np.arange(len(models))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 0.45 * len(models) + 1.8), sharey=True,
                                 gridspec_kw={"width_ratios": [2, 1]})
    left = np.zeros(len(models))
    for col, color in (("wins", "tab:green"), ("ties", "lightgray"), ("losses", "tab:red")):
        vals = w[col].to_numpy(float)
        a1.barh(y, vals, left=left, color=color, edgecolor="black", linewidth=0.4, label=col)
        for yi, (l, v) in enumerate(zip(left, vals)):
            if v > 0:
                a1.text(l + v / 2, yi, f"{int(v)}", ha="center", va="center", fontsize=8)
        left += vals
    a1.set_yticks(y, [short_label(m, 28) for m in models], fontsize=8)
    a1.set_xlabel("language pair x opponent comparisons")
    a1.legend(fontsize=8, ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    a2.barh(y, ranks.to_numpy(float), color="tab:blue", edgecolor="black", linewidth=0.4)
    for yi, v in enumerate(ranks.to_numpy(float)):
        a2.text(v, yi, f" {v:.2f}", va="center", fontsize=8)
    a2.set_xlabel("mean rank over pairs (1 = best)")
    a2.set_xlim(0, len(models) + 0.8)
    fig.suptitle(f"{c.metric}: significant pairwise wins after Holm (alpha {c.alpha:g}) and mean rank", fontsize=10)
    fig.tight_layout()
    return _save(fig, stem)


COST_AXES = (
    ("bytes_per_item", "vector size (bytes per item, float32)"),
    ("seconds_per_1m_items", "encoding time per 1M items (s, measured on this run's machine)"),
    ("cost_per_1m_items", "estimated cost per 1M items (API price)"),
)


def cost_quality(c: Comparison, stem: Path) -> tuple[Path, Path] | None:
    """Quality (the ranked metric: the mean over pairs, with the mean of the pairs' interval
    bounds as its interval) against each cost the run knows of every model shown on it -- vector
    size, measured encoding time per million items, API cost per million items -- one panel
    each; the models no other model beats on both quality and that cost (the Pareto front) are
    filled and joined by a line. None when no cost is known (a comparison without ``costs``).
    """
    from ..analysis.costs import pareto_front

    costs = c.costs.set_index("model") if len(c.costs) else None
    if costs is None:
        return None
    costs = costs.assign(seconds_per_1m_items=[1e6 / v if v else np.nan for v in
                                               pd.to_numeric(costs["items_per_second"], errors="coerce").fillna(0)])
    bounds = c.per_pair.groupby("model")[["estimate", "ci_low", "ci_high"]].mean()
    panels = [(col, label) for col, label in COST_AXES
              if pd.to_numeric(costs[col], errors="coerce").notna().sum() >= 1]
    if not panels:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (col, label) in zip(axes[0], panels):
        models = [m for m in model_order(c) if m in costs.index and m in bounds.index]
        x = pd.to_numeric(costs.loc[models, col], errors="coerce").to_numpy(float)
        q = bounds.loc[models, "estimate"].to_numpy(float)
        lo, hi = bounds.loc[models, "ci_low"].to_numpy(float), bounds.loc[models, "ci_high"].to_numpy(float)
        front = np.array(pareto_front(q, x), bool)
        ok = ~np.isnan(x)
        ax.errorbar(x[ok], q[ok], yerr=[q[ok] - lo[ok], hi[ok] - q[ok]], fmt="none", ecolor="0.6", capsize=3)
        ax.scatter(x[ok & ~front], q[ok & ~front], facecolors="white", edgecolors="C0", zorder=3, label="beaten")
        ax.scatter(x[front], q[front], color="C0", zorder=3, label="Pareto front")
        order = np.argsort(x[front])
        ax.plot(x[front][order], q[front][order], color="C0", lw=1)
        for xi, qi, m in zip(x[ok], q[ok], np.array(models, object)[ok]):
            ax.annotate(short_label(m), (xi, qi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        if ok.sum() and np.nanmax(x[ok]) > 20 * max(np.nanmin(x[ok]), 1e-12):
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"{c.metric} (mean over pairs)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Quality against cost: {c.metric}; filled = no other model is better on both")
    return _save(fig, stem)
