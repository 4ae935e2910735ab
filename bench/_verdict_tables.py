"""The tables of bench/bench_verdict_calibration.py (the verdict's error rates): the grid's
constants, the note's predictions, and the Markdown it writes to BENCHMARKS.md (compact) and
docs/how-much-data.md (every cell)."""
from __future__ import annotations

import math

GAPS = (0.0, 0.01, 0.02, 0.05, 0.1)
MODELS_K = (2, 3, 4, 5, 6)
MARGIN, ALPHA = 0.05, 0.05


def mc_se(rate: float, reps: int) -> float:
    """The Monte-Carlo standard error of a rate from ``reps`` repetitions."""
    return math.sqrt(max(rate * (1 - rate), 0.25 / reps) / reps)


def predictions(gap: float, n: int, k: int, note_sd: float, sd: float) -> dict:
    """What the notes predict of a cell's power: the verdict's note (the spread it sees), the
    same with the true spread, and the note before a run (independent hits: a bound)."""
    from backretrieval.analysis.evaluate.sensitivity import SD_INDEPENDENT, ship_power

    if gap <= 0:
        return {"predicted_note": None, "predicted_true": None, "predicted_before_run": None}
    return {"predicted_note": ship_power(gap, n, note_sd, k - 1, ALPHA, discrete=True),
            "predicted_true": ship_power(gap, n, sd, k - 1, ALPHA, discrete=True),
            "predicted_before_run": ship_power(gap, n, SD_INDEPENDENT, k - 1, ALPHA, discrete=True)}


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _answer_text(ref) -> str:
    return ref[0] + (f" {ref[1]}" if ref[0] == "ship" else f" ({', '.join(ref[1])})" if ref[0] == "equivalent" else "")


