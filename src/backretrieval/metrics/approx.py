"""XLR@K and BkR@K at millions of items per language, from FAISS nearest-neighbour lists.

The exact metrics (:func:`~.xlr.xlr`, :func:`~.bkr.bkr`) rank every candidate, which costs
N x N products: fine to a few hundred thousand items, out of reach at millions. Here only the
top K + 1 are searched, with an approximate FAISS index (``"hnsw"`` / ``"ivf"``; see
:mod:`backretrieval.search.faiss_backend`), or, on the exact route (``method="flat"``, or where
the self-check or the cost model below sends a search), by the exact metrics' own kernels:

* ``xlr_approx``: a source counts for XLR@K when its partner's rank is at most K;
* ``bkr_approx``: step 2 retrieves the target texts with the best score; steps 3-4 search the
  K + 1 source images nearest to each distinct retrieved target's image; the query counts for
  BkR@K when its own image's rank is at most K from every target it retrieved.

Ties follow the exact metrics' rule on every route (ties never help): a rank is the number of
candidates whose canonical score (:mod:`backretrieval.search.exact`) is at least the right
item's, itself included, and BkR follows every target tied for the best score and keeps the
worst rank. On the exact route the numbers are the exact metrics' own. On the approximate route
the listed candidates are scored canonically (:func:`~backretrieval.search.faiss_backend.listed_scores`)
and rows that are bit-identical to a listed one (duplicates,
:func:`~backretrieval.search.faiss_backend.duplicate_rows`) count with it, so a duplicate the
index did not return still counts; a rank beyond K fills all K + 1 listed places, and a query
whose K + 1 listed targets all tie for the best score gets its ties from exact search. Where the
index returns the canonical top K + 1 the outcome is the exact one, query by query.

Only Recall@K for K <= max(ks) is defined, and ``*_mrr@K`` is the MRR truncated at K (1/rank
when the rank is within K, else 0). With ``found_at=True`` the result also holds ``found_at``
(and ``t2s_found_at``), the per-query outcome behind them: the pessimistic rank of the right
item when it is at most K, else 0.

Self-check. An approximate index is only as good as its agreement with exact search, which
depends on the data (its intrinsic dimension more than N). With ``target_agreement`` (default
0.99) every approximate search is first calibrated
(:func:`~backretrieval.search.faiss_backend.calibrate`): the effort (HNSW ``efSearch``, IVF
``nprobe``) is doubled until, on a seeded tuning sample of ``check_sample`` queries, the top-1
agreement and top-K recall with exact search both reach the target; then both are measured on a
second, disjoint seeded sample of ``check_sample`` queries that chose nothing (held out). The
reported ``agreement`` and ``recall@K`` are the held-out ones, ``agreement_low95`` their one-sided
95% Clopper-Pearson lower bound; ``tuning_agreement`` is what the stopping rule saw. If no effort
reaches the target, the search is exact.

Cost. Checked approximate search is chosen only where it is cheaper than exact search: a
deterministic cost model (:func:`~backretrieval.search.faiss_backend.checked_cost`: the index
build, the exact search of both samples, the sampled and the final approximate searches) counts
distance computations from the index parameters and the sizes and weighs each by a measured
constant of its kind of search
(:data:`~backretrieval.search.faiss_backend.DISTANCE_WEIGHTS`: a distance in an HNSW graph
walk costs many inside exact search's blocked product; never timings taken at run time), against
exact search's ``N_queries x N``. If even the first effort costs more, nothing is built and the
search is exact; calibration stops, and the search is exact, before an effort whose total would
exceed it, so the route taken costs at most exact search plus the calibration spent before a
fall-back. In XLR, when source -> target is searched exactly, the same pass gives target ->
source. Each search's result says ``route`` (``"approximate"`` / ``"exact"``), ``route_reason``,
``cost`` and ``cost_exact`` (weighted, in exact-search distances), ``exact_fallback``, the
agreement fields above, the chosen effort, and the calibration's seconds and tried efforts.
``target_agreement=None`` searches with the given options unchecked. Inputs may be
memory-mapped: they are read in chunks.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import MetricInputError
from ..search import nearest_with_ties, rank_of_true, ranks_against_rows, unit_rows
from ..search.faiss_backend import (Duplicates, FaissOptions, build_index, calibrate, checked_cost, duplicate_rows,
                                    exact_cost, listed_scores, search)
from ._inputs import check_dims, check_ks, check_rows
from .xlr import xlr_ranks

Csr = tuple[np.ndarray, np.ndarray]  # (offsets, rows): query i's rows are rows[offsets[i]:offsets[i + 1]]


def _summary(pos: np.ndarray, ks: tuple[int, ...], prefix: str) -> dict[str, float]:
    """``pos``: pessimistic rank of the right item when it is within the K searched, 0 otherwise."""
    found = pos > 0
    out = {f"{prefix}@{k}": float(np.mean(found & (pos <= k))) for k in ks}
    rr = np.zeros(pos.shape, dtype=np.float64)
    rr[found] = 1.0 / pos[found]
    out[f"{prefix}_mrr@{max(ks)}"] = float(rr.mean())
    return out


def _within(ranks: np.ndarray, k: int) -> np.ndarray:
    """Exact pessimistic ranks as the outcome within the top ``k``: the rank, or 0 beyond ``k``."""
    return np.where(ranks <= k, ranks, 0).astype(np.int64)


def _listed_ranks(scores: np.ndarray, lists: np.ndarray, truth_scores: np.ndarray, truth: np.ndarray, k: int,
                  dups: Duplicates | None) -> np.ndarray:
    """The exact metrics' tie rule on searched lists: the pessimistic rank of the right item is the
    number of database rows scoring canonically at least as high as it (itself included), counted
    over the listed rows and every duplicate of them (``dups``: they score the same, so a search
    that found one found all). It counts when the right item or a duplicate of it is listed and
    that number is at most ``k``; then it equals the exact rank whenever the lists hold the
    canonical top ``k + 1`` (a rank beyond ``k`` fills all ``k + 1``)."""
    if dups is None:
        groups, size, own = lists, None, truth
    else:
        groups = np.where(lists >= 0, dups.group[np.maximum(lists, 0)], -1)
        own = dups.group[truth]
    order = np.argsort(groups, axis=1, kind="stable")
    g = np.take_along_axis(groups, order, axis=1)
    first = np.ones(g.shape, dtype=bool)
    first[:, 1:] = g[:, 1:] != g[:, :-1]  # each group counted once
    above = first & (g >= 0) & (np.take_along_axis(scores, order, axis=1) >= truth_scores[:, None])
    count = (above if dups is None else np.where(above, dups.size[np.maximum(g, 0)], 0)).sum(axis=1)
    listed = (groups == own[:, None]).any(axis=1)
    return np.where(listed & (count <= k), count, 0).astype(np.int64)


def _index_over(x: np.ndarray, index: Any, method: str, options: FaissOptions | None, name: str) -> Any:
    if index is None:
        return build_index(x, method, options)
    if getattr(index, "ntotal", None) != x.shape[0] or getattr(index, "d", None) != x.shape[1]:
        raise MetricInputError(
            f"the index given for the {name} holds {getattr(index, 'ntotal', '?')} vectors of dimension "
            f"{getattr(index, 'd', '?')}, but the {name} are {x.shape[0]} x {x.shape[1]}"
        )
    return index


def _approximate(method: str, check: dict[str, Any]) -> bool:
    """Whether any search of the result was approximate (not flat, not fallen back to exact)."""
    fell_back = [v for key, v in check.items() if key.endswith("exact_fallback")]
    return method != "flat" and not (fell_back and all(fell_back))


def _exact_route(out: dict[str, Any], prefix: str, reason: str, exact: int) -> None:
    out.update({
        f"{prefix}route": "exact", f"{prefix}exact_fallback": True, f"{prefix}route_reason": reason,
        f"{prefix}cost_exact": exact, f"{prefix}cost": exact,
        f"{prefix}agreement": 1.0, f"{prefix}agreement_low95": 1.0,
    })


def _checked_index(x: np.ndarray, queries: np.ndarray, index: Any, method: str, options: FaissOptions | None, name: str,
                   k: int, target: float | None, sample: int, seed: int, out: dict[str, Any], prefix: str,
                   n_queries: int | None = None, cost_check: bool = True) -> Any:
    """The approximate index over ``x`` (given or built), calibrated against exact search when
    ``target`` is set, or None where the search is exact: a flat ``method``, a calibration that
    falls back, or, with ``cost_check``, a checked search whose first effort already costs more
    than exact search (then nothing is built or calibrated). The caller searches exactly with the
    exact kernels, so the exact route gives the exact metrics' numbers. Records the route and the
    calibration in ``out`` (nothing for a flat ``method``)."""
    if method == "flat":
        if index is not None:  # a given index must still fit
            _index_over(x, index, method, options, name)
        return None
    if target is None:
        return _index_over(x, index, method, options, name)
    n_q = queries.shape[0] if n_queries is None else int(n_queries)
    exact = exact_cost(n_q, x.shape[0])
    first = checked_cost(method, n_q, x.shape[0], options, sample=sample)
    if cost_check and first > exact:
        if index is not None:
            _index_over(x, index, method, options, name)
        _exact_route(out, prefix, f"cost: checked {method} search takes at least {first:,} weighted distance "
                                  f"computations, exact search {exact:,}", exact)
        out[f"{prefix}recall@{k}"] = 1.0
        return None
    index = _index_over(x, index, method, options, name)
    cal = calibrate(index, x, queries, method, k=k, target=target, sample=sample, seed=seed, options=options,
                    n_queries=n_q, cost_check=cost_check)
    out.update({
        f"{prefix}route": cal.route, f"{prefix}exact_fallback": cal.fallback, f"{prefix}route_reason": cal.reason,
        f"{prefix}cost_exact": cal.cost_exact, f"{prefix}cost": cal.cost,
        f"{prefix}agreement": cal.agreement, f"{prefix}agreement_low95": cal.low, f"{prefix}recall@{k}": cal.recall,
        f"{prefix}heldout_sample": cal.heldout, f"{prefix}tuning_sample": cal.sample,
        f"{prefix}tuning_agreement": cal.tuning_agreement, f"{prefix}tuning_recall@{k}": cal.tuning_recall,
        f"{prefix}{cal.param}": cal.value,
        f"{prefix}calibration_seconds": round(cal.seconds, 3), f"{prefix}calibration_tried": cal.tried,
    })
    return None if cal.fallback else index


def _unit(x: np.ndarray) -> np.ndarray:
    """Canonical unit rows as the exact metrics use them (float32; ``x`` itself where it already is)."""
    return unit_rows(np.asarray(x, dtype=np.float32))


def _searched_ranks(index: Any, Q: np.ndarray, D: np.ndarray, k: int, dups: Duplicates | None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Search ``index`` (over ``D``) with aligned queries ``Q`` for ``k + 1`` rows (at most all):
    the outcome within ``k`` under the exact metrics' tie rule (:func:`_listed_ranks`), the lists
    and their canonical scores."""
    width = min(D.shape[0], k + 1)
    truth = np.arange(Q.shape[0])
    _, lists = search(index, Q, width)
    scores = listed_scores(Q, D, np.concatenate([lists, truth[:, None]], axis=1))
    return _listed_ranks(scores[:, :-1], lists, scores[:, -1], truth, k, dups), lists, scores[:, :-1]


