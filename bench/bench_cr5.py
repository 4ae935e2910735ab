"""Cr5 on all 10 DDTP languages, rank 300: wall time and peak memory of training, and the XLR@K of
the joint model on the held-out test concepts (English with every other language).

Runs in a fresh child process so that the peak RSS is this run's alone: loading the 10
languages, preprocessing (tokenising, vocabularies, TF-IDF), the eigsh/CG solve (Eq. 12-13),
Phi (Eq. 14-15) and the evaluation. Target: <= 15 minutes and <= 8 GiB on 2 cores.

    BACKRETRIEVAL_DDTP_DIR=../shared/data/ddtp python bench/bench_cr5.py [--lam 10] [--n-jobs 1]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

LANGS = ("en", "de", "fr", "it", "ja", "ru", "es", "pl", "pt", "zh_CN")


def child(args: argparse.Namespace) -> dict:
    from backretrieval.data import load_dataset
    from backretrieval.train.cr5 import Cr5, evaluate_retrieval, make_split, training_corpora

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    ds = load_dataset("ddtp", langs=list(args.langs))
    t_load = time.perf_counter() - t0
    pairs = [(args.langs[0], lang) for lang in args.langs[1:]]
    split = make_split(ds, pairs, seed=0)
    train = training_corpora(ds, split, "joint")
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    model = Cr5(rank=args.rank, lam=args.lam, n_jobs=args.n_jobs).fit(train)
    t_fit = time.perf_counter() - t1
    cpu_fit = time.process_time() - cpu1
    rss_fit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    t2 = time.perf_counter()
    recs = evaluate_retrieval(model.transform, ds, split, pairs)
    t_eval = time.perf_counter() - t2
    if args.save:
        model.save(args.save, info={"experiment": {"regime": "joint", "bench": "bench/bench_cr5.py"}})
        split.save(Path(args.save) / "split.json")
    return {
        "load_s": round(t_load, 1),
        "fit_s": round(t_fit, 1),
        "fit_cpu_s": round(cpu_fit, 1),
        "preprocess_s": model.preprocess_seconds_,
        "eig_s": round(model.stats_["eig_seconds"], 1),
        "phi_s": round(model.stats_["phi_seconds"], 1),
        "eval_s": round(t_eval, 1),
        "peak_rss_gib_fit": round(rss_fit, 2),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2),
        "stats": model.stats_,
        "n_documents": model.n_documents_,
        "n_concepts": model.n_concepts_,
        "vocab": {lang: len(v) for lang, v in model.vocabulary_.items()},
        "records": recs,
        "loadavg_before": [round(x, 2) for x in load0],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--langs", default=",".join(LANGS))
    ap.add_argument("--rank", type=int, default=300)
    ap.add_argument("--lam", type=float, default=10.0)
    ap.add_argument("--n-jobs", type=int, default=1)
    ap.add_argument("--save", default=None, help="Also save the model directory here.")
    ap.add_argument("--no-write", action="store_true", help="Print only; leave BENCHMARKS.md alone.")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.langs = [x for x in args.langs.split(",") if x]
    if args.child:
        print(json.dumps(child(args)))
        return
    cmd = [sys.executable, __file__, "--child", "--langs", ",".join(args.langs), "--rank", str(args.rank),
           "--lam", str(args.lam), "--n-jobs", str(args.n_jobs)] + (["--save", args.save] if args.save else [])
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(out.stderr[-4000:])
    wall = time.perf_counter() - t
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in r.items() if k != "records"}, indent=1), file=sys.stderr)
    from _md import machine, write_section

    from backretrieval.report.cr5_tables import precision_table_md

    s = r["stats"]
    cmdline = f"BACKRETRIEVAL_DDTP_DIR=../shared/data/ddtp python bench/bench_cr5.py --lam {args.lam:g} --n-jobs {args.n_jobs}"
    if args.langs != list(LANGS) or args.rank != 300:
        cmdline += f" --langs {','.join(args.langs)} --rank {args.rank}"
    lines = [
        f"### Joint training on {len(args.langs)} DDTP languages, rank {args.rank}",
        "",
        f"Command: `{cmdline}`. Machine: {machine()}.",
        f"Load average (1/5/15 min) before: {r['loadavg_before']}, after: {r['loadavg_after']} "
        "(other processes on the machine inflate wall times).",
        "",
        f"Training data: {sum(r['n_documents'].values()):,} documents, {r['n_concepts']:,} concepts "
        f"(after holding out the test/validation/distractor concepts), vocabularies "
        + ", ".join(f"{k} {v:,}" for k, v in r["vocab"].items()) + f"; lambda {args.lam:g}, Sec. 4.1 tolerances.",
        "",
        "| step | wall s |",
        "|---|---:|",
        f"| load 10 languages (parquet cache warm) | {r['load_s']} |",
        f"| fit: preprocessing (tokenise, vocabularies, TF-IDF) | {r['preprocess_s']} |",
        f"| fit: eigsh on Eq. 12 ({s['matvecs']} matvecs, {s['cg_iterations']:,} CG iterations in {s['cg_solves']:,} solves) | {r['eig_s']} |",
        f"| fit: Phi (Eq. 14, block CG with {args.rank} right-hand sides; Eq. 15) | {r['phi_s']} |",
        f"| **fit total** (CPU {r['fit_cpu_s']} s) | **{r['fit_s']}** |",
        f"| evaluation (9 pairs x 2 directions x cosine/CSLS) | {r['eval_s']} |",
        f"| whole child process | {wall:.1f} |",
        "",
        f"Peak RSS: {r['peak_rss_gib_fit']} GiB after fitting, {r['peak_rss_gib']} GiB for the whole process "
        "(target: 15 minutes and 8 GiB).",
        "",
        "XLR@K (percent) of the joint model on the held-out test queries against each target language's pool of",
        "held-out documents:",
        "",
        precision_table_md(r["records"]),
    ]
    if not args.no_write:
        write_section("cr5-ddtp", "\n".join(lines))
    else:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