def real_tables(real_rows: list[dict]) -> dict[str, str]:
    """The real part's tables: compact (false ship / the reference's answer / an answer it bears
    out, per metric, pair and N) and every row."""
    out = {}
    seeds = sorted({r["seeds"] for r in real_rows})
    lines = ["| metric | pair | reference (N = 1,500, 5 seeds) | N | ships a model the reference calls worse | ships "
             "the reference's pick | 'equivalent' with a model the reference puts beyond the margin | the reference's "
             "answer | an answer the reference bears out | not enough data | seeds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in real_rows:
        undecided = 1 - r["ship"] - r["equivalent"] - r["at_chance"]
        lines.append(f"| {r['metric']} | {r['pair']} | {_answer_text(r['reference'])} | {r['n']:,} | {_pct(r['false_ship'])} "
                     f"| {_pct(r['ship_ref'])} | {_pct(r['false_equiv'])} | {_pct(r['same'])} | {_pct(r['compatible'])} "
                     f"| {_pct(undecided)} | {r['seeds']} |")
    out["real_full"] = "\n".join(lines)
    ns = sorted({r["n"] for r in real_rows})
    pairs = sorted({r["pair"] for r in real_rows})
    lines = ["| metric | reference (N = 1,500, 5 seeds) | " + " | ".join(f"N = {n:,}" for n in ns) + " |",
             "|---|---|" + "---|" * len(ns)]
    by: dict = {}
    for r in real_rows:
        by.setdefault(r["metric"], {})[(r["pair"], r["n"])] = r
    for metric, row in by.items():
        ref = " · ".join(_answer_text(row[(p, n)]["reference"]) for p in pairs for n in ns[:1] if (p, n) in row)
        lines.append(f"| {metric} | {ref} | " + " | ".join(" · ".join(
            f"{_pct(row[(p, n)]['false_ship'])}/{_pct(row[(p, n)]['same'])}/{_pct(row[(p, n)]['compatible'])}"
            if (p, n) in row else "-" for p in pairs) for n in ns) + " |")
    out["real"] = "\n".join(lines)
    worst = max(real_rows, key=lambda r: r["false_ship"])
    far = max(real_rows, key=lambda r: r["false_equiv"])
    verdicts = sum(r["seeds"] for r in real_rows)
    shipped = ("no one-seed verdict shipped a model the reference calls worse (0 of " f"{verdicts:,})" if worst["false_ship"] == 0
               else f"the largest false-ship rate {_pct(worst['false_ship'])} % ({worst['metric']}, {worst['pair']}, "
               f"N = {worst['n']:,}; {verdicts:,} one-seed verdicts in all)")
    out["real_summary"] = (f"{'/'.join(map(str, seeds))} seeds per N (Monte-Carlo standard error at most "
                           f"{100 * mc_se(0.5, min(seeds)):.1f} points, {100 * mc_se(0.05, min(seeds)):.1f} at 5 %); {shipped}; "
                           f"'equivalent' with a model the reference puts beyond the margin: at most {_pct(far['false_equiv'])} % "
                           f"({far['metric']}, {far['pair']}, N = {far['n']:,})")
    return out


def _both(cells: dict, ks=(1, 10)) -> str:
    """One cell holding the values at K = 1 and K = 10."""
    return " · ".join(cells.get(K, "-") for K in ks)


def error_tables(plain, ident) -> dict[str, str]:
    """False ship and equivalence: every (K, N) (for the docs) and one row per N, K = 1 · K = 10."""
    full = ["| K | N | p0 | rho | false ship at gap 0, " + " / ".join(f"k={k}" for k in MODELS_K)
            + " | false ship at gap > 0, largest (k, gap) | equal models equivalent, k=2 / k=6 | identical models "
            "equivalent, k=2 / k=6 | 'equivalent' with a model 0.05 / 0.1 behind, largest over k |",
            "|---|---|---|---|---|---|---|---|---|"]
    rows: dict = {}
    for (K, n), g in plain.groupby(["K", "n"]):
        zero = g[g["gap"] == 0].set_index("k")
        pos = g[g["gap"] > 0]
        worst = pos.loc[pos["ship_other"].idxmax()]
        i = ident[(ident["K"] == K) & (ident["n"] == n)].set_index("k")
        eq = " / ".join(_pct(zero.loc[k, "equivalent"]) if k in zero.index else "-" for k in (2, 6))
        ie = " / ".join(_pct(i.loc[k, "equivalent"]) if k in i.index else "-" for k in (2, 6))
        far = f"{_pct(g[g['gap'] == 0.05]['eq_far'].max())} / {_pct(g[g['gap'] == 0.1]['eq_far'].max())}"
        gap0 = [_pct(zero.loc[k, "ship_other"]) if k in zero.index else "-" for k in MODELS_K]
        top0 = zero["ship_other"].idxmax()
        full.append(f"| {K} | {n:,} | {g['p0'].iloc[0]:.3f} | {g['rho'].iloc[0]:.2f} | {' / '.join(gap0)} | "
                    f"{_pct(worst['ship_other'])} ({int(worst['k'])}, {worst['gap']:g}) | {eq} | {ie} | {far} |")
        r = rows.setdefault(n, {c: {} for c in range(7)})
        for c, v in enumerate([f"{g['p0'].iloc[0]:.2f}/{g['rho'].iloc[0]:.2f}", f"{_pct(zero.loc[top0, 'ship_other'])} ({top0})",
                               f"{_pct(worst['ship_other'])} ({int(worst['k'])}, {worst['gap']:g})", eq, ie, far]):
            r[c][K] = v
    lines = ["| N | p0/rho | false ship at gap 0, largest (k) | false ship at gap > 0, largest (k, gap) | equal models "
             "equivalent, k=2 / k=6 | identical models equivalent, k=2 / k=6 | 'equivalent' with a model 0.05 / 0.1 "
             "behind, largest over k |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {n:,} | " + " | ".join(_both(r[c]) for c in range(6)) + " |" for n, r in sorted(rows.items())]
    return {"false_ship_full": "\n".join(full), "false_ship": "\n".join(lines)}


def power_tables(pos) -> dict[str, str]:
    """The best shipped against the note: every (K, N, k) (for the docs), one row per (K, gap) with
    k = 2 · k = 6 per N, and a summary."""
    gaps = [g for g in GAPS if g > 0]
    full = ["| K | N | k | " + " | ".join(f"gap {g:g}: shipped / note" for g in gaps) + " |", "|---|---|---|" + "---|" * len(gaps)]
    for (K, n, k), g in pos.groupby(["K", "n", "k"]):
        cells = {r.gap: f"{_pct(r.ship_best)} / {_pct(r.predicted_note)}" for r in g.itertuples()}
        full.append(f"| {K} | {n:,} | {k} | " + " | ".join(cells.get(gap, "-") for gap in gaps) + " |")
    ns = sorted(pos["n"].unique())
    lines = ["| K | gap | " + " | ".join(f"N = {n:,}" for n in ns) + " | largest \\|shipped - note\\| (N, k) |",
             "|---|---|" + "---|" * (len(ns) + 1)]
    for (K, gap), g in pos.groupby(["K", "gap"]):
        cell = {(r.n, r.k): f"{_pct(r.ship_best)}/{_pct(r.predicted_note)}" for r in g.itertuples()}
        w = g.loc[g["err"].abs().idxmax()]
        lines.append(f"| {K} | {gap:g} | " + " | ".join(f"{cell.get((n, 2), '-')} · {cell.get((n, 6), '-')}" for n in ns)
                     + f" | {100 * w['err']:+.1f} ({int(w['n']):,}, {int(w['k'])}) |")
    within = (pos["err"].abs() <= 0.05).mean()
    worst = pos.loc[pos["err"].abs().idxmax()]
    summary = (f"{int((pos['err'].abs() <= 0.05).sum())} of {len(pos)} cells ({100 * within:.0f}%) within 5 points of "
               f"the note; the largest difference {100 * abs(worst['err']):.1f} points (measured "
               f"{'above' if worst['err'] > 0 else 'below'} the note; K = {int(worst['K'])}, N = {int(worst['n']):,}, "
               f"k = {int(worst['k'])}, gap {worst['gap']:g}); mean difference {100 * pos['err'].mean():+.1f} points. "
               f"The note before a run (independent hits, sd 0.71) predicted "
               f"{100 * (pos['ship_best'] - pos['predicted_before_run']).mean():.1f} points less than measured on "
               f"average: a bound, not an estimate")
    return {"power_full": "\n".join(full), "power": "\n".join(lines), "power_summary": summary}


def tables(planted_rows: list[dict], real_rows: list[dict]) -> dict[str, str]:
    """The Markdown tables: false ship and equivalence, power against the prediction, real data
    (each compact for BENCHMARKS.md and in full for the docs)."""
    import pandas as pd

    df = pd.DataFrame([{**r, **predictions(r["gap"], r["n"], r["k"], r["sd_note"], r["sd_true"])} for r in planted_rows])
    reps = int(df["reps"].max())
    plain = df[~df["identical"]]
    pos = plain[plain["gap"] > 0].copy()
    pos["err"] = pos["ship_best"] - pos["predicted_note"]
    out = {**error_tables(plain, df[df["identical"]]), **power_tables(pos)}
    out["mc"] = (f"{reps:,} repetitions per cell: Monte-Carlo standard error {100 * mc_se(0.05, reps):.1f} points at a rate "
                 f"of 5 %, at most {100 * mc_se(0.5, reps):.1f} points (rate 50 %)")
    if real_rows:
        out.update(real_tables(real_rows))
    return out


def section(t: dict[str, str], machine: str, command: str, models) -> str:
    """The BENCHMARKS.md section (compact: every cell of the power table and every real row are in
    docs/how-much-data.md)."""
    real = t.get("real", "(not run)")
    return f"""## The verdict's error rates (planted gaps and real data)

Command: `{command}`. Machine: {machine}; a machine shared with other work. The code of `compare` (`decide_outcomes`, only the tests the decision needs) where the truth is known (bench/bench_verdict_calibration.py): alpha = {ALPHA:g}, margin = {MARGIN:g}, the best model against each other model, Holm over the k - 1 comparisons. Planted: k = 2..6 models answer N queries (one seed); the best hits with probability p0, each other model with p0 - gap (0, 0.01, 0.02, 0.05, 0.1), hits correlated through a shared per-query difficulty (latent correlation rho); p0 and rho per K and N measured on the real runs below (BkR@K of the best model; the median latent correlation of the real models' hits). {t['mc']}. Rates in %, each cell "K = 1 · K = 10" (every cell: docs/how-much-data.md). **False ship** (a model that is not the best shipped; at gap 0 any ship is false) and **"equivalent" with a model 0.05 or 0.1 behind** must stay at or below alpha = 5 % up to the Monte-Carlo error; equal models (gap 0, hit for hit different) and identical ones (every paired difference 0) should be called equivalent:

{t['false_ship']}

**Power against the note**: the best shipped when it leads each other model by the gap, against what the verdict's power note predicts from the spread it sees (`ship_power`, median over the repetitions): "shipped/note", k = 2 · k = 6. {t['power_summary']}.

{t['power']}

**Real data, subsampled**: emoji-cldr, image model efficientnet-lite0, models {', '.join(models)}; the reference is the verdict at N = 1,500 over 5 seeds; at each smaller N every seed's own verdict (one seed, `compare` itself) is set against it: "ships a model the reference calls significantly worse / reaches the reference's answer / gives an answer the reference bears out" (a shipped model or an equivalent group within the reference's margin of its best), en->de · en->ja; {t.get('real_summary', 'not run')}. Every row, with the undecided share: docs/how-much-data.md.

{real}
"""


def docs_section(t: dict[str, str]) -> str:
    """The tables docs/how-much-data.md shows: the same as BENCHMARKS.md, every cell of the power
    table and every real row."""
    return f"""False ship and equivalence (%; {t['mc']}; at gap 0 any ship is false; false ship and "equivalent" with a model 0.05 or 0.1 behind must stay at or below 5 %):

{t['false_ship_full']}

Power: {t['power_summary']}. The best model shipped (%) against the note's prediction:

{t['power_full']}

Real data (emoji-cldr; the reference is the verdict at N = 1,500 over 5 seeds; one seed's verdict at each N, %):

{t.get('real_full', '(not run)')}
"""
