"""The shareable report of a model comparison: ``compare --report`` and its Python form.

:func:`write_compare_report` renders a finished :class:`~backretrieval.analysis.comparison.Comparison`
(every interval, gap, test, Holm correction, win and the verdict computed once by
:func:`~backretrieval.analysis.compare.compare_models`; nothing is resampled here) and the
:class:`~backretrieval.analysis.evaluate.EvalResult` behind it into ``OUT/report.html`` (one
self-contained file: inline CSS, figures embedded as base64 PNG, no script, nothing fetched),
``OUT/report.json`` (the verdicts and every pairwise gap, machine-readable) and the figures as
PNG and SVG under ``OUT/figures/``. :func:`compare_report` runs the comparison first.
Per pair, an example gallery (:mod:`.gallery`) shows what each model retrieved for a few
queries, from the result's per-query table, with each image embedded once as a thumbnail.

The page opens with the verdict (:mod:`backretrieval.analysis.verdict`), per pair and overall:
ship, equivalent, not enough data or at chance, each pair with its power note, and the margin.
Where the records hold the ground truth (XLR) it leads and BkR is shown beside it as the check
(:mod:`backretrieval.analysis.check`: the same answer or not, with a link to the pair's gallery
where BkR would ship another model); otherwise BkR leads. Then, for each language pair, each model
against the pair's best by the verdict's own tests (:func:`verdicts`), which the ranking tables
and the forest plots mark the same way. Wins count significant gaps over every two models of a
pair (Holm over all of the pair's model pairs). "The price of
each answer" puts each model's quality beside its vector size, measured throughput and, for
embedding APIs, tokens and cost per million items (:mod:`backretrieval.analysis.costs`), with the
quality-versus-cost chart and its Pareto front.
"""
from __future__ import annotations

import html
import json
import shlex
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..analysis.compare import compare_models
from ..analysis.costs import cost_basis
from ..analysis.comparison import Comparison
from ..analysis.evaluate import EvalResult
from ..analysis.evaluate.result import slug
from ..analysis.check import gallery_anchor
from ..analysis.verdict import lead_and_check
from ..core import BackretrievalError, atomic_write_text, json_ready
from ..core.env import environment
from ..core.io import check_writable_dir
from ..metrics import table
from . import compare_figures as F
from . import gallery as G
from .html import img_tag, page
from .table import ANSWERS, MARKS

_CSS = """
.verdicts li { margin: .25em 0; }
.verdict { border-left: 4px solid #8a5a00; padding: .5em .8em; background: #fbf7ee; }
.verdict.ship { border-color: #0a6e0a; background: #f0f8f0; }
.verdict.open { border-color: #777; background: #f4f4f4; }
.open { color: #444; }
.sig { color: #0a6e0a; font-weight: 600; }
.tie { color: #8a5a00; }
.row { display: flex; flex-wrap: wrap; gap: 1em; }
.row figure { flex: 1 1 420px; margin: 0; }
.stack figure { margin: 0 0 1em 0; }
td.l { text-align: left; }
figcaption { font-size: .85em; color: #555; }
pre { background: #f4f4f4; padding: .6em; white-space: pre-wrap; word-break: break-all; }
div.scroll { max-width: 100%; overflow-x: auto; }
td, th { overflow-wrap: anywhere; }
.row figure { min-width: 0; }
ul.notes { font-size: .85em; color: #444; }
p.verdict.cheap { border-color: #1f5f9f; background: #eef4fb; }
"""


def chance_level(metric: str, n: int) -> float | None:
    """The expected value of ``metric`` for a model that ranks at random among ``n`` candidates,
    as the metric table declares it (:func:`backretrieval.metrics.table.chance_level`): K/N for
    ``...@K``, the mean of 1/r over r = 1..N for ``..._mrr``, 0 for CORR; None when it declares none."""
    return table.chance_level(metric, n)


