"""The cost model's weights: what one counted distance computation costs in each kind of search.

The cost model of ``search.faiss_backend`` counts distance computations (``build_cost``,
``query_cost``, ``exact_cost``) and weighs each by a constant per kind of work
(``faiss_backend.DISTANCE_WEIGHTS``), relative to one inside the exact route's blocked float32
product. This script measures those ratios: seconds per *counted* distance (the model's count, not
FAISS's own) of an HNSW build and search, an IVF build and search, divided by the seconds per
distance of exact search (``search.rank_of_true``: every query against every row, canonical ties).
Everything runs on one thread (BLAS and FAISS) and is timed in CPU seconds, so the ratios compare
work, not parallelism, and hold on a machine that other jobs share.

Data: the synthetic ``latent-64`` and ``isotropic`` text sides of bench_faiss.py (512-d).
Each timing is the median of ``--runs`` interleaved runs.

    nice -n 10 python bench/bench_approx_cost.py --n 20000 60000
    python bench/bench_approx_cost.py --n 5000 --print-only          # a smoke run
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
K = 10
QUERIES = 2000  # queries timed per search


def _seconds(fn, runs: int) -> float:
    """Median CPU seconds of ``runs`` calls (one thread: CPU time is the work, whatever else runs)."""
    out = []
    for _ in range(runs):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return statistics.median(out)


def one(n: int, data: str, runs: int) -> dict:
    """One row: seconds per counted distance of each kind of work at ``n`` rows, and the ratios."""
    import faiss
    from threadpoolctl import threadpool_limits

    from backretrieval.search import rank_of_true, unit_rows
    from backretrieval.search.faiss_backend import FaissOptions, build_cost, build_index, query_cost, search
    from bench_faiss import make_data
    from _md import machine

    faiss.omp_set_num_threads(1)
    opts = FaissOptions(threads=1)
    with tempfile.TemporaryDirectory(prefix="bench-cost-", dir="/var/tmp") as tmp, threadpool_limits(1):
        d = make_data(n, Path(tmp), 1.0, 1.5, data, 64)
        Q, D = np.array(d["src_text"]), np.array(d["tgt_text"])
        Qu, Du = unit_rows(Q), unit_rows(D)
        truth = np.arange(n)
        rows = np.sort(np.random.default_rng(1).choice(n, size=min(QUERIES, n), replace=False))
        exact_s = _seconds(lambda: rank_of_true(Qu, Du, truth), runs)
        per_exact = exact_s / (n * n)
        row: dict = {"data": data, "n": n, "d": int(D.shape[1]), "exact_s": round(exact_s, 2),
                     "exact_ns_per_distance": round(per_exact * 1e9, 3)}
        for method, param, values in (("hnsw", "ef_search", (128, 512)), ("ivf", "nprobe", (32, 128))):
            t = time.process_time()
            index = build_index(D, method, opts)
            built = time.process_time() - t
            row[f"{method}_build_s"] = round(built, 2)
            row[f"{method}_build_weight"] = round(built / build_cost(method, n, opts) / per_exact, 2)
            for value in values:
                if method == "hnsw":
                    index.hnsw.efSearch = value
                else:
                    index.nprobe = min(value, index.nlist)
                s = _seconds(lambda: search(index, Q, K + 1, rows=rows), runs)
                count = rows.size * query_cost(method, n, opts, value)
                row[f"{method}_{param}={value}_s"] = round(s, 3)
                row[f"{method}_{param}={value}_weight"] = round(s / count / per_exact, 2)
        row["machine"] = machine()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[20_000, 60_000])
    ap.add_argument("--data", nargs="+", default=["latent", "isotropic"], choices=["latent", "isotropic"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("N", "DATA"), help="measure one row and print it as JSON")
    ap.add_argument("--print-only", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(int(args.child[0]), args.child[1], args.runs)))
        return
    rows = []
    for n in args.n:
        for data in args.data:
            p = subprocess.run([sys.executable, __file__, "--child", str(n), data, "--runs", str(args.runs)],
                               capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"{data} {n} failed: {p.stderr[-3000:]}")
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr)
    cols = [k for k in rows[0] if k.endswith("_weight")]
    lines = [
        "### What a counted distance costs: the cost model's weights",
        "",
        f"Command: `python bench/bench_approx_cost.py --n {' '.join(map(str, args.n))} --data {' '.join(args.data)} "
        f"--runs {args.runs}`. One thread (BLAS and FAISS), CPU seconds. Seconds per distance computation *as the cost model "
        "counts them* (`build_cost`, `query_cost`; FAISS defaults: HNSW m 32, efConstruction 80; IVF nlist "
        "4 sqrt(N)), divided by the seconds per distance of exact search (`search.rank_of_true`, N x N; "
        f"its ns per distance in the table). Searches: {QUERIES:,} seeded queries, top {K + 1}; medians of "
        f"{args.runs} runs. `search.faiss_backend.DISTANCE_WEIGHTS` holds the weights chosen from these rows.",
        "",
        "| data | N | d | exact ns / distance | " + " | ".join(c.removesuffix("_weight").replace("_", " ") for c in cols) + " |",
        "|---|---|---|---|" + "---|" * len(cols),
    ]
    for r in rows:
        lines.append(f"| {r['data']} | {r['n']:,} | {r['d']} | {r['exact_ns_per_distance']} | "
                     + " | ".join(str(r[c]) for c in cols) + " |")
    lines += ["", f"Machine: {rows[0]['machine']}."]
    if args.print_only:
        print("\n".join(lines))
        return
    from _md import write_section

    write_section("approx-cost-weights", "\n".join(lines))


if __name__ == "__main__":
    main()
