"""The price of each answer: what each model of an evaluation costs beside its quality.

A team picks the best model it can afford. :func:`model_costs` reads, per model, what the run's
``run.json`` recorded of its encoding (``encoding``, see
:func:`backretrieval.analysis.evaluate.grid.encoding_facts`) and gives: the vector size (bytes per item
at float32: 4 x dimension), the measured encoding throughput (items per second of the encoding
that ran in this run, on this machine; ``cached`` when every vector came from the cache, so
nothing was measured), and for embedding APIs the tokens the server reported, tokens per item
and, with the model's ``price_per_1m_tokens``, the estimated cost per million items.
:func:`pareto_front` marks the models no other model beats on both quality and cost.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

COST_COLUMNS = ("model", "dim", "bytes_per_item", "throughput", "items_per_second", "texts", "encoded",
                "tokens_used", "tokens_per_item", "price_per_1m_tokens", "cost_per_1m_items")
FLOAT32_BYTES = 4


def model_costs(run: dict[str, Any], models: Sequence[str]) -> pd.DataFrame:
    """One row per model: vector size, throughput, tokens and cost (see the module docstring).

    Args:
        run: the evaluation's ``run.json`` (its ``encoding`` entry per model encoded in the run).
        models: the models, in the order of the rows.

    Returns:
        A frame with :data:`COST_COLUMNS`: ``throughput`` is ``"measured"``, ``"cached"`` (every
        vector from the cache: ``items_per_second`` None) or ``"not recorded"`` (all the model's
        records came from an earlier run); ``tokens_used``, ``tokens_per_item``,
        ``price_per_1m_tokens`` and ``cost_per_1m_items`` are None where the model reports no
        tokens (a local model) or no price.
    """
    encoding = run.get("encoding") or {}
    rows = []
    for m in models:
        e = encoding.get(m) or {}
        dim = e.get("dim")
        encoded = e.get("encoded")
        tokens = e.get("tokens_used")
        sent = e.get("texts_sent")
        per_item = tokens / sent if tokens is not None and sent else None
        price = e.get("price_per_1m_tokens")
        throughput = "not recorded" if not e else ("measured" if encoded else "cached")
        rows.append({
            "model": m, "dim": dim, "bytes_per_item": None if dim is None else int(dim) * FLOAT32_BYTES,
            "throughput": throughput, "items_per_second": e.get("items_per_second") if encoded else None,
            "texts": e.get("texts"), "encoded": encoded, "tokens_used": tokens, "tokens_per_item": per_item,
            "price_per_1m_tokens": price,
            "cost_per_1m_items": per_item * price if per_item is not None and price is not None else None,
        })
    return pd.DataFrame(rows, columns=list(COST_COLUMNS), dtype=object)  # None stays None (JSON null)


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
