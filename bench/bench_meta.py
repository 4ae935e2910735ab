"""The meta-evaluation at paper scale, once embeddings are cached: wall time and peak memory.

Paper scale (Backretrieval paper, Sec. 3.1): N = 1,500 per side, 25 seeds; here 8 directed
pairs of emoji-cldr (incl. non-Latin scripts) and 12 models. A first, untimed call fills the
embedding cache (texts and images); the timed call starts from a fresh output directory, so
every (model, pair, seed) record is computed, with the figures and the HTML report.

    python bench/bench_meta.py --executor processes:2
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

PAIRS = "en-de,de-en,en-ja,ja-en,en-ru,ru-en,en-ar,ar-en"
MODELS = ("use-m,e5-small,minilm-en,tfidf-char,random,use-m@trunc=64,use-m@trunc=16,use-m@noise=1,use-m@mix=0.5,"
          "e5-small@pca=32,e5-small@noise=2,minilm-en@noise=0.5")


def warm_cache(cfg) -> None:
    """Encode every text of the pairs' languages with every cached model, through the cache: the
    timed grid then encodes nothing, whatever rows its seeds draw (a warm-up with one seed would
    leave the other seeds' rows to the timed run). Models with a ``fit`` hook (fitted per run on
    the sample's rows) and variants of them are left to the grid: they are never cached."""
    from backretrieval.data import load_dataset
    from backretrieval.encoders.registry import get_text_encoder
    from backretrieval.encoders.cache import CachedTextEncoder

    langs = sorted({lang for pair in cfg.pairs for lang in pair})
    ds = load_dataset(cfg.dataset, langs=langs)
    for spec in cfg.models:
        enc = get_text_encoder(spec)
        if callable(getattr(enc, "fit", None)):
            continue
        cached = CachedTextEncoder(enc, progress=True)
        for lang in langs:
            cached.encode(ds[lang].texts, lang, ids=ds[lang].ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=PAIRS)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--seeds", type=int, default=25)
    ap.add_argument("--weak-image-models", default="")
    ap.add_argument("--executor", default="local")
    ap.add_argument("--no-warm", action="store_true", help="skip encoding every text first (the cache is known to be full)")
    ap.add_argument("--note", help="a Markdown file appended to the section: the reading of the result")
    args = ap.parse_args()
    os.environ.setdefault("BACKRETRIEVAL_EMOJI_DIR", str(ROOT.parent / "shared" / "data" / "npm"))
    from backretrieval.analysis import EvalConfig, parse_pairs
    from backretrieval.analysis.meta import run_meta
    from backretrieval.report.meta_report import write_meta_outputs

    weak = [m for m in args.weak_image_models.split(",") if m]
    cfg = EvalConfig(dataset="emoji-cldr", pairs=parse_pairs(args.pairs), models=args.models.split(","), n=args.n,
                     seeds=list(range(args.seeds)))
    if not args.no_warm:
        warm_cache(cfg)
    warm = EvalConfig(**{**cfg.__dict__, "seeds": [0]})
    run_meta(warm, None, image_models=weak, progress=False)  # image features, compiled kernels
    with tempfile.TemporaryDirectory(prefix="bench-meta-") as out:
        t0 = time.perf_counter()
        res = run_meta(cfg, out, image_models=weak, progress=False, executor=args.executor)
        t_grid = time.perf_counter() - t0
        write_meta_outputs(res, cfg, Path(out), figures=True)
        total = time.perf_counter() - t0
    runs = len(cfg.models) * len(cfg.pairs) * len(cfg.seeds)
    from _md import machine, write_section

    body = "\n".join([
        "## Meta-evaluation at paper scale (embeddings cached)",
        "",
        f"Command: `python bench/bench_meta.py --executor {args.executor}"
        + (f" --weak-image-models {args.weak_image_models}" if weak else "") + f"`. Machine: {machine()}.",
        "",
        f"emoji-cldr, {len(cfg.pairs)} directed pairs, {len(cfg.models)} models, {args.seeds} seeds, N = {args.n:,} per side: "
        f"{runs:,} (model, pair, seed) records, each with XLR (both directions), BkR, CORR and hubness"
        + (f", for {1 + len(weak)} image models" if weak else "") + ".",
        "",
        "| executor | grid s | with figures + HTML s | per record ms | peak RSS MiB (driver / largest worker) | target |",
        "|---|---|---|---|---|---|",
        f"| {args.executor} | {t_grid:.0f} | {total:.0f} | {1000 * t_grid / runs:.0f} | "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} / "
        f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} | {'met' if total <= 600 else 'MISSED'} (<= 600 s) |",
    ])
    if args.note:
        body += "\n\n" + Path(args.note).read_text(encoding="utf-8").strip()
    write_section(f"meta-paper-scale-{args.executor.replace(':', '')}", body)


if __name__ == "__main__":
    main()
