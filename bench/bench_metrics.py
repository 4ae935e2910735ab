"""BkR + XLR wall time against the bare matrix multiplications they need, and peak memory.

Random unit vectors (512-d text, 1280-d image), N per side. Each N runs in a fresh process so
peak RSS belongs to that run alone. The baseline is measured in the same process: the float32
matrix products the metrics cannot avoid, done in the same row blocks with the result
discarded (XLR in tiles of 1,024 rows above N = 32,768, as the metric), interleaved with the metrics (bench/_timing.py: median and
min-max of --repeats rounds, at least 3) -- XLR: one N x N x 512 product (cosine is symmetric, so one pass over the scores
gives both directions); BkR: one N x N x 512 text product plus one U x N x 1280 image product
for the U distinct retrieved targets.

    python bench/bench_metrics.py --n 1000 3000 10000 30000 100000

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


def bare(Q: np.ndarray, D: np.ndarray, block_bytes: int, split_cols: bool = False) -> None:
    """The product ``Q @ D.T`` in the blocks the metric uses: row blocks, or with ``split_cols``
    (XLR) tiles of 1,024 rows where a block would have fewer than 512 rows (N > 32,768 at 64 MiB;
    see search.kernels._tiles)."""
    from backretrieval.search.kernels import _tiles

    for rows, cols in _tiles(Q.shape[0], D.shape[0], block_bytes, split_cols):
        Q[rows] @ D[cols].T


def one(n: int, runs: int) -> dict:
    from _timing import interleaved, ratio_spread, spread, timed

    from backretrieval.metrics import bkr_ranks, xlr_ranks
    from backretrieval.search import DEFAULT_BLOCK_BYTES, l2_normalize

    rng = np.random.default_rng(0)
    st = l2_normalize(rng.standard_normal((n, 512), dtype=np.float32))
    tt = l2_normalize(st + rng.standard_normal((n, 512), dtype=np.float32))
    si = l2_normalize(rng.standard_normal((n, 1280), dtype=np.float32))
    ti = l2_normalize(rng.standard_normal((n, 1280), dtype=np.float32))
    # untimed: compile the kernels (on a few rows), and the distinct retrieved targets for the bare
    # image product (the same in every run)
    xlr_ranks(st[:256], tt[:256])
    uniq = np.unique(bkr_ranks(st, tt, si, ti)[1])

    def bkr_bare() -> None:
        bare(st, tt, DEFAULT_BLOCK_BYTES)
        bare(ti[uniq], si, DEFAULT_BLOCK_BYTES)

    runs_ = interleaved({
        "xlr": timed(lambda: xlr_ranks(st, tt)),
        "xlr_bare": timed(lambda: bare(st, tt, DEFAULT_BLOCK_BYTES, split_cols=True)),
        "bkr": timed(lambda: bkr_ranks(st, tt, si, ti)),
        "bkr_bare": timed(bkr_bare),
    }, runs)
    res: dict = {"n": n, "runs": runs, "bkr_distinct_targets": int(uniq.size), "times": runs_}
    for k, v in runs_.items():
        sp_ = spread(v)
        res[f"{k}_s"] = [round(sp_.median, 3), round(sp_.lo, 3), round(sp_.hi, 3)]
    both = [a + b for a, b in zip(runs_["xlr"], runs_["bkr"])]
    both_bare = [a + b for a, b in zip(runs_["xlr_bare"], runs_["bkr_bare"])]
    for key, (num, den) in {"xlr_ratio": (runs_["xlr"], runs_["xlr_bare"]), "bkr_ratio": (runs_["bkr"], runs_["bkr_bare"]),
                            "both_ratio": (both, both_bare)}.items():
        sp_ = ratio_spread(num, den)
        res[key] = [round(sp_.median, 3), round(sp_.lo, 3), round(sp_.hi, 3)]
    res["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return res


def _cell(v: list[float]) -> str:
    """``median (min-max)`` of a stored [median, min, max]."""
    from _timing import Spread

    return Spread(v[0], v[1], v[2], 0).fmt()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 3000, 10000, 30000, 100000])
    ap.add_argument("--repeats", type=int, default=3, help="Interleaved runs per variant (at least 3).")
    ap.add_argument("--child", type=int, help="measure one N and print its JSON row (no BENCHMARKS.md)")
    ap.add_argument("--rows", nargs="+", default=[], help="JSON rows saved by --child runs, kept beside the N measured now")
    args = ap.parse_args()
    from _timing import check_runs, describe

    check_runs(args.repeats)
    if args.child:
        print(json.dumps(one(args.child, args.repeats)))
        return
    rows = [json.loads(Path(f).read_text().strip().splitlines()[-1]) for f in args.rows]
    for n in args.n:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--repeats", str(args.repeats)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr)
    rows.sort(key=lambda r: r["n"])
    from _md import ROOT, machine, write_section

    target = {10000: (1.2, 1024), 100000: (1.3, 2048)}  # issue 7: ratio and RSS (MiB) targets

    def verdict(r) -> str:
        if r["n"] not in target:
            return ""
        ratio, rss = target[r["n"]]
        ok = r["both_ratio"][0] <= ratio and r["peak_rss_mib"] <= rss
        return f"{'met' if ok else 'MISSED'} (<= {ratio}x, <= {rss} MiB)"

    lines = [
        "## BkR and XLR vs the bare matrix multiplications",
        "",
        f"Command: `python bench/bench_metrics.py --n {' '.join(str(r['n']) for r in rows)} --repeats {args.repeats}` "
        f"(each N in a fresh process). Machine: {machine()}.",
        "",
        describe(args.repeats),
        "",
        "Random unit vectors, 512-d text (targets = sources + Gaussian noise, so retrieval is meaningful) and",
        "1280-d image features. *bare* = the float32 products the metric needs, in the same blocks (XLR: tiles of",
        "1,024 rows above N = 32,768, as the metric), results",
        "discarded (XLR: N x N x 512 once, which serves both directions; BkR: N x N x 512 + U x N x 1280 for the U distinct",
        "retrieved targets). Ratio = metric time / bare time (per round). Peak RSS of the whole process, inputs included",
        "(N x 3584 floats: 1.43 GB at N = 100,000).",
        "",
        "| N | XLR s | bare s | XLR ratio | BkR s | bare s | BkR ratio | XLR+BkR ratio | peak RSS MiB | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {_cell(r['xlr_s'])} | {_cell(r['xlr_bare_s'])} | {_cell(r['xlr_ratio'])} | {_cell(r['bkr_s'])} "
            f"| {_cell(r['bkr_bare_s'])} | {_cell(r['bkr_ratio'])} | {_cell(r['both_ratio'])} | {r['peak_rss_mib']} | {verdict(r)} |"
        )
    if len(rows) > 1:
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
