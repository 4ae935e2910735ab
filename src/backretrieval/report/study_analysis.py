"""The analysis of a blind relevance study as Markdown (``analysis.md``): scores per model,
the paired comparisons, inter-rater agreement and the models' BkR on the same pair.

It renders the plain dictionary that :func:`backretrieval.study.analyze.analyze` computes (the
same data that ``analysis.json`` holds) and computes nothing itself.
"""
from __future__ import annotations

from typing import Any

from .table import format_p


def _x(v: float | None, digits: int = 2) -> str:
    if v is None or v != v:
        return "-"
    return "∞" if v == float("inf") else f"{v:.{digits}f}"


def format_study_analysis(res: dict[str, Any]) -> str:
    """The analysis of a relevance study as its Markdown report.

    Args:
        res: the plain dictionary that :func:`backretrieval.study.analyze.analyze` returns (study,
            raters, models, comparisons, agreement, bkr), as written to ``analysis.json``.

    Returns:
        The Markdown text of ``analysis.md``.
    """
    s = res["study"]
    lines = [
        f"# Blind relevance study: {s['dataset']} {s['src']} → {s['tgt']}",
        "",
        f"{s['queries']} queries, {s['per_model']} suggestions per model and query, pool of {s['pool_n']} "
        f"{s['tgt']} items ({s['pool']}), seed {s['seed']}. {res['suggestions']} suggestions shown, "
        f"{res['shared_suggestions']} of them retrieved by more than one model (shown once, credited to each).",
        "",
        "Raters: " + ", ".join(f"{r['name']} {r['rated']}/{r['total']}" for r in res["raters"])
        + ("" if res["complete"] else " (**incomplete**)")
        + f". {res['ratings']} ratings stored ({res['events']} clicks).",
        "",
        "## Scores per model",
        "",
        "Scale: 1 very relevant, 2 relevant, 3 somewhat relevant, 4 not relevant.",
        "",
        "| model | rated | 1 | 2 | 3 | 4 | very relevant | mean score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for spec, m in res["models"].items():
        c = m["counts"]
        lines.append(
            f"| {m['label']}: {spec} | {m['ratings']} | {c['1']} | {c['2']} | {c['3']} | {c['4']} | "
            f"{_x(100 * m['very_relevant_share'], 1)}% | {_x(m['mean_score'])} |"
        )
    if res.get("ratings_note"):
        lines += ["", f"**{res['ratings_note'][0].upper()}{res['ratings_note'][1:]}.**"]
    if len(res.get("per_rater", {})) > 1:
        specs = list(res["models"])
        lines += ["", "Per rater, \"very relevant\" / rated:", "", "| rater | " + " | ".join(specs) + " |",
                  "|---|" + "---|" * len(specs)]
        for name, per in res["per_rater"].items():
            lines.append(f"| {name} | " + " | ".join(f"{per[m]['very_relevant']} / {per[m]['rated']}" for m in specs) + " |")
    if res["comparisons"]:
        lines += [
            "",
            "## Comparisons",
            "",
            "Primary test: exact paired sign-flip test over queries of the per-query share of "
            "\"very relevant\" ratings (two-sided; Holm-adjusted across pairs).",
            "",
            "| A vs B | very relevant A / B | ratio (95% CI) | queries A>B / A<B / tie | p (primary) | p Holm | "
            "p Wilcoxon | p mean score | p χ² (indep.) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in res["comparisons"]:
            ci = c["ratio_ci95"]
            ci_txt = f" ({_x(ci[0])}–{_x(ci[1])})" if ci else ""
            lines.append(
                f"| {c['a']} vs {c['b']} | {c['very_relevant'][0]} / {c['very_relevant'][1]} | "
                f"{_x(c['ratio_very_relevant'])}×{ci_txt} | {c['queries_a_better']} / {c['queries_b_better']} / "
                f"{c['queries_tied']} | {format_p(c['primary']['p'])} | {format_p(c['primary'].get('p_holm'))} | "
                f"{format_p(c['wilcoxon']['p'])} | {format_p(c['mean_score']['p'])} | {format_p(c['chi2']['p'])} |"
            )
        lines += [f"\n{c['too_few'][0].upper()}{c['too_few'][1:]}." for c in res["comparisons"] if c.get("too_few")]
    ag = res.get("agreement")
    lines += ["", "## Inter-rater agreement", ""]
    if ag is None:
        lines.append("One rater: agreement needs two or more.")
    else:
        lines.append(
            f"{ag['raters']} raters, {ag['pairable_suggestions']} suggestions rated by at least two. "
            f"Krippendorff's alpha: ordinal {_x(ag['alpha_ordinal'], 3)}, nominal {_x(ag['alpha_nominal'], 3)}, "
            f"\"very relevant\" or not {_x(ag['alpha_very_relevant'], 3)}."
        )
    lines += _bkr_lines(res)
    return "\n".join(lines) + "\n"


def _bkr_lines(res: dict[str, Any]) -> list[str]:
    """The section "Backretrieval on the same pair" of :func:`format_study_analysis` (none
    without a BkR comparison): the models' BkR and XLR beside the raters' share, and the two
    orders."""
    b = res.get("bkr")
    if not b:
        return []
    lines = ["", "## Backretrieval on the same pair", ""]
    if "error" in b:
        lines.append(f"Not computed: {b['error']}")
    else:
        k = b["k"]
        lines += [
            f"N={b['n']} items per side, {b['seeds']} seed(s), image model {b['image_model']}"
            + (f"; chance BkR@{k} ≈ {b['chance']:.4f}." if "chance" in b else ".")
            + (f" {b['n_note'][0].upper()}{b['n_note'][1:]}." if b.get("n_note") else ""),
            "",
            f"| model | BkR@{k} | BkR MRR | XLR@{k} | raters: very relevant |",
            "|---|---|---|---|---|",
        ]
        for spec, e in b["models"].items():
            lines.append(
                f"| {spec} | {_x(e.get(f'bkr@{k}'), 3)} | {_x(e.get('bkr_mrr'), 3)} | {_x(e.get(f'xlr@{k}'), 3)} | "
                f"{_x(100 * res['models'][spec]['very_relevant_share'], 1)}% |"
            )
        key = f"bkr@{k}"
        if all(key in e for e in b["models"].values()) and len(b["models"]) >= 2:
            by_bkr = sorted(b["models"], key=lambda m: -b["models"][m][key])
            if res.get("ratings_note"):  # no order by the raters from no (or too few) ratings
                lines += ["", f"Order by BkR@{k}: {' > '.join(by_bkr)}; by the raters: none yet ({res['ratings_note']})."]
            else:
                by_h = sorted(res["models"], key=lambda m: -(res["models"][m]["very_relevant_share"] or 0))
                lines += ["", f"Order by BkR@{k}: {' > '.join(by_bkr)}; by the raters: {' > '.join(by_h)}"
                          + (" (same)." if by_bkr == by_h else " (different).")]
    return lines
