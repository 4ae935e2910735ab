"""Cr5 solver speed: this tree's ``solve`` against the block-CG solver of commit ac498f6 (loaded
from git into a temporary module -- no copy of old code lives in the
repository), on the three configurations compared with the original authors' code.

Each (configuration, solver) runs in a fresh child process: DDTP loaded, the concept split of
``bench_cr5.py`` (seed 0), joint training data, ``Cr5(rank, lam=1).fit`` (Sec. 4.1 tolerances:
CG rtol 0.01 / maxiter 500, eigsh tol 0.1) with the module's ``solve`` swapped for the solver
under test, then the held-out test P@1. Reported per run: the solve's wall and CPU time (the
preprocessing is identical for both and timed apart), the peak RSS of the solve above the RSS at
its start (the input matrices are already in memory; the peak is reset through
``/proc/self/clear_refs`` just before the solve), and the mean cosine P@1 over the pairs'
directions. The original's figures are quoted as the anchor (same data, 2-core
machine, measured there, not here).

    BACKRETRIEVAL_DDTP_DIR=../shared/data/ddtp nice python bench/bench_cr5_speed.py [--repeats 3] [--n-jobs 1,2]

``--kernels en,de,fr,it`` prints instead the measurements behind the solver's kernel choices (per-block
``X^T X v`` products, the compiled/scipy CG crossover, tiny problems with and without thick restarts;
docs/cr5.md, "Where the time goes").
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

OLD_COMMIT = "ac498f6"
CONFIGS = [("en,de", 100), ("en,de", 300), ("en,de,fr,it", 100)]
# quoted: the original Cr5 code (MKL 1 thread) and the project at ac498f6, same inputs, 2 cores
ORIGINAL = {
    ("en,de", 100): ("61.7-76.6 (40.2-42.8)", 197, "40.3-43.2 (25.2-26.8)", 258),
    ("en,de", 300): ("129.7-183.7 (128.3-133.8)", 369, "99.5-143.6 (90.1-93.4)", 569),
    ("en,de,fr,it", 100): ("564.9 (403.2)", 530, "109.0 (106.2)", 656),
}


# where the modules that the cr5.py of ac498f6 imports live in this tree;
# the benchmark calls only the old module's `solve`, which uses nothing from them
MOVED = {"..encoders._bow": "..encoders.trained.bow", "..encoders.cr5": "..encoders.trained.cr5"}


def _rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _old_solve():
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(["git", "show", f"{OLD_COMMIT}:src/backretrieval/train/cr5.py"], cwd=root, capture_output=True,
                         text=True, check=True).stdout
    for was, now in MOVED.items():  # modules the old solver imports that have moved since
        src = src.replace(f"from {was} import", f"from {now} import")
    tmp = Path(tempfile.mkdtemp(prefix="cr5-old-")) / "_cr5_old.py"
    tmp.write_text(src, encoding="utf-8")
    import backretrieval.train  # noqa: F401  (the parent package of the temporary module)

    spec = importlib.util.spec_from_file_location("backretrieval.train._cr5_old", tmp)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)

    def solve(blocks, labels, n_classes, settings, *, names=None):  # the old signature: keywords, no deflation
        kw = {k: v for k, v in dataclasses.asdict(settings).items() if k != "deflation"}
        return mod.solve(blocks, labels, n_classes, **kw)

    return solve


def child(args: argparse.Namespace) -> dict:
    import backretrieval.train.cr5 as cr5
    import backretrieval.train.cr5.estimator as cr5_estimator
    from backretrieval.data import load_dataset

    langs = args.langs.split(",")
    ds = load_dataset("ddtp", langs=langs)
    pairs = [(langs[0], lang) for lang in langs[1:]]
    split = cr5.make_split(ds, pairs, seed=0)
    train = cr5.training_corpora(ds, split, "joint")
    inner = _old_solve() if args.solver == "old" else cr5.solve
    m: dict = {}

    def timed_solve(*a, **kw):
        m["rss_start"] = _rss_mib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM) to the current RSS
        t, c = time.perf_counter(), time.process_time()
        out = inner(*a, **kw)
        m["solve_s"], m["solve_cpu_s"] = time.perf_counter() - t, time.process_time() - c
        m["peak"] = _rss_mib("VmHWM")
        return out

    cr5_estimator.solve = timed_solve  # the name Cr5.fit calls
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    model = cr5.Cr5(rank=args.rank, lam=1.0, n_jobs=args.n_jobs).fit(train)
    fit_s = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    recs = cr5.evaluate_retrieval(model.transform, ds, split, pairs, sims=("cosine",))
    return {
        "solve_s": round(m["solve_s"], 1), "solve_cpu_s": round(m["solve_cpu_s"], 1), "fit_s": round(fit_s, 1),
        "rss_start_mib": round(m["rss_start"]), "peak_mib": round(m["peak"]), "above_mib": round(m["peak"] - m["rss_start"]),
        "p1": round(100 * sum(r["xlr@1"] for r in recs) / len(recs), 2), "stats": model.stats_,
        "load": [round(load0, 1), round(load1, 1)], "maxrss_process_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _blocks(langs: list[str]):
    """The per-language CSR blocks, labels and concept count that ``Cr5.fit`` hands to ``solve`` (the
    split, regime and preprocessing of the speed rows)."""
    import backretrieval.train.cr5 as cr5
    from backretrieval.data import load_dataset

    ds = load_dataset("ddtp", langs=langs)
    split = cr5.make_split(ds, [(langs[0], lang) for lang in langs[1:]], seed=0)
    train = cr5.training_corpora(ds, split, "joint")
    got: dict = {}

    class _Got(Exception):
        pass

    def grab(blocks, labels, n_classes, settings, *, names=None):
        got.update(blocks=blocks, labels=labels, K=n_classes, names=names)
        raise _Got

    import backretrieval.train.cr5.estimator as cr5_estimator

    inner, cr5_estimator.solve = cr5_estimator.solve, grab  # the name Cr5.fit calls
    try:
        cr5.Cr5(rank=10, lam=1.0).fit(train)
    except _Got:
        pass
    finally:
        cr5_estimator.solve = inner
    return got


def _synthetic(seed: int, K: int, p: tuple[int, ...], density: float = 0.2):
    """Three small languages (the generator of tests/train/test_cr5.py): concept prototypes plus noise."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    blocks, labels = [], []
    for pl in p:
        proto = sp.random(K, pl, density=density, random_state=rng).toarray()
        cpts = np.sort(rng.choice(K, size=int(0.8 * K), replace=False))
        rows = proto[cpts] + 0.3 * sp.random(len(cpts), pl, density=density, random_state=rng).toarray()
        rows[rows.sum(1) == 0, 0] = 1.0
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        blocks.append(sp.csr_matrix(rows))
        labels.append(cpts)
    return blocks, labels, K