def verdicts(c: Comparison) -> list[dict[str, Any]]:
    """One plain-language sentence per language pair and model against the pair's best, by the
    verdict's own tests (:attr:`~backretrieval.analysis.comparison.Comparison.equivalence`: the
    best against each other model, superiority and equivalence within the margin, each
    Holm-adjusted over those comparisons), so the sentences, the table marks and the verdict say
    the same.

    Args:
        c: the comparison.

    Returns:
        Dicts with ``pair, better, worse, diff, low, high, p_adj, significant, eq_low, eq_high,
        p_tost_adj, equivalent, vs_best, text`` (``better``: the pair's best; ``significant``: it
        is significantly better); plus one ``at_chance`` entry per model whose interval reaches
        down to the chance level ("below chance" when all of it is below).
    """
    out = []
    pct = f"{1 - 2 * c.alpha:.0%}"
    for pair, g in c.per_pair.groupby("pair", sort=False):
        rows = list(g.sort_values("rank").itertuples(index=False))
        tests = c.equivalence[c.equivalence["pair"] == pair]
        for t in tests.itertuples(index=False):
            span = f"{t.diff:.3f} [{t.diff_low:.3f}, {t.diff_high:.3f}]"
            within = f"{pct} interval [{t.eq_low:.3f}, {t.eq_high:.3f}]"
            k1 = int(t.comparisons)
            how = f"Holm over {k1} comparison{'s' * (k1 != 1)} with the best"
            if t.better and t.equivalent:
                text = (f"{t.model_a} beats {t.model_b} by {span} ({how}, p = {t.p_adj:.2g}), a gap within ±{c.margin:g} "
                        f"({within}): equivalent in practice")
            elif t.better:
                text = f"{t.model_a} beats {t.model_b} by {span}, significant ({how}, p = {t.p_adj:.2g})"
            elif t.equivalent:
                text = f"{t.model_b} is equivalent to {t.model_a}: gap {span}, {within} inside ±{c.margin:g} ({how}, p = {t.p_tost_adj:.2g})"
            else:
                why = (f"; its {c.level:.0%} interval excludes 0, but the test corrected for the {k1} comparisons decides"
                       if t.diff_low > 0 else "")
                text = (f"{t.model_a} and {t.model_b}: undecided at this N ({c.n} queries x {c.seeds or 1} seed"
                        f"{'s' if (c.seeds or 1) != 1 else ''}; gap {span}, p = {t.p_adj:.2g}{why}; {within} not inside "
                        f"±{c.margin:g})")
            out.append({"pair": pair, "better": t.model_a, "worse": t.model_b, "diff": float(t.diff), "low": float(t.diff_low),
                        "high": float(t.diff_high), "p_adj": float(t.p_adj), "significant": bool(t.better),
                        "eq_low": float(t.eq_low), "eq_high": float(t.eq_high), "p_tost_adj": float(t.p_tost_adj),
                        "equivalent": bool(t.equivalent), "vs_best": t.vs_best, "text": text})
        if c.chance is not None:
            for r in rows:
                if r.ci_low <= c.chance:
                    where = "below chance" if r.ci_high < c.chance else "not distinguishable from chance"
                    out.append({"pair": pair, "at_chance": r.model, "text": (
                        f"{r.model} is {where} ({c.metric} {r.estimate:.3f} "
                        f"[{r.ci_low:.3f}, {r.ci_high:.3f}], chance {c.chance:.3g})")})
    return out


def compare_report(result: EvalResult, out_dir: str | Path, metric: str | None = None, *, n_boot: int = 1000,
                   level: float = 0.95, alpha: float = 0.05, margin: float | None = None, command: str | None = None) -> Path:
    """Rank the models of ``result`` by ``metric`` (:func:`~backretrieval.analysis.compare.compare_models`:
    default ``bkr@K``, or ``xlr@K`` for text-only results; the XLR/BkR counterpart beside it where
    the data allow) and write the report (see :func:`write_compare_report`).

    Args:
        result: a finished evaluation.
        out_dir: the folder (created).
        metric: the metric to rank by (None: as above).
        n_boot: bootstrap resamples.
        level: confidence level of the intervals.
        alpha: significance level of the gaps.
        margin: the verdict's equivalence margin (None: the configuration's, 0.05 unless set).
        command: what produced it, shown verbatim (default: this Python call).

    Returns:
        The path of ``report.html``.
    """
    if metric is None:
        metric = f"xlr@{result.config.k}" if result.text_only else f"bkr@{result.config.k}"
    c = compare_models(result, metric, n_boot=n_boot, level=level, alpha=alpha, margin=margin)
    if command is None:
        command = (f"Python: backretrieval.compare_report(result, out_dir, metric={metric!r}, "
                   f"n_boot={n_boot}, level={level}, alpha={alpha}, margin={c.margin:g})")
    return write_compare_report(c, result, out_dir, command=command)


