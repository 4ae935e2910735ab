"""BkR + XLR wall time against the bare matrix multiplications they need, and peak memory.

Random unit vectors (512-d text, 1280-d image), N per side. Each N runs in a fresh process so
peak RSS belongs to that run alone. The baseline is measured in the same process: the float32
matrix products the metrics cannot avoid, done in the same row blocks with the result
discarded -- XLR: two N x N x 512 products (both directions); BkR: one N x N x 512 text product
plus one U x N x 1280 image product for the U distinct retrieved targets.

    python bench/bench_metrics.py --n 10000 100000
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


def bare(Q: np.ndarray, D: np.ndarray, block_bytes: int) -> None:
    from backretrieval.search import block_rows

    step = block_rows(D.shape[0], block_bytes)
    for s in range(0, Q.shape[0], step):
        Q[s : s + step] @ D.T


def one(n: int, repeats: int) -> dict:
    from backretrieval.metrics import bkr_ranks, xlr_ranks
    from backretrieval.search import DEFAULT_BLOCK_BYTES, l2_normalize

    rng = np.random.default_rng(0)
    st = l2_normalize(rng.standard_normal((n, 512), dtype=np.float32))
    tt = l2_normalize(st + rng.standard_normal((n, 512), dtype=np.float32))
    si = l2_normalize(rng.standard_normal((n, 1280), dtype=np.float32))
    ti = l2_normalize(rng.standard_normal((n, 1280), dtype=np.float32))
    res = {"n": n}
    best = {}
    for name, fn in {
        "xlr": lambda: xlr_ranks(st, tt),
        "xlr_bare": lambda: (bare(st, tt, DEFAULT_BLOCK_BYTES), bare(tt, st, DEFAULT_BLOCK_BYTES)),
        "bkr": lambda: bkr_ranks(st, tt, si, ti),
    }.items():
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
        best[name] = min(times)
        if name == "bkr":
            u = np.unique(out[1]).size
            res["bkr_distinct_targets"] = int(u)
    _, retrieved = bkr_ranks(st, tt, si, ti)
    uniq = np.unique(retrieved)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        bare(st, tt, DEFAULT_BLOCK_BYTES)
        bare(ti[uniq], si, DEFAULT_BLOCK_BYTES)
        times.append(time.perf_counter() - t)
    best["bkr_bare"] = min(times)
    res.update({f"{k}_s": round(v, 3) for k, v in best.items()})
    res["xlr_ratio"] = round(best["xlr"] / best["xlr_bare"], 3)
    res["bkr_ratio"] = round(best["bkr"] / best["bkr_bare"], 3)
    res["both_ratio"] = round((best["xlr"] + best["bkr"]) / (best["xlr_bare"] + best["bkr_bare"]), 3)
    res["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(args.child, args.repeats)))
        return
    rows = []
    for n in args.n:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--repeats", str(args.repeats)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr)
    from _md import machine, write_section

    lines = [
        "## BkR and XLR vs the bare matrix multiplications",
        "",
        f"Command: `python bench/bench_metrics.py --n {' '.join(map(str, args.n))} --repeats {args.repeats}` "
        f"(best of {args.repeats}). Machine: {machine()}.",
        "",
        "Random unit vectors, 512-d text and 1280-d image features. *bare* = the float32 products the metric",
        "needs, in the same blocks, results discarded (XLR: 2 x N x N x 512; BkR: N x N x 512 + U x N x 1280 for",
        "the U distinct retrieved targets). Ratio = metric time / bare time. Peak RSS of the whole process",
        "(inputs included: N x 3584 floats).",
        "",
        "| N | XLR s | bare s | XLR ratio | BkR s | bare s | BkR ratio | XLR+BkR ratio | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['xlr_s']} | {r['xlr_bare_s']} | {r['xlr_ratio']} | {r['bkr_s']} | {r['bkr_bare_s']} "
            f"| {r['bkr_ratio']} | {r['both_ratio']} | {r['peak_rss_mib']} |"
        )
    write_section("metrics-vs-matmul", "\n".join(lines))


if __name__ == "__main__":
    main()