def kernels(langs: list[str]) -> str:
    """The measurements behind ``_cr5_cg``'s choice of product and the thick restarts (docs/cr5.md,
    "Where the time goes"), as Markdown: per-block ``X^T X v`` times, the compiled/scipy CG
    crossover, and tiny problems where one Lanczos factorisation is not enough. CPU times
    (``process_time``) under one BLAS thread."""
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.linalg import LinearOperator, eigsh
    from threadpoolctl import threadpool_limits

    import backretrieval.train.cr5 as cr5
    from backretrieval.train.cr5 import _cg as cg
    from backretrieval.train.cr5 import _lanczos as _cr5_lanczos

    def best(fn, reps: int) -> float:
        fn()
        ts = []
        for _ in range(reps):
            t = time.process_time()
            fn()
            ts.append(time.process_time() - t)
        return min(ts)

    got = _blocks(langs)
    rng = np.random.default_rng(0)
    out = [f"Per product `X^T X v` on the DDTP blocks of {','.join(langs)} (ms, best of 30):", "",
           "| block | stored entries | compiled one pass | scipy: CSR `X v`, CSC view `X^T u` | scipy: CSR copy of `X^T` |",
           "|---|---:|---:|---:|---:|"]
    with threadpool_limits(1):
        for name, b in zip(got["names"], got["blocks"]):
            X = sp.csr_matrix(b, dtype=np.float64)
            XC = sp.csc_matrix((X.data, X.indices, X.indptr), shape=X.shape[::-1])
            XT = X.T.tocsr()
            v, o = rng.standard_normal(X.shape[1]), np.empty(X.shape[1])
            t = [best(lambda: cg.normal_matvec(X.indptr, X.indices, X.data, 1.0, v, o), 30),
                 best(lambda: XC @ (X @ v), 30), best(lambda: XT @ (X @ v), 30)]
            out.append(f"| {name} | {X.nnz:,} | " + " | ".join(f"{1e3 * x:.2f}" for x in t) + " |")
        E = sp.csr_matrix(got["blocks"][0], dtype=np.float64)
        out += ["", f"Per CG iteration on the first n rows of the {got['names'][0]} block and their columns (us; lambda 1, "
                "Jacobi + top-16 deflation, rtol 0.01, 20 right-hand sides, best of 7):", "",
                "| rows | stored entries | compiled | scipy | iterations |", "|---:|---:|---:|---:|---:|"]
        for n in (50, 100, 150, 250, 400, 1000, E.shape[0]):
            X = E[:n]
            X = X[:, np.unique(X.indices)].tocsr()
            p = X.shape[1]
            s = 1 / np.sqrt(np.asarray(X.multiply(X).sum(axis=0)).ravel() + 1.0)
            op = LinearOperator((p, p), matvec=lambda u: s * (X.T @ (X @ (s * u)) + s * u), dtype=np.float64)
            th, V = eigsh(op, k=min(16, p // 8), which="LA", tol=1e-2, v0=np.ones(p))
            V, f = np.ascontiguousarray(V), 1 / th - 1
            B = [X.T @ rng.standard_normal(n) for _ in range(20)]
            per = {}
            for method in ("compiled", "scipy"):
                its = sum(cg.pcg(X.indptr, X.indices, X.data, 1.0, b, np.zeros(p), s, V, f, 0.01, 500, method=method)[0] for b in B)
                t = best(lambda: [cg.pcg(X.indptr, X.indices, X.data, 1.0, b, np.zeros(p), s, V, f, 0.01, 500, method=method)
                                  for b in B], 7)
                per[method] = (1e6 * t / its, its)
            out.append(f"| {n:,} | {X.nnz:,} | {per['compiled'][0]:.0f} | {per['scipy'][0]:.0f} | {per['compiled'][1]} |")
    old = _old_solve()
    lanczos = _cr5_lanczos.lanczos_top
    out += ["", "Tiny problems (three synthetic languages, lambda 1, Sec. 4.1 tolerances; matvecs, CPU s best of 5):", "",
            "| K | rank | thick restarts (this tree) | eigsh from scratch after one factorisation | solver of "
            f"{OLD_COMMIT} (eigsh) |", "|---:|---:|---:|---:|---:|"]
    for K, p, rank in ((40, (30, 45, 25), 10), (40, (30, 45, 25), 15), (60, (70, 90, 50), 25), (120, (150, 200, 100), 50)):
        blocks, labels, K = _synthetic(1, K, p)
        cells = []
        for variant in ("new", "declining", "old"):
            fn = old if variant == "old" else cr5.solve
            if variant == "declining":  # no restarts: a missed tolerance goes to eigsh, as before
                _cr5_lanczos.lanczos_top = lambda *a, maxiter=0: lanczos(*a, maxiter=0)
            try:
                box = {}
                t = best(lambda: box.update(sol=fn(blocks, labels, K, cr5.SolverSettings(rank=rank, lam=1.0))), 5)
            finally:
                _cr5_lanczos.lanczos_top = lanczos
            cells.append(f"{box['sol'].stats.matvecs}, {t:.3f} s")
        out.append(f"| {K} | {rank} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="Interleaved runs per (configuration, solver), at least 3; "
                    "the median and min-max are shown.")
    ap.add_argument("--n-jobs", default="1", help="Comma-separated n_jobs values for the new solver (the old one runs with 1).")
    ap.add_argument("--configs", default=";".join(f"{langs}:{r}" for langs, r in CONFIGS),
                    help="Semicolon-separated LANGS:RANK (default: the three quoted configurations).")
    ap.add_argument("--no-write", action="store_true", help="Print only; leave BENCHMARKS.md alone.")
    ap.add_argument("--kernels", metavar="LANGS", help="Print the kernel measurements behind docs/cr5.md's choices on "
                    "the DDTP blocks of LANGS (e.g. en,de,fr,it) and exit.")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--langs", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--solver", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.kernels:
        print(kernels(args.kernels.split(",")))
        return
    if args.child:
        args.n_jobs = int(args.n_jobs)
        print(json.dumps(child(args)))
        return
    configs = [(c.split(":")[0], int(c.split(":")[1])) for c in args.configs.split(";") if c]
    variants = [("old", 1)] + [("new", int(j)) for j in args.n_jobs.split(",")]
    from _timing import check_runs, describe, interleaved, ratio_spread, spread

    check_runs(args.repeats)
    results: dict = {}
    up_start = os.getloadavg()

    def run(langs: str, rank: int, solver: str, n_jobs: int):
        def go() -> dict:
            cmd = [sys.executable, __file__, "--child", "--langs", langs, "--rank", str(rank), "--solver", solver,
                   "--n-jobs", str(n_jobs)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(out.stderr[-4000:])
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(langs, rank, solver, n_jobs, json.dumps(r), file=sys.stderr, flush=True)
            return r
        return go

    for langs, rank in configs:  # interleaved: old and new alternate, so they see the same machine load
        runs = interleaved({(solver, n_jobs): run(langs, rank, solver, n_jobs) for solver, n_jobs in variants}, args.repeats)
        for (solver, n_jobs), rs in runs.items():
            results[(langs, rank, solver, n_jobs)] = rs
    from _md import machine, write_section

    def rng(vals, fmt="{:.1f}"):
        return spread(vals).fmt(fmt.strip("{}:"))

    cmdline = "BACKRETRIEVAL_DDTP_DIR=../shared/data/ddtp nice python bench/bench_cr5_speed.py"
    if args.repeats != 3 or args.n_jobs != "1":
        cmdline += f" --repeats {args.repeats} --n-jobs {args.n_jobs}"
    loads = [x for rs in results.values() for r in rs for x in r["load"]]
    up_end = os.getloadavg()
    lines = [
        "### Solver speed: `solve` against the block-CG solver of commit ac498f6 (DDTP, lambda 1, Sec. 4.1 tolerances)",
        "",
        f"Command: `{cmdline}`. Machine: {machine()}.",
        f"Load average (1 min) at the fits' starts and ends: {min(loads)}-{max(loads)}; `uptime` load (1, 5, 15 min) "
        f"at the bench's start {', '.join(f'{x:.1f}' for x in up_start)} and end {', '.join(f'{x:.1f}' for x in up_end)} "
        "(the machine is shared; wall times are "
        "inflated by other processes, CPU times much less). Old = `solve` of commit "
        f"{OLD_COMMIT} loaded from git; every run a fresh child process. {describe(args.repeats)}",
        "",
        "| config | solver | n_jobs | solve wall s | solve CPU s | speed-up wall (CPU) vs old | peak RSS above start MiB "
        "(start) | mean cosine P@1 | CG iterations (Eq. 14 part) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for langs, rank in configs:
        old = results[(langs, rank, "old", 1)]
        for solver, n_jobs in variants:
            rs = results[(langs, rank, solver, n_jobs)]
            sw = ratio_spread([r["solve_s"] for r in old], [r["solve_s"] for r in rs])
            sc = ratio_spread([r["solve_cpu_s"] for r in old], [r["solve_cpu_s"] for r in rs])
            s = rs[0]["stats"]
            its = f"{s['cg_iterations']:,}" + (f" ({s['phi_cg_iterations']:,})" if "phi_cg_iterations" in s else "")
            lines.append(
                f"| {langs} r{rank} | {solver} | {n_jobs} | {rng([r['solve_s'] for r in rs])} | {rng([r['solve_cpu_s'] for r in rs])} | "
                f"{sw.fmt('.2f')}x ({sc.fmt('.2f')}x) | {rng([r['above_mib'] for r in rs], '{:.0f}')} ({rs[0]['rss_start_mib']}) | "
                f"{rng([r['p1'] for r in rs], '{:.2f}')} | {its} |")
    lines += [
        "",
        "Anchor, quoted (not measured here): fit s (CPU s) and peak RSS of the whole process.",
        "",
        "| config | original Cr5 code | peak RSS MiB | project at ac498f6 | peak RSS MiB |",
        "|---|---:|---:|---:|---:|",
    ]
    for (langs, rank), (o, orss, p, prss) in ORIGINAL.items():
        lines.append(f"| {langs} r{rank} | {o} | {orss} | {p} | {prss} |")
    text = "\n".join(lines)
    if args.no_write:
        print(text)
    else:
        write_section("cr5-speed", text)


if __name__ == "__main__":
    main()
