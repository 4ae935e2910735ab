"""BkR + XLR wall time against the bare matrix multiplications they need, and peak memory.

Random unit vectors (512-d text, 1280-d image), N per side. Each N runs in a fresh process so
peak RSS belongs to that run alone. The baseline is measured in the same process: the float32
matrix products the metrics cannot avoid, done in the same blocks with the result discarded
(tiles of 1,024 rows where a row block would be thinner than 512 rows, N above ~16k: see
search.blocks.tiles), interleaved with the metrics (bench/_timing.py: median and min-max of
--repeats rounds, at least 3) -- XLR: one N x N x 512 product (cosine is symmetric, so one pass
over the scores gives both directions); BkR: one N x N x 512 text product plus one U x N x 1280
image product for the U distinct retrieved targets, their rows gathered per block as the metric
does. The inputs are generated a block of rows at a time (the same numbers as in one draw), so
the peak RSS is the inputs plus what the metrics and products hold.

    python bench/bench_metrics.py --n 1000 3000 10000 30000 100000
    python bench/bench_metrics.py --child 100000 --metrics bkr   # one N, BkR alone, JSON row

Also writes docs/img/bench_growth.png (time and memory against N, log-log).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def bare(Q: np.ndarray, D: np.ndarray, block_bytes: int, rows_of_Q: np.ndarray | None = None) -> None:
    """The product ``Q @ D.T`` (``Q[rows_of_Q] @ D.T`` with ``rows_of_Q``, gathered per block) in
    the blocks the metrics use: row blocks, or tiles of 1,024 rows where a block would have fewer
    than 512 rows (search.blocks.tiles)."""
    from backretrieval.search.blocks import tiles

    n_rows = Q.shape[0] if rows_of_Q is None else rows_of_Q.shape[0]
    for rows, cols in tiles(n_rows, D.shape[0], block_bytes, True):
        (Q[rows] if rows_of_Q is None else Q[rows_of_Q[rows]]) @ D[cols].T


CHUNK_ROWS = 8192


def unit_gaussian(rng: np.random.Generator, n: int, d: int, add: np.ndarray | None = None) -> np.ndarray:
    """``l2_normalize(add + rng.standard_normal((n, d)))`` (``add`` optional) made a block of rows
    at a time: the same numbers as one draw, without the whole-size temporaries."""
    from backretrieval.search import l2_normalize

    out = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, CHUNK_ROWS):
        x = rng.standard_normal((min(n, s + CHUNK_ROWS) - s, d), dtype=np.float32)
        if add is not None:
            x = add[s : s + CHUNK_ROWS] + x
        out[s : s + CHUNK_ROWS] = l2_normalize(x)
    return out


METRICS = ("xlr", "bkr")


def one(n: int, runs: int, metrics: tuple[str, ...] = METRICS) -> dict:
    from _timing import interleaved, ratio_spread, spread, timed

    from backretrieval.metrics import bkr_ranks, xlr_ranks
    from backretrieval.search import DEFAULT_BLOCK_BYTES, nearest_with_ties

    rng = np.random.default_rng(0)
    st = unit_gaussian(rng, n, 512)
    tt = unit_gaussian(rng, n, 512, add=st)
    si = unit_gaussian(rng, n, 1280)
    ti = unit_gaussian(rng, n, 1280)
    # untimed: compile the kernels (on a few rows), and the distinct retrieved targets for the bare
    # image product (every target attaining a query's best score, as BkR's; the same in every run)
    xlr_ranks(st[:256], tt[:256])
    bkr_ranks(st[:256], tt[:256], si[:256], ti[:256])
    variants = {}
    res: dict = {"n": n, "runs": runs, "metrics": list(metrics)}
    if "xlr" in metrics:
        variants["xlr"] = timed(lambda: xlr_ranks(st, tt))
        # as an evaluation calls it: the ranks and each source's nearest targets (per-query results)
        variants["xlr_near"] = timed(lambda: xlr_ranks(st, tt, return_nearest=True))
        variants["xlr_bare"] = timed(lambda: bare(st, tt, DEFAULT_BLOCK_BYTES))
    if "bkr" in metrics:
        uniq = np.unique(nearest_with_ties(st, tt)[1])
        res["bkr_distinct_targets"] = int(uniq.size)

        def bkr_bare() -> None:
            bare(st, tt, DEFAULT_BLOCK_BYTES)
            bare(ti, si, DEFAULT_BLOCK_BYTES, rows_of_Q=uniq)

        variants["bkr"] = timed(lambda: bkr_ranks(st, tt, si, ti))
        variants["bkr_bare"] = timed(bkr_bare)
    runs_ = interleaved(variants, runs)
    res["times"] = runs_
    for k, v in runs_.items():
        sp_ = spread(v)
        res[f"{k}_s"] = [round(sp_.median, 3), round(sp_.lo, 3), round(sp_.hi, 3)]
    ratios = {m: (runs_[m], runs_[f"{m}_bare"]) for m in metrics}
    if "xlr" in metrics:
        ratios["xlr_near"] = (runs_["xlr_near"], runs_["xlr_bare"])
    if len(metrics) == 2:
        ratios["both"] = ([a + b for a, b in zip(runs_["xlr"], runs_["bkr"])],
                          [a + b for a, b in zip(runs_["xlr_bare"], runs_["bkr_bare"])])
    for key, (num, den) in ratios.items():
        sp_ = ratio_spread(num, den)
        res[f"{key}_ratio"] = [round(sp_.median, 3), round(sp_.lo, 3), round(sp_.hi, 3)]
    res["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return res


def _cell(v: list[float] | None) -> str:
    """``median (min-max)`` of a stored [median, min, max]; ``-`` where not measured."""
    from _timing import Spread

    return "-" if v is None else Spread(v[0], v[1], v[2], 0).fmt()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 3000, 10000, 30000, 100000])
    ap.add_argument("--repeats", type=int, default=3, help="Interleaved runs per variant (at least 3).")
    ap.add_argument("--child", type=int, help="measure one N and print its JSON row (no BENCHMARKS.md)")
    ap.add_argument("--rows", nargs="+", default=[], help="JSON rows saved by --child runs, kept beside the N measured now")
    ap.add_argument("--metrics", nargs="+", choices=METRICS, default=list(METRICS),
                    help="which metrics to time (with --child; the table needs both)")
    args = ap.parse_args()
    from _timing import check_runs, describe

    check_runs(args.repeats)
    if args.child:
        print(json.dumps(one(args.child, args.repeats, tuple(m for m in METRICS if m in args.metrics))))
        return
    rows = [json.loads(Path(f).read_text().strip().splitlines()[-1]) for f in args.rows]
    for n in args.n:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--repeats", str(args.repeats)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr)
    rows.sort(key=lambda r: r["n"])
    from _md import ROOT, machine, write_section

    target = {10000: (1.2, 1024), 100000: (1.3, 2048)}  # the ratio and RSS (MiB) targets

    def verdict(r) -> str:
        if r["n"] not in target:
            return ""
        ratio, rss = target[r["n"]]
        if "both_ratio" not in r:
            return f"RSS {'met' if r['peak_rss_mib'] <= rss else 'MISSED'} (<= {rss} MiB; {', '.join(r['metrics'])} only)"
        ok = r["both_ratio"][0] <= ratio and r["peak_rss_mib"] <= rss
        return f"{'met' if ok else 'MISSED'} (<= {ratio}x, <= {rss} MiB)"

    lines = [
        "### BkR and XLR vs the bare matrix multiplications",
        "",
        f"Command: `python bench/bench_metrics.py --n {' '.join(str(r['n']) for r in rows)} --repeats {args.repeats}` "
        f"(each N in a fresh process). Machine: {machine()}.",
        "",
        describe(args.repeats),
        "",
        "Random unit vectors, 512-d text (targets = sources + Gaussian noise, so retrieval is meaningful) and",
        "1280-d image features. *bare* = the float32 products the metric needs, in the same blocks (tiles of",
        "1,024 rows where a row block would be thinner than 512 rows, as the metrics), results",
        "discarded (XLR: N x N x 512 once, which serves both directions; BkR: N x N x 512 + U x N x 1280 for the U distinct",
        "retrieved targets). Ratio = metric time / bare time (per round). *XLR + nearest*: `xlr_ranks(...,",
        "return_nearest=True)`, as every evaluation calls it (the ranks and each source's nearest targets, for the",
        "per-query results, from the same pass). Peak RSS of the whole process, inputs included",
        "(N x 3584 floats: 1.43 GB at N = 100,000).",
        "",
        "| N | XLR s | bare s | XLR ratio | XLR + nearest ratio | BkR s | bare s | BkR ratio | XLR+BkR ratio | peak RSS MiB | target |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {_cell(r.get('xlr_s'))} | {_cell(r.get('xlr_bare_s'))} | {_cell(r.get('xlr_ratio'))} "
            f"| {_cell(r.get('xlr_near_ratio'))} "
            f"| {_cell(r.get('bkr_s'))} | {_cell(r.get('bkr_bare_s'))} | {_cell(r.get('bkr_ratio'))} "
            f"| {_cell(r.get('both_ratio'))} | {r['peak_rss_mib']} | {verdict(r)} |"
        )
    if len(rows) > 1 and all("both_ratio" in r for r in rows):
        png = growth_plot(rows, ROOT / "docs" / "img" / "bench_growth.png")
        lines += ["", f"![time and memory against N]({png.relative_to(ROOT).as_posix()})",
                  "", "Time grows as N^2 (every metric compares all pairs exactly), memory as N (blocks of a fixed",
                  "budget; no N x N matrix is ever held)."]
    write_section("metrics-vs-matmul", "\n".join(lines))


def growth_plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = np.array([r["n"] for r in rows], dtype=float)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("xlr_s", "XLR"), ("xlr_bare_s", "XLR bare matmul"), ("bkr_s", "BkR"), ("bkr_bare_s", "BkR bare matmul")):
        a.loglog(n, [r[key][0] for r in rows], "o-" if "bare" not in key else "x--", label=label)
    a.loglog(n, rows[-1]["xlr_s"][0] * (n / n[-1]) ** 2, ":", color="gray", label="~ N^2")
    a.set_xlabel("N per side")
    a.set_ylabel("seconds")
    a.legend(fontsize=8)
    a.grid(alpha=0.3, which="both")
    b.loglog(n, [r["peak_rss_mib"] for r in rows], "o-", label="peak RSS")
    b.loglog(n, n * 3584 * 4 / 2**20, "x--", label="inputs (N x 3584 floats)")
    b.set_xlabel("N per side")
    b.set_ylabel("MiB")
    b.legend(fontsize=8)
    b.grid(alpha=0.3, which="both")
    fig.suptitle("Exact blocked XLR + BkR: time and memory against N")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
