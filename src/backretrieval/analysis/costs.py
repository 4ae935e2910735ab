"""The price of each answer: what each model of an evaluation costs beside its quality, and the
cheapest model that is as good as the best.

A team picks the best model it can afford. :func:`model_costs` reads, per model, what the run's
``run.json`` recorded of it (``encoding``, see :func:`backretrieval.analysis.evaluate.pricing.price_facts`):
the vector size (bytes per item as the model is served: float32, 4 x dimension, unless the model
says otherwise), the encoding throughput recorded on the machine that ran it (items per second
and per CPU-second, with the note that says when and on what it was measured), the tokens per
item (an API's reported usage, a model's own tokenizer) and, with the model's
``price_per_1m_tokens``, the cost per million items -- unknown, not $0, where the server reported
no usage. :func:`pareto_front` marks the models no other model beats on both quality and cost.

:func:`cheapest_equivalent` reads the verdict's equivalence test (per pair and overall, the models
shown equivalent to the best within the verdict's margin: ``equivalent_to_best``) and names, by
the cost the user picks (:data:`COST_KINDS`), the cheapest of them: "ship use-m@int8: within 0.05
of use-m on every pair at a quarter of the storage", or that none is cheaper than the best.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

COST_COLUMNS = ("model", "dim", "bytes_per_item", "items_per_second", "items_per_cpu_second", "seconds_per_1m_items",
                "speed_note", "tokens_per_item", "tokens_counted_by", "price_per_1m_tokens", "cost_per_1m_items")
FLOAT32_BYTES = 4
# cost kind -> (column of the cost table, what a fraction of it is called)
COST_KINDS = {
    "bytes": ("bytes_per_item", "the storage"),
    "speed": ("seconds_per_1m_items", "the encoding time"),
    "price": ("cost_per_1m_items", "the price"),
}
NO_CLAIM = ("not enough data", "at chance")  # verdict statuses under which no model is shown as good as another


def cost_basis(kind: str) -> str:
    """How a page names what the cheapest model is cheapest in.

    Args:
        kind: a key of :data:`COST_KINDS`.

    Returns:
        ``"by bytes per item"``, ``"by encoding time"`` or ``"by price per million items"``.
    """
    return {"bytes": "by bytes per item", "speed": "by encoding time", "price": "by price per million items"}[kind]


def model_costs(run: dict[str, Any], models: Sequence[str]) -> pd.DataFrame:
    """One row per model: vector size, throughput, tokens and cost (see the module docstring).

    Args:
        run: the evaluation's ``run.json`` (its ``encoding`` entry per model).
        models: the models, in the order of the rows.

    Returns:
        A frame with :data:`COST_COLUMNS`: ``speed_note`` says where the throughput comes from
        ("measured YYYY-MM-DD on this machine (1,200 texts of 16-31 chars)", "not measured
        (--no-measure-speed)", "not recorded" for a run that recorded none); ``tokens_per_item``,
        ``price_per_1m_tokens`` and ``cost_per_1m_items`` are None where unknown (a local model
        has no price; a server that reports no usage has no token count).
    """
    encoding = run.get("encoding") or {}
    rows = []
    for m in models:
        e = encoding.get(m) or {}
        dim = e.get("dim")
        size = e.get("bytes_per_item", None if dim is None else int(dim) * FLOAT32_BYTES)
        speed = e.get("speed") if isinstance(e.get("speed"), dict) else {}
        rate = speed.get("items_per_second") if "speed" in e else (e.get("items_per_second") if e.get("encoded") else None)
        tokens = e.get("tokens_per_item") if "tokens_per_item" in e else _tokens_of_run(e)
        price = e.get("price_per_1m_tokens")
        rows.append({
            "model": m, "dim": dim, "bytes_per_item": size, "items_per_second": rate,
            "items_per_cpu_second": speed.get("items_per_cpu_second"),
            "seconds_per_1m_items": 1e6 / rate if rate else None,
            "speed_note": e.get("speed_note") or ("measured in this run" if rate else "not recorded"),
            "tokens_per_item": tokens, "tokens_counted_by": e.get("tokens_counted_by"), "price_per_1m_tokens": price,
            "cost_per_1m_items": tokens * price if tokens is not None and price is not None else None,
        })
    return pd.DataFrame(rows, columns=list(COST_COLUMNS), dtype=object)  # None stays None (JSON null)


def _tokens_of_run(e: Mapping[str, Any]) -> float | None:
    """Tokens per item of a ``run.json`` entry without ``tokens_per_item``: the reported tokens
    over the texts whose answers reported them (None where none did)."""
    sent = e.get("texts_with_usage", e.get("texts_sent"))
    tokens = e.get("tokens_used")
    return tokens / sent if tokens and sent else None


def pareto_front(quality: Sequence[float], cost: Sequence[float]) -> list[bool]:
    """Which points no other point beats on both: higher (or equal) quality at lower (or equal)
    cost, better on at least one.

    Args:
        quality: one value per model (greater is better).
        cost: one value per model (smaller is better); NaN: unknown, never on the front.

    Returns:
        One bool per model: on the front.
    """
    pts = list(zip(quality, cost))
    out = []
    for i, (q, c) in enumerate(pts):
        if any(map(math.isnan, (q, c))):
            out.append(False)
            continue
        beaten = any(j != i and not math.isnan(q2) and not math.isnan(c2) and q2 >= q and c2 <= c and (q2 > q or c2 < c)
                     for j, (q2, c2) in enumerate(pts))
        out.append(not beaten)
    return out


def fraction_words(ratio: float) -> str:
    """A cost ratio in words: ``"half"``, ``"a third"``, ``"a quarter"``, ``"1/32"``, ``"61%"``.

    Args:
        ratio: the cheaper cost over the dearer one, in (0, 1).

    Returns:
        The words.
    """
    k = 1 / ratio
    near = round(k)
    if near >= 2 and abs(k - near) <= 0.03 * near:
        return {2: "half", 3: "a third", 4: "a quarter"}.get(near, f"1/{near}")
    return f"{ratio:.0%}"


def _costs_of(costs: pd.DataFrame, kind: str) -> dict[str, float]:
    col = COST_KINDS[kind][0]
    out = {}
    for _, r in costs.iterrows():
        v = r[col]
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            out[r["model"]] = float(v)
    return out


def _pick(equivalent: Sequence[str], cost: Mapping[str, float]) -> tuple[str, str | None, float | None]:
    """``(best, cheapest known-cost model cheaper than the best or None, cost ratio)``."""
    best = equivalent[0]
    known = [m for m in equivalent if m in cost]
    if best not in cost or not known:
        return best, None, None
    cheap = min(known, key=lambda m: (cost[m], list(equivalent).index(m)))
    if cost[cheap] >= cost[best] or cost[best] <= 0:
        return best, None, None
    return best, cheap, cost[cheap] / cost[best]


def _sentence(best: str, cheap: str | None, ratio: float | None, margin: Any, kind: str, where: str,
              equivalent: Sequence[str], unknown: Sequence[str]) -> str:
    what = COST_KINDS[kind][1]
    margin_txt = f"within {margin:g} of {best}" if isinstance(margin, (int, float)) else f"as good as {best}"
    if cheap is not None:
        words = fraction_words(ratio)
        share = f"{words} {what}" if words == "half" else f"{words} of {what}"
        return f"ship {cheap}: {margin_txt}{where} at {share}"
    if len(equivalent) > 1:
        others = [m for m in equivalent[1:]]
        return (f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} {margin_txt}{where}, but none is cheaper in "
                f"{what}" + (f" (unknown for {', '.join(unknown)})" if unknown else "") + f": ship {best}")
    return f"no other model is shown {margin_txt}{where}: ship {best}"


def cheapest_equivalent(verdict: Mapping[str, Any], costs: pd.DataFrame, kind: str = "bytes") -> dict[str, Any] | None:
    """The cheapest model shown as good as the best, per pair and overall, by the cost ``kind``.

    Args:
        verdict: the verdict (:func:`backretrieval.analysis.verdict.verdict`): each of its
            ``pairs`` with ``pair``, ``status``, ``margin`` and ``equivalent_to_best`` (the models
            shown equivalent to the pair's best within the margin, best first, best included);
            ``equivalent_to_best`` overall (equivalent to the overall best on every pair).
        costs: :func:`model_costs`.
        kind: a key of :data:`COST_KINDS`.

    Returns:
        None when the verdict holds no equivalence test (no ``equivalent_to_best``); else
        ``{"cost", "pairs": [{"pair", "best", "cheapest", "ratio", "text"}], "overall": {...} or
        None, "text"}``: ``cheapest`` is None where no equivalent model is cheaper than the best
        (or the pair's status makes no claim: not enough data, at chance), ``ratio`` its cost over
        the best's.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in COST_KINDS:
        raise ValueError(f"cost {kind!r}: use one of {', '.join(COST_KINDS)}")
    pairs = list(verdict.get("pairs") or [])
    if "equivalent_to_best" not in verdict and not any("equivalent_to_best" in p for p in pairs):
        return None
    cost = _costs_of(costs, kind)
    per = []
    for p in pairs:
        eq = list(p.get("equivalent_to_best") or [])
        if not eq or p.get("status") in NO_CLAIM:
            per.append({"pair": p.get("pair"), "best": eq[0] if eq else None, "cheapest": None, "ratio": None,
                        "text": f"{p.get('pair')}: {p.get('status', 'no verdict')}: no model is shown as good as another"})
            continue
        best, cheap, ratio = _pick(eq, cost)
        unknown = [m for m in eq if m not in cost]
        text = f"{p.get('pair')}: " + _sentence(best, cheap, ratio, p.get("margin"), kind, "", eq, unknown)
        per.append({"pair": p.get("pair"), "best": best, "cheapest": cheap, "ratio": ratio, "text": text})
    overall = None
    eq = list(verdict.get("equivalent_to_best") or [])
    if eq:
        margins = {p.get("margin") for p in pairs if p.get("margin") is not None}
        margin = verdict.get("margin", next(iter(margins)) if len(margins) == 1 else None)
        best, cheap, ratio = _pick(eq, cost)
        unknown = [m for m in eq if m not in cost]
        where = " on every pair" if len(pairs) > 1 else ""
        text = _sentence(best, cheap, ratio, margin, kind, where, eq, unknown)
        overall = {"best": best, "cheapest": cheap, "ratio": ratio, "text": text[:1].upper() + text[1:] + "."}
    return {"cost": kind, "pairs": per, "overall": overall,
            "text": overall["text"] if overall else " ".join(x["text"] + "." for x in per)}
