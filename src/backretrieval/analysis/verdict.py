"""The verdict of a comparison: per language pair and overall, one of four answers, each with
the numbers behind it and one sentence saying why.

Read from a finished :class:`~.comparison.Comparison` (nothing is resampled here): the answer of
each pair is :func:`~.decision.pair_status` of the decision's tests, the best model against each
other model with Holm over those k - 1 comparisons (:attr:`~.comparison.Comparison.equivalence`).
Where the records hold the ground truth (XLR, the data link languages) it *leads*: the verdict is
XLR's and BkR is the check beside it (:mod:`.check`); otherwise the ranked metric leads.

* **ship X** -- X is significantly better than every other model (models whose gap to X is
  real but inside the margin are named: as good in practice);
* **equivalent** -- every model X does not beat significantly is shown within the margin of it
  (two one-sided tests): pick among them by cost or speed. Only this answer says so;
* **not enough data** -- neither a winner nor equivalence can be shown at this N: the verdict
  says which models are undecided (and which already equivalent), the smallest gap this N
  detects, the N that would settle it and whether the data hold it, and, where several models
  sit at the metric's ceiling (K/N large), the K that separates them;
* **at chance** -- the best model's interval reaches the metric's chance level: nothing can be
  concluded. One model only is "the only model".

Overall, a model that is shipped on every pair, or is the only model within the margin of the
best on every pair, is shipped; several such models are equivalent (pick by cost or speed);
when no model is acceptable on every decided pair the choice depends on the pair ("per pair");
undecided pairs make the overall answer "not enough data" (or "at chance" when every pair is).
Each pair carries its power note (:func:`pair_power`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

from ..metrics.table import parse_metric
from .decision import ceiling_of, identical, pair_status, smaller_k
from .evaluate.sensitivity import detectable_gap, queries_for_equivalence, queries_for_gap

if TYPE_CHECKING:
    from .comparison import Comparison

Limits = Mapping[str, Mapping[str, int | None]]


def lead_and_check(c: "Comparison") -> tuple["Comparison", "Comparison | None"]:
    """The comparison the verdict follows and the one shown beside it as a check.

    Args:
        c: a comparison, with its counterpart in ``c.beside`` where the records have it.

    Returns:
        ``(lead, check)``: the ground-truth comparison (XLR) and the one without ground truth
        (BkR) when both exist, in that order whichever was asked for; otherwise ``(c, c.beside)``.
    """
    b = c.beside
    if b is not None and truth_metric(b.metric) and not truth_metric(c.metric):
        return b, c
    return c, b


def truth_metric(metric: str) -> bool:
    """Whether ``metric`` is a ground-truth metric (XLR: it needs the data's cross-lingual links).

    Args:
        metric: a metric name.

    Returns:
        True for the XLR metrics.
    """
    return parse_metric(metric)[0].needs_truth


def names(models: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``.

    Args:
        models: model names.

    Returns:
        The names joined for a sentence.
    """
    return ", ".join(models[:-1]) + " and " + models[-1] if len(models) > 1 else "".join(models)


def _span(diff: float, low: float, high: float) -> str:
    return f"{diff:.3f} [{low:.3f}, {high:.3f}]"


def _rows(c: "Comparison", pair: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pair's models best first (``per_pair`` rows) and the decision's tests in that order."""
    g = c.per_pair[c.per_pair["pair"] == pair].sort_values("rank").to_dict(orient="records")
    eq = c.equivalence[c.equivalence["pair"] == pair].to_dict(orient="records")
    where = {r["model"]: i for i, r in enumerate(g)}
    return g, sorted(eq, key=lambda t: where[t["model_b"]])


def _s(n: int) -> str:
    return "s" * (n != 1)


def pair_power(c: "Comparison", pair: str, largest_n: Limits | None = None) -> dict[str, Any] | None:
    """What this N lets the pair's tests detect, and what would settle the pair (after the run:
    the spread of the per-query differences is the data's, :mod:`.evaluate.sensitivity`).

    Args:
        c: the comparison.
        pair: a pair label of ``c.per_pair``.
        largest_n: per pair label, the largest N the data allow per sample kind (``"xlr"``,
            ``"bkr"``; ``EvalResult.largest_n``); None: unknown.

    Returns:
        None for one model; else ``n``, ``seeds``, ``queries`` (N x seeds), ``comparisons``
        (k - 1), ``vs`` (the runner-up, whose comparison is measured), ``sd`` (of one query's
        difference to it), ``detectable_gap`` (the lead over each other model shipped 80 % of
        the time at this N; None when no lead up to 1 is), ``margin``, ``n_for_margin`` (N per
        seed at which a lead of the margin is shipped 80 % of the time), ``n_for_equivalence``
        (N at which the runner-up's observed gap would be shown inside the margin 80 % of the
        time; None when it is not inside), ``largest_n`` (the most the data allow for the
        metric's sample; None: unknown) and ``text``.
    """
    rows, tests = _rows(c, pair)
    if not tests:
        return None
    seeds = c.seeds or 1
    queries = (c.n or 0) * seeds
    k1 = len(tests)
    runner = tests[0]
    spreads = [t["se"] for t in tests if isinstance(t["se"], float) and math.isfinite(t["se"]) and t["se"] > 0]
    se = runner["se"] if runner["se"] and math.isfinite(runner["se"]) else max(spreads, default=0.0)
    sd = se * math.sqrt(queries) if queries else 0.0
    hits = parse_metric(c.metric)[1] is not None  # 0/1 outcomes, tested exactly
    gap = detectable_gap(queries, sd, k1, c.alpha, discrete=hits) if sd > 0 else 0.0
    per_seed = lambda q: None if q is None or math.isinf(q) else max(math.ceil(q / seeds), 1)  # noqa: E731
    n_margin = per_seed(queries_for_gap(c.margin, sd, k1, c.alpha, discrete=hits)) if sd > 0 else None
    n_eq = per_seed(queries_for_equivalence(runner["diff"], c.margin, sd, k1, c.alpha)) if sd > 0 else None
    family = "xlr" if truth_metric(c.metric) else "bkr"
    most = (largest_n or {}).get(pair, {}).get(family)
    out = {"n": c.n, "seeds": seeds, "queries": queries, "comparisons": k1, "vs": runner["model_b"], "sd": sd,
           "detectable_gap": None if math.isinf(gap) else gap, "margin": c.margin, "n_for_margin": n_margin,
           "n_for_equivalence": n_eq, "largest_n": most}
    out["text"] = _power_text(c, out)
    return out


def _power_text(c: "Comparison", p: dict[str, Any]) -> str:
    """The power note of one pair in words."""
    if p["sd"] == 0:
        return (f"every query's outcome is the same for {p['vs']} as for the best: the gap is exactly 0 at this N, and "
                "more queries are needed only to see a difference at all")
    over = f"each of the other {p['comparisons']} models" if p["comparisons"] > 1 else "the other model"
    seen = (f"a lead of {p['detectable_gap']:.3f} or more over {over}" if p["detectable_gap"] is not None
            else f"no lead over {over}, however large,")
    text = (f"at N = {p['n']} x {p['seeds']} seed{_s(p['seeds'])} ({p['queries']:,} queries) {c.metric} detects {seen} 80% "
            f"of the time (spread of the per-query difference to {p['vs']}: sd {p['sd']:.2f}; Holm over {p['comparisons']})")
    needs = []
    if p["n_for_margin"] is not None:
        needs.append(f"a lead of {p['margin']:g} needs about N = {p['n_for_margin']:,}" if p["n_for_margin"] > (p["n"] or 0)
                     else f"a lead of {p['margin']:g} is detected at this N")
    if p["n_for_equivalence"] is not None and p["n_for_equivalence"] > (p["n"] or 0):
        needs.append(f"showing {p['vs']} within ±{p['margin']:g} (if its gap is what it seems) about N = "
                     f"{p['n_for_equivalence']:,}")
    if needs:
        text += "; " + ", and ".join(needs)
    most, wanted = p["largest_n"], max([x for x in (p["n_for_margin"], p["n_for_equivalence"]) if x is not None], default=0)
    if most is not None and most <= (p["n"] or 0):
        text += f"; N = {p['n']} is the most these data allow, so only more items (not more seeds) can add queries"
    elif most is not None and wanted > most:
        text += f"; the data allow N up to {most:,}: more seeds add queries, more items more distinct ones"
    elif most is not None:
        text += f"; the data allow N up to {most:,}"
    return text


def _saturated(c: "Comparison", rows: list[dict[str, Any]], leading: list[str]) -> str:
    """A sentence when several leading models sit at the metric's ceiling at K > 1, else ``""``."""
    spec, k = parse_metric(c.metric)
    if not k or k <= 1 or spec.outcome is None:
        return ""
    top = [r for r in rows if r["model"] in leading and r["ci_high"] >= 1 - 1e-9 and r["estimate"] >= 0.95]
    if len(top) < 2:
        return ""
    at1 = c.metric.split("@")[0] + "@1"
    return (f". {c.metric} saturates: {names([r['model'] for r in top])} score {top[-1]['estimate']:.3f} or more at K = {k} "
            f"(K/N = {k / c.n:.2g}), where it cannot tell them apart; at K = 1 they may separate ({at1} ranks the same "
            f"records: --metric {at1})")


def pair_verdict(c: "Comparison", pair: str, largest_n: Limits | None = None) -> dict[str, Any]:
    """The verdict of one language pair.

    Args:
        c: the comparison the verdict follows.
        pair: a pair label of ``c.per_pair`` (``"en->de"``).
        largest_n: per pair label, the largest N the data allow per sample kind (``"xlr"``,
            ``"bkr"``; ``EvalResult.largest_n``); None: unknown.

    Returns:
        ``pair``; ``status`` (``"ship"``, ``"equivalent"``, ``"not enough data"``, ``"at
        chance"`` or ``"only model"``); ``ship`` (the model to ship, or None); ``margin``;
        ``equivalent_to_best`` (the models shown equivalent to the best by the equivalence test,
        best first, the best included: just ``[best]`` when none); ``leading`` (the best and
        every model not significantly worse, best first); ``best`` (the best model with
        ``estimate, low, high``); ``gap`` (the best model's gap to the runner-up with its
        interval, Holm-adjusted p-value and equivalence interval; None for one model);
        ``comparisons`` (the k - 1 comparisons corrected for); ``power`` (:func:`pair_power`)
        and ``text``.
    """
    rows, tests = _rows(c, pair)
    top = rows[0]
    best = {"model": top["model"], "estimate": float(top["estimate"]), "low": float(top["ci_low"]),
            "high": float(top["ci_high"])}
    interval = {r["model"]: (float(r["estimate"]), float(r["ci_low"]), float(r["ci_high"])) for r in rows}
    ceiling = ceiling_of(interval, best["model"], tests, smaller_k(c.metric))
    status = pair_status([t["vs_best"] for t in tests], best["low"], c.chance, ceiling,
                         identical(tests, best["estimate"], c.chance))
    leading = [best["model"]] + [t["model_b"] for t in tests if not t["better"]]
    equivalent = [best["model"]] + [t["model_b"] for t in tests if t["equivalent"]]
    gap = None
    if tests:
        t = tests[0]
        gap = {"vs": t["model_b"], "diff": float(t["diff"]), "low": float(t["diff_low"]), "high": float(t["diff_high"]),
               "p_adj": float(t["p_adj"]), "significant": bool(t["better"]), "eq_low": float(t["eq_low"]),
               "eq_high": float(t["eq_high"]), "p_tost_adj": float(t["p_tost_adj"]), "equivalent": bool(t["equivalent"])}
    power = pair_power(c, pair, largest_n)
    text = _pair_text(c, pair, status, best, rows, tests, power, ceiling)
    if status == "not enough data":
        text += _saturated(c, rows, leading)
    return {"pair": pair, "status": status, "ship": best["model"] if status == "ship" else None, "margin": c.margin,
            "equivalent_to_best": equivalent, "leading": leading, "best": best, "gap": gap, "comparisons": len(tests),
            "power": power, "text": text.rstrip(".") + "."}


def _pair_text(c: "Comparison", pair: str, status: str, best: dict[str, Any], rows: list[dict[str, Any]],
               tests: list[dict[str, Any]], power: dict[str, Any] | None, ceiling: bool = False) -> str:
    """The sentence of one pair's answer."""
    score = f"{c.metric} {best['estimate']:.3f} [{best['low']:.3f}, {best['high']:.3f}]"
    k1, m = len(tests), c.margin
    holm_k = f"Holm over the {k1} comparison{_s(k1)} with the best"
    if status == "only model":
        return f"{pair}: {best['model']} is the only model ({score}): nothing to compare it with"
    if status == "at chance":
        tie = all(r["estimate"] == best["estimate"] for r in rows)
        where = "below" if best["high"] < c.chance else "not distinguishable from"
        who = (f"every model scores {best['estimate']:.3f} [{best['low']:.3f}, {best['high']:.3f}] (they tie: none is "
               f"best), {where}" if tie else f"the best model, {best['model']} ({score}), is {where}")
        spec, k = parse_metric(c.metric)
        most = power["largest_n"] if power else None
        helps = (f"N = {c.n} is the most these data allow, so only more items lower chance (K/N)" if most is not None
                 and most <= c.n else "a larger N lowers chance (K/N)")
        helps += f", and so does a smaller K (--k 1: chance {1 / c.n:.3g})" if k and k > 1 else ""
        same = [t["model_b"] for t in tests if t["equivalent"] and t["se"] == 0]
        also = (f"; {names([best['model']] + same)} give identical per-query results (equivalent at any N)" if same else "")
        return f"{pair}: at chance: {who} chance ({c.chance:.3g}); nothing can be concluded at N = {c.n}: {helps}{also}"
    runner = tests[0]
    lead = _span(runner["diff"], runner["diff_low"], runner["diff_high"])
    if status == "ship":
        within = [t["model_b"] for t in tests if t["vs_best"] == "worse, within margin"]
        text = (f"{pair}: ship {best['model']} ({score}): it is significantly better than "
                + (f"each of the other {k1} models" if k1 > 1 else f"the other model, {runner['model_b']}")
                + f" (paired test, {holm_k}); its smallest lead: {lead} over {runner['model_b']} (p = {runner['p_adj']:.2g})")
        if within:
            text += (f". {names(within)} {'is' if len(within) == 1 else 'are'} within ±{m:g} of it (equivalent: the gap is "
                     "real but smaller than the margin; if cheaper, as good in practice)")
        return text
    eq = [t for t in tests if t["equivalent"]]
    worse = [t["model_b"] for t in tests if t["vs_best"] == "worse"]
    if status == "equivalent":
        far = max(eq, key=lambda t: max(abs(t["eq_low"]), abs(t["eq_high"])))
        text = (f"{pair}: equivalent: {names([best['model']] + [t['model_b'] for t in eq])} are within ±{m:g} of the best, "
                f"{best['model']} ({score}; the widest: {far['model_b']}, gap {far['diff']:.3f}, {1 - 2 * c.alpha:.0%} interval "
                f"[{far['eq_low']:.3f}, {far['eq_high']:.3f}]; two one-sided tests, {holm_k}): pick among them by cost or speed")
        if c.chance is not None and best["low"] <= c.chance:  # the same model under other names, but no better than chance
            text += (f"; they give identical per-query results, and the interval reaches chance ({c.chance:.3g}): "
                     "the same model, of uncertain use")
        return text + (f"; {names(worse)} {'is' if len(worse) == 1 else 'are'} significantly worse" if worse else "")
    open_ = [t for t in tests if t["vs_best"] == "undecided"]
    if ceiling and not open_:  # equivalent only at the metric's ceiling: no answer
        return (f"{pair}: not enough data at N = {c.n}: {names([best['model']] + [t['model_b'] for t in eq])} are within "
                f"±{m:g} of the best, {best['model']} ({score}), but only at the metric's ceiling, which says nothing of "
                f"the models" + (f"; {names(worse)} {'is' if len(worse) == 1 else 'are'} significantly worse" if worse else ""))
    u = open_[0]
    text = (f"{pair}: not enough data at N = {c.n}: {best['model']} leads ({score}), but {names([t['model_b'] for t in open_])} "
            f"can be neither separated from it nor shown within ±{m:g} of it (gap to {u['model_b']}: "
            f"{_span(u['diff'], u['diff_low'], u['diff_high'])}, p = {u['p_adj']:.2g}")
    if u["diff_low"] > 0:
        text += (f"; its {c.level:.0%} interval excludes 0, but the test decides, corrected for the {k1} comparison{_s(k1)} the "
                 f"verdict makes: p >= {c.alpha:g}")
    text += f"; {1 - 2 * c.alpha:.0%} interval [{u['eq_low']:.3f}, {u['eq_high']:.3f}] not inside ±{m:g})"
    if eq:
        text += (f"; {names([t['model_b'] for t in eq])} {'is' if len(eq) == 1 else 'are'} shown within ±{m:g} of it "
                 f"(partly equivalent, partly undecided)")
    if worse:
        text += f"; {names(worse)} {'is' if len(worse) == 1 else 'are'} significantly worse"
    if power is not None:
        text += f". Power: {power['text']}. More data may show a winner, or that they are equivalent"
    return text


def verdict(c: "Comparison", largest_n: Limits | None = None) -> dict[str, Any]:
    """Which model to ship, per pair and overall, with the numbers behind it.

    Args:
        c: a finished comparison (with its counterpart in ``c.beside`` where there is one).
        largest_n: per pair label, the largest N the data allow per sample kind
            (``EvalResult.largest_n``); None: unknown (the advice then names N and seeds).

    Returns:
        ``metric`` (the metric the verdict follows: the ground truth where the records have it),
        ``check`` (the metric shown beside it, or None), ``status`` (``"ship"``,
        ``"equivalent"``, ``"not enough data"``, ``"at chance"``, ``"only model"``, or ``"per
        pair"`` when every pair is decided but no model is acceptable on all), ``ship`` (the
        model to ship overall, or None), ``margin``, ``equivalent_to_best`` (the overall best
        -- the model shipped, else the best mean over pairs -- and every model within the margin
        of the best on every pair, best first), ``leading`` (the models in the leading group of
        every pair), ``pairs`` (the :func:`pair_verdict` of each pair), ``agreement``
        (:func:`~.check.agreement` of the check with the ground truth, or None), ``summary`` (the
        overall sentence), ``check_text`` (what the check says, or ``""``) and ``text``: one
        paragraph of the three.
    """
    from .check import agreement, check_sentence

    lead, check = lead_and_check(c)
    pairs = list(dict.fromkeys(lead.per_pair["pair"]))
    per = [pair_verdict(lead, p, largest_n) for p in pairs]
    models = lead.across_pairs["model"].tolist()
    truth = check is not None and truth_metric(lead.metric)
    basis = f"by {lead.metric}" + (", the ground truth (these data link languages)" if truth else "")
    status, ship, head = _overall(lead, per, models, basis)
    best = ship or models[0]
    ok = [m for m in models if all(m in v["equivalent_to_best"] for v in per)]
    equivalent = [best] + [m for m in ok if m != best] if best in ok else [best]
    agree = agreement(check, lead, largest_n) if truth else None
    check_text = check_sentence(check, lead, agree) if agree is not None else ""
    text = " ".join(t for t in [head, *(v["text"] for v in per), check_text] if t)
    return {"metric": lead.metric, "check": None if check is None else check.metric, "status": status, "ship": ship,
            "margin": lead.margin, "equivalent_to_best": equivalent,
            "leading": [m for m in models if all(m in v["leading"] for v in per)], "pairs": per, "agreement": agree,
            "summary": head, "check_text": check_text, "text": text}


def _overall(c: "Comparison", per: list[dict[str, Any]], models: list[str], basis: str) -> tuple[str, str | None, str]:
    """The overall answer: ``(status, ship, sentence)``."""
    where = f"{len(per)} pair{_s(len(per))}"
    if len(models) == 1:
        return "only model", None, f"{models[0]} is the only model ({basis}): nothing to compare it with."
    undecided = [v for v in per if v["status"] in ("not enough data", "at chance")]
    if undecided:
        if all(v["status"] == "at chance" for v in per):
            return "at chance", None, (f"At chance: {basis}, no model is shown above chance on "
                                       f"{'any' if len(per) > 1 else 'the'} pair at N = {c.n}: nothing can be concluded.")
        said = [f"on {v['pair']} {'ship ' + v['ship'] if v['ship'] else 'they are equivalent'}" for v in per
                if v not in undecided]
        return "not enough data", None, (
            f"Not enough data to decide at N = {c.n} ({basis}): on {', '.join(v['pair'] for v in undecided)} neither a "
            f"winner nor equivalence can be shown" + (f"; {'; '.join(said)}" if said else "") + ".")
    shipped = {v["ship"] for v in per}
    ok = [m for m in models if all(m in v["equivalent_to_best"] for v in per)]
    if len(shipped) == 1 and None not in shipped:
        x = next(iter(shipped))
        k1 = max(v["comparisons"] for v in per)
        low = min(per, key=lambda v: v["gap"]["diff"])
        return "ship", x, (f"Ship {x}: {basis}, it is significantly better than every other model on "
                           f"{'every' if len(per) > 1 else 'the'} pair (Holm over the {k1} comparison{_s(k1)} with the best"
                           f"{' on each' if len(per) > 1 else ''}); its smallest lead: "
                           f"{_span(low['gap']['diff'], low['gap']['low'], low['gap']['high'])} over {low['gap']['vs']} "
                           f"on {low['pair']}.")
    if len(ok) == 1:
        x = ok[0]
        won = [v["pair"] for v in per if v["ship"] == x]
        return "ship", x, (f"Ship {x}: {basis}, it is the only model within ±{c.margin:g} of the best on every pair"
                           + (f" (significantly best on {', '.join(won)}, equivalent to the best elsewhere)." if won else "."))
    if ok:
        on = "on every pair" if len(per) > 1 else "on the pair"
        return "equivalent", None, (f"Equivalent: {basis}, {names(ok)} are within ±{c.margin:g} of the best {on}: "
                                    f"pick among them by cost or speed.")
    return "per pair", None, (f"No one model is the best, or within ±{c.margin:g} of it, on all {where} ({basis}): the "
                              f"choice depends on the pair.")
