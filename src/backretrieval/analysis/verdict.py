"""The verdict of a comparison: which model to ship, per language pair and overall, with the
interval behind it, or which models the data cannot tell apart at this N.

Read from a finished :class:`~.comparison.Comparison` (nothing is resampled here). Where the records
hold the ground truth (XLR, the data link languages) it *leads*: the verdict is XLR's and BkR is
the check beside it (:func:`agreement`); otherwise the ranked metric leads.

Per pair, the *leading group* is the best model and every model whose gap to it is not
significant after Holm (over all of the pair's model pairs, :attr:`~.comparison.Comparison.pairwise`):

* one model in it: ship that model (its lead over the runner-up, with the paired interval);
* several: they are indistinguishable at this N, pick among them by cost or speed;
* every model, or a best model whose interval reaches the chance level: not enough data to tell.

Overall, a model in the leading group of every pair is the one to ship (several such models:
pick among them by cost or speed); when none is, the choice depends on the pair. Advice to take
more queries is given only where the data hold more (``largest_n``); where N is already the most
the data allow, the verdict says so instead.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..metrics.table import parse_metric
from .stats import correlations

if TYPE_CHECKING:
    from .comparison import Comparison


def lead_and_check(c: "Comparison") -> tuple["Comparison", "Comparison | None"]:
    """The comparison the verdict follows and the one shown beside it as a check.

    Args:
        c: a comparison, with its counterpart in ``c.beside`` where the records have it.

    Returns:
        ``(lead, check)``: the ground-truth comparison (XLR) and the one without ground truth
        (BkR) when both exist, in that order whichever was asked for; otherwise ``(c, c.beside)``.
    """
    b = c.beside
    if b is not None and _truth(b.metric) and not _truth(c.metric):
        return b, c
    return c, b


def _truth(metric: str) -> bool:
    return parse_metric(metric)[0].needs_truth


def _gap(c: "Comparison", pair: str, a: str, b: str) -> dict[str, Any]:
    """The gap ``a - b`` on ``pair`` from ``c.pairwise`` (either orientation), with its interval."""
    pw = c.pairwise
    g = pw[(pw["pair"] == pair) & (pw["model_a"] == a) & (pw["model_b"] == b)]
    if len(g):
        r = g.iloc[0]
        return {"diff": float(r["diff"]), "low": float(r["diff_low"]), "high": float(r["diff_high"]),
                "p_adj": float(r["p_adj"]), "significant": bool(r["significant"])}
    r = pw[(pw["pair"] == pair) & (pw["model_a"] == b) & (pw["model_b"] == a)].iloc[0]
    return {"diff": -float(r["diff"]), "low": -float(r["diff_high"]), "high": -float(r["diff_low"]),
            "p_adj": float(r["p_adj"]), "significant": bool(r["significant"])}


def _span(g: Mapping[str, float]) -> str:
    return f"{g['diff']:.3f} [{g['low']:.3f}, {g['high']:.3f}]"


def _more_data(c: "Comparison", pair: str, largest_n: Mapping[str, Mapping[str, int | None]] | None) -> str:
    """What would narrow the intervals on ``pair``: more queries where the data hold them, else
    the plain fact that N is the most the data allow (one N serves both samples, so the smaller
    of their limits counts)."""
    limits = [x for x in (largest_n or {}).get(pair, {}).values() if x is not None]
    most = min(limits) if limits else None
    if most is None:
        return "more queries (N) or seeds would narrow the intervals"
    if c.n is not None and most <= c.n:
        return (f"N = {c.n} is the most these data allow on {pair}, so neither a larger N nor more seeds can "
                f"separate them: only more items can")
    return f"more queries would narrow the intervals (the data allow N up to {most})"


def pair_verdict(c: "Comparison", pair: str, largest_n: Mapping[str, Mapping[str, int | None]] | None = None) -> dict[str, Any]:
    """The verdict of one language pair.

    Args:
        c: the comparison the verdict follows.
        pair: a pair label of ``c.per_pair`` (``"en->de"``).
        largest_n: per pair label, the largest N the data allow per sample kind (``"xlr"``,
            ``"bkr"``; ``EvalResult.largest_n``); None: unknown.

    Returns:
        ``pair``, ``status`` (``"ship"``, ``"tied"`` or ``"not enough data"``), ``ship`` (the
        model to ship, or None), ``leading`` (the leading group, best first), ``best`` (the
        best model with ``estimate, low, high``), ``gap`` (the best model's gap to the runner-up
        (``ship``) or to the last of the leading group (``tied``), with its interval and
        Holm-adjusted p-value; None for one model) and ``text``.
    """
    g = c.per_pair[c.per_pair["pair"] == pair].sort_values("rank")
    models = g["model"].tolist()
    top = g.iloc[0]
    best = {"model": top["model"], "estimate": float(top["estimate"]), "low": float(top["ci_low"]), "high": float(top["ci_high"])}
    score = f"{c.metric} {best['estimate']:.3f} [{best['low']:.3f}, {best['high']:.3f}]"
    leading = [m for m in models if m == best["model"] or not _gap(c, pair, best["model"], m)["significant"]]
    gap = None
    if len(models) > 1:
        other = models[1] if len(leading) == 1 else leading[-1]
        gap = {"vs": other, **_gap(c, pair, best["model"], other)}
    at_chance = c.chance is not None and best["low"] <= c.chance
    if len(models) == 1:
        status, text = "ship", f"{pair}: {best['model']} is the only model ({score})."
    elif at_chance or len(leading) == len(models):
        status = "not enough data"
        why = (f"even the best model, {best['model']} ({score}), is not distinguishable from chance ({c.chance:.3g})"
               if at_chance else f"no model is significantly better than another (largest gap: {best['model']} over "
                                 f"{gap['vs']}, {_span(gap)})")
        text = f"{pair}: not enough data to tell at N = {c.n}: {why}; {_more_data(c, pair, largest_n)}."
    elif len(leading) == 1:
        status = "ship"
        text = (f"{pair}: ship {best['model']} ({score}); it leads the runner-up {gap['vs']} by {_span(gap)}, "
                f"significant after Holm (p = {gap['p_adj']:.2g}).")
    else:
        status = "tied"
        text = (f"{pair}: {_names(leading)} are indistinguishable at N = {c.n} (best {score}; gap to {gap['vs']} "
                f"{_span(gap)}): pick among them by cost or speed; {_more_data(c, pair, largest_n)}.")
    return {"pair": pair, "status": status, "ship": best["model"] if status == "ship" else None, "leading": leading,
            "best": best, "gap": gap, "text": text}


def _names(models: list[str]) -> str:
    return ", ".join(models[:-1]) + " and " + models[-1] if len(models) > 1 else "".join(models)


def agreement(check: "Comparison", truth: "Comparison") -> list[dict[str, Any]]:
    """Does the metric without ground truth order the models as the ground truth does? Per pair.

    Args:
        check: the comparison by the metric without ground truth (BkR).
        truth: the comparison by the ground truth (XLR) on the same records.

    Returns:
        Per pair: ``pair``, ``spearman`` (of the two metrics' estimates across models; NaN for
        fewer than 3 models), ``tested`` (the model pairs both metrics separate significantly:
        only there could the check contradict the truth), ``reversed`` (those it orders the
        other way round), ``same_pick`` (whether it would ship the model the truth ships, or
        pick the same leading group), ``status`` (``"agrees"``, ``"reverses"`` or ``"not
        enough data"``) and ``text``.
    """
    out = []
    for pair in dict.fromkeys(check.per_pair["pair"]):
        x = check.per_pair[check.per_pair["pair"] == pair].set_index("model")["estimate"]
        y = truth.per_pair[truth.per_pair["pair"] == pair].set_index("model")["estimate"].reindex(x.index)
        _, rho = correlations(x.to_numpy(float), y.to_numpy(float))
        sig = _significant(check, pair)
        sig_t = _significant(truth, pair)
        tested = [(a, b) for a, b in sig if (a, b) in sig_t or (b, a) in sig_t]
        swapped = [(a, b) for a, b in tested if (b, a) in sig_t]
        pick, pick_t = pair_verdict(check, pair), pair_verdict(truth, pair)
        same = pick["leading"] == pick_t["leading"] if pick_t["status"] != "ship" else pick["ship"] == pick_t["ship"]
        corr = "" if np.isnan(rho) else f"Spearman {rho:.2f} across models; "
        if swapped:
            status = "reverses"
            text = "; ".join(f"{check.metric} puts {a} above {b}, {truth.metric} puts {b} above {a}" for a, b in swapped)
        elif tested:
            status = "agrees"
            text = (f"the {len(tested)} gap{'s' * (len(tested) != 1)} both metrics call significant "
                    f"{'go' if len(tested) != 1 else 'goes'} the same way")
        else:
            status = "not enough data"
            text = (f"not enough data to tell: at N = {check.n} no gap is significant by both {check.metric} and "
                    f"{truth.metric}, so no disagreement could show")
        if pick_t["status"] == "ship" and status != "not enough data":
            text += "; " + _pick(check.metric, pick, pick_t["ship"])
        out.append({"pair": pair, "spearman": rho, "tested": [list(p) for p in tested],
                    "reversed": [list(p) for p in swapped], "same_pick": bool(same), "status": status,
                    "text": f"{corr}{text}"})
    return out


def _pick(metric: str, pick: dict[str, Any], ship: str) -> str:
    """What the check would ship, beside the ground truth's ``ship``."""
    if pick["ship"] == ship:
        return f"{metric} would also ship {ship}"
    if pick["ship"] is not None:
        return f"{metric} would ship {pick['ship']} instead"
    gap = pick["gap"]
    return (f"{metric} cannot separate {_names(pick['leading'])} at this N (gap {gap['diff']:.3f} "
            f"[{gap['low']:.3f}, {gap['high']:.3f}])")


def _significant(c: "Comparison", pair: str) -> list[tuple[str, str]]:
    pw = c.pairwise
    s = pw[(pw["pair"] == pair) & pw["significant"].astype(bool)]
    return list(zip(s["model_a"], s["model_b"]))


def verdict(c: "Comparison", largest_n: Mapping[str, Mapping[str, int | None]] | None = None) -> dict[str, Any]:
    """Which model to ship, per pair and overall, with the interval behind it.

    Args:
        c: a finished comparison (with its counterpart in ``c.beside`` where there is one).
        largest_n: per pair label, the largest N the data allow per sample kind
            (``EvalResult.largest_n``); None: unknown (the advice then names N and seeds).

    Returns:
        ``metric`` (the metric the verdict follows: the ground truth where the records have it),
        ``check`` (the metric shown beside it, or None), ``status`` (``"ship"``, ``"tied"``,
        ``"per pair"`` or ``"not enough data"``), ``ship`` (the model to ship overall, or None),
        ``leading`` (the models in the leading group of every pair), ``pairs`` (the
        :func:`pair_verdict` of each pair), ``agreement`` (:func:`agreement` of the check with
        the ground truth, or None), ``summary`` (the overall sentence), ``check_text`` (what the
        check says, or ``""``) and ``text``: one paragraph of the three.
    """
    lead, check = lead_and_check(c)
    pairs = list(dict.fromkeys(lead.per_pair["pair"]))
    per = [pair_verdict(lead, p, largest_n) for p in pairs]
    models = lead.across_pairs["model"].tolist()
    always = [m for m in models if all(m in v["leading"] for v in per)]
    decided = [v for v in per if v["status"] != "not enough data"]
    undecided = [v["pair"] for v in per if v["status"] == "not enough data"]
    truth = check is not None and _truth(lead.metric)
    basis = f"by {lead.metric}" + (", the ground truth (these data link languages)" if truth else "")
    where = f"{len(pairs)} pair{'s' * (len(pairs) != 1)}"
    unsure = f"; on {', '.join(undecided)} there is not enough data to tell" if undecided else ""
    if not decided:
        status, ship = "not enough data", None
        head = f"Not enough data to tell: {basis}, no pair separates the models at N = {lead.n}."
    elif len(always) == 1:
        status, ship = "ship", always[0]
        ahead = [v for v in per if v["status"] == "ship" and v["gap"] is not None]
        tied = [v["pair"] for v in per if v["status"] == "tied"]
        lead_txt = ""
        if ahead:
            low = min(ahead, key=lambda v: v["gap"]["diff"])
            lead_txt = f"; its smallest lead: {_span(low['gap'])} over {low['gap']['vs']} on {low['pair']}"
        if tied:
            where_best = f"in the leading group on every pair (tied with others on {', '.join(tied)})"
        else:
            where_best = "significantly best on every pair" if not undecided else "significantly best wherever the data tell"
        head = f"Ship {ship}: {basis}, it is {where_best}{lead_txt}{unsure}."
    elif always:
        status, ship = "tied", None
        head = (f"{_names(always)} are indistinguishable at N = {lead.n} on all {where} ({basis}): pick among them "
                f"by cost or speed{unsure}.")
    else:
        status, ship = "per pair", None
        head = f"No one model leads on all {where} ({basis}): the choice depends on the pair."
    agree = agreement(check, lead) if truth else None
    check_text = ""
    if agree is not None:
        said = []
        for kind, what in (("agrees", "it agrees with {m} on {p}"), ("reverses", "it reverses a significant gap of {m} on {p}"),
                           ("not enough data", "on {p} there is not enough data to tell")):
            on = [a["pair"] for a in agree if a["status"] == kind]
            if on:
                said.append(what.format(m=lead.metric, p=", ".join(on)))
        check_text = f"{check.metric}, which needs no translations, is the check: {'; '.join(said)}."
    text = " ".join(t for t in [head, *(v["text"] for v in per), check_text] if t)
    return {"metric": lead.metric, "check": None if check is None else check.metric, "status": status, "ship": ship,
            "leading": always, "pairs": per, "agreement": agree, "summary": head, "check_text": check_text, "text": text}
