"""The check beside the ground truth: would the metric that needs no translations (BkR) give the
verdict's *answer* on data whose ground truth (XLR) is known?

Per pair the check's own verdict (:func:`~.verdict.pair_verdict` of the BkR comparison) is set
against the ground truth's. The check *agrees* only where both give the same answer: the same
model to ship, or the same models equivalent. It *differs* where BkR would ship another model
(said first: its pick, its interval, its lead, and where to look: the pair's example gallery in
the report) or gives another kind of answer. Where BkR cannot decide itself (not enough data, at
chance), or the ground truth cannot, the check could not have failed: "not enough data to
check", never a pass. Significant gaps the two metrics order the other way round are named too.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from .stats import correlations
from .verdict import Limits, names, pair_verdict

if TYPE_CHECKING:
    from .comparison import Comparison


def gallery_anchor(pair: str) -> str:
    """The id of a pair's example gallery in ``report.html``.

    Args:
        pair: a pair label (``"en->de"``).

    Returns:
        ``"gallery-en-de"`` (letters, digits, ``-`` and ``_`` only).
    """
    return "gallery-" + re.sub(r"[^A-Za-z0-9_]+", "-", pair).strip("-")


def _answer(v: dict[str, Any]) -> tuple[str, Any] | None:
    if v["status"] == "ship":
        return "ship", v["ship"]
    if v["status"] == "equivalent":
        return "equivalent", tuple(sorted(v["equivalent_to_best"]))
    return None


def _says(metric: str, v: dict[str, Any]) -> str:
    """What a decided pair verdict says, with the numbers behind it."""
    b = v["best"]
    if v["status"] == "ship":
        g = v["gap"]
        return (f"ship {v['ship']} ({metric} {b['estimate']:.3f} [{b['low']:.3f}, {b['high']:.3f}], ahead of {g['vs']} by "
                f"{g['diff']:.3f} [{g['low']:.3f}, {g['high']:.3f}], p = {g['p_adj']:.2g})")
    return f"find {names(v['equivalent_to_best'])} equivalent (within ±{v['margin']:g})"


def _significant(c: "Comparison", pair: str) -> list[tuple[str, str]]:
    pw = c.pairwise
    s = pw[(pw["pair"] == pair) & pw["significant"].astype(bool)]
    return list(zip(s["model_a"], s["model_b"]))


def agreement(check: "Comparison", truth: "Comparison", largest_n: Limits | None = None) -> list[dict[str, Any]]:
    """Would the metric without ground truth give the ground truth's answer? Per pair.

    Args:
        check: the comparison by the metric without ground truth (BkR).
        truth: the comparison by the ground truth (XLR) on the same records.
        largest_n: per pair label, the largest N the data allow per sample kind, for the pair
            verdicts' notes (``EvalResult.largest_n``).

    Returns:
        Per pair: ``pair``, ``spearman`` (of the two metrics' estimates across models; NaN for
        fewer than 3 models), ``tested`` (the model pairs both metrics separate significantly),
        ``reversed`` (those it orders the other way round), ``same_pick`` (both give the same
        answer), ``status`` (``"agrees"``: the same answer; ``"differs"``: another answer;
        ``"not enough data"``: either cannot decide, so the check could not have failed),
        ``check_status`` and ``check_ship`` (the check's own answer and the model it would ship,
        or None), ``gallery`` (:func:`gallery_anchor`) and ``text``.
    """
    out = []
    for pair in dict.fromkeys(check.per_pair["pair"]):
        x = check.per_pair[check.per_pair["pair"] == pair].set_index("model")["estimate"]
        y = truth.per_pair[truth.per_pair["pair"] == pair].set_index("model")["estimate"].reindex(x.index)
        _, rho = correlations(x.to_numpy(float), y.to_numpy(float))
        sig, sig_t = _significant(check, pair), _significant(truth, pair)
        tested = [(a, b) for a, b in sig if (a, b) in sig_t or (b, a) in sig_t]
        swapped = [(a, b) for a, b in tested if (b, a) in sig_t]
        pick, pick_t = pair_verdict(check, pair, largest_n), pair_verdict(truth, pair, largest_n)
        mine, theirs = _answer(pick), _answer(pick_t)
        if mine is None:
            status = "not enough data"
            why = {"at chance": "is at chance", "only model": "has one model"}.get(pick["status"], "cannot decide")
            text = (f"not enough data to check: {check.metric} itself {why} at N = {check.n}"
                    + ("" if swapped else ", so its answer could not have disagreed"))
        elif theirs is None:
            status = "not enough data"
            text = (f"not enough data to check: {truth.metric}, the ground truth, cannot decide at N = {truth.n} "
                    f"({check.metric} alone would {_says(check.metric, pick)})")
        elif mine == theirs:
            status, text = "agrees", f"{check.metric} gives the same answer: {_says(check.metric, pick)}"
        else:
            status = "differs"
            text = (f"{check.metric} would {_says(check.metric, pick)} where {truth.metric} would "
                    f"{_says(truth.metric, pick_t)}; the example gallery of {pair} in the report shows what each "
                    "model retrieved")
        if swapped:
            text += "; it reverses a significant gap: " + "; ".join(
                f"{check.metric} puts {a} above {b}, {truth.metric} puts {b} above {a}" for a, b in swapped)
        corr = "" if np.isnan(rho) else f"Spearman {rho:.2f} across models; "
        out.append({"pair": pair, "spearman": rho, "tested": [list(p) for p in tested],
                    "reversed": [list(p) for p in swapped], "same_pick": bool(mine is not None and mine == theirs),
                    "status": status, "check_status": pick["status"], "check_ship": pick["ship"],
                    "gallery": gallery_anchor(pair), "text": f"{corr}{text}"})
    return out


def check_sentence(check: "Comparison", truth: "Comparison", agree: list[dict[str, Any]]) -> str:
    """What the check says over all pairs, where it would ship another model first.

    Args:
        check: the comparison by the metric without ground truth (BkR).
        truth: the comparison by the ground truth (XLR).
        agree: :func:`agreement` of the two.

    Returns:
        One sentence.
    """
    said = []
    for a in agree:
        if a["status"] == "differs" and a["check_ship"]:
            said.append(f"on {a['pair']} it would ship {a['check_ship']} instead (see that pair's example gallery)")
    other = [a["pair"] for a in agree if a["status"] == "differs" and not a["check_ship"]]
    if other:
        said.append(f"on {', '.join(other)} it gives another answer than {truth.metric}")
    on = [a["pair"] for a in agree if a["status"] == "agrees"]
    if on:
        said.append(f"it gives the same answer as {truth.metric} on {', '.join(on)}")
    for a in agree:  # where the ground truth cannot decide, what the check alone would ship
        if a["status"] == "not enough data" and a["check_ship"]:
            said.append(f"on {a['pair']} there is not enough data to check ({truth.metric} cannot decide; "
                        f"{check.metric} alone would ship {a['check_ship']})")
    on = [a["pair"] for a in agree if a["status"] == "not enough data" and not a["check_ship"]]
    if on:
        said.append(f"on {', '.join(on)} there is not enough data to check")
    return f"{check.metric}, which needs no translations, is the check: {'; '.join(said)}."
