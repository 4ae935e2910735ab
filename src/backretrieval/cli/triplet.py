"""Triplet / TripletXL commands: ``train triplet``, ``train tripletxl`` and the ``case-study``
group (``prepare`` a held-out ddtp split, ``report`` the Fig. 3 analog).

The case study (Backretrieval paper, Sec. 3.2, Table 2 / Fig. 3): a base encoder vs Triplet vs
TripletXL, per directed language pair, with BkR on emoji-cldr (images as the pivot, no ground
truth used) and ground-truth XLR on emoji-cldr and on held-out ddtp documents to check that BkR
told the truth. Heavy libraries are imported inside the commands.
"""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Sequence

import click

from ._app import (
    NON_NEGATIVE_NUMBER, OPEN_UNIT, POSITIVE, POSITIVE_NUMBER, SEED, UNIT_FROM_0, _bad, _check_image_models, _check_outputs,
    _check_text_models, _parse_list, _parse_numbers, _parse_options, _parse_seeds, _warn, main, train,
)


# ----------------------------------------------------------------------------- training
def _langs(spec: str | None, option: str = "--langs") -> list[str] | None:
    return None if spec is None else _parse_list(spec, option, "language")


def _train_options(fn):
    opts = [
        click.option("--dataset", required=True, help="ddtp, emoji-cldr, or a .jsonl/.csv/.parquet file with title, body and lang columns."),
        click.option("--langs", default=None, help="Comma-separated languages to train on (default: all of the dataset)."),
        click.option("--base", default="use-m", show_default=True, help="Frozen base text encoder (any text model spec)."),
        click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Model directory to write."),
        click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE (e.g. source_dir=DIR)."),
        click.option("--max-per-lang", type=POSITIVE, default=None, help="Keep a seeded random subset of this many items per language."),
        click.option("--epochs", type=POSITIVE, default=40, show_default=True),
        click.option("--lr", type=POSITIVE_NUMBER, default=0.01, show_default=True),
        click.option("--alpha", type=NON_NEGATIVE_NUMBER, default=0.1, show_default=True, help="Margin of Eq. 1."),
        click.option("--batch-size", type=click.IntRange(min=2), default=128, show_default=True, help="Items per batch, at least 2 (the negative is another item of the batch)."),
        click.option("--layers", default="300,300", show_default=True, help="Widths of the dense ReLU layers of the siamese tower."),
        click.option("--tower", type=click.Choice(["mlp", "residual"]), default="mlp", show_default=True,
                     help="mlp: the paper's tower; residual: x + f(x), f's last layer zero-initialised, so training starts at the base's own vectors."),
        click.option("--negatives", type=click.Choice(["batch", "language"]), default="batch", show_default=True,
                     help="Eq. 1's negative title: any other item of the mini-batch (paper) or one of the same language."),
        click.option("--val-frac", type=UNIT_FROM_0, default=0.1, show_default=True, help="Random validation share, in [0, 1)."),
        click.option("--patience", type=POSITIVE, default=None, help="Early stopping: stop after this many epochs without a better validation loss."),
        click.option("--seed", type=SEED, default=0, show_default=True),
        click.option("--threads", type=POSITIVE, default=None, help="torch CPU threads (default: all cores this process may use)."),
        click.option("--resume/--no-resume", default=True, show_default=True, help="Continue from OUT/checkpoint.pt when it matches."),
        click.option("--quiet", is_flag=True, help="No progress bars."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def plot_curves(history: Sequence[dict[str, Any]], path: Path, title: str, best_epoch: int | None = None) -> None:
    """Training curves: train/validation loss, and L_XL (trained on by TripletXL, a monitor for Triplet)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..core import atomic_write

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
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)


def _run_train(method: str, *, dataset, langs, base, out, dataset_option, max_per_lang, epochs, lr, alpha, batch_size,
               layers, tower, negatives, val_frac, patience, seed, threads, resume, quiet, beta=0.01, k=5, refresh_every=1) -> None:
    from ..data import load_dataset
    from ..train.triplet import CHECKPOINT_FILE, TitleBodyData, TripletModel

    options = _parse_options(dataset_option, dataset)
    wanted = _langs(langs)
    widths = _parse_numbers(layers, "--layers", integer=True, low=1)
    est = TripletModel(
        method, base=base, layers=widths, tower=tower, lr=lr, alpha=alpha, batch_size=batch_size, epochs=epochs, beta=beta, k=k,
        refresh_every=refresh_every, negatives=negatives, val_frac=val_frac, patience=patience, seed=seed, threads=threads, progress=not quiet,
    )
    est._check()  # every setting, before any data is read
    _check_text_models([base], "--base")
    _check_outputs((out, "--out"))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if not resume and (out / CHECKPOINT_FILE).exists():
        (out / CHECKPOINT_FILE).unlink()
    ds = load_dataset(dataset, langs=wanted, **options)
    data = TitleBodyData.from_dataset(ds, wanted, max_per_lang=max_per_lang, seed=seed)
    click.echo(f"{method}: {len(data)} monolingual title/body pairs ({', '.join(f'{l} {n}' for l, n in data.counts().items())}); base {base}", err=True)
    t0 = time.perf_counter()
    est.fit(data, checkpoint_dir=out)
    seconds = time.perf_counter() - t0
    meta = {"dataset": dataset, "dataset_options": options, "max_per_lang": max_per_lang, "fit_seconds": round(seconds, 1)}
    est.save(out, meta=meta)
    plot_curves(est.history_, out / "curves.png", f"{method} on {Path(dataset).name} ({len(data)} items), base {base}", est.best_epoch_)
    last = est.history_[-1]
    click.echo(
        f"trained {len(est.history_)} epochs in {seconds:.0f}s; kept epoch {est.best_epoch_}; last train loss "
        f"{last['train_loss']:.4f}" + (f", validation loss {last['val_loss']:.4f}" if "val_loss" in last else "")
    )
    click.echo(f"wrote {out}/model.json, weights.npz, history.csv, curves.png; use it as --models {method}:{out}")


@train.command("triplet", short_help="Train Triplet (paper Eq. 1) on monolingual title/body pairs.")
@_train_options
def train_triplet(**kw) -> None:
    """Triplet (paper Eq. 1) on monolingual title/body pairs over a frozen base encoder.

    Example: backretrieval train triplet --dataset ddtp --langs en,de,fr,it,ja,ru --base use-m --out MODEL_DIR
    """
    _run_train("triplet", **kw)


@train.command("tripletxl", short_help="Train TripletXL (paper Eq. 1 + beta * Eq. 2) on monolingual title/body pairs.")
@_train_options
@click.option("--beta", type=NON_NEGATIVE_NUMBER, default=0.01, show_default=True, help="Weight of L_XL (Eq. 2).")
@click.option("--k", "k", type=POSITIVE, default=5, show_default=True, help="Neighbours per language in L_XL.")
@click.option("--refresh-every", type=POSITIVE, default=1, show_default=True, help="Recompute the neighbour sets every this many epochs.")
def train_tripletxl(**kw) -> None:
    """TripletXL (paper Eq. 1 + beta * Eq. 2) on monolingual title/body pairs over a frozen base encoder.

    Example: backretrieval train tripletxl --dataset ddtp --langs en,de,fr,it,ja,ru --base use-m --out MODEL_DIR
    """
    _run_train("tripletxl", **kw)


# ----------------------------------------------------------------------------- case study
@main.group("case-study", short_help="Base encoder vs Triplet vs TripletXL per language pair (paper Table 2 / Fig. 3).")
def case_study() -> None:
    """The case study of the paper's Sec. 3.2 (Table 2 / Fig. 3) with Triplet and TripletXL."""


def heldout_mask(concepts: Sequence[str | None], frac: float, seed: int = 0) -> "Any":
    """Which items are held out: a concept is held out when the hash of ``seed:concept`` falls in
    the lowest ``frac`` of the hash range -- the same decision in every language, so no held-out
    document has a translation among the training items. Items without a concept stay in training."""
    import numpy as np

    from ..core import content_hash

    out = np.zeros(len(concepts), dtype=bool)
    for i, c in enumerate(concepts):
        if c is not None:
            out[i] = int(content_hash(f"{seed}:{c}", 8), 16) < frac * 2.0**64
    return out


@case_study.command("prepare", short_help="Split linked title/body data into monolingual training data and a held-out test set.")
@click.option("--dataset", default="ddtp", show_default=True, help="Dataset with title/body columns and cross-lingual links.")
@click.option("--langs", required=True, help="Comma-separated languages, e.g. en,de,fr,it,ja,ru,es.")
@click.option("--holdout", type=OPEN_UNIT, default=0.25, show_default=True, help="Share of concepts held out for the ground-truth check, in (0, 1).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--dataset-option", "dataset_option", multiple=True, help="Loader option KEY=VALUE.")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="Work directory.")
def prepare(dataset, langs, holdout, seed, dataset_option, out) -> None:
    """Split a linked title/body dataset into monolingual training data and a held-out test set.

    Writes OUT/<dataset>_train.jsonl (id, lang, text, title, body: no concept column, no image,
    ids are positions) and OUT/<dataset>_heldout.jsonl (with the concept column for XLR and, where
    the dataset has images, an absolute image path for BkR). The split is
    by concept (see heldout_mask), so held-out documents and their translations are never trained on.
    """
    import numpy as np

    from ..core import DataError, atomic_write_text, content_hash
    from ..data import load_dataset

    wanted = _langs(langs)
    options = _parse_options(dataset_option, dataset)
    _check_outputs((out, "--out"))
    ds = load_dataset(dataset, langs=wanted, **options)
    out = Path(out)
    train_rows, test_rows, counts = [], [], {}
    for lang in wanted:
        c = ds[lang]
        if "title" not in c.extra or "body" not in c.extra:
            raise DataError(f"{dataset}/{lang} has no title/body columns")
        if not c.has_concepts:
            raise DataError(f"{dataset}/{lang} has no cross-lingual links: nothing to hold out for XLR")
        held = heldout_mask(c.concepts, holdout, seed)
        title_body = lambda i: (str(c.extra["title"][i] or ""), str(c.extra["body"][i] or ""))  # noqa: E731
        for i in np.flatnonzero(held):
            title, body = title_body(i)
            row = {"id": c.ids[i], "lang": lang, "concept": c.concepts[i], "text": c.texts[i], "title": title, "body": body}
            if c.image_paths is not None:
                row["image"] = str(Path(c.image_paths[i]).resolve())
            test_rows.append(row)
        # training rows in a seeded per-language random order, ids = new positions: neither the
        # order nor the ids of the training file say which items of two languages correspond
        train_idx = np.random.default_rng([seed, int(content_hash(lang, 4), 16)]).permutation(np.flatnonzero(~held))
        for j, i in enumerate(train_idx, start=1):
            title, body = title_body(i)
            train_rows.append({"id": f"{lang}-{j:06d}", "lang": lang, "text": c.texts[i], "title": title, "body": body})
        counts[lang] = {"train": int(train_idx.size), "heldout": int(held.sum())}
    name = Path(dataset).stem
    dump = lambda rows: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)  # noqa: E731
    atomic_write_text(out / f"{name}_train.jsonl", dump(train_rows))
    atomic_write_text(out / f"{name}_heldout.jsonl", dump(test_rows))
    held_sets = {lang: {r["concept"] for r in test_rows if r["lang"] == lang} for lang in wanted}
    shared = {f"{a}-{b}": len(held_sets[a] & held_sets[b]) for a, b in itertools.combinations(wanted, 2)}
    info = {"dataset": dataset, "langs": wanted, "holdout": holdout, "seed": seed, "counts": counts, "heldout_shared_concepts": shared}
    atomic_write_text(out / "prepare.json", json.dumps(info, indent=1))
    for lang, cnt in counts.items():
        click.echo(f"{lang}: {cnt['train']} training items, {cnt['heldout']} held out")
    click.echo(f"smallest held-out pair: {min(shared, key=shared.get)} with {min(shared.values())} shared concepts (the largest XLR n for all pairs)")
    click.echo(f"wrote {out / f'{name}_train.jsonl'} and {out / f'{name}_heldout.jsonl'}")


