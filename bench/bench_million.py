"""XLR@K and BkR@K at a million items per language, end to end from memory-mapped .npy files.

The data: latent-structured synthetic embeddings (``bench_faiss.make_data``, ``--data latent``):
source and target texts of use-m's size (512-d), source and target images of
efficientnet-lite0's size (1280-d), aligned row by row, unit rows, generated deterministically in
chunks and written to .npy files under ``--data-dir`` (a ``done.json`` marker is written last, so
a half-written folder is regenerated, never reused). They are then opened with
``np.load(mmap_mode="r")`` and passed as they are to the public metric functions:

* approximate: ``metrics.approx.xlr_approx`` (source -> target, K = 1, 10) and ``bkr_approx``
  (its step 2 is XLR's first target found), HNSW with the self-check (target 0.99, tuning and
  held-out samples of 1,000 queries each, the counted-distance cost model);
* an independent exact check of ``--check-queries`` seeded queries (a seed the self-check does not
  use): exact top-10 text targets of each over all N (``search.faiss_backend.exact_top``), the
  exact BkR outcome of each (exact first target, then the exact 10 nearest source images of its
  image), compared with the approximate per-query outcomes (``found_at``);
* exact ``metrics.xlr`` / ``metrics.bkr`` over all N with ``--exact`` (for N where it fits in
  time); exact search grows as N^2, so a smaller ``--exact`` run projects it to larger N (the
  exact check's per-query time is no guide: its 1,000 queries are searched in small blocks).

Measured per step: wall and CPU seconds, the process's peak RSS (``ru_maxrss``: it counts pages
of the mapped inputs that were read, which the kernel can drop) and the peak of its *anonymous*
RSS (``RssAnon`` of /proc/self/status, sampled every 0.2 s: the memory the process allocated
itself: indexes, copies, results), and the load average during the run.

    python bench/bench_million.py --n 100000 --exact --out row100k.json
    nice -n 10 python bench/bench_million.py --n 1000000 --out row1m.json   # then delete --data-dir
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
CHECK_SEED = 20261126  # the independent exact check's sample: not the self-check's seed


class Monitor:
    """Samples RssAnon and the 1-minute load average in a background thread."""

    def __init__(self, every: float = 0.2) -> None:
        self.every, self.peak_anon, self.loads = every, 0, []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def anon_kib() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
        return 0

    def _run(self) -> None:
        last_load = 0.0
        while not self._stop.is_set():
            self.peak_anon = max(self.peak_anon, self.anon_kib())
            now = time.monotonic()
            if now - last_load >= 5.0:
                self.loads.append(os.getloadavg()[0])
                last_load = now
            self._stop.wait(self.every)

    def reset_peak(self) -> None:
        self.peak_anon = self.anon_kib()

    def __enter__(self) -> "Monitor":
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def data(n: int, folder: Path, latent: int, text_noise: float, image_noise: float) -> dict[str, np.ndarray]:
    """The four memory-mapped arrays, generated first unless ``folder`` holds a finished set of
    the same parameters."""
    from bench_faiss import make_data

    spec = {"n": n, "data": "latent", "latent": latent, "text_noise": text_noise, "image_noise": image_noise}
    marker = folder / "done.json"
    names = ("src_text", "tgt_text", "src_img", "tgt_img")
    if not (marker.exists() and json.loads(marker.read_text()) == spec):
        folder.mkdir(parents=True, exist_ok=True)
        marker.unlink(missing_ok=True)
        make_data(n, folder, text_noise, image_noise, "latent", latent)
        marker.write_text(json.dumps(spec))
    return {k: np.load(folder / f"{k}.npy", mmap_mode="r") for k in names}


class Steps:
    def __init__(self, mon: Monitor, out: dict) -> None:
        self.mon, self.out = mon, out
        self.out["steps"] = {}

    def run(self, name: str, fn):
        self.mon.reset_peak()
        w, c = time.perf_counter(), time.process_time()
        load0 = os.getloadavg()[0]
        value = fn()
        self.out["steps"][name] = {
            "wall_s": round(time.perf_counter() - w, 1), "cpu_s": round(time.process_time() - c, 1),
            "peak_anon_mib": round(self.mon.peak_anon / 1024), "load_start": round(load0, 2),
            "load_end": round(os.getloadavg()[0], 2),
            "maxrss_mib_so_far": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {self.out['steps'][name]}", file=sys.stderr, flush=True)
        return value


def exact_check(d: dict[str, np.ndarray], x: dict, b: dict, rows: np.ndarray, k: int) -> dict:
    """Exact outcomes of the sampled queries, compared with the approximate ones."""
    from backretrieval.search.faiss_backend import exact_top

    src, tgt, si, ti = d["src_text"], d["tgt_text"], d["src_img"], d["tgt_img"]
    s, i = exact_top(np.asarray(src[rows]), tgt, k)
    # the approximate first target agrees when it is among the exact ones tied for first place
    approx_first = x["retrieved"][rows]
    tied = (i == approx_first[:, None]) & (s == s[:, :1])
    hit = i == rows[:, None]
    exact_xlr_pos = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
    exact_first = i[:, 0]
    _, li = exact_top(np.asarray(ti[exact_first]), si, k)
    hit = li == rows[:, None]
    exact_bkr_pos = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
    ax, ab = x["found_at"][rows], b["found_at"][rows]
    out = {"queries": int(rows.size), "top1_agreement": float(np.mean(tied.any(axis=1))),
           "xlr_outcome_agreement": float(np.mean(ax == exact_xlr_pos)),
           "bkr_outcome_agreement": float(np.mean(ab == exact_bkr_pos))}
    for kk in (1, k):
        out[f"sample_xlr@{kk}"] = [float(np.mean((ax > 0) & (ax <= kk))), float(np.mean((exact_xlr_pos > 0) & (exact_xlr_pos <= kk)))]
        out[f"sample_bkr@{kk}"] = [float(np.mean((ab > 0) & (ab <= kk))), float(np.mean((exact_bkr_pos > 0) & (exact_bkr_pos <= kk)))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path, default=Path("/work/million-data"), help="the .npy files go to DATA_DIR/N")
    ap.add_argument("--latent", type=int, default=16)
    ap.add_argument("--text-noise", type=float, default=0.7)
    ap.add_argument("--image-noise", type=float, default=1.0)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=40)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="FAISS threads")
    ap.add_argument("--check-queries", type=int, default=1000)
    ap.add_argument("--exact", action="store_true", help="also exact XLR and BkR over all N (public metrics)")
    ap.add_argument("--gen-only", action="store_true", help="only write the data")
    ap.add_argument("--out", type=Path, help="write the JSON row here too")
    args = ap.parse_args()

    from backretrieval.metrics import bkr, xlr
    from backretrieval.metrics.approx import bkr_approx, xlr_approx
    from backretrieval.search.faiss_backend import FaissOptions
    from _md import git_rev, machine

    out: dict = {"n": args.n, "data": f"latent-{args.latent}", "text_noise": args.text_noise,
                 "image_noise": args.image_noise, "m": args.m, "ef_construction": args.ef_construction,
                 "ef_search": args.ef_search, "threads": args.threads, "start_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "uptime_start": Path("/proc/loadavg").read_text().split()[:3]}
    opts = FaissOptions(m=args.m, ef_construction=args.ef_construction, ef_search=args.ef_search, threads=args.threads)
    ks = (1, 10)
    with Monitor() as mon:
        st = Steps(mon, out)
        d = st.run("data", lambda: data(args.n, args.data_dir / str(args.n), args.latent, args.text_noise, args.image_noise))
        out["data_gib"] = round(sum(a.nbytes for a in d.values()) / 2**30, 2)
        out["memmap"] = all(isinstance(a, np.memmap) for a in d.values())
        if args.gen_only:
            print(json.dumps(out))
            return
        x = st.run("xlr_approx", lambda: xlr_approx(d["src_text"], d["tgt_text"], ks, method="hnsw", options=opts,
                                                     both_directions=False, check_sample=1000, seed=0, found_at=True))
        b = st.run("bkr_approx", lambda: bkr_approx(d["src_text"], d["tgt_text"], d["src_img"], d["tgt_img"], ks,
                                                     method="hnsw", options=opts, retrieved=x["retrieved"],
                                                     check_sample=1000, seed=0, found_at=True))
        keep = lambda r: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()  # noqa: E731
                          if not isinstance(v, np.ndarray)}
        out["xlr"], out["bkr"] = keep(x), keep(b)
        out["distinct_retrieved"] = int(np.unique(x["retrieved"]).size)
        rows = np.sort(np.random.default_rng(CHECK_SEED).choice(args.n, size=min(args.check_queries, args.n), replace=False))
        out["check"] = st.run("exact_check", lambda: exact_check(d, x, b, rows, max(ks)))
        if args.exact:
            ex = st.run("exact_xlr", lambda: xlr(d["src_text"], d["tgt_text"], ks=ks))
            eb = st.run("exact_bkr", lambda: bkr(d["src_text"], d["tgt_text"], d["src_img"], d["tgt_img"], ks=ks))
            out["exact"] = {k: round(float(v), 4) for k, v in {**ex, **eb}.items() if k.startswith(("xlr@", "bkr@"))}
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["loadavg_1min"] = {"min": min(mon.loads, default=None), "max": max(mon.loads, default=None),
                           "mean": round(float(np.mean(mon.loads)), 2) if mon.loads else None}
    out["uptime_end"] = Path("/proc/loadavg").read_text().split()[:3]
    out["end_utc"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out["machine"], out["commit"] = machine(), git_rev()
    text = json.dumps(out)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
