"""Every encoder that takes ``--device`` on a CUDA GPU against the CPU, and the README demo on the GPU.

For each registered text and image model whose factory takes the ``device`` option (and each
backend of the CNNs: torch, and ONNX Runtime where its CUDA provider is usable), the script
encodes the same seeded inputs on the CPU and on the device and reports:

* the largest absolute difference between the two sets of vectors, relative to the largest
  absolute CPU value (``rel diff``), against a stated tolerance per kind of model
  (:data:`TOLERANCE`); the lowest cosine between a CPU vector and its device twin;
* items per second on each side (one timed pass after a warm-up batch that loads the model).

Then the README demo (``evaluate`` on emoji-cldr, the demo's models and image model) runs end to
end with ``--device cuda`` in a fresh cache folder, and its wall time is recorded. The rows go
to BENCHMARKS.md (section ``gpu``) and to a JSON file.

Inputs: seeded synthetic sentences (texts) and seeded synthetic PNG images (images), so the
script needs no data set; only the demo needs the emoji data (``$BACKRETRIEVAL_EMOJI_DIR``, or
``../shared/data/npm``). Models are the pip packages already installed: no network.

With ``--device cuda`` and no usable CUDA GPU (none present, or torch built for the CPU only and
no ONNX Runtime CUDA provider) it prints ``no CUDA device: nothing measured`` with the reason
and exits with status 2. ``--device cpu`` runs the same comparison CPU against CPU (a check of
the script itself: every difference is 0); it never writes BENCHMARKS.md.

    python bench/bench_gpu.py                    # every model, full sizes, the demo; ~8 min budget
    python bench/bench_gpu.py --quick            # fewer items, the torch backend only, a small demo
    python bench/bench_gpu.py --device cpu --quick --no-demo --no-write   # the dry path
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]

#: Largest ``max |device - cpu| / max |cpu|`` accepted, per kind of model. Float32 on both sides;
#: on a GPU, cuBLAS/cuDNN sum in other orders, and PyTorch lets cuDNN run convolutions in TF32
#: (10-bit mantissa) by default, hence the wider bound for the CNNs.
TOLERANCE = {"text": 1e-3, "image": 1e-2}

#: Items encoded per model and side: (full, quick).
SIZES = {"text": (2000, 128), "image": (500, 48)}

DEMO = ["--dataset", "emoji-cldr", "--pairs", "en-de,de-en,en-ja", "--models", "use-m,e5-small,minilm-en,tfidf-char,random",
        "--image-model", "efficientnet-lite0", "--n", "1500", "--seeds", "3", "--k", "10"]
DEMO_QUICK = ["--dataset", "emoji-cldr", "--pairs", "en-de", "--models", "use-m,e5-small,minilm-en,tfidf-char,random",
              "--image-model", "efficientnet-lite0", "--n", "500", "--seeds", "1", "--k", "10"]

_WORDS = ("the a small red green blue house tree river city night morning cat dog bird music happy sad "
          "open close run walk water fire light dark old new face hand heart star moon sun rain snow "
          "book letter phone car train road mountain sea flower food drink coffee tea bread apple "
          "Haus Baum Fluss Stadt Nacht Katze Hund Vogel Herz Stern Mond Sonne Regen Schnee "
          "家 木 川 町 夜 猫 犬 鳥 心 星 月 太陽 雨 雪").split()


class NoDevice(RuntimeError):
    """The device asked for is not usable here (the message says why)."""


def device_check(device: str) -> list[str]:
    """The backends usable on ``device`` (``torch``, ``onnxruntime``); :class:`NoDevice` naming why
    there are none for ``cuda``."""
    from backretrieval.encoders import devices as runtime

    if device == "cpu":
        return ["torch"] + (["onnxruntime"] if runtime.ort_installed() and runtime.onnx_installed() else [])
    if device != "cuda":
        raise NoDevice(f"unknown device {device!r} (cpu or cuda)")
    got = []
    if runtime.torch_cuda_available():
        got.append("torch")
    if runtime.ort_cuda_available() and runtime.onnx_installed():
        got.append("onnxruntime")
    if not got:
        import torch

        try:
            import onnxruntime as ort

            providers = ort.get_available_providers()
        except ImportError:
            providers = "not installed"
        gpus = Path("/proc/driver/nvidia/gpus")
        driver = sorted(p.name for p in gpus.iterdir()) if gpus.is_dir() else []
        raise NoDevice(f"torch {torch.__version__} sees no CUDA GPU (built for CUDA {torch.version.cuda}); "
                       f"onnxruntime providers: {providers}; NVIDIA driver GPUs: {driver or 'none'}")
    return got


def texts(n: int, seed: int = 0) -> list[str]:
    """``n`` seeded sentences of 3-30 words (a few languages mixed)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(_WORDS, size=int(rng.integers(3, 31)))) for _ in range(n)]


