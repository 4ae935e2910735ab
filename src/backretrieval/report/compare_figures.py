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
  size, recorded encoding time and API cost per million items, the Pareto front filled; each
  model a colour and marker named once in the legend, so no label overlaps at 8 models and more.

Model names are the run's labels (shorter than 40 characters, :mod:`backretrieval.analysis.models`),
shown whole (:func:`~.figures.short_label` cuts only what is longer).

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


def _rotation(models: list[str]) -> int:
    """The heatmap's column labels upright (90 degrees) where any is long, so none overlaps the next."""
    return 90 if max(map(len, models), default=0) > 12 else 30


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
    turn = _rotation(models)
    ax.set_xticks(range(len(models)), [short_label(m) for m in models], rotation=turn,
                  ha="center" if turn == 90 else "right", fontsize=8)
    ax.set_yticks(range(len(pairs)), pairs, fontsize=8)
    on_bar = chance is not None and lo <= chance <= hi
    cb = fig.colorbar(im, ax=ax, shrink=0.85, label=c.metric + (f" (red: chance {chance:.3g})" if on_bar else ""))
    if on_bar:  # named in the bar's label, not beside the line, where it would cover a tick label
        cb.ax.axhline(chance, color="red", linewidth=2)
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
        ax.set_yticks(y, [short_label(m) for m in g["model"]], fontsize=8)
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
    ax.set_yticks(range(1, len(models) + 1), [short_label(m) for m in models], fontsize=8)
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
    a1.set_yticks(y, [short_label(m) for m in models], fontsize=8)
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
    ("bytes_per_item", "vector size (bytes per item)"),
    ("seconds_per_1m_items", "encoding time per 1M items (s, recorded on this machine)"),
    ("cost_per_1m_items", "cost per 1M items ($, API price)"),
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "p", "h", "<", ">")


def model_styles(models: list[str]) -> dict[str, tuple[str, str]]:
    """One (colour, marker) per model, the same in every panel: 10 colours times 12 markers tell
    apart up to 120 models without a label beside any point."""
    import matplotlib

    colours = matplotlib.colormaps["tab10"].colors
    return {m: (matplotlib.colors.to_hex(colours[i % 10]), MARKERS[(i // 10 + i) % len(MARKERS)])
            for i, m in enumerate(models)}


def cost_quality(c: Comparison, stem: Path) -> tuple[Path, Path] | None:
    """Quality (the ranked metric: the mean over pairs, with the mean of the pairs' interval
    bounds as its interval) against each cost the run knows of at least one model -- vector
    size, encoding time per million items, API cost per million items -- one panel each. Every
    model has its own colour and marker, named once in the legend (no label sits beside a point,
    so none can overlap another at 8 or more models); the models no other model beats on both
    quality and that cost (the Pareto front) are filled and joined by a step line, the others
    hollow. A cost spanning more than 20x is on a log scale. None when no cost is known.
    """
    from matplotlib.ticker import MaxNLocator

    from ..analysis.costs import pareto_front

    costs = c.costs.set_index("model") if len(c.costs) else None
    if costs is None:
        return None
    bounds = c.per_pair.groupby("model")[["estimate", "ci_low", "ci_high"]].mean()
    panels = [(col, label) for col, label in COST_AXES
              if col in costs and pd.to_numeric(costs[col], errors="coerce").notna().sum() >= 1]
    if not panels:
        return None
    plt = pyplot()
    models = [m for m in model_order(c) if m in costs.index and m in bounds.index]
    style = model_styles(models)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False)
    for ax, (col, label) in zip(axes[0], panels):
        x = pd.to_numeric(costs.loc[models, col], errors="coerce").to_numpy(float)
        q = bounds.loc[models, "estimate"].to_numpy(float)
        lo, hi = bounds.loc[models, "ci_low"].to_numpy(float), bounds.loc[models, "ci_high"].to_numpy(float)
        front = np.array(pareto_front(q, x), bool)
        ok = ~np.isnan(x)
        order = np.argsort(x[front])
        fx, fq = x[front][order], q[front][order]
        if len(fx) > 1:
            ax.step(fx, fq, where="post", color="0.35", lw=1, zorder=1)
        for i, m in enumerate(models):
            if not ok[i]:
                continue
            colour, marker = style[m]
            ax.errorbar([x[i]], [q[i]], yerr=[[q[i] - lo[i]], [hi[i] - q[i]]], fmt="none", ecolor=colour, alpha=0.6,
                        capsize=3, zorder=2)
            ax.scatter([x[i]], [q[i]], marker=marker, s=55, zorder=3, linewidths=1.5, edgecolors=colour,
                       facecolors=colour if front[i] else "white")
        missing = [m for m, k in zip(models, ok) if not k]
        if missing:
            ax.text(0.02, 0.02, f"unknown for {len(missing)} model{'s' * (len(missing) != 1)}", transform=ax.transAxes,
                    fontsize=7, color="0.4")
        if ok.sum() and np.nanmax(x[ok]) > 20 * max(np.nanmin(x[ok]), 1e-12):
            ax.set_xscale("log")
        else:
            ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel(f"{c.metric} (mean over pairs)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker=style[m][1], markersize=7, markeredgecolor=style[m][0],
                      markerfacecolor=style[m][0], label=m) for m in models]
    handles += [Line2D([], [], ls="-", color="0.35", marker="o", markerfacecolor="0.35", markeredgecolor="0.35",
                       label="Pareto front (filled)"),
                Line2D([], [], ls="", marker="o", markerfacecolor="white", markeredgecolor="0.35",
                       label="beaten on both (hollow)")]
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, frameon=False,
               title="model (best first)", title_fontsize=8)
    fig.suptitle(f"Quality against cost: {c.metric}, bars: intervals", fontsize=10)
    fig.tight_layout()
    return _save(fig, stem)
