"""How much data BkR needs: how often BkR@K picks XLR's best model, and how well it ranks the
models as XLR does, as the sample size N grows (emoji-cldr; CORR beside it as the baseline).

For every N the evaluation grid (``br.evaluate``: models x pairs x seeds, K = 10, which also
records BkR@1, BkR@5 and XLR@1, XLR@5) runs into OUT/n<N>/ (each record is stored as it is
finished, so an interrupted run resumes), and the records of each finished N are appended to
OUT/records.jsonl. ``--report`` reads whatever OUT holds and writes the table to BENCHMARKS.md and
the plot to docs/img/data-size.png, so a partial run is usable.

What is computed, per pair, N, K and seed, across the models:

* pick: whether the model with the highest BkR@K (ties share the credit) is XLR's best model
  (XLR@K averaged over the seeds at the largest N run: the ground truth a team would want), or
  within 0.01 XLR@K of it (so that a near-twin variant of the best counts as the best);
* loss: how much XLR@K (that ground truth) the model BkR@K picks is below the best;
* Pearson and Spearman of BkR@K with XLR@K on the same seed (the meta-evaluation's
  ``per_seed_correlations``); a seed where BkR@K is the same for every model ranks nothing and
  counts as 0;
* the same for CORR.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python bench/bench_data_size.py --out /tmp/data-size
    python bench/bench_data_size.py --out /tmp/data-size --report          # the table and plot
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

PAIRS = "en-de,en-ja"
NS = "25,50,100,200,400,800,1500"
KS = (1, 5, 10)
# the demo's models and graded variants of use-m and minilm-en between them and random; e5-small (the demo's fifth)
# is left out by default: it encodes ~10 names per CPU-second (BENCHMARKS.md), 20 minutes of CPU for three languages
MODELS = ("use-m,minilm-en,tfidf-char,random,use-m@noise=0.5,use-m@noise=1,use-m@noise=2,use-m@trunc=16,"
          "minilm-en@noise=1")
SECTION = "data-size"
TOLERANCE = 0.01  # a model within this much XLR@K of the best counts as XLR's best
PLOT = ROOT / "docs" / "img" / "data-size.png"


def run_grid(args) -> None:
    """Run the grid N by N (smallest first), appending each finished N's records to OUT/records.jsonl."""
    import backretrieval as br
    from backretrieval.analysis import parse_pairs
    from bench_meta import warm_cache

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = {rec["n"] for rec in read_records(out)}
    models = args.models.split(",")
    for n in (int(x) for x in args.ns.split(",")):
        if n in done:
            continue
        cfg = br.EvalConfig(dataset="emoji-cldr", pairs=parse_pairs(args.pairs), models=models, n=n,
                            seeds=list(range(args.seeds)), k=10, image_model="efficientnet-lite0")
        if not args.no_warm:
            warm_cache(cfg)
            args.no_warm = True
        t0, c0 = time.perf_counter(), time.process_time()
        res = br.evaluate(cfg, out / f"n{n}", progress=False, log=lambda m: print(m, file=sys.stderr))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        with open(out / "records.jsonl", "a", encoding="utf-8") as f:
            for rec in res.records:
                f.write(json.dumps({**rec, "wall_s_grid": wall, "cpu_s_grid": cpu}, default=str) + "\n")
        print(f"N={n}: {len(res.records)} records in {wall:.0f} s wall, {cpu:.0f} s CPU", file=sys.stderr, flush=True)


def read_records(out: Path) -> list[dict]:
    """The records of every finished N in OUT/records.jsonl."""
    path = out / "records.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def summarize(records: list[dict]):
    """One row per (pair, N, K): pick rates and correlations of BkR@K and CORR with XLR@K over seeds."""
    import numpy as np
    import pandas as pd
    from backretrieval.analysis.evaluate import pair_labels
    from backretrieval.analysis.meta import per_seed_correlations

    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
    top_n = int(df["n"].max())
    rows = []
    for k in KS:
        truth = df[df["n"] == top_n].groupby(["pair", "model"])[f"xlr@{k}"].mean()
        for (pair, n), g in df.groupby(["pair", "n"], sort=True):
            ref = truth[pair].sort_values(ascending=False)
            best, margin = ref.index[0], float(ref.iloc[0] - ref.iloc[1])
            as_good = set(ref.index[ref >= ref.iloc[0] - TOLERANCE])
            per_seed = per_seed_correlations(g.to_dict("records"), truth=f"xlr@{k}", candidates={"bkr": f"bkr@{k}", "corr": "corr"})
            row = {"pair": pair, "n": int(n), "k": k, "seeds": int(g["seed"].nunique()), "models": int(g["model"].nunique()),
                   "best": best, "best_margin": margin, "as_good": len(as_good), "chance": k / n}
            for cand, col in (("bkr", f"bkr@{k}"), ("corr", "corr")):
                picks, losses = [], []
                for _, s in g.groupby("seed"):
                    top = list(s[s[col] == s[col].max()]["model"])  # ties share the credit
                    picks.append(np.mean([m in as_good for m in top]))
                    losses.append(np.mean([ref.iloc[0] - ref[m] for m in top]))
                row[f"pick_{cand}"], row[f"loss_{cand}"] = float(np.mean(picks)), float(np.mean(losses))
                for kind in ("pearson", "spearman"):
                    v = per_seed[f"{kind}_{cand}"].fillna(0.0).to_numpy(float)
                    row[f"{kind}_{cand}"], row[f"{kind}_{cand}_sd"] = float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0
            rows.append(row)
    return pd.DataFrame(rows).sort_values(["k", "pair", "n"], kind="stable").reset_index(drop=True)