def write_compare_report(comparison: Comparison, result: EvalResult, out_dir: str | Path, *,
                         command: str | Sequence[str] | None = None, seed: int = 0, examples: int = 12) -> Path:
    """Write ``report.html``, ``report.json`` and ``figures/*.png|svg`` into ``out_dir``.

    Args:
        comparison: the finished comparison (:func:`~backretrieval.analysis.compare.compare_models`),
            with its counterpart in ``beside`` where the records have one: the ground truth
            (XLR) leads where it is there, the metric without ground truth (BkR) beside it.
        result: the evaluation the comparison was computed from (configuration and provenance
            for the header, per-query results for the galleries).
        out_dir: the folder (created).
        command: what produced it, shown verbatim (a list is shell-quoted); default: this
            Python call.
        seed: draws the galleries' random queries.
        examples: queries per pair and sample in the example galleries (0: no galleries), from
            the result's per-query table (:meth:`EvalResult.queries`,
            :func:`backretrieval.report.gallery.select_queries`).

    Returns:
        The path of ``report.html`` (written last, atomically: figures and report.json first;
        the galleries' images are read before anything is written).

    Raises:
        OutputError: ``out_dir`` is a file, below a file, or not writable.
        DataError: an image of the galleries is missing or unreadable (nothing is written).
    """
    if not isinstance(comparison, Comparison):
        raise BackretrievalError(f"write_compare_report takes one finished Comparison (from compare_models()), got "
                                 f"{type(comparison).__name__}")
    lead, check = lead_and_check(comparison)
    cs = [lead] + ([check] if check is not None else [])
    out = check_writable_dir(out_dir, "compare_report:")
    gallery = _galleries(result, lead, examples, seed) if examples else None  # reads every image before anything is written
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    if command is None:
        command = f"Python: backretrieval.report.compare_report.write_compare_report(<comparison by {comparison.metric}>, result, out_dir)"
    elif not isinstance(command, str):
        command = shlex.join(list(command))
    v = comparison.verdict
    blocks, doc = [], {"metric": comparison.metric, "command": command, "verdict": v, "metrics": []}
    for c in cs:
        w = c.across_pairs[["model", "wins", "losses", "ties"]]
        stem = fig_dir / f"compare_{slug(c.metric)}"
        figs = {
            "heatmap": F.heatmap_ci(c, stem.with_name(stem.name + "_heatmap"), c.chance),
            "forest": F.forest(c, stem.with_name(stem.name + "_forest"), c.chance),
            "spread": F.spread(c, stem.with_name(stem.name + "_spread"), c.chance),
            "wins": F.wins_chart(c, w, stem.with_name(stem.name + "_wins")),
        }
        sentences = verdicts(c)
        blocks.append((c, c.chance, c.pairwise, w, figs, sentences))
        doc["metrics"].append({
            "metric": c.metric, "level": c.level, "alpha": c.alpha, "chance": c.chance, "verdicts": sentences,
            "pairwise": c.pairwise.to_dict(orient="records"), "wins": w.to_dict(orient="records"),
            "figures": {k: [str(p.relative_to(out)) for p in ps] for k, ps in figs.items()},
        })
    price = F.cost_quality(comparison, fig_dir / f"compare_{slug(comparison.metric)}_cost")
    if price is not None:
        doc["costs"] = {"models": comparison.costs.to_dict(orient="records"), "figure": [str(p.relative_to(out)) for p in price]}
    agree = v.get("agreement")
    if agree is not None:
        doc["agreement"] = {"metric": check.metric, "truth": lead.metric, "per_pair": agree}
    if gallery is not None:
        doc["examples"] = gallery["selected"].to_dict(orient="records") if "selected" in gallery else gallery["note"]
    atomic_write_text(out / "report.json", json.dumps(json_ready(doc), indent=1))
    path = out / "report.html"
    atomic_write_text(path, _html(blocks, result, command, lead.seeds or 1, agree, v, gallery, (comparison, price)))
    return path


