"""The table's values: every metric of the metric table (:mod:`.table`) that one source of data
gives, computed from that source -- the per-query ranks of XLR and BkR (:func:`rank_values`,
:func:`source_summary`) or the non-matching sample's text embeddings (:func:`text_values`).

The evaluation's two routes and :func:`~backretrieval.metrics.xlr` /
:func:`~backretrieval.metrics.bkr` compute their metrics here, so a metric added to the table is
computed wherever its source is.
"""
from __future__ import annotations

import numpy as np

from . import table


def rank_values(source: str, ranks: np.ndarray, n: int, k: int, depth: int | None = None) -> dict[str, float]:
    """Every metric of the table computed from the per-query ranks of ``source``, in table order.

    Args:
        source: ``"xlr"``, ``"xlr_t2s"`` or ``"bkr"``.
        ranks: the 1-based per-query ranks (on the approximate route float64, inf for a query not found).
        n: the sample size N.
        k: the configured K.
        depth: None for the exact route; the search depth (the largest K searched) for the approximate one.

    Returns:
        Record key -> value, for each metric of the route at each K of :meth:`MetricSpec.record_ks`.
    """
    out = {}
    for spec in table.METRICS:
        if spec.source == source and (spec.exact if depth is None else spec.approx):
            for kk in spec.record_ks(n, k, depth):
                out[spec.key(kk)] = spec.value(ranks, kk)
    return out


def source_summary(ranks: np.ndarray, ks: tuple[int, ...], source: str) -> dict[str, float]:
    """Every exact metric of the table computed from the per-query ranks of ``source``, at the
    given K (what :func:`~backretrieval.metrics.xlr` and :func:`~backretrieval.metrics.bkr` report).

    Args:
        ranks: 1-based (pessimistic) ranks of the right item, one per query.
        ks: cut-offs K of the metrics with ``@K``.
        source: ``"xlr"``, ``"xlr_t2s"`` or ``"bkr"``.

    Returns:
        Record key -> value in table order: ``{source}@K`` per K, ``{source}_mrr``,
        ``{source}_median_rank``.
    """
    out = {}
    for spec in table.METRICS:
        if spec.source == source and spec.exact:
            for k in ks if spec.at_k else (None,):
                out[spec.key(k)] = spec.value(ranks, k)
    return out


def text_values(src: np.ndarray, tgt: np.ndarray, k: int, *, sim: str, csls_k: int) -> dict[str, float]:
    """Every exact metric of the table computed from the non-matching sample's text embeddings
    (source ``"text"``), at the configured K: each function of those metrics is called once.

    Args:
        src, tgt: the source and target text embeddings.
        k: the configured K.
        sim: ``"cosine"``, ``"csls"`` or ``"dot"``.
        csls_k: neighbours of the CSLS penalty.

    Returns:
        Record key -> value, in the order the functions return them.
    """
    specs = [s for s in table.METRICS if s.source == "text" and s.exact]
    wanted = {s.key(kk) for s in specs for kk in s.record_ks(tgt.shape[0], k)}
    out = {}
    for spec in {s.function: s for s in specs}.values():
        values = spec.resolve()(src, tgt, k, sim=sim, csls_k=csls_k)
        out.update({key: v for key, v in values.items() if key in wanted})
    return out
