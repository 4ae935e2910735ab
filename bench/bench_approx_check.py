"""Approximate search that checks itself: the agreement reached and what it costs.

For each data set, XLR@K (one direction) and BkR@K with FAISS HNSW (or IVF), first with the
default effort and no check, then with the self-check of ``metrics.approx`` (target top-1
agreement and top-K recall 0.99 on 1,000 seeded queries; effort doubled until reached, else
exact search). Reported: the agreement the unchecked search had, the agreement and recall the
check reached on its held-out sample, the effort it chose (or the exact route, and why), the
check's cost and the total time, and an out-of-sample agreement on 1,000 queries of a third
seed. Beside the clock, the cost model's counts of distance computations: the checked route,
exact search and the approximate route forced, with FAISS's own per-query count.

Data: the synthetic ``isotropic`` and ``latent-64`` sets of bench_faiss.py (N per side), and real
embeddings: use-m on every emoji-cldr name and every DDTP description of one language pair (text
only: XLR), plus emoji-cldr with EfficientNet-Lite0 images (BkR).

    python bench/bench_approx_check.py --n 100000 --data isotropic latent real
    python bench/bench_approx_check.py --n 2000 --data isotropic --text-only --print-only   # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
K = 10


def _real(pair: tuple[str, str]) -> dict[str, np.ndarray]:
    """use-m on all emoji-cldr names + all DDTP documents of ``pair`` (aligned by concept), and the
    emoji rows' image features (EfficientNet-Lite0) for BkR."""
    from backretrieval.data import load_dataset, matching
    from backretrieval.encoders.registry import get_image_encoder, get_text_encoder
    from backretrieval.encoders.cache import CachedImageEncoder, CachedTextEncoder

    enc = CachedTextEncoder(get_text_encoder("use-m"))
    out: dict[str, list[np.ndarray]] = {"src_text": [], "tgt_text": []}
    for name in ("emoji-cldr", "ddtp"):
        ds = load_dataset(name, langs=list(pair))
        s, t = ds[pair[0]], ds[pair[1]]
        n = len(set(s.concepts) & set(t.concepts))
        si, ti = matching(s, t, n, 0)
        out["src_text"].append(enc.encode([s.texts[i] for i in si], pair[0]))
        out["tgt_text"].append(enc.encode([t.texts[i] for i in ti], pair[1]))
        if name == "emoji-cldr":
            img = CachedImageEncoder(get_image_encoder("efficientnet-lite0"))
            emoji = {"src_img": img.encode_images([s.image_paths[i] for i in si]),
                     "tgt_img": img.encode_images([t.image_paths[i] for i in ti]),
                     "n_img": len(si)}
    d = {k: np.concatenate(v).astype(np.float32) for k, v in out.items()}
    d.update(emoji)
    return d


def _counted(D, Q, method: str, opts, value: int, sample: int = 1000) -> tuple[float, int]:
    """FAISS's counted distance computations per query (its search statistics) for a seeded
    sample of queries at effort ``value``, and the cost model's :func:`query_cost` for it."""
    import faiss

    from backretrieval.search.faiss_backend import build_index, query_cost, search

    index = build_index(D, method, opts)
    if method == "hnsw":
        index.hnsw.efSearch = value
        stats = faiss.cvar.hnsw_stats
    else:
        index.nprobe = value
        stats = faiss.cvar.indexIVF_stats
    rows = np.sort(np.random.default_rng(2).choice(Q.shape[0], size=min(sample, Q.shape[0]), replace=False))
    stats.reset()
    search(index, Q, K, rows=rows)
    ndis = stats.ndis + (rows.size * index.nlist if method == "ivf" else 0)  # IVF's count omits the centroids
    return round(ndis / rows.size, 1), query_cost(method, D.shape[0], opts, value)