_SAMPLE_TITLE = {
    "non-matching": "BkR's queries (no translation among the targets): does the retrieved item's image lead back?",
    "matching": "XLR's queries (the translation is among the targets): is the retrieved item the translation?",
}


def _galleries(result: EvalResult, c: Comparison, n: int, seed: int) -> dict[str, Any]:
    """Per pair, the example gallery of each sample, models in ``c``'s order on that pair:
    ``{"html": ..., "css": ..., "selected": frame}``, or ``{"note": why}`` where the records
    keep no per-query results (approximate search)."""
    try:
        q = result.queries()
    except BackretrievalError as e:
        return {"note": f"no example gallery: {e}"}
    sel = G.select_queries(q, n=n, seed=seed)
    thumbs = G.Thumbnails()
    parts = []
    for pair in dict.fromkeys(c.per_pair["pair"]):
        order = c.per_pair[c.per_pair["pair"] == pair].sort_values("rank")["model"].tolist()
        parts.append(f'<h3 id="{gallery_anchor(pair)}">{_e(pair)}</h3>')
        for sample, title in _SAMPLE_TITLE.items():
            s = sel[(sel["pair"] == pair) & (sel["sample_kind"] == sample)]
            if len(s):
                parts += [f"<p><b>{_e(title)}</b></p>", G.gallery_table(q, s, thumbs, order)]
    return {"html": "\n".join(parts), "css": G.CSS + thumbs.style(), "selected": sel}


_VERDICT_CLASS = {"ship": "ship", "equivalent": "ship", "only model": "open", "per pair": "tie", "not enough data": "open",
                  "at chance": "open"}
_AGREE_CLASS = {"agrees": "sig", "differs": "tie", "not enough data": "open"}
_MARK_CLASS = {"best": "sig", "worse": "", "worse, within margin": "", "equivalent": "sig", "undecided": "tie"}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _cell(v: Any) -> str:
    text = str(v)
    numeric = text[:1].isdigit() or text[:1] in "[-~>" or text == ""
    return f"<td>{_e(v)}</td>" if numeric else f'<td class="l">{_e(v)}</td>'


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in r) + "</tr>" for r in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _figures(items: Sequence[tuple[Path, str]], wide: bool = False) -> str:
    """Figures side by side (``wide``: one below the other), each with its caption."""
    figs = "".join(f"<figure>{img_tag(png)}<figcaption>{_e(cap)} (also {_e(png.with_suffix('.svg').name)})"
                   "</figcaption></figure>" for png, cap in items)
    return f'<div class="{"stack" if wide else "row"}">{figs}</div>'


def _num(v: Any, fmt: str) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else format(v, fmt)


def _money(v: Any) -> str:
    return "" if v is None or pd.isna(v) else (f"${v:,.2f}" if v >= 0.01 else f"${v:.2g}")


def _cost_cell(r: Any) -> str:
    """The cost per million items, or why it is unknown."""
    if r["cost_per_1m_items"] is not None and not pd.isna(r["cost_per_1m_items"]):
        return _money(r["cost_per_1m_items"])
    if r["price_per_1m_tokens"] is not None and not pd.isna(r["price_per_1m_tokens"]):
        return "unknown (no token count)" if r["tokens_counted_by"] else "unknown"
    return ""


