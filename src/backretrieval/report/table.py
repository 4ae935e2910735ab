"""Plain-text / Markdown tables of evaluation summaries."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import pandas as pd

from ..analysis.comparison import Comparison
from ..analysis.meta import KINDS, column
from ..core import BackretrievalError
from ..core.text import one_line
from ..metrics.table import parse_metric, shown_columns


def md_text(text: Any, cell: bool = False) -> str:
    """``text`` safe to put into Markdown as it is: on one line (a newline or other character
    that does not print is written as Python's ``repr`` writes it, :func:`~backretrieval.core.text.one_line`),
    ``&`` and ``<`` as HTML entities (a model named ``<script>`` shows as text, never as a tag),
    and with ``cell`` ``|`` escaped (``\\|``), so a name keeps a table's columns.

    Args:
        text: a model name, a pair label, a sentence naming them.
        cell: the text goes into a table cell.

    Returns:
        The escaped text.
    """
    out = one_line(str(text)).replace("&", "&amp;").replace("<", "&lt;")
    return out.replace("|", "\\|") if cell else out


def _cell(row: pd.Series, m: str) -> str:
    if m not in row or pd.isna(row[m]):
        return "-"
    sd = row.get(f"{m}_sd")
    if sd is None or pd.isna(sd) or row.get("seeds", 1) <= 1:
        return f"{row[m]:.3f}"
    return f"{row[m]:.3f} ± {sd:.3f}"


def format_summary(summary: pd.DataFrame, columns: Sequence[str] | None = None) -> str:
    """One Markdown table per language pair, models sorted by the first BkR@K column (else XLR@10,
    else the first column), best first. Cells are mean ± sd over seeds; a column missing from
    ``summary`` or empty in it is left out. ``columns`` None: the metric table's columns shown
    by default at K = 10 (:func:`backretrieval.metrics.table.shown_columns`)."""
    if summary.empty:
        return "(no results)"
    columns = shown_columns() if columns is None else columns
    cols = [c for c in columns if c in summary.columns and summary[c].notna().any()]
    key = next((c for c in cols if c.startswith("bkr@")), "xlr@10" if "xlr@10" in cols else (cols[0] if cols else None))
    blocks = []
    for pair, grp in summary.groupby("pair", sort=False):
        if key is not None:
            grp = grp.sort_values(key, ascending=False)
        lines = [f"### {md_text(pair)}", "", "| model | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for _, row in grp.iterrows():
            lines.append(f"| {md_text(row['model'], cell=True)} | " + " | ".join(_cell(row, c) for c in cols) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _truncated_mrr(key: str) -> bool:
    """Whether a record key names a metric taken at the approximate search depth (an MRR truncated at K)."""
    try:
        spec, _ = parse_metric(key)
    except BackretrievalError:
        return False
    return "depth" in spec.ks


def approx_note(records: Sequence[dict[str, Any]]) -> str | None:
    """One paragraph on records computed with approximate search (``--approx``): what was
    computed how, what was not, and the calibration reached; None for exact records."""
    approx = [r for r in records if r.get("approx")]
    if not approx:
        return None
    r0 = approx[0]
    agreement = [v for r in approx for key, v in r.items() if key.startswith("approx_") and key.endswith("_agreement")
                 and not key.endswith("_tuning_agreement")]
    lows = [v for r in approx for key, v in r.items() if key.startswith("approx_") and key.endswith("_agreement_low95")]
    fallbacks = sum(bool(v) for r in approx for key, v in r.items() if key.startswith("approx_") and key.endswith("_exact_fallback"))
    searches = sum(1 for r in approx for key in r if key.startswith("approx_") and key.endswith("_exact_fallback"))
    by_cost = sum(str(v).startswith("cost") for r in approx for key, v in r.items()
                  if key.startswith("approx_") and key.endswith("_route_reason"))
    mrr = sorted({key for r in approx for key in r if _truncated_mrr(key)})
    low = f"{min(agreement):.4f} (95% lower bound {min(lows):.4f})" if agreement and lows else "-"
    return (
        f"Approximate search ({r0['approx']}, each search calibrated until its top-1 agreement and top-K recall "
        f"with exact search on a seeded tuning sample reach {r0['approx_target']:g}, then measured on a disjoint "
        f"held-out sample; exact search where the target was out of reach or the cost model said exact search is "
        f"cheaper): XLR@K and BkR@K from the "
        f"approximate top-K lists{', MRR truncated at K (' + ', '.join(mrr) + ')' if mrr else ''}; CORR exact (all "
        f"pairs up to its seeded 4M-pair subsample). Not computed (exact search only): hubness, median ranks, the "
        f"untruncated MRR. Lowest held-out top-1 agreement: {low}; {fallbacks} of {searches} searches ran as exact "
        f"search ({by_cost} because it was cheaper). Records say `approximate: true` when any search was approximate "
        "and carry every search's route and calibration (`approx_*`)."
    )


def format_p(v: float | None) -> str:
    """The one p-value format of the tables: ``1.2e-05`` below 0.001, else ``0.034``; ``-`` for
    a missing value (None or NaN).

    Args:
        v: the p-value.

    Returns:
        The cell's text.
    """
    if v is None or v != v:
        return "-"
    return f"{v:.1e}" if v < 1e-3 else f"{v:.3f}"


def format_meta_table(table: dict[str, dict[str, Any]]) -> str:
    """Markdown in the layout of the paper's Table 1: per correlation type, each candidate's mean ±
    sd over seeds (the best in bold where it is ahead) and p, the paired Wilcoxon test of the
    best candidate against the runner-up."""
    if not table:
        return "(no results)"
    first = next(iter(table.values()))
    cands = [c for c in (key[len("pearson["):-1] for key in first if key.startswith("pearson[")) if c]
    head = ["pair"]
    for kind in KINDS:
        head += [f"{kind.capitalize()} {c}" for c in cands] + ["p"]
    lines = ["| " + " | ".join([*head, "models", "seeds"]) + " |", "|" + "---|" * (len(head) + 2)]
    for pair, e in table.items():
        cells = [pair]
        for kind in KINDS:
            best = e["best"][kind]
            ahead = best and best["runner_up"] and e[column(kind, best["candidate"])]["mean"] > e[column(kind, best["runner_up"])]["mean"]
            for c in cands:
                txt = f"{e[column(kind, c)]['mean']:.3f} ± {e[column(kind, c)]['sd']:.3f}"
                cells.append(f"**{txt}**" if ahead and c == best["candidate"] else txt)
            cells.append(format_p(e[f"p_{kind}_wilcoxon"]))
        lines.append("| " + " | ".join([*cells, str(e["n_models"]), str(e["seeds"])]) + " |")
    return "\n".join(lines)


ANSWERS = ("The four answers: *ship* (one model significantly better than every other), *equivalent* (every model "
           "the best does not beat shown within ±{m:g} of it, the margin: the gap that matters; pick among them by cost "
           "or speed), *not enough data* (neither can be shown at this N), *at chance* (the best model's interval reaches "
           "the chance level). Each pair tests the best model against each other model, Holm-adjusted over those "
           "comparisons.")


def format_verdict(v: dict[str, Any]) -> str:
    """Markdown of a comparison's verdict (:func:`backretrieval.analysis.verdict.verdict`): the
    overall answer, one bullet per pair with its power note, what the check says, and the four
    answers with the margin.

    Args:
        v: the verdict dict (``Comparison.verdict``).

    Returns:
        The Markdown section, starting with its heading.
    """
    lines = ["## Verdict", "", f"**{md_text(v['summary'])}**", ""]
    for p in v["pairs"]:
        lines.append(f"* {md_text(p['text'])}")
        if p.get("power") and "Power:" not in p["text"]:
            lines.append(f"  Power: {md_text(p['power']['text'])}.")
    if v.get("check_text"):
        lines += ["", md_text(v["check_text"])]
    lines += ["", ANSWERS.format(m=v.get("margin", 0.05))]
    return "\n".join(lines)


MARKS = {"best": "best", "worse": "< best", "worse, within margin": "< best, within margin",
         "equivalent": "≈ best", "undecided": "?"}  # how a ranking marks each model against the pair's best


def format_comparison(c: Comparison) -> str:
    """Markdown of one comparison's tables: one ranking per pair, each model marked against the
    pair's best by the verdict's own tests ('< best': significantly worse; '≈ best': within the
    margin; '?': neither; Holm over the k - 1 comparisons with the best,
    :attr:`~backretrieval.analysis.comparison.Comparison.equivalence`), with its gap to the best,
    the gap's paired interval and the two Holm-adjusted p-values; then the average over pairs
    with its spread, first places and significant wins, ties and losses (over every two models
    of a pair, Holm over the pair's model pairs)."""
    pct = int(round(c.level * 100))
    eq = c.equivalence.set_index(["pair", "model_b"]) if len(c.equivalence) else None
    out = [f"## Ranking by {c.metric} ({pct}% bootstrap CI; against the best: paired sign-flip test and two one-sided "
           f"tests of a gap within ±{c.margin:g}, each Holm-adjusted over the comparisons with the best, alpha={c.alpha})"]
    for pair, g in c.per_pair.groupby("pair", sort=False):
        out += ["", f"### {md_text(pair)}", "",
                f"| rank | model | {c.metric} | {pct}% CI | vs best | gap to best | p (Holm) | p equivalent (Holm) |",
                "|---|---|---|---|---|---|---|---|"]
        for _, r in g.iterrows():
            mark, gap, p, p_eq = MARKS.get(r.get("vs_best", ""), ""), "", "", ""
            if eq is not None and (pair, r["model"]) in eq.index:
                t = eq.loc[(pair, r["model"])]
                gap = f"{-t['diff']:.4f} [{-t['diff_high']:.4f}, {-t['diff_low']:.4f}]"
                p, p_eq = f"{t['p_adj']:.3g}", f"{t['p_tost_adj']:.3g}"
            out.append(f"| {r['rank']} | {md_text(r['model'], cell=True)} | {r['estimate']:.4f} | [{r['ci_low']:.4f}, {r['ci_high']:.4f}] | {mark} "
                       f"| {gap} | {p} | {p_eq} |")
    out += ["", f"### Across {c.per_pair['pair'].nunique()} pairs", "",
            "| model | mean | sd | min | max | mean rank | first on | significant wins | ties | losses |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in c.across_pairs.iterrows():
        out.append(f"| {md_text(r['model'], cell=True)} | {r['mean']:.4f} | {r['sd']:.4f} | {r['min']:.4f} | {r['max']:.4f} | {r['mean_rank']:.2f} "
                   f"| {r['firsts']} | {r['wins']} | {r['ties']} | {r['losses']} |")
    return "\n".join(out)
