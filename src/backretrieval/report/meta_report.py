"""Files of the ``meta`` command: meta.json, meta.md, figures and a self-contained report.html."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..analysis.evaluate import pair_labels, summarize
from ..analysis.evaluate.result import slug
from ..analysis.evaluate.records import write_results
from ..analysis.meta import KINDS, TRUTH, MetaResult
from ..analysis.models import image_model_name, model_names
from ..core import BackretrievalError, atomic_write_text, json_ready
from ..metrics.table import metric_name, parse_metric
from .table import format_meta_table, format_summary


def _df_md(df: pd.DataFrame, digits: int = 3) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(lines)


def _interval(v: dict[str, float]) -> str:
    ends = "" if v["low"] != v["low"] else f" [{v['low']:.3f}, {v['high']:.3f}]"
    return f"{v['mean']:.3f}{ends}"


def format_best_candidates(table: dict[str, dict[str, Any]]) -> str:
    """Markdown: per pair and correlation type, the candidate that tracks the ground truth best,
    its mean correlation with its interval, and its lead over the runner-up with its interval.

    Args:
        table: the meta table (:func:`~backretrieval.analysis.meta.meta_table`).

    Returns:
        One table row per pair; a lead whose interval reaches 0 is marked "not told apart".
    """
    if not table:
        return "(no results)"
    levels = [b["level"] for e in table.values() for b in e["best"].values() if b]
    pct = f"{round(levels[0] * 100)}%" if levels else ""
    head = ["pair"]
    for kind in KINDS:
        head += [f"best by {kind.capitalize()}", f"mean ({pct} CI)", f"lead over the runner-up ({pct} CI)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pair, e in table.items():
        cells = [pair]
        for kind in KINDS:
            b = e["best"][kind]
            if b is None:
                cells += ["-", "-", "-"]
                continue
            lead = "-"
            if b["lead"] is not None:
                lead = f"{b['runner_up']}: +{_interval(b['lead'])}"
                if not b["lead"]["low"] > 0:
                    lead += " (not told apart)"
            cells += [b["candidate"], _interval(b), lead]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_meta_outputs(res: MetaResult, cfg: Any, out: Path, figures: bool = True,
                       log: Callable[[str], None] | None = None) -> str:
    """Write the meta-evaluation outputs into ``out``; return the Markdown summary. An earlier
    run's ``report.html`` and ``figures/`` are removed when this run writes none
    (:func:`~.runs.grid.remove_earlier_outputs`).

    Args:
        res: the meta-evaluation (its candidates name every table, figure and calibration).
        cfg: the grid it ran (:class:`~backretrieval.analysis.evaluate.EvalConfig`).
        out: the output folder.
        figures: also write the figures and ``report.html``.
        log: receives a line per earlier file or folder removed (None: a warning each,
            :class:`~.runs.grid.RemovedOutputWarning`).

    Returns:
        The Markdown of ``meta.md``.
    """
    out.mkdir(parents=True, exist_ok=True)
    main_g = image_model_name(cfg.image_model)
    cands = list(res.candidates)
    context = metric_name("hubness_skew@K", cfg.k)
    columns = tuple(dict.fromkeys((res.truth, *cands, context)))
    datasets = res.datasets or [cfg.dataset]
    name = " + ".join(datasets)
    if len(datasets) > 1:  # the merged records (each dataset's own are in OUT/datasets/<name>/)
        write_results(res.main.records, out, res.run)
        for g, sub in list(res.results.items())[1:]:
            write_results(sub.records, out / "image-models" / slug(g), res.run)
    doc = {
        "dataset": datasets[0] if len(datasets) == 1 else datasets,
        "n": cfg.n,
        "seeds": len(cfg.seeds),
        "models": model_names(cfg.models),
        "image_model": main_g,
        "truth": res.truth,
        "candidates": cands,
        "pairs": res.table,
        "image_models": res.degradation.to_dict(orient="records"),
        "run": res.run,
    }
    cals = {c: cal for c, cal in res.calibration.items() if not cal.rows.empty}
    if cals:
        doc["calibration"] = {
            c: {
                "level": cal.level,
                "per_pair": cal.summary().to_dict(orient="records"),
                "mae": float(cal.rows["abs_error"].mean()),
                "coverage": float(cal.rows["covered"].mean()),
            }
            for c, cal in cals.items()
        }
    truth = res.truth.upper()
    parts = [
        f"# Meta-evaluation on {name}",
        "",
        f"N={cfg.n} per side, {len(cfg.seeds)} seeds, {len(cfg.models)} models, image model g = {main_g}, "
        f"similarity {cfg.sim}. Correlation across models of each candidate ({', '.join(cands)}) with the ground truth "
        f"{truth} (whatever K is); mean ± sd over seeds; bold: the best candidate; p = paired Wilcoxon signed-rank "
        "test over seeds of the best candidate's vs the runner-up's correlation. A candidate where lower is better "
        "enters with its sign flipped.",
        "",
        format_meta_table(res.table),
        "",
        f"## Which candidate tracks {truth} best (Student t intervals over seeds)",
        "",
        format_best_candidates(res.table),
        "",
        "## How weak may g be? (mean over pairs and seeds)",
        "",
        _df_md(res.degradation),
    ]
    for c, cal in cals.items():
        info = doc["calibration"][c]
        parts += [
            "",
            f"## Calibration: isotonic {c} -> {truth} map, leave one pair out ({int(cal.level * 100)}% intervals)",
            "",
            _df_md(cal.summary()),
            "",
            f"Overall MAE {info['mae']:.4f}, interval coverage {info['coverage']:.2f}.",
        ]
    parts += [
        "",
        "## Per pair and model (main image model)",
        "",
        format_summary(summarize(res.main.records, columns), columns),
    ]
    notes = list(dict.fromkeys(n for sub in res.results.values() for n in getattr(sub, "notes", [])))
    parts += [f"\nNote: {n}." for n in notes]
    md = "\n".join(parts)
    if figures:  # first: a failure here leaves no meta.json / meta.md that look complete
        _figures_and_html(res, cfg, out, md)
    atomic_write_text(out / "meta.json", json.dumps(json_ready(doc), indent=1))
    atomic_write_text(out / "meta.md", md + "\n")
    from .runs.grid import remove_earlier_outputs

    remove_earlier_outputs(out, ["report.html", "figures"] * figures, log)
    return md


def rank_disagreements(records: Sequence[dict[str, Any]], bkr_key: str, truth: str = TRUTH) -> pd.DataFrame:
    """Per pair and model, its place among the pair's models by BkR and by the ground truth.

    Args:
        records: the evaluation records (one per model, pair and seed).
        bkr_key: BkR's column, e.g. ``"bkr@10"``.
        truth: the ground truth's column.

    Returns:
        One row per (pair, model): ``pair``, ``model``, the two means over seeds, ``by_bkr`` and
        ``by_truth`` (1 = best, ties share the best place) and ``gap`` (their absolute difference);
        pairs in record order.
    """
    df = pd.DataFrame(records)
    df["pair"] = pair_labels(df)
    m = df.groupby(["pair", "model"], sort=False)[[bkr_key, truth]].mean().reset_index()
    for col, name in ((bkr_key, "by_bkr"), (truth, "by_truth")):
        m[name] = m.groupby("pair", sort=False)[col].rank(ascending=False, method="min").astype(int)
    m["gap"] = (m["by_bkr"] - m["by_truth"]).abs()
    return m


def disagreement_examples(result: Any, bkr_key: str, *, pairs: int = 2, n: int = 6, seed: int = 0) -> tuple[str, str]:
    """Example queries behind the largest disagreements of BkR and the ground truth.

    For the ``pairs`` language pairs where the two place the models most differently (the sum of
    :func:`rank_disagreements`' gaps), the model they place most differently and the model it
    trades places with: the queries on which the two models differ (:func:`.gallery.select_queries`,
    its "models disagree" group, up to ``n`` per sample), on BkR's sample and on XLR's.

    Args:
        result: the evaluation (:class:`~backretrieval.analysis.evaluate.EvalResult`).
        bkr_key: BkR's column, e.g. ``"bkr@10"``.
        pairs: how many pairs to show.
        n: queries per pair and sample.
        seed: seed of :func:`.gallery.select_queries`.

    Returns:
        ``(html, css)``: the section's HTML (a sentence where nothing can be shown) and the CSS
        of its gallery and thumbnails.
    """
    from . import gallery as G

    ranks = rank_disagreements(result.records, bkr_key)
    total = ranks.groupby("pair", sort=False)["gap"].sum()
    chosen = [p for p in total.sort_values(ascending=False, kind="stable").index[:pairs] if total[p] > 0]
    if not chosen:
        return "<p>BkR and the ground truth place the models alike on every pair.</p>", ""
    try:
        q = result.queries()
    except BackretrievalError as e:
        return f"<p>No examples: {html.escape(str(e))}</p>", ""
    thumbs, parts = G.Thumbnails(), []
    for pair in chosen:
        r = ranks[ranks["pair"] == pair].set_index("model")
        focus = r["gap"].idxmax()
        f = r.loc[focus]
        swapped = r[(np.sign(r["by_bkr"] - f["by_bkr"]) * np.sign(r["by_truth"] - f["by_truth"])) < 0]
        if swapped.empty:
            continue
        other = swapped["gap"].idxmax()
        o = r.loc[other]
        parts.append(f"<h3>{html.escape(pair)}</h3><p>{html.escape(bkr_key)} places {html.escape(focus)} "
                     f"{f['by_bkr']} and {html.escape(other)} {o['by_bkr']} of {len(r)} models; {TRUTH} places them "
                     f"{f['by_truth']} and {o['by_truth']}. The queries on which the two differ:</p>")
        sub = q[(q["pair"] == pair) & q["model"].isin([focus, other])]
        sel = G.select_queries(sub, n=2 * n, seed=seed)
        sel = sel[sel["why"] == G.DISAGREE].groupby("sample_kind", sort=False, dropna=False).head(n)
        for kind, title in (("non-matching", "BkR's queries (does the round trip lead back?)"),
                            ("matching", "XLR's queries (is the retrieved item the translation?)")):
            s = sel[sel["sample_kind"] == kind]
            if len(s):
                parts.append(f"<p><b>{title}</b></p>" + G.gallery_table(sub, s, thumbs, [focus, other]))
    if not parts:
        return "<p>No model trades places with another between BkR and the ground truth.</p>", ""
    return "\n".join(parts), G.CSS + thumbs.style()


def _figures_and_html(res: MetaResult, cfg: Any, out: Path, md: str) -> None:
    from . import figures as F
    from .html import Html, build_html

    fig_dir = out / "figures"
    fig_dir.mkdir(exist_ok=True)
    records = res.main.records
    pair0 = str(pair_labels(pd.DataFrame(records[:1])).iloc[0])
    cands = list(res.candidates)
    sections = [
        ("Summary", [md]),
        (f"{res.truth} vs each candidate ({pair0}, seed {cfg.seeds[0]})",
         [F.scatter_candidates(records, pair0, cfg.seeds[0], fig_dir / "scatter.png", truth=res.truth, candidates=cands)]),
    ]
    sections += [(f"{c} per model across pairs", [F.boxplot_by_model(records, c, fig_dir / f"boxplot_{slug(c)}.png")])
                 for c in cands]
    sections.append(("Pair x model", [F.heatmap(records, m, fig_dir / f"heatmap_{slug(m)}.png")
                                      for m in dict.fromkeys((*cands, res.truth))]))
    if len(res.results) > 1:
        sections.append(("How weak may g be?", [F.degradation_plot(res.degradation, fig_dir / "image_models.png")]))
    cals = [F.calibration_plot(cal, fig_dir / f"calibration_{slug(c)}.png")
            for c, cal in res.calibration.items() if not cal.rows.empty]
    if cals:
        sections.append(("Calibration", cals))
    # example queries for the first candidate that follows single queries back (BkR's per-query ranks)
    bkr = next((c for c in cands if parse_metric(c)[0].source == "bkr"), None)
    if bkr is not None:
        examples, css = disagreement_examples(res.main, bkr)
        sections.append((f"Where {bkr} and {TRUTH} disagree: example queries", [Html(examples)]))
    build_html(f"Backretrieval meta-evaluation: {' + '.join(res.datasets or [cfg.dataset])}", sections,
               out / "report.html", css if bkr is not None else "")