def _price_section(c: Comparison, figure: tuple[Path, Path] | None, run: dict[str, Any] | None = None) -> str:
    """The price of each answer: a table of quality beside vector size, throughput, tokens and
    cost per model, where each throughput comes from, and the quality-versus-cost chart."""
    quality = c.across_pairs.set_index("model")["mean"]
    encoding = (run or {}).get("encoding") or {}
    rows, notes = [], []
    for _, r in c.costs.iterrows():
        rows.append([r["model"], _num(quality.get(r["model"]), ".4f"), _num(r["bytes_per_item"], ",.0f"),
                     _num(r["items_per_second"], ",.4g"), _num(r["items_per_cpu_second"], ",.4g"),
                     _num(r["tokens_per_item"], ".1f") or ("unknown" if r["tokens_counted_by"] else ""), _cost_cell(r)])
        how = r["tokens_counted_by"]
        notes.append(f"<li><b>{_e(r['model'])}</b>: speed {_e(r['speed_note'])}"
                     + (f"; tokens {_e(how)}" if how else "") + "</li>")
    machines = {json.dumps(e.get("machine"), sort_keys=True): e.get("machine") for e in encoding.values()
                if isinstance(e, dict) and isinstance(e.get("machine"), dict)}
    where = "; ".join(f"{m.get('cpu')}, {m.get('cores')} core{'s' * (m.get('cores') != 1)}, {m.get('device')}"
                      for m in machines.values())
    out = ["<h2>The price of each answer</h2>",
           "<p>Beside each model's quality: its vector size (bytes per item as it is served: float32 is 4 bytes per "
           "dimension), its encoding throughput recorded on this machine" + (f" ({_e(where)})" if where else "")
           + " in items per second and per CPU-second (measured when its vectors were made, or on a fixed sample of "
           "its texts when none was recorded; the first batch, which loads the model, is not counted), and for "
           "embedding APIs the tokens per item the server reported and the cost per million items at the model's "
           "price_per_1m_tokens (unknown where the server reports no usage). A rerun shows the same figures: they "
           "are the model's record on this machine, not this run's timing.</p>",
           _table(["model", f"{c.metric} (mean)", "bytes / item", "items / s", "items / CPU-s", "tokens / item",
                   "cost / 1M items"], rows),
           f'<ul class="notes">{"".join(notes)}</ul>']
    if figure is not None:
        out.append(_figures([(figure[0], "quality against cost, one colour and marker per model; filled and joined: "
                                         "the Pareto front (no model better on both); bars: the quality intervals")],
                            wide=True))
    return "".join(out)


def _verdict_box(verdict: dict[str, Any], has_gallery: bool) -> str:
    """The verdict, first on the page: the overall answer, each pair's answer with its power
    note, the check (a link to the pair's gallery where the check would ship another model),
    and what the four answers and the margin mean."""
    items = []
    for v in verdict["pairs"]:
        power = v.get("power")
        note = (f'<br><span class="open">Power: {_e(power["text"])}.</span>'
                if power and "Power:" not in v["text"] else "")
        items.append(f"<li>{_e(v['text'])}{note}</li>")
    check = ""
    if verdict.get("check_text"):
        links = "".join(f' <a href="#{a["gallery"]}">{_e(a["pair"])}: the gallery</a>' for a in verdict.get("agreement") or []
                        if a["status"] == "differs" and has_gallery)
        check = f"<p>{_e(verdict['check_text'])}{links}</p>"
    return (f'<div class="verdict {_VERDICT_CLASS[verdict["status"]]}"><p><b>{_e(verdict["summary"])}</b></p>'
            f'<ul class="verdicts">{"".join(items)}</ul>{check}<p class="open">{_e(ANSWERS.format(m=verdict["margin"]))}</p></div>')


def _ranking(c: Comparison, pct: int) -> str:
    """One comparison's ranking table, each model marked against its pair's best by the verdict's tests."""
    eq = c.equivalence.set_index(["pair", "model_b"]) if len(c.equivalence) else None
    rows = []
    for _, r in c.per_pair.iterrows():
        gap = p = p_eq = ""
        if eq is not None and (r["pair"], r["model"]) in eq.index:
            t = eq.loc[(r["pair"], r["model"])]
            gap = f"{-t['diff']:.4f} [{-t['diff_high']:.4f}, {-t['diff_low']:.4f}]"
            p, p_eq = f"{t['p_adj']:.3g}", f"{t['p_tost_adj']:.3g}"
        rows.append([r["pair"], r["rank"], r["model"], f"{r['estimate']:.4f}", f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]",
                     MARKS.get(r.get("vs_best", ""), ""), gap, p, p_eq])
    return _table(["pair", "rank", "model", c.metric, f"{pct}% CI", "vs best", "gap to best", "p (Holm)",
                   "p equivalent (Holm)"], rows)


