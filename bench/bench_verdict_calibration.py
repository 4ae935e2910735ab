"""The verdict's error rates, measured where the truth is known: how often it ships a model that is
not the best, how often it ships the best (power, against the power note's prediction), how often
it calls equal models equivalent, and how often it says "equivalent" when the true gap exceeds
the margin.

Both parts run the code of ``backretrieval compare``: the planted part calls
:func:`backretrieval.analysis.decision.decide_outcomes`, which ``compare`` runs on every pair
(``tests/analysis/test_verdict.py`` holds the two to the same answers), with ``all_pairs=False``
(only the tests the decision needs); the real part runs :func:`backretrieval.compare` itself.

* **Planted gaps** (``--planted``). k = 2..6 models answer N queries (one seed); the best hits
  with probability p0, every other model with p0 - gap (gap 0, 0.01, 0.02, 0.05, 0.1): the
  least favourable layout for power (k - 1 comparisons at the same gap) and for false
  equivalence. Hits are correlated as real models' hits are: a shared per-query difficulty (a
  latent normal factor, correlation rho) makes query q a hit for model j when
  ``sqrt(rho) u_q + sqrt(1 - rho) e_qj < Phi^-1(p_j)``. p0 (BkR@K of the best real model) and rho
  (the median latent correlation of the real models' per-query hits) are estimated per N and K
  from the real runs below (``--params``), or taken from :data:`PARAMS` (measured so, on
  emoji-cldr en-de and en-ja). Chance is K/N, as on real data. Two identical models (every
  paired difference 0) are planted too. Each cell repeats ``--reps`` times; rates come with
  their Monte-Carlo standard error.
* **Real data, subsampled** (``--real OUT``). emoji-cldr, en-de and en-ja, the demo's packaged
  models and graded variants (and ``minilm-en@trunc=384``, the same vectors as ``minilm-en``
  under another name), image model efficientnet-lite0: the verdict at N = 1,500 over 5 seeds is
  the reference; at N = 50..800, each seed's own verdict (one seed each) is set against it.

    OMP_NUM_THREADS=1 nice -n 10 python bench/bench_verdict_calibration.py --real /tmp/verdict-real --seeds 40
    OMP_NUM_THREADS=1 nice -n 10 python bench/bench_verdict_calibration.py --planted --reps 1000 --n-boot 100 \\
        --out /tmp/verdict-planted.jsonl     # PARAMS, or --params /tmp/verdict-real/params.json
    python bench/bench_verdict_calibration.py --write --planted-json /tmp/verdict-planted.jsonl \\
        --real-json /tmp/verdict-real/real.json
    python bench/bench_verdict_calibration.py --examples /tmp/verdict-examples   # the four answers in the docs
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _verdict_tables import ALPHA, GAPS, MARGIN, MODELS_K, docs_section, predictions, section, tables  # noqa: E402

KS = (1, 10)
NS = (50, 100, 200, 400, 800, 1500)
REAL_MODELS = ("use-m", "minilm-en", "tfidf-char", "random", "use-m@noise=0.5", "use-m@noise=1", "use-m@noise=2",
               "use-m@trunc=16", "minilm-en@noise=1", "minilm-en@trunc=384")
REAL_PAIRS = (("en", "de"), ("en", "ja"))
SECTION = "verdict-calibration"
# p0 (BkR@K of the best model) and rho (median latent correlation of the models' hits) per (K, N), measured by --real
# on emoji-cldr en-de and en-ja (40 seeds per N, 5 at N = 1,500; params.json, the mean of the two pairs)
PARAMS: dict[str, dict[str, float]] = {f"{K}/{n}": {"p0": p0, "rho": rho} for K, n, p0, rho in (
    (1, 50, 0.213, 0.64), (1, 100, 0.199, 0.67), (1, 200, 0.210, 0.67), (1, 400, 0.202, 0.66),
    (1, 800, 0.185, 0.62), (1, 1500, 0.152, 0.59), (10, 50, 0.558, 0.54), (10, 100, 0.531, 0.55),
    (10, 200, 0.521, 0.51), (10, 400, 0.518, 0.44), (10, 800, 0.516, 0.43), (10, 1500, 0.502, 0.45),
)}


def planted(rng: np.random.Generator, k: int, gap: float, n: int, p0: float, rho: float,
            identical: bool = False) -> dict[str, np.ndarray]:
    """One draw of k models' 0/1 outcomes on n queries: model m0 at p0, the others at p0 - gap,
    correlated through a shared per-query factor (or, ``identical``, every model m0's outcomes)."""
    from scipy.special import ndtri

    u = rng.standard_normal(n)
    e = rng.standard_normal((k, n))
    rates = np.r_[p0, np.full(k - 1, p0 - gap)]
    hits = (math.sqrt(rho) * u + math.sqrt(1 - rho) * e) < ndtri(np.clip(rates, 1e-9, 1 - 1e-9))[:, None]
    if identical:
        hits[1:] = hits[0]
    return {f"m{j}": hits[j].astype(np.float64) for j in range(k)}


def true_sd(gap: float, p0: float, rho: float) -> float:
    """The standard deviation of one query's difference between the best and another model."""
    from scipy.special import ndtri
    from scipy.stats import multivariate_normal

    a, b = ndtri(p0), ndtri(p0 - gap)
    both = float(multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf([a, b]))
    var = p0 + (p0 - gap) - 2 * both - gap ** 2
    return math.sqrt(max(var, 0.0))


def run_cell(k: int, gap: float, n: int, K: int, p0: float, rho: float, reps: int, seed: int, n_boot: int,
             identical: bool = False) -> dict:
    """The verdict's rates on one cell of the planted grid."""
    from backretrieval.analysis.decision import decide_outcomes

    rng = np.random.default_rng([seed, k, int(round(gap * 1000)), n, K, int(identical)])
    counts = dict(ship=0, ship_best=0, ship_other=0, equivalent=0, eq_far=0, at_chance=0, not_enough=0)
    sds = []
    for r in range(reps):
        d = decide_outcomes(planted(rng, k, gap, n, p0, rho, identical), margin=MARGIN, alpha=ALPHA, chance=K / n,
                            n_boot=n_boot, n_perm=1000, seed=r, all_pairs=False, smaller_k=K > 1)
        shipped = d.order[0] if d.status == "ship" else None
        counts["ship"] += shipped is not None
        counts["ship_best"] += shipped == "m0"
        counts["ship_other"] += shipped is not None and (shipped != "m0" or gap == 0)
        counts["equivalent"] += d.status == "equivalent"
        group = set(d.equivalent_to_best)
        counts["eq_far"] += "m0" in group and len(group) > 1  # the best and a model `gap` behind called equivalent
        counts["at_chance"] += d.status == "at chance"
        counts["not_enough"] += d.status == "not enough data"
        runner = d.tests[0]["se"] if d.tests else float("nan")
        sds.append(runner * math.sqrt(n))
    rates = {key: v / reps for key, v in counts.items()}
    sd = true_sd(gap, p0, rho)
    note_sd = float(np.nanmedian(sds))
    return {"k": k, "gap": gap, "n": n, "K": K, "p0": p0, "rho": rho, "reps": reps, "identical": identical, **rates,
            "sd_true": sd, "sd_note": note_sd,
            **predictions(gap, n, k, note_sd, sd)}


def planted_grid(params: dict, reps: int, seed: int, n_boot: int, ks=MODELS_K, gaps=GAPS, ns=NS, kk=KS,
                 progress: bool = True, out: Path | None = None) -> list[dict]:
    """Every cell of the planted grid (and the identical-models cells: k in 2 and 6); with
    ``out`` (a JSON-lines file) each cell is appended as it is finished, and the cells already
    there (same repetitions) are not run again."""
    rows = []
    cells = [(k, g, n, K, False) for K in kk for n in ns for k in ks for g in gaps]
    cells += [(k, 0.0, n, K, True) for K in kk for n in ns for k in (2, 6) if k in ks]
    done = {}
    if out is not None and out.exists():
        for line in out.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            done[(r["k"], r["gap"], r["n"], r["K"], r["identical"], r["reps"])] = r
    t0 = time.time()
    for i, (k, g, n, K, ident) in enumerate(cells):
        if (k, g, n, K, ident, reps) in done:
            rows.append(done[(k, g, n, K, ident, reps)])
            continue
        p = params[f"{K}/{n}"]
        rows.append(run_cell(k, g, n, K, p["p0"], p["rho"], reps, seed, n_boot, ident))
        if out is not None:
            with open(out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(rows[-1]) + "\n")
        if progress:
            print(f"[{i + 1}/{len(cells)}] k={k} gap={g} N={n} K={K}{' identical' if ident else ''}: ship {rows[-1]['ship']:.3f} "
                  f"equivalent {rows[-1]['equivalent']:.3f} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    return rows


def real_results(out: Path, seeds: int, progress: bool = False) -> dict:
    """The real grids (resumed from ``out``): N -> EvalResult."""
    import backretrieval as br

    plan = [(1500, list(range(5)))] + [(n, list(range(seeds))) for n in NS if n < 1500]
    results = {}
    for n, sd in plan:
        cfg = br.EvalConfig(dataset="emoji-cldr", pairs=list(REAL_PAIRS), models=list(REAL_MODELS), n=n, seeds=sd, k=10,
                            image_model="efficientnet-lite0")
        t0 = time.time()
        results[n] = br.evaluate(cfg, out / f"n{n}", progress=progress, log=lambda m: print(m, file=sys.stderr))
        print(f"N={n}: {len(results[n].records)} records ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    return results


def latent_rho(x: np.ndarray, y: np.ndarray) -> float | None:
    """The correlation of a latent normal pair thresholded into the two 0/1 series (tetrachoric)."""
    from scipy.optimize import brentq
    from scipy.special import ndtri
    from scipy.stats import multivariate_normal

    px, py, both = x.mean(), y.mean(), (x * y).mean()
    if min(px, py) <= 0.01 or max(px, py) >= 0.99:
        return None
    a, b = ndtri(px), ndtri(py)

    def gap(r: float) -> float:
        return float(multivariate_normal(mean=[0, 0], cov=[[1, r], [r, 1]]).cdf([a, b])) - both

    lo, hi = -0.95, 0.99
    if gap(lo) * gap(hi) > 0:
        return None
    return float(brentq(gap, lo, hi, xtol=1e-4))


def estimate_params(results: dict) -> dict:
    """p0 and rho per (K, N) from the real per-query BkR@K hits (see :data:`PARAMS`)."""
    from backretrieval.metrics.table import hits

    skip = {"random", "minilm-en@trunc=384"}  # chance and a copy say nothing of how models' hits go together
    out = {}
    for n, res in results.items():
        for K in KS:
            p0s, rhos = [], []
            for src, tgt in REAL_PAIRS:
                for s in sorted({r["seed"] for r in res.records}):
                    h = {m: hits(res.ranks[(m, src, tgt, s)]["bkr"], K).astype(float) for m in REAL_MODELS
                         if (m, src, tgt, s) in res.ranks}
                    p0s.append(max(v.mean() for m, v in h.items() if m not in skip))
                    models = [m for m in h if m not in skip]
                    rhos += [r for i, a in enumerate(models) for b in models[i + 1:] if (r := latent_rho(h[a], h[b])) is not None]
            out[f"{K}/{n}"] = {"p0": float(np.mean(p0s)), "rho": float(np.median(rhos)) if rhos else 0.5}
    return out


def answer(v: dict) -> tuple:
    return (v["status"], v["ship"] if v["status"] == "ship" else tuple(sorted(v["equivalent_to_best"]))
            if v["status"] == "equivalent" else None)


def real_rates(results: dict, metrics=("bkr@10", "xlr@10", "bkr@1"), n_boot: int = 200) -> list[dict]:
    """Per metric, pair and N: how often one seed's verdict ships a model the reference (N = 1,500,
    5 seeds) calls significantly worse, ships the reference's pick, says "equivalent" of a group
    holding the reference's best and a model the reference puts beyond the margin (its whole 95 %
    interval), reaches the reference's answer, and gives an answer the reference bears out (ships
    a model of the reference's equivalent_to_best, or calls a group of them equivalent)."""
    from backretrieval.analysis.compare import compare_models
    from backretrieval.analysis.evaluate import EvalResult

    rows = []
    for metric in metrics:
        ref = compare_models(results[1500], metric, beside=False)
        for pv in ref.verdict["pairs"]:
            pair = pv["pair"]
            eq = ref.equivalence[ref.equivalence["pair"] == pair]
            worse = set(eq[eq["better"]]["model_b"])  # significantly worse than the reference's best
            far = set(eq[eq["diff_low"] > MARGIN]["model_b"])  # its whole interval beyond the margin
            fine = set(pv["equivalent_to_best"])  # the reference's best and the models within the margin of it
            for n, res in sorted(results.items()):
                if n == 1500:
                    continue
                src, tgt = pair.split("->")
                c = dict(false_ship=0, ship=0, ship_ref=0, equivalent=0, false_equiv=0, same=0, compatible=0, at_chance=0)
                seeds = sorted({r["seed"] for r in res.records})
                for s in seeds:
                    keep = [r for r in res.records if r["seed"] == s and (r["src_lang"], r["tgt_lang"]) == (src, tgt)]
                    sub = EvalResult(res.config, keep, {k: v for k, v in res.ranks.items() if k[3] == s and k[1:3] == (src, tgt)},
                                     run=res.run, largest_n=res.largest_n)
                    v = compare_models(sub, metric, n_boot=n_boot, beside=False).verdict["pairs"][0]
                    c["ship"] += v["status"] == "ship"
                    c["false_ship"] += v["status"] == "ship" and v["ship"] in worse
                    c["ship_ref"] += v["status"] == "ship" and v["ship"] == pv["best"]["model"]
                    c["equivalent"] += v["status"] == "equivalent"
                    group = set(v["equivalent_to_best"]) if v["status"] == "equivalent" else set()
                    c["false_equiv"] += pv["best"]["model"] in group and bool(group & far)
                    c["same"] += answer(v) == answer(pv)
                    c["compatible"] += (v["status"] == "ship" and v["ship"] in fine) or (bool(group) and group <= fine)
                    c["at_chance"] += v["status"] == "at chance"
                rows.append({"metric": metric, "pair": pair, "n": n, "seeds": len(seeds), "reference": answer(pv),
                             "reference_text": pv["text"], **{k: x / len(seeds) for k, x in c.items()}})
                print(f"{metric} {pair} N={n}: {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def write_marked(path: Path, name: str, body: str) -> None:
    """Replace the text between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``."""
    import re

    from backretrieval.core import atomic_write_text

    text = path.read_text(encoding="utf-8")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text:
        raise SystemExit(f"{path} has no {start} marker")
    text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda m: f"{start}\n{body.rstrip()}\n{end}", text, flags=re.S)
    atomic_write_text(path, text)
    print(f"updated {name!r} in {path}", file=sys.stderr)


EXAMPLES = (  # one real run per answer (emoji-cldr, packaged models, the embedding cache warm after --real)
    ("ship", "--pairs en-de --models minilm-en,tfidf-char,random --n 200 --seeds 1"),
    ("equivalent", "--pairs en-de --models minilm-en,minilm-en@trunc=384 --n 100 --seeds 1"),
    ("not enough data", "--pairs en-de --models use-m,use-m@noise=0.5,minilm-en --n 200 --seeds 1 --metric xlr@1"),
    ("at chance", "--pairs en-ja --models random,random@noise=1 --n 50 --seeds 1"),
)


def examples(out: Path) -> str:
    """Run one ``backretrieval compare`` per answer and render the verdict of each as Markdown."""
    import shlex
    import subprocess

    from backretrieval.core import atomic_write_text  # noqa: F401  (the package must import)

    blocks = []
    for answer_, args in EXAMPLES:
        folder = out / answer_.replace(" ", "-")
        cmd = ("backretrieval compare --dataset emoji-cldr " + args + " --image-model efficientnet-lite0 --out "
               + f"runs/{folder.name} --quiet")
        argv = [sys.executable, "-m", "backretrieval.cli", *shlex.split(cmd)[1:]]
        argv[argv.index(f"runs/{folder.name}")] = str(folder)
        subprocess.run(argv, check=True, capture_output=True, text=True)
        v = json.loads((folder / "compare.json").read_text(encoding="utf-8"))["verdict"]
        pairs = "\n".join(p["text"] for p in v["pairs"])
        power = "\n".join(f"Power: {p['power']['text']}." for p in v["pairs"] if p.get("power") and "Power:" not in p["text"])
        blocks.append(f"**{answer_}** (`{cmd}`; compare.json: `\"status\": \"{v['pairs'][0]['status']}\"`):\n\n"
                      f"```text\n{v['summary']}\n{pairs}" + (f"\n{power}" if power else "") + "\n```")
    return "\n\n".join(blocks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planted", action="store_true", help="run the planted grid")
    ap.add_argument("--reps", type=int, default=1000, help="repetitions per planted cell")
    ap.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples per decision (the interval of the best)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", help="JSON of p0 and rho per K/N (written by --real; default: PARAMS)")
    ap.add_argument("--out", help="where --planted appends its rows (JSON lines; cells already there are kept)")
    ap.add_argument("--k-values", default=",".join(map(str, KS)), help="the K of the planted grid (to split it over processes)")
    ap.add_argument("--real", metavar="OUT", help="run (or resume) the real grids into OUT, write OUT/params.json and OUT/real.json")
    ap.add_argument("--seeds", type=int, default=40, help="seeds per N of the real grids")
    ap.add_argument("--write", action="store_true", help="write the tables to BENCHMARKS.md and docs/how-much-data.md")
    ap.add_argument("--planted-json", help="with --write: the files of --planted (comma-separated)")
    ap.add_argument("--real-json", help="with --write: OUT/real.json of --real")
    ap.add_argument("--command", default="see the script's docstring", help="with --write: the command line shown")
    ap.add_argument("--examples", metavar="OUT", help="run one compare per answer into OUT and write them to docs/how-much-data.md")
    args = ap.parse_args()
    if args.examples:
        write_marked(ROOT / "docs" / "how-much-data.md", "verdict-examples", examples(Path(args.examples)))
    if args.real:
        out = Path(args.real)
        results = real_results(out, args.seeds)
        params = estimate_params(results)
        (out / "params.json").write_text(json.dumps(params, indent=1), encoding="utf-8")
        rows = real_rates(results)
        (out / "real.json").write_text(json.dumps(rows, indent=1, default=str), encoding="utf-8")
    if args.planted:
        params = json.loads(Path(args.params).read_text()) if args.params else PARAMS
        planted_grid(params, args.reps, args.seed, args.n_boot, kk=tuple(int(x) for x in args.k_values.split(",")),
                     out=Path(args.out))
    if args.write:
        from _md import machine, write_section

        planted_rows = [json.loads(line) for f in args.planted_json.split(",")
                        for line in Path(f).read_text(encoding="utf-8").splitlines() if line.strip()]
        real_rows = json.loads(Path(args.real_json).read_text()) if args.real_json else []
        t = tables(planted_rows, real_rows)
        write_section(SECTION, section(t, machine(), args.command, REAL_MODELS))
        write_marked(ROOT / "docs" / "how-much-data.md", SECTION, docs_section(t))


if __name__ == "__main__":
    main()