def one(data: str, n: int, method: str, seed_data: int = 0, text_only: bool = False, skip: tuple[str, ...] = ()) -> dict:
    from backretrieval.metrics import bkr
    from backretrieval.metrics.approx import bkr_approx, xlr_approx
    from backretrieval.search.faiss_backend import FaissOptions, top1_agreement
    from _md import machine

    opts = FaissOptions()
    with tempfile.TemporaryDirectory(prefix="bench-approx-", dir="/var/tmp") as tmp:
        if data == "real":
            d = _real(("en", "de"))
            label = f"real: use-m, emoji-cldr + ddtp en-de (BkR: emoji {d['n_img']:,})"
        else:
            from bench_faiss import make_data

            d = make_data(n, Path(tmp), 1.0, 1.5, "latent" if data.startswith("latent") else "isotropic", 64)
            label = data
        st, tt = d["src_text"], d["tgt_text"]
        row = {"data": label, "n": int(st.shape[0]), "method": method}
        if "unchecked" not in skip:
            t0 = time.perf_counter()
            raw = xlr_approx(st, tt, ks=(1, K), method=method, options=opts, both_directions=False, target_agreement=None)
            row["unchecked_s"] = round(time.perf_counter() - t0, 1)
            row["unchecked_agreement"] = top1_agreement(st, tt, raw["retrieved"], sample=1000, seed=0)
        # exact search as the fall-back runs it (the exact kernels), and the checked search (cost model on);
        # CPU seconds beside the wall clock: on a shared machine they are the steadier measure of the work
        t0, c0 = time.perf_counter(), time.process_time()
        flat = xlr_approx(st, tt, ks=(1, K), method="flat", both_directions=False)  # the exact kernels
        row["exact_s"], row["exact_cpu_s"] = round(time.perf_counter() - t0, 1), round(time.process_time() - c0, 1)
        t0, c0 = time.perf_counter(), time.process_time()
        x = xlr_approx(st, tt, ks=(1, K), method=method, options=opts, both_directions=False)
        row["checked_s"], row["checked_cpu_s"] = round(time.perf_counter() - t0, 1), round(time.process_time() - c0, 1)
        for key in ("text_agreement", "text_agreement_low95", "text_tuning_agreement", "text_recall@10",
                    "text_ef_search", "text_nprobe", "text_exact_fallback", "text_route", "text_route_reason",
                    "text_cost", "text_cost_exact", "text_calibration_seconds"):
            if key in x:
                row[key] = x[key]
        row["out_of_sample_agreement"] = top1_agreement(st, tt, x["retrieved"], sample=1000, seed=1)
        row["xlr@10"] = round(x["xlr@10"], 4)
        # the approximate route forced (no cost check): what the cost model saved
        if "forced" in skip:
            row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
            row["machine"] = machine()
            return row
        t0 = time.perf_counter()
        xa = xlr_approx(st, tt, ks=(1, K), method=method, options=opts, both_directions=False, cost_check=False)
        row["forced_s"] = round(time.perf_counter() - t0, 1)
        row["forced_route"], row["forced_cost"] = xa["text_route"], xa["text_cost"]
        row["forced_agreement"] = xa["text_agreement"]
        # FAISS's own count of distance computations per query at the forced route's effort, beside the model's
        value = xa.get("text_ef_search", xa.get("text_nprobe"))
        if value is not None:
            row["faiss_ndis_per_query"], row["model_ndis_per_query"] = _counted(tt, st, method, opts, value)
        if "src_img" in d and not text_only:
            ns = d["src_img"].shape[0]
            si, ti = d["src_img"], d["tgt_img"]
            t0 = time.perf_counter()
            b = bkr_approx(st[:ns], tt[:ns], si, ti, ks=(1, K), method=method, options=opts)
            row["bkr_checked_s"] = round(time.perf_counter() - t0, 1)
            row["image_agreement"] = b.get("image_agreement")
            row["image_recall@10"] = b.get("image_recall@10")
            row["image_exact_fallback"] = b.get("image_exact_fallback")
            row["bkr@10"] = round(b["bkr@10"], 4)
            if ns <= 100_000:
                row["exact_bkr@10"] = round(bkr(np.asarray(st[:ns]), np.asarray(tt[:ns]), np.asarray(si), np.asarray(ti), ks=(K,))["bkr@10"], 4)
        row["exact_xlr@10"] = round(flat["xlr@10"], 4)  # method="flat" runs the exact metric's kernels
        row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        row["machine"] = machine()
    return row


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="items per side of the synthetic sets")
    ap.add_argument("--data", nargs="+", default=["isotropic", "latent", "real"], choices=["isotropic", "latent", "real"])
    ap.add_argument("--method", default="hnsw", choices=["hnsw", "ivf"])
    ap.add_argument("--child", help="measure one data set and print its JSON row")
    ap.add_argument("--note", help="a Markdown file appended to the section: the reading of these rows")
    ap.add_argument("--text-only", action="store_true", help="XLR only (no BkR: no image index, no exact BkR)")
    ap.add_argument("--section", default="approx-check", help="the BENCHMARKS.md section to write (one per N)")
    ap.add_argument("--print-only", action="store_true", help="print the section instead of writing BENCHMARKS.md")
    ap.add_argument("--skip", nargs="*", default=[], choices=["unchecked", "forced"],
                    help="leave out the unchecked search or the forced approximate route (long at 100k on 2 cores)")
    ap.add_argument("--rows", nargs="*", help="write the section from saved child rows (JSON files) instead of measuring")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(args.child, args.n, args.method, text_only=args.text_only, skip=tuple(args.skip))))
        return
    rows = [json.loads(Path(f).read_text()) for f in args.rows or []]
    for data in [] if args.rows else args.data:
        p = subprocess.run([sys.executable, __file__, "--child", data, "--n", str(args.n), "--method", args.method,
                            *(["--text-only"] if args.text_only else []), *(["--skip", *args.skip] if args.skip else [])],
                           capture_output=True, text=True, env={**os.environ})
        if p.returncode != 0:
            raise SystemExit(f"{data} failed: {p.stderr[-3000:]}")
        rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr)
    lines = [
        f"### N = {args.n:,}: {'text only' if args.text_only else 'text and images'}, with the weighted cost model",
        "",
        f"Command: `python bench/bench_approx_check.py --n {args.n} --data {' '.join(args.data)} --method {args.method}"
        f"{' --text-only' if args.text_only else ''}{' --skip ' + ' '.join(args.skip) if args.skip else ''}"
        f"{'' if args.section == 'approx-check' else ' --section ' + args.section}`. "
        "FAISS defaults (HNSW m 32, efConstruction 80, efSearch 128; IVF nlist 4 sqrt(N), nprobe 32). *Unchecked*: "
        "the default effort, agreement measured afterwards on 1,000 seeded queries. *Checked*: `xlr_approx` / "
        "`bkr_approx` with `target_agreement=0.99` (the effort doubles until top-1 agreement and top-10 recall on "
        "1,000 seeded tuning queries reach 0.99; reported: both on 1,000 disjoint held-out queries, and the "
        "agreement's 95% Clopper-Pearson lower bound; exact search where the target is out of reach or the cost "
        "model says exact search is cheaper). *Out of sample*: top-1 agreement of the checked search on 1,000 "
        "queries of a third seed. Times in seconds, wall clock, index build included; *CPU s*: the process's CPU "
        "seconds (all threads), the steadier measure on a shared machine. A `-`: the part was skipped (`--skip`).",
        "",
        "| data | N | unchecked agreement | unchecked s | route | held-out agreement (low95) / recall@10 "
        "| tuning agreement | effort chosen | check s | checked total s (CPU s) | out-of-sample agreement | xlr@10 (exact) "
        "| BkR image agreement / recall@10 | bkr@10 (exact) | BkR s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        effort = r.get("text_ef_search", r.get("text_nprobe", "-"))
        tuning = r.get("text_tuning_agreement")
        lines.append(
            f"| {r['data']} | {r['n']:,} | {_f(r.get('unchecked_agreement'))} | {r.get('unchecked_s', '-')} | {r['text_route']} "
            f"| {r['text_agreement']:.3f} ({r['text_agreement_low95']:.3f}) / {r['text_recall@10']:.3f} "
            f"| {'-' if tuning is None else f'{tuning:.3f}'} | {effort} | {r.get('text_calibration_seconds', '-')} "
            f"| {r['checked_s']} ({r.get('checked_cpu_s', '-')}) | {r['out_of_sample_agreement']:.3f} | {r['xlr@10']} ({r.get('exact_xlr@10', '-')}) "
            f"| {('%.3f / %.3f' % (r['image_agreement'], r['image_recall@10'])) if r.get('image_agreement') is not None else '-'} "
            f"| {r.get('bkr@10', '-')} ({r.get('exact_bkr@10', '-')}) | {r.get('bkr_checked_s', '-')} |"
        )
    lines += [
        "",
        "Cost model beside the clock (XLR, one direction). *Counts*: weighted distance computations of the cost model "
        "(`search.faiss_backend.checked_cost`, `exact_cost`; units of one exact-search distance): the checked route as taken, exact search, and the "
        "approximate route forced (`cost_check=False`). *Per query*: FAISS's own count of distance computations "
        "(its search statistics, 1,000 queries) at the forced route's effort beside the model's `query_cost`. "
        "*Exact s*: the exact route as the fall-back runs it (the exact kernels).",
        "",
        "| data | N | route (reason) | checked count | exact count | forced approximate count | checked s (CPU s) | exact s (CPU s) "
        "| forced approximate s | forced held-out agreement | per query: FAISS count / model |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['data']} | {r['n']:,} | {r['text_route']} ({r['text_route_reason']}) | {r['text_cost']:,} "
            f"| {r['text_cost_exact']:,} | {_n(r.get('forced_cost'))} | {r['checked_s']} ({r.get('checked_cpu_s', '-')}) "
            f"| {r['exact_s']} ({r.get('exact_cpu_s', '-')}) | {r.get('forced_s', '-')} "
            f"| {_f(r.get('forced_agreement'))} | {r.get('faiss_ndis_per_query', '-')} / {r.get('model_ndis_per_query', '-')} |"
        )
    lines.append("")
    lines.append(f"Machine: {rows[0]['machine']}.")
    if args.note:
        lines += ["", Path(args.note).read_text(encoding="utf-8").strip()]
    if args.print_only:
        print("\n".join(lines))
        return
    from _md import write_section

    write_section(args.section, "\n".join(lines))


if __name__ == "__main__":
    main()
