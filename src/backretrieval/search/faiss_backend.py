"""FAISS backend (``faiss-cpu``): k nearest neighbours by inner product, exact or approximate.

* ``"flat"`` -- ``IndexFlatIP``: exact, the same neighbours as :func:`.kernels.topk` (up to the
  order of exactly tied scores, which FAISS does not define).
* ``"hnsw"`` -- ``IndexHNSWFlat`` (inner product), graph search; ``m`` links per node,
  ``ef_construction``, ``ef_search`` (raise it for better recall at a higher cost).
* ``"ivf"`` -- ``IndexIVFFlat`` with ``nlist`` k-means cells (default ``4 sqrt(N)``; never more than
  one cell per :data:`MIN_POINTS_PER_CELL` rows, FAISS's own minimum of training points per cell, so
  small N gets fewer cells, down to one), trained on a seeded sample of at most ``256 nlist``
  vectors, searching ``nprobe`` cells.

Approximate indexes trade exactness for speed at N where the exact N x N work is out of reach
(millions of items per language); :func:`top1_agreement` measures how often their first
neighbour equals the exact one on a sample, which every approximate result should report, and
:func:`calibrate` raises the search effort (HNSW ``efSearch``, IVF ``nprobe``) until a seeded
sample of queries reaches a target agreement with exact search, measures the agreement reached on
a second, disjoint (held-out) sample, and falls back to exact search when the target is out of
reach or when a cost model says that exact search is cheaper: it counts distance computations
(:func:`build_cost`, :func:`query_cost`, :func:`exact_cost`) and weighs each by what one costs in
its kind of search (:data:`DISTANCE_WEIGHTS`, measured constants), :func:`checked_cost`.
:func:`listed_scores` gives the canonical scores of the pairs a search listed, on which callers
decide ranks with the same tie rule as exact search.

Vectors are added and queried in chunks, so callers may pass memory-mapped arrays; float32,
C-contiguous, unit-normalised (``normalize=True``, the default: inner product = cosine) copies
are made one chunk at a time, with the canonical unit rows of the exact kernels
(:func:`.exact.unit_rows`: rows within :data:`.exact.UNIT_TOL` of unit norm are kept as they are).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from .exact import UNIT_TOL, pair_scores, unit_rows_exact
from .faiss_cost import (  # the settings and the cost model, re-exported here
    build_cost,
    checked_cost,
    DISTANCE_WEIGHTS,
    exact_cost,
    FaissOptions,
    ivf_nlist,
    KMEANS_ITERATIONS,
    METHODS,
    MIN_POINTS_PER_CELL,
    query_cost,
    sample_sizes,
    weighted,
)
from .kernels import topk

CHUNK = 65536
EXACT_BLOCK = 1 << 20  # scores per block of exact search in :func:`exact_top` (queries x database rows)


def _faiss():
    try:
        import faiss
    except ImportError as e:  # pragma: no cover - exercised only without faiss-cpu
        raise ImportError("the FAISS backend needs faiss-cpu: pip install faiss-cpu", name="faiss-cpu") from e
    return faiss


def _chunks(n: int, size: int = CHUNK):
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def _rows(X: np.ndarray, sl: slice | np.ndarray, normalize: bool) -> np.ndarray:
    """Rows of ``X`` as a float32 C-contiguous copy, unit-normalised canonically as the exact kernels
    do (:func:`.exact.unit_rows`, the same bits on every machine, see :mod:`.exact`) when ``normalize``."""
    x = np.array(X[sl], dtype=np.float32, order="C", copy=True)
    return unit_rows_exact(x, UNIT_TOL, out=x) if normalize else x  # normalised in place: one copy per chunk


def build_index(D: np.ndarray, method: str = "hnsw", options: FaissOptions | None = None, *, normalize: bool = True,
                progress: Any = None) -> Any:
    """An inner-product index over the rows of ``D`` (added in chunks)."""
    faiss = _faiss()
    opt = options or FaissOptions()
    if opt.threads:
        faiss.omp_set_num_threads(int(opt.threads))
    n, d = D.shape
    if method == "flat":
        index = faiss.IndexFlatIP(d)
    elif method == "hnsw":
        index = faiss.IndexHNSWFlat(d, opt.m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = opt.ef_construction
        index.hnsw.efSearch = opt.ef_search
    elif method == "ivf":
        nlist = ivf_nlist(n, opt)
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        # at most n // MIN_POINTS_PER_CELL cells: FAISS trains without its warning (below
        # MIN_POINTS_PER_CELL rows there is one cell, whose minimum is lowered to the rows there are)
        index.cp.min_points_per_centroid = max(1, min(MIN_POINTS_PER_CELL, n // nlist))
        rng = np.random.default_rng(opt.seed)
        sample = np.sort(rng.choice(n, size=min(n, 256 * nlist), replace=False))
        index.train(_rows(D, sample, normalize))
        index.nprobe = min(opt.nprobe, nlist)
    else:
        raise ValueError(f"unknown FAISS method {method!r}; use one of {', '.join(METHODS)}")
    for sl in _chunks(n):
        index.add(_rows(D, sl, normalize))
        if progress is not None:
            progress.update(sl.stop - sl.start)
    return index


def search(index: Any, Q: np.ndarray, k: int, *, rows: np.ndarray | None = None, normalize: bool = True,
           progress: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, indices)`` of the ``k`` best rows per query, best first (FAISS order). The
    queries are ``Q`` or, with ``rows``, ``Q[rows]`` -- gathered one chunk at a time."""
    n = Q.shape[0] if rows is None else len(rows)
    scores = np.empty((n, k), dtype=np.float32)
    idx = np.empty((n, k), dtype=np.int64)
    for sl in _chunks(n):
        q = _rows(Q, sl if rows is None else np.asarray(rows[sl]), normalize)
        scores[sl], idx[sl] = index.search(q, k)
        if progress is not None:
            progress.update(sl.stop - sl.start)
    return scores, idx