def plot(table, path: Path) -> None:
    """Pick rate and Spearman of BkR@K (solid) and CORR (dashed) against N, one panel per measure and K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, len(KS), figsize=(4.2 * len(KS), 6.4), sharex=True, sharey="row")
    colors = dict(zip(table["pair"].unique(), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for j, k in enumerate(KS):
        sub = table[table["k"] == k]
        for i, (measure, label) in enumerate((("pick", "picks XLR's best model"), ("spearman", "Spearman with XLR"))):
            ax = axes[i, j]
            for pair, g in sub.groupby("pair", sort=False):
                ax.plot(g["n"], g[f"{measure}_bkr"], "o-", color=colors[pair], label=f"BkR@K {pair}")
                ax.plot(g["n"], g[f"{measure}_corr"], "s--", color=colors[pair], alpha=0.6, label=f"CORR {pair}")
            ax.set_xscale("log")
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.set_xticks(sorted(sub["n"].unique()), [str(n) for n in sorted(sub["n"].unique())])
            ax.grid(alpha=0.3)
            ax.set_title(f"K = {k}: {label}" if i == 0 else f"K = {k}")
            if j == 0:
                ax.set_ylabel(label)
            if i == 1:
                ax.set_xlabel("N per side")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    fig.suptitle("How much data BkR needs (emoji-cldr, mean over seeds)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(args) -> None:
    """Write the BENCHMARKS.md section and the plot from the records OUT holds."""
    import pandas as pd
    from _md import machine, write_section

    records = read_records(Path(args.out))
    if not records:
        sys.exit(f"no finished N in {args.out}/records.jsonl yet")
    table = summarize(records)
    plot(table, PLOT)
    cost = pd.DataFrame(records).groupby("n")[["wall_s_grid", "cpu_s_grid"]].first()
    first = records[0]
    models = list(dict.fromkeys(r["model"] for r in records))
    lines = [
        "## How much data BkR needs (emoji-cldr)",
        "",
        f"Command: `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 python bench/bench_data_size.py --out OUT --seeds {table['seeds'].max()}` then "
        f"`python bench/bench_data_size.py --out OUT --report`. Machine: {machine()}; a machine shared with other work (load average 10-19), so wall times are not speeds.",
        "",
        f"emoji-cldr, pairs {', '.join(table['pair'].unique())}, image model {first['image_model']}, {len(models)} models "
        f"({', '.join(models)}), seeds 0-{table['seeds'].max() - 1} per N. XLR's best model is the one with the highest "
        f"XLR@K averaged over the seeds at N = {table['n'].max():,} (the ground truth); *as good* counts the models "
        f"within {TOLERANCE} XLR@K of it. *pick*: share of seeds where the highest BkR@K (or CORR) is one of those "
        "(ties share the credit); *loss*: how much lower that ground truth XLR@K is for the model picked, mean over "
        "seeds; *Spearman* / *Pearson*: across the models, of BkR@K (or CORR) with XLR@K on the same sample, mean (sd) "
        "over seeds, a seed where every model has the same BkR@K counting as 0. Plot: docs/img/data-size.png.",
        "",
        "| pair | K | N | chance K/N | XLR's best (as good) | pick BkR | pick CORR | loss BkR | loss CORR | Spearman BkR | "
        "Spearman CORR | Pearson BkR | Pearson CORR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {r.pair} | {r.k} | {r.n:,} | {r.chance:.3f} | {r.best} ({r.as_good}) | {r.pick_bkr:.2f} | {r.pick_corr:.2f} | "
            f"{r.loss_bkr:.3f} | {r.loss_corr:.3f} | "
            f"{r.spearman_bkr:.2f} ({r.spearman_bkr_sd:.2f}) | {r.spearman_corr:.2f} ({r.spearman_corr_sd:.2f}) | "
            f"{r.pearson_bkr:.2f} ({r.pearson_bkr_sd:.2f}) | {r.pearson_corr:.2f} ({r.pearson_corr_sd:.2f}) |"
        )
    lines += ["", "Cost of each N's grid (every pair, model and seed, embeddings cached):", "",
              "| N | wall s | CPU s |", "|---|---|---|"]
    lines += [f"| {n:,} | {c.wall_s_grid:.0f} | {c.cpu_s_grid:.0f} |" for n, c in cost.iterrows()]
    lines += [f"| all | {cost.wall_s_grid.sum():.0f} | {cost.cpu_s_grid.sum():.0f} |", "",
              "Not counted: encoding every text and image once beforehand (into the embedding cache)."]
    if args.note:
        lines += ["", Path(args.note).read_text(encoding="utf-8").strip()]
    write_section(SECTION, "\n".join(lines))
    table.to_csv(Path(args.out) / "summary.csv", index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where the records go (resumable)")
    ap.add_argument("--pairs", default=PAIRS)
    ap.add_argument("--ns", default=NS)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--no-warm", action="store_true", help="skip encoding every text first (the cache is known to be full)")
    ap.add_argument("--report", action="store_true", help="write the table and plot from OUT instead of running")
    ap.add_argument("--note", help="a Markdown file appended to the section: the reading of the result")
    args = ap.parse_args()
    os.environ.setdefault("BACKRETRIEVAL_EMOJI_DIR", str(ROOT.parent / "shared" / "data" / "npm"))
    report(args) if args.report else run_grid(args)


if __name__ == "__main__":
    main()