def _html(blocks, result: EvalResult, command: str, n_seeds: int, agree: list[dict[str, Any]] | None,
          verdict: dict[str, Any], gallery: dict[str, Any] | None = None, price: Any = None) -> str:
    cfg = result.config
    c0, chance0 = blocks[0][0], blocks[0][1]
    names = [b[0].metric for b in blocks]
    pct = int(round(c0.level * 100))
    models = F.model_order(c0)
    pairs = list(dict.fromkeys(c0.per_pair["pair"]))
    what = "text only" if result.text_only else f"image model g = {cfg.image_model_name}"
    chance_txt = "" if chance0 is None else f" Chance level of {c0.metric}: {chance0:.4g} (red line on the figures)."
    h = [f"<h1>Which model? {_e(' and '.join(names))} on {_e(cfg.dataset)}</h1>"]
    if verdict:
        h.append(_verdict_box(verdict, gallery is not None and "html" in gallery))
        cheapest = getattr(price[0], "cheapest", None) if price is not None else None
        if cheapest:
            h.append(f'<p class="verdict cheap"><b>The cheapest model as good as the best</b> '
                     f'({_e(cost_basis(cheapest["cost"]))}): {_e(cheapest["text"])}</p>')
    h.append(f"<p>{len(models)} models, {len(pairs)} language pairs, N = {cfg.n} queries per pair and seed, "
             f"{n_seeds} seed{'s' if n_seeds != 1 else ''}, {_e(what)}, similarity {_e(cfg.sim)}. Intervals: {pct}% "
             f"seed-stratified percentile bootstrap over queries. The verdict tests the best model of each pair against "
             f"each other model: the paired sign-flip test (better?) and two one-sided tests of a gap within "
             f"±{c0.margin:g} (equivalent?), each Holm-adjusted over those comparisons, alpha = {c0.alpha:g}."
             f"{_e(chance_txt)}</p>")
    if len(blocks) > 1 and agree is not None:
        h.append(f"<p>{_e(c0.metric)} is the ground truth (the data link languages); {_e(blocks[1][0].metric)}, which "
                 f"needs no translations, is shown beside it as the check.</p>")
    elif len(blocks) > 1:
        h.append(f"<p>{_e(blocks[1][0].metric)} is shown beside {_e(c0.metric)} (the records have what it needs).</p>")
    if agree:
        items = "".join(f'<li class="{_AGREE_CLASS[a["status"]]}"><b>{_e(a["pair"])}</b>: {_e(a["text"])}'
                        + (f' (<a href="#{a["gallery"]}">the gallery</a>)' if gallery is not None and "html" in gallery else "")
                        + "</li>" for a in agree)
        check = blocks[1][0].metric
        h.append(f"<h2>{_e(check)} against the ground truth {_e(c0.metric)}</h2>"
                 f"<p>These data have known translations, so the answer {_e(check)} gives without them can be "
                 f"checked: green where it gives the same answer (the same model to ship, or the same models "
                 f"equivalent), amber where it would give another, grey where either metric cannot decide at this N, "
                 f"so the check could not have failed.</p><ul class=\"verdicts\">{items}</ul>")
    h.append("<h2>Each model against the best</h2>")
    for c, _, _, _, _, v in blocks:
        h.append(f"<h3>By {_e(c.metric)}</h3>")
        for pair in dict.fromkeys(x["pair"] for x in v) if v else []:
            items = "".join(f'<li class="{_MARK_CLASS.get(x.get("vs_best"), "tie")}">{_e(x["text"])}</li>'
                            for x in v if x["pair"] == pair)
            h.append(f'<p><b>{_e(pair)}</b></p><ul class="verdicts">{items}</ul>')
    h.append("<h2>Language pairs x models</h2>")
    h.append(_figures([(b[4]["heatmap"][0], "; ".join(filter(None, (f"{b[0].metric}: estimate ± interval half-width",
                                                                      F.chance_note(b[0], b[1]))))) for b in blocks]))
    h.append("<h2>Per pair: each model with its interval</h2>")
    h.append(_figures([(b[4]["forest"][0], f"{b[0].metric} per pair; right: each model against the best (< significantly "
                                          f"worse, ≈ within ±{b[0].margin:g}, ? undecided)") for b in blocks], wide=True))
    for c, *_ in blocks:
        h.append(f"<h3>Ranking by {_e(c.metric)}</h3>")
        h.append(_ranking(c, pct))
    h.append("<h2>Average over pairs and its spread</h2>")
    h.append(_figures([(b[4]["spread"][0], f"{b[0].metric}: one point per language pair") for b in blocks]))
    h.append("<h2>Wins and mean rank</h2>")
    h.append("<p>A win: on one language pair, the model's gap to one other model is significant after Holm "
             "(over all of that pair's model pairs). Rank 1 = best on a pair.</p>")
    h.append(_figures([(b[4]["wins"][0], f"{b[0].metric}: significant wins, ties, losses") for b in blocks], wide=True))
    for c, *_ in blocks:
        rows = [[r["model"], f"{r['mean']:.4f}", f"{r['sd']:.4f}", f"{r['min']:.4f}", f"{r['max']:.4f}",
                 f"{r['mean_rank']:.2f}", r["firsts"], r["wins"], r["ties"], r["losses"]] for _, r in c.across_pairs.iterrows()]
        h.append(f"<h3>By {_e(c.metric)}</h3>")
        h.append(_table(["model", "mean", "sd over pairs", "min", "max", "mean rank", "rank-1 pairs",
                         "significant wins", "ties", "losses"], rows))
    if price is not None and len(price[0].costs):
        h.append(_price_section(*price, result.run))
    if gallery is not None:
        h.append("<h2>Examples: what each model retrieved</h2>")
        h.append(f"<p>{_e(G.HOW_TO_READ)} Models in the order of {_e(c0.metric)} on each pair.</p>")
        h.append(gallery.get("html") or f"<p>{_e(gallery['note'])}</p>")
    h.append("<h2>How to read this</h2><ul>"
             "<li>An interval is where the score would land on most other samples of N queries from the same data; "
             "two overlapping intervals do not mean a tie: the gap's own (paired) interval and its test decide.</li>"
             "<li>'Not enough data' is a statement about the sample, not the models: neither a winner nor equivalence "
             "within the margin can be shown at this N. The verdict says what this N detects, the N that would "
             "settle it and whether the data hold it; 'equivalent' (pick by cost or speed) needs its own test and is "
             "never read from a gap that is merely not significant.</li>"
             "<li>BkR (Backretrieval) needs no translations: it retrieves images through the texts. Trust its ranking "
             "where it has been checked against ground truth on similar data (docs/meta.md, calibration), and confirm "
             "a close call with the human study (docs/study.md).</li></ul>")
    h.append("<h2>Provenance</h2>")
    h.append(f"<p>Command:</p><pre>{_e(command)}</pre>")
    env = result.run.get("environment") or environment()
    pkgs = env.get("packages", {}) if isinstance(env.get("packages"), dict) else {}
    rows = [[k, v] for k, v in env.items() if not isinstance(v, (dict, list))]
    rows += [[k, v] for k, v in pkgs.items() if v is not None]
    rows += [[f"BLAS {i}", ", ".join(f"{k}={v}" for k, v in b.items())] for i, b in enumerate(env.get("blas") or [])]
    h.append(_table(["software", "version"], rows))
    inputs = result.run.get("inputs")
    if inputs:
        h.append(f"<p>Inputs (fingerprints):</p><pre>{_e(json.dumps(inputs, indent=1, default=str))}</pre>")
    css = _CSS + (gallery.get("css", "") if gallery else "")
    return page(f"Backretrieval comparison: {' and '.join(names)} on {cfg.dataset}", "\n".join(h), css)
