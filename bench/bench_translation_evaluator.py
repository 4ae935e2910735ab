"""XLR from the same embeddings: backretrieval vs sentence-transformers' TranslationEvaluator.

TranslationEvaluator (sentence_transformers.evaluation) embeds both sides, builds the full
N x N cosine matrix with torch, then loops over its rows in Python (argmax per row, both
directions) -- its accuracy is XLR@1. Here it gets the same precomputed embeddings through a
minimal model object whose ``encode`` returns them, so only the evaluation is timed.

1. Speed at N (default 10,000): R rounds (at least 3), each a fresh child process per
   implementation, the two alternating (bench/_timing.py); the backretrieval child also times one
   bare N x N x 512 float32 matrix product, in the same blocks, for scale. Reported: the median
   and min-max of the seconds and of the per-round ratios; accuracies compared.
2. Memory: each implementation runs in a child process capped at 24 GiB of address space
   (RLIMIT_AS) at growing N until it fails; the largest N that ran is reported.

    python bench/bench_translation_evaluator.py --n 10000 --scan 40000 60000 70000 80000 100000
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
LIMIT = 24 * 2**30
NOISE = 5.0


def embeddings(n: int, d: int = 512, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((n, d), dtype=np.float32)
    # noisy translations: cosine with the source about 0.2, so top-1 accuracy is far from 1 (about
    # 0.7 at N = 10,000) and equal accuracies of the two implementations are a real check
    tgt = src + NOISE * rng.standard_normal((n, d), dtype=np.float32)
    for x in (src, tgt):
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    return src, tgt


class _Precomputed:
    """The part of a SentenceTransformer that TranslationEvaluator touches."""

    def __init__(self, table: dict[str, np.ndarray]):
        import torch

        self.table = {k: torch.from_numpy(v) for k, v in table.items()}

        class _Card:
            def set_evaluation_metrics(self, *a, **k):
                pass

        self.model_card_data = _Card()

    def encode(self, sentences, **kwargs):
        return list(self.table[sentences[0][:1]][: len(sentences)])


def run_theirs(src: np.ndarray, tgt: np.ndarray) -> dict:
    from sentence_transformers.evaluation import TranslationEvaluator

    n = len(src)
    ev = TranslationEvaluator([f"s{i}" for i in range(n)], [f"t{i}" for i in range(n)], write_csv=False)
    model = _Precomputed({"s": src, "t": tgt})
    t0 = time.perf_counter()
    m = ev(model)
    return {"seconds": time.perf_counter() - t0, "s2t": m["src2trg_accuracy"], "t2s": m["trg2src_accuracy"]}


def run_ours(src: np.ndarray, tgt: np.ndarray) -> dict:
    from backretrieval.metrics import xlr_ranks

    t0 = time.perf_counter()
    fwd, bwd = xlr_ranks(src, tgt)
    return {"seconds": time.perf_counter() - t0, "s2t": float(np.mean(fwd == 1)), "t2s": float(np.mean(bwd == 1))}


def child(impl: str, n: int, warm: int) -> dict:
    """One timed run of ``impl`` in this process (after ``warm`` untimed ones: backretrieval's
    kernels compile on first use); for backretrieval also one bare product, alternating with it."""
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))
    src, tgt = embeddings(n)
    fn = run_ours if impl == "ours" else run_theirs
    for _ in range(warm):
        fn(src[:256], tgt[:256])
    out = {"impl": impl, "n": n, **fn(src, tgt)}
    if impl == "ours":
        from backretrieval.search import block_rows

        step = block_rows(n)
        t0 = time.perf_counter()
        for s in range(0, n, step):  # one bare N x N x 512 product, in the same blocks as the metric
            src[s : s + step] @ tgt.T
        out["bare_matmul_s"] = time.perf_counter() - t0
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def spawn(impl: str, n: int, repeats: int) -> dict | None:
    p = subprocess.run([sys.executable, __file__, "--child", impl, str(n), str(repeats)], capture_output=True, text=True)
    if p.returncode != 0:
        tail = (p.stderr or "").strip().splitlines()[-1:] or ["?"]
        print(f"{impl} N={n}: failed ({tail[0][:160]})", file=sys.stderr)
        return None
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(r, file=sys.stderr)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3, help="Interleaved rounds (at least 3).")
    ap.add_argument("--scan", type=int, nargs="*", default=[40000, 60000, 70000, 80000, 100000])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        impl, n, r = args.child
        print(json.dumps(child(impl, int(n), int(r))))
        return
    from _timing import describe, interleaved, ratio_spread, spread

    runs = interleaved({"ours": lambda: spawn("ours", args.n, 1), "theirs": lambda: spawn("theirs", args.n, 1)}, args.repeats)
    if any(r is None for rs in runs.values() for r in rs):
        sys.exit(f"a run at N = {args.n} failed")
    ours, theirs = runs["ours"][-1], runs["theirs"][-1]
    t_ours, t_theirs = [r["seconds"] for r in runs["ours"]], [r["seconds"] for r in runs["theirs"]]
    t_bare = [r["bare_matmul_s"] for r in runs["ours"]]
    rss = {k: max(r["peak_rss_mib"] for r in rs) for k, rs in runs.items()}
    largest = {}
    for impl in ("theirs", "ours"):
        largest[impl] = (args.n, None)
        # TranslationEvaluator climbs the scan until it fails; backretrieval starts at the top
        # (holding no N x N matrix it should run there) and only steps down if it does not
        scan = sorted(args.scan) if impl == "theirs" else sorted(args.scan, reverse=True)
        for n in scan:
            if impl == "ours" and largest[impl][0] > args.n:
                break
            r = spawn(impl, n, 0)
            if impl == "ours":
                largest[impl] = (n, largest[impl][1]) if r is not None else (largest[impl][0], n)
                continue
            if r is None:
                largest[impl] = (largest[impl][0], n)
                break
            largest[impl] = (n, None)
    from _md import machine, write_section

    same = ours["s2t"] == theirs["s2t"] and ours["t2s"] == theirs["t2s"]
    speedup, te_bare, ours_bare = ratio_spread(t_theirs, t_ours), ratio_spread(t_theirs, t_bare), ratio_spread(t_ours, t_bare)

    def lim(impl: str) -> str:
        ok, failed = largest[impl]
        return f"ran at N = {ok:,}" + (f", failed at N = {failed:,}" if failed else " (largest tried)")

    body = "\n".join([
        "### XLR vs sentence-transformers' TranslationEvaluator (same embeddings)",
        "",
        f"Command: `python bench/bench_translation_evaluator.py --n {args.n} --repeats {args.repeats} --scan "
        f"{' '.join(map(str, args.scan))}`. Machine: {machine()}.",
        "",
        f"Random 512-d unit vectors, targets = sources + {NOISE} x Gaussian noise per dimension (cosine about 0.2).",
        "TranslationEvaluator gets them through a model",
        "object whose `encode` returns them; its accuracy is XLR@1 (top-1, both directions). Each run is a",
        "fresh process capped at 24 GiB of address space.",
        "",
        describe(args.repeats),
        "",
        "| N | implementation | seconds | src->tgt acc | tgt->src acc | peak RSS MiB |",
        "|---|---|---|---|---|---|",
        f"| {args.n:,} | backretrieval `xlr` | {spread(t_ours).fmt()} | {ours['s2t']:.4f} | {ours['t2s']:.4f} | {rss['ours']:.0f} |",
        f"| {args.n:,} | TranslationEvaluator | {spread(t_theirs).fmt()} | {theirs['s2t']:.4f} | {theirs['t2s']:.4f} | {rss['theirs']:.0f} |",
        "",
        f"Accuracies identical: {'yes' if same else 'no, they differ by %d and %d queries (scores within float32 rounding of each other, computed by two BLAS libraries)' % (round(abs(ours['s2t'] - theirs['s2t']) * args.n), round(abs(ours['t2s'] - theirs['t2s']) * args.n))}. Speed-up: {speedup.fmt('.2f')}x "
        f"(target >= 3x). One bare N x N x 512 product: {spread(t_bare).fmt()} s, so TranslationEvaluator takes "
        f"{te_bare.fmt('.2f')} of them and backretrieval {ours_bare.fmt('.3f')} "
        "(one pass over the scores serves both directions, and it returns every query's full rank, not only the top 1).",
        "",
        f"Largest N in 24 GiB: TranslationEvaluator {lim('theirs')}; backretrieval {lim('ours')}.",
    ])
    write_section("translation-evaluator", body)


if __name__ == "__main__":
    main()
