"""Markdown and figures of the Triplet / TripletXL case study (paper Table 2 / Fig. 3) and the
training curves of a Triplet / TripletXL run.

* :func:`case_study_markdown` -- the tables of :func:`backretrieval.analysis.trained.case_study.case_study_summary`.
* :func:`case_study_figure` -- Fig. 3 analog: a box per model over language pairs, one panel per metric.
* :func:`plot_curves` -- train/validation loss and L_XL per epoch of one training run.
* :func:`case_study_json` -- the summary as JSON-ready values.
"""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core import atomic_write


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path, dpi: int) -> Path:
    """Render to memory, then write atomically (nothing half-written)."""
    plt = _plt()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        fh.write(buf.getvalue())
    return path


def _ci(lo: float, hi: float, signed: bool = False) -> str:
    f = "{:+.4f}" if signed else "{:.4f}"
    return f"[{f.format(lo)}, {f.format(hi)}]"


def case_study_markdown(summary: dict[str, Any], header: str) -> str:
    """The case study's tables as Markdown: averages with CIs and lifts over the base, the worst
    pairs, did BkR tell the truth (incl. the per-pair ordering of the models), did TripletXL
    narrow the spread (sd and IQR), and per-pair tables with CIs."""
    lines = [header, "", "## Averages across pairs", "",
             "Mean over all directed pairs with a 95% bootstrap CI (queries resampled within every pair and seed); "
             "lift = mean per-query difference to the base model with its 95% CI; sd, IQR, min and the worst pair "
             "describe the spread across pairs; 'sd over training seeds' = sd of the model's mean over its training seeds "
             "(models trained with several seeds are averaged query by query). 'better / worse' = pairs where the model "
             "differs significantly from the base model (paired sign-flip permutation test per pair, Holm-adjusted "
             "across pairs, 0.05).", "",
             "| metric | model | mean | 95% CI | lift vs base [95% CI] | sd across pairs | IQR | min (pair) | 25th pct | max "
             "| training seeds (sd over them) | better / worse pairs vs base |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["metrics"]:
        bw = f"{r['pairs_better']} / {r['pairs_worse']}" if "pairs_better" in r else "(base)"
        lift = f"{r['delta_vs_base']:+.4f} {_ci(r['delta_low'], r['delta_high'], True)}" if "delta_vs_base" in r else ""
        ts = f"{r['training_seeds']}" + ("" if math.isnan(r["sd_over_training_seeds"]) else f" ({r['sd_over_training_seeds']:.4f})")
        lines.append(f"| {r['metric']} | {r['model']} | {r['mean']:.4f} | {_ci(r['ci_low'], r['ci_high'])} | {lift} | {r['sd']:.4f} | "
                     f"{r['iqr']:.4f} | {r['min']:.4f} ({r['worst_pair']}) | {r['q25']:.4f} | {r['max']:.4f} | {ts} | {bw} |")
    if summary.get("xl_vs_triplet"):
        lines += ["", "## TripletXL vs Triplet", "", "Mean per-query difference TripletXL - Triplet (95% CI, queries resampled within "
                  "every pair and seed) and the share of pairs where TripletXL's estimate is higher.", "",
                  "| metric: comparison | difference [95% CI] | pairs where TripletXL is higher |", "|---|---|---|"]
        for name, d in summary["xl_vs_triplet"].items():
            lines.append(f"| {name} | {d['lift']:+.4f} {_ci(d['lift_low'], d['lift_high'], True)} | {d['share_pairs_higher']:.0%} |")
    if summary.get("worst"):
        lines += ["", "## The worst pairs", "",
                  "The bottom quartile of pairs by the base model's score, and each model's mean lift over the base on "
                  "those pairs (95% CI from the per-query paired differences).", "",
                  "| metric: model | pairs | base mean | model mean | lift [95% CI] |", "|---|---|---|---|---|"]
        for name, w in summary["worst"].items():
            lines.append(f"| {name} | {', '.join(w['pairs'])} | {w['base_mean']:.4f} | {w['model_mean']:.4f} | "
                         f"{w['lift']:+.4f} {_ci(w['lift_low'], w['lift_high'], True)} |")
    if summary["truth"]:
        lines += ["", "## Did BkR tell the truth?", "",
                  "Correlation of per-pair BkR with per-pair ground-truth XLR over all (model, pair) points; the share of pairs "
                  "where BkR and XLR agree on the sign of each model's gain over the base; the models ranked by their mean; "
                  "per pair, the Spearman rho between the models' order by BkR and by the ground truth (mean over pairs, share "
                  "of pairs with the identical order, share with rho > 0).", "",
                  "| ground truth | Pearson | Spearman | sign agreement vs base | ranking by BkR | ranking by ground truth "
                  "| per-pair order: mean rho | identical order | rho > 0 |", "|---|---|---|---|---|---|---|---|---|"]
        for title, t in summary["truth"].items():
            agree = ", ".join(f"{m} {v:.0%}" for m, v in t["sign_agreement_vs_base"].items())
            o = t["ordering"]
            lines.append(f"| {title} | {t['pearson']:.3f} | {t['spearman']:.3f} | {agree} | {' > '.join(t['ranking_bkr'])} | "
                         f"{' > '.join(t['ranking_truth'])} | {o['mean_rho']:.3f} | {o['share_identical']:.0%} of {o['n_defined']} | "
                         f"{o['share_positive']:.0%} |")
    if summary["spread"]:
        lines += ["", "## Did TripletXL narrow the spread?", "",
                  "sd and IQR across pairs of model A minus those of model B, with 95% bootstrap CIs over pairs (pairs resampled, "
                  "the same for both models); negative = A's results vary less across pairs.", "",
                  "| comparison | sd(A) | sd(B) | sd(A) - sd(B) [95% CI] | IQR(A) - IQR(B) [95% CI] | share of draws with sd(A) >= sd(B) |",
                  "|---|---|---|---|---|---|"]
        for name, s in summary["spread"].items():
            lines.append(f"| {name} | {s['sd_a']:.4f} | {s['sd_b']:.4f} | {s['sd_diff']:+.4f} {_ci(s['sd_diff_low'], s['sd_diff_high'], True)} | "
                         f"{s['iqr_diff']:+.4f} {_ci(s['iqr_diff_low'], s['iqr_diff_high'], True)} | {s['p_sd_not_smaller']:.3f} |")
    for title, d in summary["per_pair"].items():
        est, lo, hi = d["estimate"], d["low"], d["high"]
        lines += ["", f"## Per pair: {title} (95% bootstrap CI)", "", "| pair | " + " | ".join(est.columns) + " |", "|---|" + "---|" * len(est.columns)]
        for pair in est.index:
            cells = [f"{est.at[pair, c]:.3f} [{lo.at[pair, c]:.3f}, {hi.at[pair, c]:.3f}]" for c in est.columns]
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def case_study_json(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with its tables as plain dicts (for ``json.dumps(..., default=float)``)."""
    return {"metrics": summary["metrics"], "truth": summary["truth"], "spread": summary["spread"], "worst": summary.get("worst", {}),
            "xl_vs_triplet": summary.get("xl_vs_triplet", {}),
            "per_pair": {t: {k: v.to_dict() for k, v in d.items()} for t, d in summary["per_pair"].items()}}


def case_study_figure(summary: dict[str, Any], path: str | Path, annotate: int = 1) -> Path:
    """Fig. 3 analog: one panel per metric, a box per model over language pairs, each pair a dot;
    the ``annotate`` worst pairs of every model are labelled."""
    plt = _plt()

    panels = list(summary["per_pair"].items())
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4), dpi=80, squeeze=False)
    rng = np.random.default_rng(0)
    for ax, (title, d) in zip(axes[0], panels):
        est = d["estimate"]
        cols = list(est.columns)
        ax.boxplot([est[c].to_numpy() for c in cols], showfliers=False, widths=0.55)
        for j, c in enumerate(cols, start=1):
            v = est[c].to_numpy()
            xs = j + rng.uniform(-0.17, 0.17, size=v.size)
            ax.scatter(xs, v, s=10, alpha=0.6, color="C0", zorder=3)
            for i in np.argsort(v)[:annotate]:
                ax.annotate(est.index[i], (xs[i], v[i]), fontsize=8, xytext=(4, -4), textcoords="offset points", color="C3",
                            bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
            ax.scatter([j], [v.mean()], marker="D", color="C1", s=24, zorder=4)
        ax.set_xticks(range(1, len(cols) + 1))
        ax.set_xticklabels(cols, rotation=20, fontsize=8, ha="right")
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    n_pairs = len(next(iter(summary["per_pair"].values()))["estimate"])
    fig.suptitle(f"{n_pairs} directed language pairs (dots; the worst pair of each model labelled), orange diamond = mean over pairs", fontsize=10)
    fig.tight_layout()
    return _save(fig, path, dpi=80)


def plot_curves(history: Sequence[dict[str, Any]], path: str | Path, title: str, best_epoch: int | None = None) -> Path:
    """Training curves: train/validation loss, and L_XL (trained on by TripletXL, a monitor for Triplet)."""
    plt = _plt()

    def series(key):
        pts = [(h["epoch"], h[key]) for h in history if h.get(key) is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    ax = axes[0]
    ax.plot(*series("train_loss"), marker=".", label="train loss")
    if any("val_loss" in h for h in history):
        has0 = any(h["epoch"] == 0 for h in history)
        ax.plot(*series("val_loss"), marker=".", label="validation loss" + (" (epoch 0: untrained)" if has0 else ""))
    if best_epoch:
        ax.axvline(best_epoch, color="grey", ls=":", lw=1, label=f"kept: epoch {best_epoch}")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (Eq. 1" + (" + beta Eq. 2)" if any("train_xl" in h for h in history) else ")"))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes[1]
    xl = any("train_xl" in h for h in history)
    if xl:
        ax.plot(*series("train_xl"), marker=".", label="train L_XL")
    if any("val_xl" in h for h in history):
        ax.plot(*series("val_xl"), marker=".", label="validation L_XL" + ("" if xl else " (monitor, not trained on)"))
    ax.set_xlabel("epoch")
    ax.set_ylabel("L_XL (Eq. 2)")
    ax.set_title("language gap of neighbour distances", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path, dpi=90)

