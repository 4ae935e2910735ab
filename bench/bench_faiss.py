"""XLR@K and BkR@K at a million items per language with FAISS approximate search.

Synthetic, aligned data written chunk by chunk (seeded) to memory-mapped .npy files, so no
process ever holds all of it: source texts a_i (512-d), target texts a_i + noise ("translations"),
source images b_i (1280-d), target images b_i + noise (the same concept photographed again).
Unit rows. Approximate indexes are built from the memory-mapped files in chunks.

Reported per N: wall time of XLR@K (one direction) and of BkR@K, peak RSS, and the top-1
agreement of the approximate text retrieval with exact brute force on a seeded sample of 1,000
queries (target >= 0.99). At the smallest N the exact metrics are computed too, to show that the
approximate values agree.

    python bench/bench_faiss.py --n 100000 1000000 --method hnsw
    python bench/bench_faiss.py --child 1000000 > row.json      # one N, e.g. on a bigger machine
    python bench/bench_faiss.py --rows row100k.json row.json     # then write BENCHMARKS.md from the rows
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
CHUNK = 50_000


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


LATENT = 64  # default intrinsic dimension of the "latent" data


def make_data(n: int, folder: Path, text_noise: float, image_noise: float, data: str = "isotropic",
              latent: int = LATENT) -> dict[str, np.ndarray]:
    """Aligned synthetic embeddings on disk.

    ``isotropic``: a_i ~ N(0, I_512), targets a_i + text_noise * N(0, I); images b_i ~ N(0, I_1280),
    target images b_i + image_noise * N(0, I). No structure at all: the worst case for any index.
    ``latent``: concepts live in a ``latent``-dimensional space (default 64), as real sentence and image embeddings
    concentrate near low-dimensional structure: z_i ~ N(0, I_latent), source text P z_i, target text
    P (z_i + text_noise * N(0, I_latent)), with a fixed random 512 x latent map P, plus isotropic noise of 5%
    of the norm in all 512 dimensions; images likewise with their own latent w_i and a 1280 x latent map.
    """
    from numpy.lib.format import open_memmap

    arrays = {
        "src_text": open_memmap(folder / "src_text.npy", "w+", np.float32, (n, 512)),
        "tgt_text": open_memmap(folder / "tgt_text.npy", "w+", np.float32, (n, 512)),
        "src_img": open_memmap(folder / "src_img.npy", "w+", np.float32, (n, 1280)),
        "tgt_img": open_memmap(folder / "tgt_img.npy", "w+", np.float32, (n, 1280)),
    }
    maps = np.random.default_rng(99)
    P_text = maps.standard_normal((latent, 512), dtype=np.float32) / np.sqrt(latent)
    P_img = maps.standard_normal((latent, 1280), dtype=np.float32) / np.sqrt(latent)
    def fill(c: int) -> None:  # chunk c from its own seeded generator: same data for any thread count
        s, e = c * CHUNK, min(n, (c + 1) * CHUNK)
        rng = np.random.default_rng([7, c])
        if data == "isotropic":
            a = rng.standard_normal((e - s, 512), dtype=np.float32)
            arrays["src_text"][s:e] = _unit(a)
            arrays["tgt_text"][s:e] = _unit(a + text_noise * rng.standard_normal(a.shape, dtype=np.float32))
            b = rng.standard_normal((e - s, 1280), dtype=np.float32)
            arrays["src_img"][s:e] = _unit(b)
            arrays["tgt_img"][s:e] = _unit(b + image_noise * rng.standard_normal(b.shape, dtype=np.float32))
        elif data == "latent":
            for (src, tgt, P, noise) in (("src_text", "tgt_text", P_text, text_noise), ("src_img", "tgt_img", P_img, image_noise)):
                z = rng.standard_normal((e - s, latent), dtype=np.float32)
                zt = z + noise * rng.standard_normal(z.shape, dtype=np.float32)
                for name, lat in ((src, z), (tgt, zt)):
                    x = _unit(lat @ P)
                    arrays[name][s:e] = _unit(x + 0.05 / np.sqrt(P.shape[1]) * rng.standard_normal(x.shape, dtype=np.float32))
        else:
            raise ValueError(f"unknown data {data!r}")

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(fill, range((n + CHUNK - 1) // CHUNK)))
    for x in arrays.values():
        x.flush()
    return {k: np.load(folder / f"{k}.npy", mmap_mode="r") for k in arrays}


def one(n: int, method: str, text_noise: float, image_noise: float, exact: bool, opts_kw: dict, data: str, latent: int = LATENT) -> dict:
    from backretrieval.metrics import bkr, xlr
    from backretrieval.metrics.approx import bkr_approx, xlr_approx
    from backretrieval.search.faiss_backend import FaissOptions, build_index, top1_agreement
    from _md import machine

    opts = FaissOptions(**opts_kw)
    with tempfile.TemporaryDirectory(prefix="bench-faiss-", dir="/var/tmp") as tmp:
        t0 = time.perf_counter()
        d = make_data(n, Path(tmp), text_noise, image_noise, data, latent)
        out = {"n": n, "data": data if data == "isotropic" else f"latent-{latent}", "text_noise": text_noise, "image_noise": image_noise, "method": method, **opts_kw, "data_s": round(time.perf_counter() - t0, 1)}
        t0 = time.perf_counter()
        text_index = build_index(d["tgt_text"], method, opts)  # shared by XLR and BkR
        out["text_index_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        x = xlr_approx(d["src_text"], d["tgt_text"], ks=(1, 10), method=method, options=opts, both_directions=False,
                       tgt_index=text_index)
        out["xlr_search_s"] = round(time.perf_counter() - t0, 1)
        out["xlr_s"] = round(out["text_index_s"] + out["xlr_search_s"], 1)
        out.update({k: round(v, 4) for k, v in x.items() if k.startswith("xlr")})
        t0 = time.perf_counter()
        b = bkr_approx(d["src_text"], d["tgt_text"], d["src_img"], d["tgt_img"], ks=(1, 10), method=method, options=opts,
                       retrieved=x["retrieved"])  # step 2 = the first target of XLR's lists: no second text search
        out["bkr_extra_s"] = round(time.perf_counter() - t0, 1)  # image index + image search
        out["bkr_s"] = round(out["text_index_s"] + out["bkr_extra_s"], 1)
        out["distinct_retrieved"] = int(np.unique(b["retrieved"]).size)
        out.update({k: round(v, 4) for k, v in b.items() if k.startswith("bkr")})
        t0 = time.perf_counter()
        out["top1_agreement"] = top1_agreement(d["src_text"], d["tgt_text"], b["retrieved"], sample=1000, seed=0)
        out["agreement_s"] = round(time.perf_counter() - t0, 1)
        if exact:
            st, tt = np.asarray(d["src_text"]), np.asarray(d["tgt_text"])
            si, ti = np.asarray(d["src_img"]), np.asarray(d["tgt_img"])
            out["exact_xlr@10"] = round(xlr(st, tt, ks=(10,))["xlr@10"], 4)
            out["exact_bkr@10"] = round(bkr(st, tt, si, ti, ks=(10,))["bkr@10"], 4)
        out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        out["machine"] = machine()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--method", default="hnsw", choices=["hnsw", "ivf", "flat"])
    ap.add_argument("--m", type=int, default=32, help="HNSW links per node")
    ap.add_argument("--ef-construction", type=int, default=80)
    ap.add_argument("--ef-search", type=int, default=128)
    ap.add_argument("--text-noise", type=float, default=1.0)
    ap.add_argument("--image-noise", type=float, default=1.5)
    ap.add_argument("--data", default="isotropic", choices=["isotropic", "latent"], help="synthetic data (see make_data)")
    ap.add_argument("--latent", type=int, default=LATENT, help="intrinsic dimension of --data latent")
    ap.add_argument("--exact", action="store_true", help="also the exact metrics (only for N <= 100,000)")
    ap.add_argument("--child", type=int, help="measure one N and print its JSON row (no BENCHMARKS.md)")
    ap.add_argument("--rows", nargs="+", help="write the section from JSON rows saved by --child runs (e.g. on another machine)")
    ap.add_argument("--note", help="a Markdown file appended to the section: the reading of these rows")
    args = ap.parse_args()
    opts_kw = {"m": args.m, "ef_construction": args.ef_construction, "ef_search": args.ef_search}
    if args.child:
        print(json.dumps(one(args.child, args.method, args.text_noise, args.image_noise,
                             args.exact and args.child <= 100_000, opts_kw, args.data, args.latent)))
        return
    rows = []
    if args.rows:
        for f in args.rows:
            rows.append(json.loads(Path(f).read_text().strip().splitlines()[-1]))
    else:
        for i, n in enumerate(args.n):
            cmd = [sys.executable, __file__, "--child", str(n), "--data", args.data, "--latent", str(args.latent), "--method", args.method, "--m", str(args.m),
                   "--ef-construction", str(args.ef_construction), "--ef-search", str(args.ef_search),
                   "--text-noise", str(args.text_noise), "--image-noise", str(args.image_noise)]
            if i == 0 and n <= 100_000:
                cmd.append("--exact")
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"N={n} failed: {p.stderr[-2000:]}")
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr)
    from _md import write_section

    methods = sorted({r["method"] for r in rows})
    lines = [
        f"### {', '.join(m.upper() for m in methods)} at a fixed effort, without the self-check (bench/bench_faiss.py)",
        "",
        "Command per row: `python bench/bench_faiss.py --child N --method M --m M_LINKS --ef-construction EFC "
        "--ef-search EFS [--exact]` (`--n N1 N2 ...` runs the children and writes this section; `--rows` writes it from",
        "saved child rows). Each row names the machine it ran on.",
        "",
        "Synthetic aligned data (unit rows), written to memory-mapped files chunk by chunk and never held whole:",
        "*isotropic*: source texts ~ N(0, I_512), target texts = source + (text noise) x N(0, I); images likewise in",
        "1280-d -- no structure at all, the hardest case for any index. *latent-r*: concepts drawn in an r-dimensional",
        "latent space and mapped to 512-d (text) and 1280-d (image) by fixed random maps, plus 5% isotropic noise; the",
        "target text is the mapping of latent + (text noise) x N(0, I_r) -- real embeddings concentrate near",
        "low-dimensional structure like this (see `make_data`). Peak RSS counts the pages of the memory-mapped inputs",
        "that were read (N x 3,584 floats: 14.3 GB at N = 1,000,000; the kernel can drop them) besides the indexes.",
        "XLR@K (source->target) from the K targets found; BkR@K from the first target found, then the K source images",
        "nearest to its image. One text search serves both. Agreement = share of 1,000 seeded",
        "queries whose approximate first target equals exact brute force (target >= 0.99). Times in seconds:",
        "text index build, XLR search (its first target per source is BkR's step 2), BkR's rest (source-image",
        "index, image search of the distinct retrieved targets).",
        "",
        "| N | data (text / image noise) | method (m / efC / efS) | text index s | XLR search s | BkR rest s | XLR total s "
        "| BkR total s | xlr@1 | xlr@10 | bkr@1 | bkr@10 | top-1 agreement | peak RSS MiB | exact xlr@10 / bkr@10 | machine |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ex = f"{r['exact_xlr@10']} / {r['exact_bkr@10']}" if "exact_xlr@10" in r else "-"
        lines.append(
            f"| {r['n']:,} | {r['data']} ({r['text_noise']} / {r['image_noise']}) "
            f"| {r['method']} ({r['m']} / {r['ef_construction']} / {r['ef_search']}) | {r['text_index_s']} "
            f"| {r['xlr_search_s']} | {r['bkr_extra_s']} | {r['xlr_s']} | {r['bkr_s']} | {r['xlr@1']} | {r['xlr@10']} "
            f"| {r['bkr@1']} | {r['bkr@10']} | {r['top1_agreement']:.3f} | {r['peak_rss_mib']:,} | {ex} | {r['machine']} |"
        )
    if args.note:
        lines += ["", Path(args.note).read_text(encoding="utf-8").strip()]
    write_section("faiss", "\n".join(lines))


if __name__ == "__main__":
    main()