def model_label(spec: str) -> str:
    """Short name of a model spec: ``tripletxl:/x/tripletxl`` -> ``tripletxl``, ``tripletxl:/x/b1`` -> ``tripletxl:b1``."""
    name, sep, arg = spec.partition(":")
    if not sep:
        return spec
    base = Path(arg.rstrip("/")).name
    return name if base == name else f"{name}:{base}"


def _stacked(result, model: str, pairs, key: str, k: int):
    """Per-query hit@k outcomes of ``model`` for every (pair, seed): (pairs, seeds, N)."""
    import numpy as np

    from ..analysis.stats import hits

    seeds = sorted({r["seed"] for r in result.records})
    return np.stack([np.stack([hits(result.ranks[(model, s, t, seed)][key], k) for seed in seeds]) for s, t in pairs])


def spread_ci(per_pair, a: str, b: str, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Bootstrap over pairs (the same resampled pairs for both models) of sd_a - sd_b and of
    min_a - min_b across pairs; ``per_pair`` is a (pairs x models) DataFrame of estimates."""
    import numpy as np

    x, y = per_pair[a].to_numpy(), per_pair[b].to_numpy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(x), size=(n_boot, len(x)))
    d_sd = x[idx].std(axis=1, ddof=1) - y[idx].std(axis=1, ddof=1)
    q = [(1 - level) / 2, 1 - (1 - level) / 2]
    lo, hi = np.quantile(d_sd, q)
    return {"sd_diff": float(x.std(ddof=1) - y.std(ddof=1)), "sd_diff_low": float(lo), "sd_diff_high": float(hi),
            "p_sd_not_smaller": float((d_sd >= 0).mean())}


def case_study_summary(
    results: dict[str, Any], models: list[str], labels: dict[str, str], pairs, k: int, truth_k: int, n_boot: int,
    names: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Tables of the case study from evaluation results ``{"bkr": EvalResult on the image data,
    "xlr": EvalResult on held-out linked data}`` (``names``: a display name per data set)."""
    import numpy as np
    import pandas as pd

    from ..analysis.stats import bootstrap_ci, correlations, holm, paired_permutation_test

    names = names or {"bkr": "image data", "xlr": "held-out data"}
    views = [(f"BkR@{k} ({names['bkr']})", "bkr", "bkr", k), (f"XLR@{truth_k} ({names['bkr']})", "bkr", "xlr", truth_k)]
    if "xlr" in results:
        views.append((f"XLR@{truth_k} ({names['xlr']})", "xlr", "xlr", truth_k))
    base = models[0]
    out: dict[str, Any] = {"metrics": [], "per_pair": {}, "vs_base": {}, "spread": {}}
    for title, which, key, kk in views:
        res = results[which]
        if not any(key in r for r in res.ranks.values()):
            continue  # e.g. XLR on image data without cross-lingual links
        stacks = {m: _stacked(res, m, pairs, key, kk) for m in models}  # (pairs, seeds, N)
        est = pd.DataFrame({labels[m]: stacks[m].mean(axis=(1, 2)) for m in models}, index=[f"{s}->{t}" for s, t in pairs])
        lows, highs = {}, {}
        for m in models:
            cis = [bootstrap_ci(stacks[m][i], n_boot=n_boot, seed=i) for i in range(len(pairs))]
            lows[labels[m]] = [c.low for c in cis]
            highs[labels[m]] = [c.high for c in cis]
        rows = []
        for m in models:
            st = stacks[m]
            mean_ci = bootstrap_ci(st.reshape(-1, st.shape[-1]), n_boot=n_boot, seed=1)  # strata = (pair, seed)
            col = est[labels[m]]
            row = {"metric": title, "model": labels[m], "mean": mean_ci.estimate, "ci_low": mean_ci.low, "ci_high": mean_ci.high,
                   "sd": float(col.std(ddof=1)), "min": float(col.min()), "worst_pair": str(col.idxmin()),
                   "q25": float(col.quantile(0.25)), "max": float(col.max())}
            if m != base:
                tests = [paired_permutation_test(st[i], stacks[base][i], n_perm=2000, seed=i) for i in range(len(pairs))]
                p_adj = holm([t.p_value for t in tests])
                row["pairs_better"] = int(sum(t.diff > 0 and p < 0.05 for t, p in zip(tests, p_adj)))
                row["pairs_worse"] = int(sum(t.diff < 0 and p < 0.05 for t, p in zip(tests, p_adj)))
                row["delta_vs_base"] = float(st.mean() - stacks[base].mean())
            rows.append(row)
        out["metrics"].extend(rows)
        out["per_pair"][title] = {"estimate": est, "low": pd.DataFrame(lows, index=est.index), "high": pd.DataFrame(highs, index=est.index)}
    # did BkR tell the truth? sign agreement of gains vs the base, per pair; correlation over (model, pair)
    truth = {}
    bkr_title = views[0][0]
    if bkr_title in out["per_pair"]:
        b = out["per_pair"][bkr_title]["estimate"]
        for title in [v[0] for v in views[1:]]:
            if title not in out["per_pair"]:
                continue
            x = out["per_pair"][title]["estimate"]
            r, rho = correlations(b.to_numpy().ravel(), x.to_numpy().ravel())
            agree = {}
            for m in models[1:]:
                db, dx = b[labels[m]] - b[labels[base]], x[labels[m]] - x[labels[base]]
                agree[labels[m]] = float((np.sign(db) == np.sign(dx)).mean())
            # does BkR rank the models' across-pair means like the ground truth does?
            order_b = list(b.mean().sort_values(ascending=False).index)
            order_x = list(x.mean().sort_values(ascending=False).index)
            truth[title] = {"pearson": r, "spearman": rho, "sign_agreement_vs_base": agree, "ranking_bkr": order_b, "ranking_truth": order_x}
    out["truth"] = truth
    # did TripletXL narrow the spread? every tripletxl model against the first triplet model
    trip = [m for m in models if m.split(":")[0] == "triplet"]
    xls = [m for m in models if m.split(":")[0] == "tripletxl"]
    for title, d in out["per_pair"].items():
        for a in xls:
            for other in trip[:1] + [base]:
                out["spread"][f"{title}: {labels[a]} vs {labels[other]}"] = spread_ci(d["estimate"], labels[a], labels[other])
    return out


def case_study_markdown(summary: dict[str, Any], header: str) -> str:
    lines = [header, "", "## Averages across pairs", "",
             "Mean over all directed pairs with a 95% bootstrap CI (queries resampled within every pair and seed); sd, "
             "min and the worst pair describe the spread across pairs. 'better / worse' = pairs where the model differs "
             "significantly from the base encoder (paired sign-flip permutation test per pair, Holm-adjusted across pairs, 0.05).", "",
             "| metric | model | mean | 95% CI | sd across pairs | min (pair) | 25th pct | max | better / worse pairs vs base |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["metrics"]:
        bw = f"{r['pairs_better']} / {r['pairs_worse']}" if "pairs_better" in r else "(base)"
        lines.append(f"| {r['metric']} | {r['model']} | {r['mean']:.4f} | [{r['ci_low']:.4f}, {r['ci_high']:.4f}] | {r['sd']:.4f} | "
                     f"{r['min']:.4f} ({r['worst_pair']}) | {r['q25']:.4f} | {r['max']:.4f} | {bw} |")
    if summary["truth"]:
        lines += ["", "## Did BkR tell the truth?", "",
                  "Correlation of per-pair BkR with per-pair ground-truth XLR over all (model, pair) points; the share of pairs "
                  "where BkR and XLR agree on the sign of each model's gain over the base; the models ranked by their mean.", "",
                  "| ground truth | Pearson | Spearman | sign agreement vs base | ranking by BkR | ranking by ground truth |", "|---|---|---|---|---|---|"]
        for title, t in summary["truth"].items():
            agree = ", ".join(f"{m} {v:.0%}" for m, v in t["sign_agreement_vs_base"].items())
            lines.append(f"| {title} | {t['pearson']:.3f} | {t['spearman']:.3f} | {agree} | {' > '.join(t['ranking_bkr'])} | {' > '.join(t['ranking_truth'])} |")
    if summary["spread"]:
        lines += ["", "## Did TripletXL narrow the spread?", "",
                  "sd across pairs of model A minus that of model B, with a 95% bootstrap CI over pairs (pairs resampled, the "
                  "same for both models); negative = A's results vary less across pairs.", "",
                  "| comparison | sd(A) - sd(B) | 95% CI | share of bootstrap draws with sd(A) >= sd(B) |", "|---|---|---|---|"]
        for name, s in summary["spread"].items():
            lines.append(f"| {name} | {s['sd_diff']:+.4f} | [{s['sd_diff_low']:+.4f}, {s['sd_diff_high']:+.4f}] | {s['p_sd_not_smaller']:.3f} |")
    for title, d in summary["per_pair"].items():
        est, lo, hi = d["estimate"], d["low"], d["high"]
        lines += ["", f"## Per pair: {title} (95% bootstrap CI)", "", "| pair | " + " | ".join(est.columns) + " |", "|---|" + "---|" * len(est.columns)]
        for pair in est.index:
            cells = [f"{est.at[pair, c]:.3f} [{lo.at[pair, c]:.3f}, {hi.at[pair, c]:.3f}]" for c in est.columns]
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def case_study_figure(summary: dict[str, Any], path: Path, annotate: int = 1) -> None:
    """Fig. 3 analog: one panel per metric, a box per model over language pairs, each pair a dot;
    the ``annotate`` worst pairs of every model are labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..core import atomic_write

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
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png")
    plt.close(fig)


@case_study.command("report", short_help="Evaluate base vs trained models on every directed pair; tables and boxplot.")
@click.option("--langs", required=True, help="Comma-separated languages; every directed pair is evaluated.")
@click.option("--models", required=True, help="Base encoder first, then trained models, e.g. use-m,triplet:DIR,tripletxl:DIR.")
@click.option("--labels", default=None, help="Comma-separated short names of the models (default: derived from the specs).")
@click.option("--bkr-dataset", default="emoji-cldr", show_default=True, help="Data with images for BkR (and XLR where it has links).")
@click.option("--xlr-dataset", default=None, help="Held-out linked data for the ground-truth check, e.g. WORK/ddtp_heldout.jsonl.")
@click.option("--bkr-n", type=POSITIVE, default=1500, show_default=True)
@click.option("--xlr-n", type=POSITIVE, default=250, show_default=True)
@click.option("--seeds", default="3", show_default=True, help="Number of seeds (0..S-1) or a comma list of seeds >= 0.")
@click.option("--k", "k", type=POSITIVE, default=10, show_default=True, help="K of BkR@K; at most --bkr-n.")
@click.option("--truth-k", type=POSITIVE, default=1, show_default=True, help="K of the ground-truth XLR@K (XLR@10 saturates on both data sets).")
@click.option("--image-model", default="efficientnet-lite0", show_default=True)
@click.option("--n-boot", type=click.IntRange(min=2), default=1000, show_default=True, help="Bootstrap resamples, at least 2.")
@click.option("--figure", type=click.Path(dir_okay=False), default=None, help="Where to write the boxplot PNG (default OUT/case_study.png).")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True)
@click.option("--quiet", is_flag=True)
def report(langs, models, labels, bkr_dataset, xlr_dataset, bkr_n, xlr_n, seeds, k, truth_k, image_model, n_boot, figure, out, quiet) -> None:
    """Fig. 3 / Table 2 analog: per directed pair, BkR on the image data and ground-truth XLR
    (on the image data where it has links, and on held-out linked data) for a base encoder and
    trained Triplet / TripletXL models; averages with CIs, spread across pairs, boxplot.

    Writes OUT/case_study.md, OUT/case_study.json, the figure, and the evaluation records under
    OUT/bkr and OUT/xlr (resumable).
    """
    from ..analysis import EvalConfig
    from ..analysis import evaluate as run
    from ..core import atomic_write_text
    from ..data import dataset_option_names

    wanted = _langs(langs)
    if len(wanted) < 2:
        _bad("--langs", f"{langs!r}: give at least two languages (every directed pair is evaluated)")
    specs = _parse_list(models, "--models", "model")
    if len(specs) < 2:
        _bad("--models", "give the base encoder and at least one trained model")
    names = [x.strip() for x in labels.split(",")] if labels else [model_label(m) for m in specs]
    if len(names) != len(specs) or len(set(names)) != len(names) or not all(names):
        _bad("--labels", f"one distinct, non-empty label per model ({len(specs)} models), got {labels!r}")
    lab = dict(zip(specs, names))
    pairs = [(s, t) for s in wanted for t in wanted if s != t]
    seed_list = _parse_seeds(seeds)
    if k > bkr_n:
        _bad("--k", f"K={k} is larger than N={bkr_n} (--bkr-n)")
    if truth_k > bkr_n or (xlr_dataset and truth_k > xlr_n):
        _bad("--truth-k", f"K={truth_k} is larger than N={min(bkr_n, xlr_n) if xlr_dataset else bkr_n}")
    for ds_spec in (bkr_dataset, xlr_dataset):
        if ds_spec:
            dataset_option_names(ds_spec)  # an unknown dataset is refused now
    _check_image_models([image_model], "--image-model")
    _check_text_models(specs, "--models")
    _check_outputs((out, "--out"), files=[(figure, "--figure")] if figure else [])
    out = Path(out)
    results: dict[str, Any] = {}
    t0 = time.perf_counter()
    results["bkr"] = run(EvalConfig(dataset=bkr_dataset, pairs=pairs, models=specs, image_model=image_model, n=bkr_n, seeds=seed_list, k=k),
                         out / "bkr", progress=not quiet, log=_warn)
    if xlr_dataset:
        results["xlr"] = run(EvalConfig(dataset=xlr_dataset, pairs=pairs, models=specs, image_model=image_model, n=xlr_n, seeds=seed_list, k=k),
                             out / "xlr", progress=not quiet, log=_warn)
    ds_names = {"bkr": Path(bkr_dataset).stem, "xlr": Path(xlr_dataset).stem if xlr_dataset else ""}
    summary = case_study_summary(results, specs, lab, pairs, k, truth_k, n_boot, ds_names)
    header = (f"# Case study: {', '.join(names)} on {len(pairs)} directed pairs of {', '.join(wanted)}\n\n"
              f"BkR@{k} on {ds_names['bkr']} (N={bkr_n} per side, image model {image_model}); ground-truth XLR@{truth_k} on {ds_names['bkr']}"
              + (f" (where it has links) and on {ds_names['xlr']} (N={xlr_n})" if xlr_dataset else " (where it has links)")
              + f"; seeds {','.join(map(str, seed_list))}. Models: " + ", ".join(f"`{lab[m]}` = `{m}`" for m in specs) + ".")
    md = case_study_markdown(summary, header)
    atomic_write_text(out / "case_study.md", md)
    js = {"metrics": summary["metrics"], "truth": summary["truth"], "spread": summary["spread"],
          "per_pair": {t: {kk: v.to_dict() for kk, v in d.items()} for t, d in summary["per_pair"].items()},
          "seconds": round(time.perf_counter() - t0, 1)}
    atomic_write_text(out / "case_study.json", json.dumps(js, indent=1, default=float))
    fig_path = Path(figure) if figure else out / "case_study.png"
    case_study_figure(summary, fig_path)
    click.echo(md)
    click.echo(f"wrote {out / 'case_study.md'}, {out / 'case_study.json'}, {fig_path}")