def _csr_rows(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of CSR rows of ``counts`` items, and the row of each item."""
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, np.repeat(np.arange(counts.size), counts)


def _nearest_in_lists(lists: np.ndarray, scores: np.ndarray, Q: np.ndarray, D: np.ndarray,
                      dups: Duplicates | None) -> Csr:
    """Each query's listed rows attaining its best listed canonical score, with their duplicates
    (ascending): BkR step 2's ties, as the exact metric follows them. A query whose whole list ties
    (more may tie beyond it) gets its ties from exact search over all of ``D``."""
    n, width = lists.shape
    best = scores.max(axis=1)
    tied = (scores == best[:, None]) & (lists >= 0)
    full = np.count_nonzero(tied, axis=1) == width if width < D.shape[0] else np.zeros(n, dtype=bool)
    tied[full] = False
    query, slot = np.nonzero(tied)
    rows = lists[query, slot]
    if dups is not None:  # every duplicate of a tied row ties too
        pairs = np.unique(np.stack([query, dups.group[rows]], axis=1), axis=0)
        rows, counts = dups.members(pairs[:, 1])
        query = np.repeat(pairs[:, 0], counts)
    if full.any():
        which = np.flatnonzero(full)
        ip, more = nearest_with_ties(_unit(Q[which]), _unit(D))
        query = np.concatenate([query, np.repeat(which, np.diff(ip))])
        rows = np.concatenate([rows, more])
    order = np.lexsort((rows, query))
    offsets, _ = _csr_rows(np.bincount(query, minlength=n))
    return offsets, rows[order]


def xlr_approx(
    src: np.ndarray,
    tgt: np.ndarray,
    ks: tuple[int, ...] | int = (1, 5, 10),
    *,
    method: str = "hnsw",
    options: FaissOptions | None = None,
    both_directions: bool = True,
    tgt_index: Any = None,
    target_agreement: float | None = 0.99,
    check_sample: int = 1000,
    seed: int = 0,
    found_at: bool = False,
    cost_check: bool = True,
) -> dict[str, Any]:
    """XLR@K (and ``xlr_t2s@K``) on aligned rows from K-nearest-neighbour lists.

    ``tgt_index``: a FAISS index already built over ``tgt`` (by :func:`build_index` with the
    same method), to share it with :func:`bkr_approx` instead of building it twice (it is
    calibrated here, so pass ``nearest`` to :func:`bkr_approx` as ``retrieved`` rather than the index).
    ``target_agreement``, ``check_sample``, ``seed``: the self-check (module doc). ``found_at``:
    also return the per-query outcomes ``found_at`` (and ``t2s_found_at``), see the module doc.

    Args:
        src: (N, d) source embeddings; row i is the translation of ``tgt`` row i (may be
            memory-mapped).
        tgt: (N, d) target embeddings.
        ks: cut-offs K, each in [1, N]; ``max(ks)`` neighbours are searched per query.
        method: the FAISS index, ``"flat"`` (exact), ``"hnsw"`` or ``"ivf"``.
        options: the index's settings (:class:`~backretrieval.search.faiss_backend.FaissOptions`;
            None: the defaults).
        both_directions: also ``xlr_t2s@K`` (an index over ``src`` searched by ``tgt``).
        tgt_index: a FAISS index already built over ``tgt`` (None: built here).
        target_agreement: the self-check's target top-1 agreement and top-K recall with exact
            search (None: no check, the options are used as given).
        check_sample: queries of the self-check's seeded sample.
        seed: seed of the self-check's sample.
        found_at: also return the per-query outcomes ``found_at`` (and ``t2s_found_at``).
        cost_check: search exactly where the cost model says exact search is cheaper (module doc);
            False: always calibrate and search approximately unless the target is out of reach.

    Returns:
        ``xlr@K``, ``xlr_mrr@Kmax`` (truncated), the self-check's fields, ``approximate``,
        ``nearest`` (every target tied for each source's best score, as CSR arrays
        ``(offsets, rows)``: BkR's step 2, for :func:`bkr_approx`'s ``retrieved``), ``retrieved``
        (the first of them per source) and, with ``found_at``, the per-query outcomes.

    Raises:
        MetricInputError: bad matrices (named as in :func:`~backretrieval.metrics.xlr`), misaligned
            rows, a given index whose size or dimension does not fit, or bad ``retrieved`` rows.
    """
    check_rows(src, "source embeddings")
    check_rows(tgt, "target embeddings")
    check_dims(src, tgt, ("source embeddings", "target embeddings"))
    if src.shape[0] != tgt.shape[0]:
        raise MetricInputError(f"source has {src.shape[0]} rows but target has {tgt.shape[0]}; rows must be aligned")
    ks = check_ks(ks, src.shape[0])
    n = src.shape[0]
    check: dict[str, Any] = {}
    k = max(ks)
    index = _checked_index(tgt, src, tgt_index, method, options, "target embeddings", k, target_agreement,
                           check_sample, seed, check, "text_", cost_check=cost_check)
    t2s_pos = None
    if index is None:  # exact: one pass over the scores ranks both directions and finds the nearest targets
        fwd, bwd, offsets, rows = xlr_ranks(src, tgt, return_nearest=True)
        pos, nearest = _within(fwd, k), (offsets, rows)
        if both_directions:
            t2s_pos = _within(bwd, k)
            if method != "flat":
                _exact_route(check, "t2s_", "cost: the exact search of source -> target ranks target -> source in "
                                            "the same pass", exact_cost(n, n))
                check["t2s_recall@" + str(k)] = 1.0
    else:
        dups = duplicate_rows(tgt)
        pos, lists, scores = _searched_ranks(index, src, tgt, k, dups)
        nearest = _nearest_in_lists(lists, scores, src, tgt, dups)
        del lists, scores
    out: dict[str, Any] = _summary(pos, ks, "xlr")
    if found_at:
        out["found_at"] = pos
    if both_directions:
        if t2s_pos is None:
            index = _checked_index(src, tgt, None, method, options, "source embeddings", k, target_agreement,
                                   check_sample, seed, check, "t2s_", cost_check=cost_check)
            if index is None:
                t2s_pos = _within(rank_of_true(_unit(tgt), _unit(src), np.arange(n)), k)
            else:
                t2s_pos = _searched_ranks(index, tgt, src, k, duplicate_rows(src))[0]
        out.update(_summary(t2s_pos, ks, "xlr_t2s"))
        if found_at:
            out["t2s_found_at"] = t2s_pos
    out.update(check)
    out["approximate"] = _approximate(method, check)
    out["retrieved"] = nearest[1][nearest[0][:-1]]
    out["nearest"] = nearest
    return out


def bkr_approx(
    src_text: np.ndarray,
    tgt_text: np.ndarray,
    src_img: np.ndarray,
    tgt_img: np.ndarray,
    ks: tuple[int, ...] | int = (1, 5, 10),
    *,
    method: str = "hnsw",
    options: FaissOptions | None = None,
    tgt_text_index: Any = None,
    retrieved: np.ndarray | tuple[np.ndarray, np.ndarray] | None = None,
    target_agreement: float | None = 0.99,
    check_sample: int = 1000,
    seed: int = 0,
    found_at: bool = False,
    cost_check: bool = True,
) -> dict[str, Any]:
    """BkR@K from a text index over the targets and an image index over the source images.

    Also returns ``retrieved`` (the target retrieved for each query) for agreement checks.
    ``tgt_text_index``: an index already built over ``tgt_text`` (see :func:`xlr_approx`).
    ``retrieved``: the targets already retrieved for each source (step 2), e.g. ``xlr_approx``'s
    ``nearest`` (every target tied for the best score: the exact metric follows them all); then
    no text search is done here. ``target_agreement``, ``check_sample``, ``seed``: the self-check
    (module doc): the text index on top-1 agreement, the source-image index on top-1 agreement and
    recall of the K nearest. ``found_at``: also return the per-query outcomes (module doc).

    Args:
        src_text, tgt_text, src_img, tgt_img: as :func:`~backretrieval.metrics.bkr` (may be
            memory-mapped).
        ks: cut-offs K, each in [1, N]; ``max(ks)`` source images are searched per distinct
            retrieved target.
        method: the FAISS index, ``"flat"`` (exact), ``"hnsw"`` or ``"ivf"``.
        options: the index's settings (:class:`~backretrieval.search.faiss_backend.FaissOptions`;
            None: the defaults).
        tgt_text_index: an index already built over ``tgt_text`` (None: built here).
        retrieved: the targets retrieved for each source: CSR arrays ``(offsets, rows)`` (as
            ``xlr_approx``'s ``nearest``), or int (N,) one target row per source (None: searched here).
        target_agreement: the self-check's target (None: no check).
        check_sample: queries of the self-check's seeded sample.
        seed: seed of the self-check's sample.
        found_at: also return the per-query outcomes ``found_at``.
        cost_check: search exactly where the cost model says exact search is cheaper (module doc).

    Returns:
        ``bkr@K``, ``bkr_mrr@Kmax`` (truncated), the self-check's fields, ``approximate``,
        ``nearest`` (the targets each query retrieved, CSR ``(offsets, rows)``) and ``retrieved``
        (the first of them per query).

    Raises:
        MetricInputError: bad matrices (named as in :func:`~backretrieval.metrics.xlr`), misaligned
            rows, a given index whose size or dimension does not fit, or bad ``retrieved`` rows.
    """
    _check_bkr_inputs(src_text, tgt_text, src_img, tgt_img)
    ks = check_ks(ks, src_img.shape[0])
    check: dict[str, Any] = {}
    n, k = src_text.shape[0], max(ks)
    if retrieved is None:
        index = _checked_index(tgt_text, src_text, tgt_text_index, method, options, "target text embeddings", 1,
                               target_agreement, check_sample, seed, check, "text_", cost_check=cost_check)
        if index is None:
            offsets, rows = nearest_with_ties(_unit(src_text), _unit(tgt_text))
        else:
            _, lists = search(index, src_text, min(tgt_text.shape[0], k + 1))
            offsets, rows = _nearest_in_lists(lists, listed_scores(src_text, tgt_text, lists), src_text, tgt_text,
                                              duplicate_rows(tgt_text))
    else:
        offsets, rows = _retrieved_rows(retrieved, n, tgt_text.shape[0])
    # steps 3-4 over the distinct retrieved targets; a query that retrieved several (a tie) keeps its worst rank
    query_of_pair = np.repeat(np.arange(n), np.diff(offsets))
    distinct, row_of_pair = np.unique(rows, return_inverse=True)
    row_of_pair = row_of_pair.ravel()
    index = _checked_index(src_img, tgt_img, None, method, options, "source image features", k, target_agreement,
                           check_sample, seed, check, "image_", n_queries=distinct.size,
                           cost_check=cost_check)
    ranks = np.zeros(n, dtype=np.int64)
    if index is None:
        pair_ranks = ranks_against_rows(tgt_img, distinct, row_of_pair, _unit(src_img), query_of_pair)
        np.maximum.at(ranks, query_of_pair, pair_ranks)
    else:
        _, lists = search(index, tgt_img, min(src_img.shape[0], k + 1), rows=distinct)
        scores = listed_scores(tgt_img, src_img, lists, rows=distinct)
        _worst_listed_ranks(ranks, scores, lists, (tgt_img, src_img), (rows, row_of_pair, query_of_pair), k,
                            duplicate_rows(src_img))
    pos = _within(ranks, k)
    out: dict[str, Any] = _summary(pos, ks, "bkr")
    if found_at:
        out["found_at"] = pos
    out.update(check)
    out["approximate"] = _approximate(method, check)
    out["retrieved"] = rows[offsets[:-1]]
    out["nearest"] = (offsets, rows)
    return out


def _check_bkr_inputs(src_text: np.ndarray, tgt_text: np.ndarray, src_img: np.ndarray, tgt_img: np.ndarray) -> None:
    """:func:`bkr_approx`'s four matrices: each usable (:func:`check_rows`), the text and the image sides each
    of one dimension, and every text row aligned with its image row."""
    for x, name in ((src_text, "source text embeddings"), (tgt_text, "target text embeddings"),
                    (src_img, "source image features"), (tgt_img, "target image features")):
        check_rows(x, name)
    check_dims(src_text, tgt_text, ("source text embeddings", "target text embeddings"))
    check_dims(src_img, tgt_img, ("source image features", "target image features"))
    for side, a, b in (("source", src_text, src_img), ("target", tgt_text, tgt_img)):
        if a.shape[0] != b.shape[0]:
            raise MetricInputError(f"{side}: {a.shape[0]} text embeddings but {b.shape[0]} image features; rows must be aligned")


PAIR_BLOCK = 1 << 18  # elements of the (pairs, K + 1) arrays of one chunk of :func:`_worst_listed_ranks`


def _worst_listed_ranks(ranks: np.ndarray, scores: np.ndarray, lists: np.ndarray, images: tuple[np.ndarray, np.ndarray],
                        pairs: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, dups: Duplicates | None) -> None:
    """BkR's step 4 on the listed source images of each distinct retrieved target (``scores``,
    ``lists``: one row per distinct target), for every (query, retrieved target) pair: each
    query's worst rank goes into ``ranks`` (k + 1 where the own image is not within the K
    searched). ``images``: the target and source image features; ``pairs``: per pair the target
    row, its distinct target and its query. The pairs are taken one chunk at a time, so the
    ``(pairs, K + 1)`` arrays of the tie rule never exceed :data:`PAIR_BLOCK` elements: a query
    tied with every target (constant text vectors) costs what the pairs themselves cost, as on
    the exact route, not K + 1 times more."""
    tgt_img, src_img = images
    rows, row_of_pair, query_of_pair = pairs
    step = max(1, PAIR_BLOCK // lists.shape[1])
    for start in range(0, row_of_pair.size, step):
        sl = slice(start, start + step)
        query, which = query_of_pair[sl], row_of_pair[sl]
        own = listed_scores(tgt_img, src_img, query[:, None], rows=rows[sl])[:, 0]
        found = _listed_ranks(scores[which], lists[which], own, query, k, dups)
        found[found == 0] = k + 1  # not within the K searched
        np.maximum.at(ranks, query, found)


def _retrieved_rows(retrieved: Any, n: int, m: int) -> Csr:
    """``retrieved`` as CSR rows: one target row per query (an int array of ``n``), or the
    ``(offsets, rows)`` of every tied target per query (``xlr_approx``'s ``nearest``); checked."""
    if isinstance(retrieved, tuple) and len(retrieved) == 2:
        offsets, rows = (np.asarray(a) for a in retrieved)
        if offsets.shape != (n + 1,) or offsets.dtype.kind not in "iu" or rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise MetricInputError(f"retrieved: expected (offsets, rows), integer arrays of {n + 1} offsets and of rows, "
                                   f"got shapes {offsets.shape} ({offsets.dtype}) and {rows.shape} ({rows.dtype})")
        steps = np.diff(offsets)
        if offsets[0] != 0 or offsets[-1] != rows.size or (steps < 1).any():
            raise MetricInputError(f"retrieved: offsets must start at 0, end at {rows.size} (the rows given) and give "
                                   "each query at least one target")
    else:
        rows = np.asarray(retrieved)
        if rows.shape != (n,) or rows.dtype.kind not in "iu":
            raise MetricInputError(f"retrieved: expected {n} integer target rows, got shape {rows.shape} ({rows.dtype})")
        offsets = np.arange(n + 1)
    bad = (rows < 0) | (rows >= m)
    if bad.any():
        i = int(np.argmax(bad))
        raise MetricInputError(f"retrieved[{i}] = {int(rows[i])} is not a target row (0..{m - 1})")
    return offsets.astype(np.int64), rows.astype(np.int64)