LIST_BLOCK = 1 << 22  # float32 elements of gathered database rows per block of :func:`listed_scores`
HASH_BLOCK = 1 << 20  # elements per block of :func:`duplicate_rows` (12 bytes each: the float32 row, its bits as uint64)


def listed_scores(Q: np.ndarray, D: np.ndarray, lists: np.ndarray, *, rows: np.ndarray | None = None,
                  normalize: bool = True) -> np.ndarray:
    """Canonical scores of each query with each database row of its list, as the exact kernels
    score them (:func:`.exact.pair_scores` on the canonical unit rows of :func:`.exact.unit_rows`),
    so that a rank decided on them follows the exact metrics' tie rule.

    Args:
        Q, D: the queries and the database (may be memory-mapped: rows are gathered and
            normalised one block of at most :data:`LIST_BLOCK` elements at a time).
        lists: int (n, L) rows of ``D`` per query, -1 for an empty slot (as FAISS returns).
        rows: query ``p`` is ``Q[rows[p]]`` (None: ``Q[p]``).
        normalize: unit-normalise the rows first (cosine).

    Returns:
        float32 (n, L) canonical scores, -inf in empty slots.
    """
    lists = np.asarray(lists, dtype=np.int64)
    n, width = lists.shape
    out = np.full((n, width), -np.inf, dtype=np.float32)
    step = max(1, LIST_BLOCK // max(1, (width + 1) * D.shape[1]))
    for sl in _chunks(n, step):
        block = lists[sl]
        valid = block >= 0
        if not valid.any():
            continue
        q = _rows(Q, sl if rows is None else np.asarray(rows[sl]), normalize)
        wanted, local = np.unique(block[valid], return_inverse=True)
        qi, _ = np.nonzero(valid)
        part = out[sl]
        part[valid] = pair_scores(q, _rows(D, wanted, normalize), qi, local.ravel())
    return out


@dataclasses.dataclass
class Duplicates:
    """Groups of bit-identical canonical unit rows of a database (:func:`duplicate_rows`).

    ``group[j]``: the first row of row ``j``'s group (``j`` itself when it is unique); ``size[g]``:
    the rows in the group of first row ``g`` (0 for rows that are not first); :meth:`members`
    expands groups to their rows. Duplicates score the same with every query, bit for bit, so a
    search that finds one of them has found all of them."""

    group: np.ndarray
    size: np.ndarray
    order: np.ndarray  # rows sorted by group (stable), and where each group starts in it
    start: np.ndarray

    def members(self, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of each given group (first rows), concatenated in ascending order per group,
        and how many each group has."""
        groups = np.asarray(groups, dtype=np.int64)
        counts = self.size[groups]
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        within = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], counts)
        return self.order[np.repeat(self.start[groups], counts) + within], counts


_HASH_SEEDS = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F)


def duplicate_rows(X: np.ndarray, *, normalize: bool = True) -> Duplicates | None:
    """The groups of rows of ``X`` whose canonical unit rows (:func:`_rows`) are bit-identical, or
    None when every row is unique. Rows are read one chunk at a time (memory-mapped inputs
    welcome) and keyed by two 64-bit hashes of their bits; rows sharing a key are compared bit for
    bit, so a hash collision never joins different rows."""
    n = X.shape[0]
    keys = np.empty((n, 2), dtype=np.uint64)
    weights = [np.random.default_rng(seed).integers(1, 2**63, size=X.shape[1], dtype=np.uint64) | np.uint64(1)
               for seed in _HASH_SEEDS]
    with np.errstate(over="ignore"):
        for sl in _chunks(n, max(1, HASH_BLOCK // max(1, X.shape[1]))):
            bits = _rows(X, sl, normalize).view(np.uint32).astype(np.uint64)
            for c, w in enumerate(weights):
                keys[sl, c] = bits @ w  # modulo 2**64 (integer products wrap)
    _, first, inverse, counts = np.unique(keys, axis=0, return_index=True, return_inverse=True, return_counts=True)
    if counts.max(initial=0) <= 1:
        return None
    group = first[inverse.ravel()].astype(np.int64)
    shared = np.flatnonzero(counts[inverse.ravel()] > 1)  # rows whose key another row has: compare their bits
    for sl in _chunks(shared.size, max(1, LIST_BLOCK // max(1, X.shape[1]))):
        rows = shared[sl]
        same = (_rows(X, rows, normalize) == _rows(X, group[rows], normalize)).all(axis=1)
        group[rows[~same]] = rows[~same]  # a hash collision: the row stays on its own
    size = np.bincount(group, minlength=n).astype(np.int64)
    if size.max(initial=0) <= 1:
        return None
    order = np.argsort(group, kind="stable")
    start = np.zeros(n, dtype=np.int64)
    firsts, at = np.unique(group[order], return_index=True)
    start[firsts] = at
    return Duplicates(group, size, order, start)


def knn(Q: np.ndarray, D: np.ndarray, k: int, method: str = "flat", options: FaissOptions | None = None, *,
        normalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Build an index over ``D`` and search it with ``Q``: ``(scores, indices)``, both (n_q, k)."""
    if not 1 <= k <= D.shape[0]:
        raise ValueError(f"k={k} must be between 1 and the database size {D.shape[0]}")
    return search(build_index(D, method, options, normalize=normalize), Q, k, normalize=normalize)


def top1_agreement(Q: np.ndarray, D: np.ndarray, approx_top1: np.ndarray, sample: int = 1000, seed: int = 0, *,
                   normalize: bool = True) -> float:
    """Share of a seeded sample of queries whose approximate first neighbour is the exact one
    (exact = brute force over ``D`` in chunks; a tie for first place counts as agreement)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(Q.shape[0], size=min(sample, Q.shape[0]), replace=False))
    q = _rows(Q, rows, normalize)
    best = np.full(q.shape[0], -np.inf, dtype=np.float32)
    for sl in _chunks(D.shape[0]):
        s, _ = topk(q, _rows(D, sl, normalize), 1)
        np.maximum(best, s[:, 0], out=best)
    got = np.einsum("ij,ij->i", q, _rows(D, approx_top1[rows], normalize))
    return float(np.mean(got >= best - 1e-6))


def exact_top(Q: np.ndarray, D: np.ndarray, k: int, *, normalize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of the rows ``Q`` against all of ``D`` (``D`` read in chunks of at most
    :data:`EXACT_BLOCK` scores, so its memory does not grow with ``D``): canonical scores and
    indices, ties by ascending index, as :func:`.kernels.topk` (``Q`` must be small)."""
    q = _rows(Q, slice(None), normalize)
    best_s = np.full((q.shape[0], 0), -np.inf, dtype=np.float32)
    best_i = np.empty((q.shape[0], 0), dtype=np.int64)
    for sl in _chunks(D.shape[0], max(1, min(CHUNK, EXACT_BLOCK // max(1, q.shape[0])))):
        d = _rows(D, sl, normalize)
        s, i = topk(q, d, min(k, d.shape[0]))
        cs = np.concatenate([best_s, s], axis=1)
        ci = np.concatenate([best_i, i + sl.start], axis=1)
        order = np.lexsort((ci, -cs.astype(np.float64)), axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cs, order, axis=1), np.take_along_axis(ci, order, axis=1)
    return best_s, best_i


# --------------------------------------------------------------------------- cost model

def clopper_pearson_low(successes: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower confidence bound of a binomial proportion: the smallest
    p for which ``successes`` or more of ``n`` has probability at least ``1 - confidence``
    (0 when ``successes`` is 0 or ``n`` is 0)."""
    from scipy.stats import beta

    if n <= 0 or successes <= 0:
        return 0.0
    return float(beta.ppf(1.0 - confidence, successes, n - successes + 1))


# --------------------------------------------------------------------------- calibration

@dataclasses.dataclass
class Calibration:
    """What :func:`calibrate` chose, measured and counted.

    ``route``: ``"approximate"`` (the index at the chosen effort) or ``"exact"`` (the caller must
    search exactly, or the index is flat); ``reason``: why, in words. ``fallback``: the caller
    must search exactly.
    ``agreement`` / ``recall``: measured on the *held-out* sample (``heldout`` queries, disjoint
    from the tuning sample and never used to choose the effort): the share of queries whose
    approximate first neighbour is an exact first neighbour (a tie for first place counts), and
    the mean share of the exact top ``k`` found in the approximate top ``k``; ``low``: the
    one-sided 95% Clopper-Pearson lower bound of the held-out agreement. On the exact route all
    three are 1 (the search that runs is exact). ``tuning_agreement`` / ``tuning_recall``: the
    same on the ``sample`` tuning queries at the last effort tried (the statistic the stopping
    rule used; None when nothing was tried). ``param`` / ``value``: the effort parameter and its
    last value tried (its starting value when the cost check stopped before any). ``tried``: each (value, tuning agreement, tuning recall). ``cost_exact``:
    distance computations of exact search of ``n_queries`` queries; ``cost``: those of the route
    taken, calibration included, weighted (:func:`checked_cost`'s model: units of one exact-search
    distance, so the two compare as times do). ``seconds``: the calibration's
    wall time."""

    method: str
    target: float
    sample: int
    heldout: int
    agreement: float
    recall: float
    low: float
    tuning_agreement: float | None
    tuning_recall: float | None
    param: str | None
    value: int | None
    route: str
    reason: str
    cost_exact: int
    cost: int
    tried: list[tuple[int, float, float]]
    seconds: float

    @property
    def fallback(self) -> bool:
        """The caller must search exactly instead (never for flat search, which is exact)."""
        return self.route == "exact" and self.method != "flat"

    def as_dict(self, prefix: str = "") -> dict[str, Any]:
        """The fields as a plain dict, each key prefixed with ``prefix``."""
        return {f"{prefix}{k}": v for k, v in dataclasses.asdict(self).items()}


def _agreement(q: np.ndarray, D: np.ndarray, exact_s: np.ndarray, exact_i: np.ndarray, idx: np.ndarray,
               normalize: bool) -> tuple[int, float]:
    """(queries whose approximate first neighbour scores the exact best canonically, mean recall@k).
    Recall@k counts the approximate top ``k`` that score canonically at least the exact ``k``-th
    best (at most ``k``): the share of the exact top ``k`` found where scores are distinct, and
    where rows tie at the cut any of them counts, as a tie for first place counts for agreement."""
    k = exact_i.shape[1]
    got = listed_scores(q, D, idx[:, :k], normalize=normalize)
    agree = int(np.count_nonzero(got[:, 0] >= exact_s[:, 0]))
    found = np.count_nonzero(got >= exact_s[:, k - 1:k], axis=1)
    recall = float(np.mean(np.minimum(found, k) / k))
    return agree, recall


def check_rows(n_q: int, sample: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The tuning and the held-out query rows of :func:`calibrate` (disjoint, each ascending):
    one seeded draw without replacement of :func:`sample_sizes`'s total, split in two."""
    tune, held = sample_sizes(n_q, sample)
    rows = np.random.default_rng(seed).choice(int(n_q), size=tune + held, replace=False)
    return np.sort(rows[:tune]), np.sort(rows[tune:])


def calibrate(index: Any, D: np.ndarray, Q: np.ndarray, method: str, *, k: int = 1, target: float = 0.99,
              sample: int = 1000, seed: int = 0, max_value: int | None = None, normalize: bool = True,
              options: FaissOptions | None = None, n_queries: int | None = None, cost_check: bool = True) -> Calibration:
    """Raise the search effort of ``index`` (over ``D``, queried by ``Q``) until, on a seeded
    tuning sample of queries, the approximate first neighbour equals an exact one for at least
    ``target`` of them *and* the approximate top ``k`` holds at least ``target`` of the exact top
    ``k``; then measure both on a second, disjoint seeded sample (held out: it never chooses the
    effort) and report them with the one-sided 95% Clopper-Pearson lower bound of the agreement.
    The stopping rule uses the tuning sample's point estimates; the held-out numbers are an
    unbiased estimate of the agreement over all queries, not a guarantee that it reaches
    ``target``.

    HNSW doubles ``efSearch`` (from its current value, up to ``max_value``, default
    ``max(4096, 4 k)`` and at most the index size); IVF doubles ``nprobe`` up to ``nlist``. The
    route is ``"exact"`` (the caller must search exactly, :func:`exact_index`) when the largest
    effort is still below the target, or, with ``cost_check``, when the cost model says that
    going on costs more than exact search: before each effort is tried, the weighted distance
    computations spent so far plus those of searching both samples and the ``n_queries`` queries
    at that effort (:func:`query_cost` times its :data:`DISTANCE_WEIGHTS` weight) must not exceed
    :func:`exact_cost`. So the approximate route is taken only where its whole cost, calibration
    included, is at most exact search's, and a checked search that falls back has spent at most
    one exact search's worth (the calibration) before searching exactly. The
    chosen value is left set on ``index``.

    Args:
        index: a FAISS index built by :func:`build_index` over ``D``.
        D, Q: the database and the queries (may be memory-mapped).
        method: "hnsw", "ivf" or "flat" (flat is exact: agreement 1, nothing tuned).
        k: list length the caller will search (recall@k is reported too).
        target: required top-1 agreement, in (0, 1].
        sample: queries in the tuning sample, and in the held-out sample (seeded, disjoint;
            :func:`sample_sizes` when ``Q`` has fewer than ``2 sample`` rows).
        options: the options ``index`` was built with (the cost model's parameters).
        n_queries: queries the caller will search (default: all of ``Q``).
        cost_check: fall back to exact search when the cost model says it is cheaper.

    Returns:
        A :class:`Calibration`.

    Raises:
        ValueError: for a bad target or sample size, or an unknown method.
    """
    if not 0 < target <= 1:
        raise ValueError(f"target agreement {target} must be in (0, 1]")
    if sample < 1:
        raise ValueError(f"sample {sample} must be positive")
    if method not in METHODS:
        raise ValueError(f"unknown FAISS method {method!r}; use one of {', '.join(METHODS)}")
    t0 = time.perf_counter()
    n_q = Q.shape[0] if n_queries is None else int(n_queries)
    n_d = D.shape[0]
    exact = exact_cost(n_q, n_d)
    tune_rows, held_rows = check_rows(Q.shape[0], sample, seed)
    k = max(1, min(k, n_d))
    if method == "flat":
        return Calibration(method, target, tune_rows.size, held_rows.size, 1.0, 1.0, 1.0, None, None, None, None,
                           "exact", "flat search is exact", exact, exact, [], time.perf_counter() - t0)
    q, qh = _rows(Q, tune_rows, normalize), _rows(Q, held_rows, normalize)
    exact_s, exact_i = exact_top(q, D, k, normalize=normalize)
    spent = weighted(method, "build", build_cost(method, n_d, options)) + tune_rows.size * n_d
    held_exact = held_rows.size * n_d  # exact search of the held-out sample, done once the effort is chosen
    param, value, top, set_value = _effort_knob(index, method, k, n_d, max_value)
    tried: list[tuple[int, float, float]] = []
    reason = ""
    while True:
        c = weighted(method, "search", query_cost(method, n_d, options, value))
        total = spent + held_exact + (tune_rows.size + held_rows.size + n_q) * c
        if cost_check and total > exact:
            reason = (f"cost: {param}={value} would bring the checked search to {total:,} weighted distance computations, "
                      f"exact search takes {exact:,}")
            break
        set_value(value)
        _, idx = index.search(q, k)
        spent += tune_rows.size * c
        agree, recall = _agreement(q, D, exact_s, exact_i, idx, normalize)
        tried.append((value, agree / max(tune_rows.size, 1), recall))
        if tried[-1][1] >= target and recall >= target:
            break
        if value >= top:
            reason = f"target: {param}={value}, the largest effort, reached agreement {tried[-1][1]:.4f} < {target:g}"
            break
        value = min(top, 2 * value)
    tuning = (tried[-1][1], tried[-1][2]) if tried else (None, None)
    value = tried[-1][0] if tried else value  # the last effort tried (the cost check may stop before the next)
    if reason:
        return Calibration(method, target, tune_rows.size, held_rows.size, 1.0, 1.0, 1.0, *tuning, param, value,
                           "exact", reason, exact, spent + exact, tried, time.perf_counter() - t0)
    agree, recall = _held_out(index, qh, D, k, normalize)  # measured once, at the chosen effort
    spent += held_exact + held_rows.size * c + n_q * c
    share = agree / held_rows.size if held_rows.size else float("nan")
    return Calibration(method, target, tune_rows.size, held_rows.size, share, recall,
                       clopper_pearson_low(agree, held_rows.size), *tuning, param, value, "approximate",
                       f"tuning sample reached {target:g} at {param}={value}", exact, spent, tried,
                       time.perf_counter() - t0)


def _effort_knob(index: Any, method: str, k: int, n_d: int, max_value: int | None):
    """What :func:`calibrate` raises: ``(name, start value, largest value, setter)`` (HNSW's
    ``efSearch``, IVF's ``nprobe``), the start clipped to ``[1, largest]``."""
    if method == "hnsw":
        param, value = "ef_search", int(index.hnsw.efSearch)
        top = min(max_value or max(4096, 4 * k), max(n_d, 1))

        def set_value(v: int) -> None:
            index.hnsw.efSearch = v
    else:
        param, value = "nprobe", int(index.nprobe)
        top = min(max_value or index.nlist, index.nlist)

        def set_value(v: int) -> None:
            index.nprobe = v
    return param, max(1, min(value, top)), top, set_value


def _held_out(index: Any, qh: np.ndarray, D: np.ndarray, k: int, normalize: bool) -> tuple[int, float]:
    """:func:`_agreement` of the index as it is set on the held-out queries ``qh`` (0 and NaN
    without any)."""
    if not qh.shape[0]:
        return 0, float("nan")
    hs, hi = exact_top(qh, D, k, normalize=normalize)
    _, idx = index.search(qh, k)
    return _agreement(qh, D, hs, hi, idx, normalize)


def exact_index(D: np.ndarray, *, normalize: bool = True) -> Any:
    """An exact inner-product index over ``D`` (the fall-back of :func:`calibrate`)."""
    return build_index(D, "flat", normalize=normalize)