def images(n: int, folder: Path, seed: int = 0) -> list[str]:
    """``n`` seeded 256 x 256 RGB PNGs (smooth colour fields plus noise) written to ``folder``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[0:256, 0:256] / 255.0
    out = []
    for i in range(n):
        a = rng.uniform(-1, 1, size=(3, 3))
        field = np.stack([a[c, 0] * xx + a[c, 1] * yy + a[c, 2] * xx * yy for c in range(3)], axis=-1)
        px = np.clip(127.5 + 100 * field + rng.normal(0, 20, size=field.shape), 0, 255).astype(np.uint8)
        path = folder / f"img{i:05d}.png"
        Image.fromarray(px).save(path)
        out.append(str(path))
    return out


def candidates(quick: bool, folder: Path, only: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """``(models, notes)``: every registered model (or those named in ``only``) that takes
    ``device`` (``kind``, ``name``, the spec's argument and options, the backends to try);
    ``notes`` says what was left out and why."""
    from backretrieval.core import BackretrievalError
    from backretrieval.encoders.registry import build_encoder, list_image_encoders, list_text_encoders

    out, notes = [], []
    for info in list(list_text_encoders()) + list(list_image_encoders()):
        if only and info.name not in only:
            continue
        arg, options = None, {}
        if info.takes_arg:
            if quick or info.example is None:
                notes.append(f"{info.name}: takes a path{' (left out by --quick)' if quick else ' and has no example'}")
                continue
            try:
                ex = info.example(folder / info.name.replace(":", "_"))
            except Exception as e:  # an example that cannot be built here (a missing extra)
                notes.append(f"{info.name}: example not built ({type(e).__name__}: {e})")
                continue
            arg, options = ex.arg, dict(ex.options or {})
        options.pop("device", None)
        try:
            build_encoder(info, arg, **options, device="cpu")
        except BackretrievalError as e:
            if "unknown option" in str(e) and "device" in str(e):
                continue  # runs on the CPU only: nothing to compare
            notes.append(f"{info.name}: not built ({e})")
            continue
        except Exception as e:
            notes.append(f"{info.name}: not built ({type(e).__name__}: {e})")
            continue
        takes_backend = "backend" in options or _takes(info, arg, options, "backend")
        out.append({"kind": info.kind, "name": info.name, "arg": arg, "options": options, "backends": ["torch", "onnxruntime"] if takes_backend else [None]})
    return out, notes


def _takes(info, arg, options: dict, option: str) -> bool:
    from backretrieval.core import BackretrievalError
    from backretrieval.encoders.registry import build_encoder

    try:
        build_encoder(info, arg, **options, **{option: "torch"}, device="cpu")
    except BackretrievalError:
        return False
    return True


def encode(model: dict, backend: str | None, device: str, items: list[str]) -> tuple[np.ndarray, float]:
    """The vectors of ``items`` (float32) and items per second (one timed pass after a warm-up
    batch of 8 that loads the model on ``device``)."""
    from backretrieval.encoders.registry import build_encoder, list_image_encoders, list_text_encoders

    table = list_text_encoders() if model["kind"] == "text" else list_image_encoders()
    info = next(i for i in table if i.name == model["name"])
    opts = dict(model["options"], device=device)
    if backend is not None:
        opts["backend"] = backend
    enc = build_encoder(info, model["arg"], **opts)
    run = (lambda xs: enc.encode(xs, "en")) if model["kind"] == "text" else enc.encode_images
    run(items[:8])
    if device == "cuda":
        _sync()
    t0 = time.perf_counter()
    vecs = np.asarray(run(items), dtype=np.float32)
    if device == "cuda":
        _sync()
    return vecs, len(items) / (time.perf_counter() - t0)


def _sync() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:  # pragma: no cover
        pass


def difference(cpu: np.ndarray, dev: np.ndarray) -> dict:
    """``max_abs``: ``max |dev - cpu|``; ``rel``: that over ``max |cpu|``; ``min_cos``: the lowest
    cosine between a CPU row and its device row (1 for two zero rows)."""
    if cpu.shape != dev.shape:
        raise ValueError(f"vector shapes differ: cpu {cpu.shape}, device {dev.shape}")
    a, b = cpu.astype(np.float64), dev.astype(np.float64)
    max_abs = float(np.abs(a - b).max()) if a.size else 0.0
    scale = float(np.abs(a).max()) if a.size else 0.0
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    both = (na > 0) & (nb > 0)
    cos = np.ones(a.shape[0])
    cos[both] = np.einsum("ij,ij->i", a[both], b[both]) / (na[both] * nb[both])
    cos[(na > 0) != (nb > 0)] = 0.0
    return {"max_abs": max_abs, "rel": max_abs / scale if scale > 0 else max_abs, "min_cos": float(cos.min()) if cos.size else 1.0}


def measure(device: str, quick: bool, budget_s: float, only: list[str] | None, t_start: float,
            items: int | None = None) -> tuple[list[dict], list[str]]:
    """One row per model and backend (or a row saying why it was skipped), and the notes;
    ``items`` overrides :data:`SIZES`."""
    backends = device_check(device)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        models, notes = candidates(quick, Path(tmp), only)
        size = {k: items or v[quick] for k, v in SIZES.items()}
        inputs = {"text": texts(size["text"]), "image": images(size["image"], Path(tmp) / "images")}
        for model in models:
            for backend in model["backends"]:
                if quick and backend == "onnxruntime":
                    continue
                row = {"model": model["name"], "kind": model["kind"], "backend": backend or "torch",
                       "items": len(inputs[model["kind"]]), "tolerance": TOLERANCE[model["kind"]]}
                rows.append(row)
                if (backend or "torch") not in backends:
                    row["skipped"] = f"{backend or 'torch'} cannot use {device} here"
                    continue
                if time.perf_counter() - t_start > budget_s:
                    row["skipped"] = "time budget spent"
                    continue
                try:
                    cpu, cpu_rate = encode(model, backend, "cpu", inputs[model["kind"]])
                    dev, dev_rate = encode(model, backend, device, inputs[model["kind"]])
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"[:300]
                    continue
                row.update(difference(cpu, dev), dim=int(cpu.shape[1]), cpu_items_per_s=round(cpu_rate, 1),
                           device_items_per_s=round(dev_rate, 1))
                row["within_tolerance"] = row["rel"] <= row["tolerance"]
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows, notes


def demo(device: str, quick: bool, seconds: float) -> dict:
    """The README demo with ``--device``, in a fresh cache folder: wall time and exit status."""
    args = DEMO_QUICK if quick else DEMO
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    shared = ROOT.parent / "shared" / "data" / "npm"
    if not env.get("BACKRETRIEVAL_EMOJI_DIR") and shared.is_dir():
        env["BACKRETRIEVAL_EMOJI_DIR"] = str(shared)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-demo-") as tmp:
        env["BACKRETRIEVAL_CACHE"] = str(Path(tmp) / "cache")
        cmd = [sys.executable, "-m", "backretrieval.cli", "evaluate", *args, "--out", str(Path(tmp) / "out"), "--device", device, "--quiet"]
        out = {"command": "backretrieval evaluate " + " ".join(args) + f" --out OUT --device {device}", "device": device}
        t0 = time.perf_counter()
        try:
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=max(1.0, seconds))
        except subprocess.TimeoutExpired:
            out.update(wall_s=round(time.perf_counter() - t0, 1), status="stopped at the time budget")
            return out
        out["wall_s"] = round(time.perf_counter() - t0, 1)
        out["status"] = "ok" if res.returncode == 0 else f"exit {res.returncode}: {res.stderr.strip()[-300:]}"
        records = Path(tmp) / "out" / "results.jsonl"
        if res.returncode == 0 and records.exists():
            out["records"] = sum(1 for line in records.read_text().splitlines() if line.strip())
    return out


def _gpu_name() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA {torch.version.cuda})"
    except ImportError:  # pragma: no cover
        pass
    return "unknown GPU"


def section(rows: list[dict], notes: list[str], demo_row: dict | None, cmdline: str) -> str:
    from _md import machine

    lines = ["## GPU: every model that takes `--device`, on CUDA against the CPU", "",
             f"Command: `{cmdline}`. Machine: {machine()}; GPU: {_gpu_name()}.",
             "Inputs: seeded synthetic sentences and 256 x 256 PNGs (`bench/bench_gpu.py`). rel diff = max |cuda - cpu| / "
             "max |cpu| over all vectors; items/s from one timed pass after a warm-up batch (single runs).", "",
             "| model | backend | items | dim | rel diff | tolerance | within | lowest cosine | CPU items/s | CUDA items/s |",
             "|---|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if "rel" in r:
            lines.append(f"| {r['model']} | {r['backend']} | {r['items']:,} | {r['dim']} | {r['rel']:.2e} | {r['tolerance']:g} | "
                         f"{'yes' if r['within_tolerance'] else '**no**'} | {r['min_cos']:.6f} | {r['cpu_items_per_s']:,.1f} | "
                         f"{r['device_items_per_s']:,.1f} |")
        else:
            lines.append(f"| {r['model']} | {r['backend']} | {r['items']:,} | - | - | {r['tolerance']:g} | - | - | - | "
                         f"{r.get('skipped') or r.get('error')} |")
    if demo_row is not None:
        lines += ["", f"README demo on the GPU, fresh cache folder: `{demo_row['command']}`: {demo_row.get('wall_s', '-')} s wall, "
                      f"{demo_row['status']}" + (f", {demo_row['records']} records" if "records" in demo_row else "") + "."]
    if notes:
        lines += ["", "Not measured: " + "; ".join(notes) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="Device compared with the CPU (cpu: a dry run of the script).")
    ap.add_argument("--quick", action="store_true", help="Fewer items, the torch backend only, no path-taking models, a one-pair demo.")
    ap.add_argument("--budget-s", type=float, default=480.0, help="Stop starting new measurements after this many seconds (default 480).")
    ap.add_argument("--models", help="Comma-separated model names to measure (default: every one that takes --device).")
    ap.add_argument("--items", type=int, help="Items encoded per model and side (default: 2,000 texts / 500 images; "
                    "--quick: 128 / 48).")
    ap.add_argument("--no-demo", action="store_true", help="Skip the README demo.")
    ap.add_argument("--json", default=str(ROOT / "out" / "bench_gpu.json"), help="Where the JSON rows go (default out/bench_gpu.json).")
    ap.add_argument("--no-write", action="store_true", help="Leave BENCHMARKS.md alone (always so with --device cpu).")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        rows, notes = measure(args.device, args.quick, args.budget_s, args.models.split(",") if args.models else None, t0,
                             args.items)
    except NoDevice as e:
        print(f"no CUDA device: nothing measured ({e})", file=sys.stderr)
        return 2
    demo_row = None
    if not args.no_demo:
        left = args.budget_s - (time.perf_counter() - t0)
        demo_row = demo(args.device, args.quick, left) if left > 30 else {"command": "-", "device": args.device, "status": "skipped: time budget spent"}
    cmdline = "python bench/bench_gpu.py" + (" --quick" if args.quick else "") + (f" --models {args.models}" if args.models else "")
    result = {"device": args.device, "quick": args.quick, "rows": rows, "notes": notes, "demo": demo_row,
              "seconds": round(time.perf_counter() - t0, 1)}
    from backretrieval.core import atomic_write_text

    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.json), json.dumps(result, indent=1) + "\n")
    text = section(rows, notes, demo_row, cmdline)
    if args.no_write or args.device != "cuda":
        print(text)
    else:
        from _md import write_section

        write_section("gpu", text)
    bad = [r["model"] for r in rows if r.get("within_tolerance") is False or "error" in r]
    if bad:
        print(f"outside tolerance or failed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
