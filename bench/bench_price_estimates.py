"""The dry run's estimate against what happened: time per model and, for embedding APIs, tokens.

Real data: emoji-cldr (``$BACKRETRIEVAL_EMOJI_DIR`` or the shared data). With an empty embedding
cache (so an empty price book) in a temporary folder:

1. a first run (``--calibrate-pairs``, default en-de) encodes every model's texts and records
   each model's throughput on this machine;
2. the dry run of a second run on other pairs (``--pairs``, default de-ja,ja-en: new texts, some
   of them cached) estimates, per model, the texts to encode, the time and, for the APIs, the
   tokens (:func:`backretrieval.analysis.evaluate.estimate`);
3. the second run encodes them; its ``run.json`` says the encoding seconds per model and the
   tokens the servers reported.

The APIs are the project's ``EmbeddingServer`` on 127.0.0.1: ``openai:text-embedding-3-small``
served by use-m with usage counted by tiktoken's cl100k_base (as OpenAI counts; the client
knows that tokenizer), and ``openai:minilm`` served by minilm-en with usage counted by the
model's own WordPiece tokenizer (as TEI or vLLM count; the client does not know it and
approximates 1 token per 4 bytes of UTF-8).

    python bench/bench_price_estimates.py --n 200 --write
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
SECTION = "price-estimates"


class CountedLikeOpenAI:
    """A text model whose token count is tiktoken's cl100k_base (what OpenAI's usage reports)."""

    def __init__(self, model):
        from backretrieval.encoders.text.openai_api import openai_encoding

        self.model, (self.enc, self.how) = model, openai_encoding("text-embedding-3-small")
        if self.enc is None:
            raise SystemExit(f"tiktoken's cl100k_base is needed: {self.how}")

    def encode(self, texts, lang, **kw):
        return self.model.encode(texts, lang, **kw)

    def count_tokens(self, texts):
        return sum(len(self.enc.encode(t, disallowed_special=())) for t in texts)


def run(args) -> list[dict]:
    from backretrieval.analysis import EvalConfig, run_grid
    from backretrieval.analysis.evaluate import estimate
    from backretrieval.encoders.registry import get_text_encoder
    from backretrieval.encoders.text.embedding_server import EmbeddingServer

    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddingServer(CountedLikeOpenAI(get_text_encoder("use-m"))) as oai, \
            EmbeddingServer(get_text_encoder("minilm-en")) as tei:
        os.environ["BACKRETRIEVAL_CACHE"] = str(Path(tmp) / "cache")
        os.environ["OPENAI_API_KEY"] = "sk-bench"
        models = {"use-m": "use-m", "minilm-en": "minilm-en", "tfidf-char": "tfidf-char",
                  "text-embedding-3-small": f"openai:text-embedding-3-small?base_url={oai.url}",
                  "openai:minilm": f"openai:minilm?base_url={tei.url}"}

        def cfg(pairs):
            return EvalConfig(dataset="emoji-cldr", pairs=pairs, models=models, image_model="color-hist", n=args.n,
                              seeds=list(range(args.seeds)))

        run_grid(cfg(args.calibrate_pairs), Path(tmp) / "first", progress=False)
        est = estimate(cfg(args.pairs))
        run_grid(cfg(args.pairs), Path(tmp) / "second", progress=False)
        enc = json.loads((Path(tmp) / "second" / "run.json").read_text())["encoding"]
        for name in models:
            e, a = est[name], enc[name]
            rows.append({"model": name, "texts_est": e["texts"], "texts": a["encoded"], "seconds_est": e["seconds"],
                         "seconds": a["seconds"], "cpu_est": e.get("cpu_seconds"), "cpu": a.get("cpu_seconds"),
                         "tokens_est": e.get("tokens"), "tokens": a.get("tokens_used"),
                         "tokenizer": e.get("tokenizer"), "speed": e["speed_note"]})
    return rows


def _pct(est, actual) -> str:
    if est is None or not actual:
        return "-"
    return f"{100 * (est - actual) / actual:+.0f}%"


def table(rows: list[dict], args, load: str) -> str:
    from _md import machine

    head = ("| model | texts est. / encoded | time est. s | actual s | time error | CPU s est. | actual CPU s | "
            "CPU error | tokens est. | reported | token error | counted by |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    body = [f"| {r['model']} | {r['texts_est']:,} / {r['texts']:,} | "
            f"{'-' if r['seconds_est'] is None else format(r['seconds_est'], '.1f')} | {r['seconds']:.1f} | "
            f"{_pct(r['seconds_est'], r['seconds'])} | {'-' if r['cpu_est'] is None else format(r['cpu_est'], '.1f')} | "
            f"{'-' if r['cpu'] is None else format(r['cpu'], '.1f')} | {_pct(r['cpu_est'], r['cpu'])} | "
            f"{'-' if r['tokens_est'] is None else format(r['tokens_est'], ',')} | "
            f"{'-' if r['tokens'] is None else format(r['tokens'], ',')} | {_pct(r['tokens_est'], r['tokens'])} | "
            f"{r['tokenizer'] or '-'} |" for r in rows]
    cmd = " ".join(["python bench/bench_price_estimates.py", *sys.argv[1:]])
    return "\n".join([
        "## The dry run's estimate against what happened", "",
        f"Command: `{cmd}`. emoji-cldr, N = {args.n}, {args.seeds} seed(s), image model color-hist. A first run on "
        f"{','.join('-'.join(p) for p in args.calibrate_pairs)} records each model's throughput in an empty price book; "
        f"the dry run of a second run on {','.join('-'.join(p) for p in args.pairs)} estimates each model's texts to "
        "encode (after the cache), its time (start-up plus texts at the recorded rate of the nearest length class) "
        "and, for the APIs, its tokens; the second run then says what it took (run.json: encoding seconds, the "
        "tokens the servers reported; the CPU seconds of its calls to the model, the steadier measure on a shared "
        "machine, against the estimate at the recorded items per CPU-second). Actual seconds are the run's whole "
        "encoding of the model: cache reads and, for tfidf-char, fitting included. The APIs are the project's EmbeddingServer on 127.0.0.1: "
        "text-embedding-3-small (use-m behind it, usage counted with tiktoken cl100k_base as OpenAI counts) and "
        "openai:minilm (minilm-en behind it, usage counted by its WordPiece tokenizer as TEI and vLLM count).", "",
        head, *body, "",
        f"Machine: {machine()}; load average during the run {load}.",
    ])


def main() -> None:
    from backretrieval.analysis import parse_pairs

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--calibrate-pairs", default="en-de")
    ap.add_argument("--pairs", default="de-ja,ja-en")
    ap.add_argument("--write", action="store_true", help="write the section of BENCHMARKS.md")
    args = ap.parse_args()
    args.calibrate_pairs, args.pairs = parse_pairs(args.calibrate_pairs), parse_pairs(args.pairs)
    before = os.getloadavg()[0]
    rows = run(args)
    load = f"{before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (1-minute)"
    md = table(rows, args, load)
    print(md)
    if args.write:
        from _md import write_section

        write_section(SECTION, md)


if __name__ == "__main__":
    main()
