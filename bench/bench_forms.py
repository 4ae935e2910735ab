"""Serving forms and ONNX Runtime: what each costs and what it gains, on this machine, same texts, same run.

Part 1, encoding. ``minilm-en`` (all-MiniLM-L6-v2) through sentence-transformers' own torch path
against the ``runtime=onnx`` and ``runtime=onnx-int8`` paths (:mod:`backretrieval.encoders.text.st_onnx`)
on three kinds of real text: emoji names (emoji-cldr), product titles (the tutorial's shop
catalogue, ``backretrieval make-catalogue``: CLDR names and keywords of the emoji one could sell)
and long descriptions (Debian package descriptions, DDTP, English, over 300 characters). Each
runtime encodes each set with one engine (``threads=1``: one core, so texts per CPU-second is the
figure a team can scale by its cores) straight through the model (no embedding cache), the
runtimes interleaved round by round (bench/_timing.py). Reported per set and runtime: texts per
second (wall) and per CPU-second (the process's user + system time), the ratio to torch per
CPU-second, and the minimum and mean cosine of each text's vector to torch's fp32 vector. A
fourth row, ``onnx-int8 batched``, runs the same int8 graph on whole batches as a batching server
would: faster, but then a text's vector depends on the other texts of its batch, which is why
the project runs int8 one text per call (its cosine to its one-text-per-call vector is reported).

Part 2, retrieval quality of each form and runtime on emoji-cldr (en->de, N texts per side, one
seed, image model efficientnet-lite0) through ``br.evaluate`` (the embedding cache of the user is
used): minilm-en and its ``@int8`` / ``@binary`` forms and ONNX runtimes, and use-m with its forms
(``@int8``, ``@binary``, ``@trunc=256@int8``): bytes per item, XLR@10, BkR@10, CORR.

    python bench/bench_forms.py                 # print the section
    python bench/bench_forms.py --write         # and write it into BENCHMARKS.md (its own section, at the end)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _md import machine, write_section  # noqa: E402
from _timing import describe, interleaved, ratio_spread, spread  # noqa: E402

RUNTIMES = ("torch", "onnx", "onnx-int8")
SECTION = "forms"


def text_sets(n_short: int, n_long: int) -> dict[str, list[str]]:
    """The three kinds of real text (see the module doc)."""
    import csv

    from backretrieval.data import load_dataset
    from backretrieval.data.shop import write_catalogue

    names = list(load_dataset("emoji-cldr", langs=["en"])["en"].texts[:n_short])
    with tempfile.TemporaryDirectory() as tmp:
        write_catalogue(tmp, langs=("en",))
        with open(Path(tmp) / "en.csv", encoding="utf-8", newline="") as fh:
            titles = [row["text"] for row in csv.DictReader(fh)][:n_short]
    docs = [t for t in load_dataset("ddtp", langs=["en"], max_docs=5 * n_long)["en"].texts if len(t) > 300][:n_long]
    return {"emoji names": names, "product titles": titles, "long descriptions": docs}


def _run(fn):
    """A variant returning (wall seconds, CPU seconds, vectors) of one call of ``fn``."""
    def call():
        w, c = time.perf_counter(), time.process_time()
        v = fn()
        return time.perf_counter() - w, time.process_time() - c, v
    return call


def encoding_rows(sets: dict[str, list[str]], runs: int) -> list[dict]:
    """Part 1: one row per (text set, runtime)."""
    from backretrieval.encoders.registry import get_text_encoder

    encs = {rt: get_text_encoder(f"minilm-en?runtime={rt}", threads=1) for rt in RUNTIMES}
    for enc in encs.values():
        enc.encode(["warm-up"], "en")  # load the model and (first run) export the graphs
    batched = _batched_int8(encs["onnx-int8"])
    rows = []
    for kind, texts in sets.items():
        variants = {rt: _run(lambda e=enc: e.encode(texts, "en")) for rt, enc in encs.items()}
        variants["onnx-int8 batched"] = _run(lambda: batched(texts))
        res = interleaved(variants, runs=runs)
        ref = res["torch"][0][2]
        for name, r in res.items():
            wall, cpu, vecs = [x[0] for x in r], [x[1] for x in r], r[0][2]
            cos = np.sum(vecs * ref, axis=1)
            row = {"kind": kind, "runtime": name, "n": len(texts), "chars": float(np.mean([len(t) for t in texts])),
                   "tps": spread([len(texts) / s for s in wall]), "tpcpu": spread([len(texts) / s for s in cpu]),
                   "ratio": ratio_spread([len(texts) / s for s in cpu], [len(texts) / x[1] for x in res["torch"]]),
                   "cos_min": float(cos.min()), "cos_mean": float(cos.mean())}
            if name == "onnx-int8 batched":
                row["vs_per_text"] = float(np.min(np.sum(vecs * res["onnx-int8"][0][2], axis=1)))
            rows.append(row)
            print(f"{kind:18s} {name:18s} {row['tps'].fmt('.0f')} texts/s, {row['tpcpu'].fmt('.0f')} per CPU-s, "
                  f"cos min {row['cos_min']:.5f}", file=sys.stderr)
    return rows


def _batched_int8(enc):
    """The int8 graph run on whole batches of the encoder's batch size (a batching server's way)."""
    runner = enc.onnx_runner

    def encode(texts):
        cut, _ = enc.truncate(texts)
        order = np.argsort([len(t) for t in cut], kind="stable")  # length-sorted batches, as the encoder's
        out = np.empty((len(cut), enc.dim), dtype=np.float32)
        for s in range(0, len(cut), enc.batch_size):
            rows = order[s : s + enc.batch_size]
            out[rows] = runner.encode([cut[i] for i in rows], True, per_text=False)
        return out

    return encode


def quality_rows(n: int) -> list[dict]:
    """Part 2: one row per model of the grid."""
    import json

    import backretrieval as br

    models = ["minilm-en", "minilm-en@int8", "minilm-en@binary", "minilm-en?runtime=onnx",
              "minilm-en?runtime=onnx-int8", "use-m", "use-m@int8", "use-m@binary", "use-m@trunc=256@int8"]
    cfg = br.EvalConfig(dataset="emoji-cldr", pairs=[("en", "de")], models=models, n=n, seeds=[0],
                        image_model="efficientnet-lite0")
    with tempfile.TemporaryDirectory() as out:
        res = br.evaluate(cfg, out, progress=False)
        encoding = json.loads((Path(out) / "run.json").read_text())["encoding"]
    rows = []
    for r in res.records:
        rows.append({"model": r["model"], "sim": r["sim"], "bytes": encoding[r["model"]]["bytes_per_item"],
                     "xlr@10": r["xlr@10"], "bkr@10": r["bkr@10"], "corr": r["corr"]})
    return rows


def render(enc_rows: list[dict], q_rows: list[dict], runs: int, n: int, elapsed: float) -> str:
    lines = [
        "## Serving forms and ONNX Runtime (bench/bench_forms.py)",
        "",
        f"Machine: {machine()}. Shared with other work while it ran (load varies): compare rows of one table, "
        f"not across sections. Whole run {elapsed / 60:.1f} min.",
        "",
        "**Encoding: minilm-en through sentence-transformers' torch path and through ONNX Runtime**, the same texts "
        "in the same run, one engine (`threads=1`), no embedding cache. " + describe(runs) + " Cosines: each "
        "text's vector against torch's fp32 vector. `onnx-int8` runs one text per call (a text's vector is then "
        "the text's alone: `runtime=onnx-int8`); `onnx-int8 batched` runs the same graph on batches of 64, as a "
        "batching server would, whose vectors depend on their batch (last column: the lowest cosine between a "
        "text's batched and one-per-call vectors).",
        "",
        "| texts | runtime | texts/s | texts per CPU-s | vs torch (per CPU-s) | cosine to torch min / mean | batched vs per text |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in enc_rows:
        kind = f"{r['kind']} ({r['n']}, {r['chars']:.0f} chars)"
        extra = f"{r['vs_per_text']:.4f}" if "vs_per_text" in r else ""
        lines.append(f"| {kind} | `{r['runtime']}` | {r['tps'].fmt('.0f')} | {r['tpcpu'].fmt('.0f')} | "
                     f"{r['ratio'].fmt('.2f')}x | {r['cos_min']:.5f} / {r['cos_mean']:.5f} | {extra} |")
    lines += ["", "Reading: " + reading(enc_rows)]
    lines += [
        "",
        f"**Retrieval quality of each form and runtime**: emoji-cldr en->de, N = {n}, seed 0, image model "
        "efficientnet-lite0, `br.evaluate` (forms ranked as a vector store ranks them: int8 by the integer dot "
        "product of the codes, binary by the Hamming distance; `sim` says which). minilm-en is the English-only "
        "control (its German is word pieces); use-m is multilingual. One seed: at this N a difference of a few "
        "hundredths in XLR@10 or BkR@10 is within the sampling spread (`compare` gives intervals and tests). CORR "
        "compares distances across queries: the dot product of int8 codes with per-dimension offsets adds a "
        "per-item term, large where a dimension's range is far from symmetric about 0 (minilm-en), small where "
        "it is nearly symmetric (use-m).",
        "",
        "| model | bytes per item | sim | XLR@10 | BkR@10 | CORR |",
        "|---|---|---|---|---|---|",
    ]
    for r in q_rows:
        lines.append(f"| `{r['model']}` | {r['bytes']:,} | {r['sim']} | {r['xlr@10']:.3f} | {r['bkr@10']:.3f} | "
                     f"{r['corr']:.3f} |")
    return "\n".join(lines) + "\n"


def reading(rows: list[dict]) -> str:
    """One sentence per text set: what each ONNX runtime gains per CPU-second against torch."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in rows):
        by = {r["runtime"]: r for r in rows if r["kind"] == kind}
        out.append(f"{kind}: onnx {by['onnx']['ratio'].median:.2f}x, onnx-int8 {by['onnx-int8']['ratio'].median:.2f}x "
                   f"(batched {by['onnx-int8 batched']['ratio'].median:.2f}x) the texts per CPU-second of torch")
    return ("; ".join(out) + ". fp32 ONNX Runtime gains little over torch's one-thread engines; int8 weights gain "
            "most where texts are long, and there one text per call also avoids the padded batches of 64 long "
            "texts that slow both batched paths; on short texts the per-call overhead makes one text per call "
            "slower than a batch.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-short", type=int, default=500, help="emoji names and product titles per set")
    ap.add_argument("--n-long", type=int, default=80, help="long descriptions")
    ap.add_argument("--n", type=int, default=500, help="N of the retrieval-quality grid")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per runtime")
    ap.add_argument("--write", action="store_true", help="write the section into BENCHMARKS.md")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    enc_rows = encoding_rows(text_sets(args.n_short, args.n_long), args.runs)
    q_rows = quality_rows(args.n)
    body = render(enc_rows, q_rows, args.runs, args.n, time.perf_counter() - t0)
    print(body)
    if args.write:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
